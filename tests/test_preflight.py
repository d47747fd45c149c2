"""Pre-flight (``collector.protocol.preflight``): a plan that cannot work is refused in one line naming what
to fix,
and nothing is written under raw/. Plans are the test plan of test_collector_run (the local test server
standing in for llama-server) with one thing broken; the GGUF and flag checks also run against the real
engines."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import gguf
import pytest

from collector.protocol.preflight import (
    Preflight,
    PreflightError,
    check_lengths,
    preflight,
    read_gguf_meta,
    vllm_source_dir,
    vllm_unknown_flags,
)
from collector.raw.plan import load_plan
from tests import engine_cache
from tests.cli import collector_cli

ROOT = Path(__file__).resolve().parent.parent
PATHS = engine_cache.paths()


def _refused(tmp_path: Path, plan: Path, pattern: str) -> None:
    """Both through the library and the command line: one line, exit 1, nothing under raw/."""
    with pytest.raises(PreflightError, match=pattern):
        preflight(load_plan(plan), tmp_path / "raw")
    p = collector_cli("run", plan, "--raw", tmp_path / "raw")
    assert p.returncode == 1 and "Traceback" not in p.stderr, p.stderr
    assert len(p.stderr.strip().splitlines()) == 1 and re.search(pattern, p.stderr), p.stderr
    assert not (tmp_path / "raw").exists()


def _edit(plan: Path, old: str, new: str) -> Path:
    text = plan.read_text()
    assert old in text, old
    plan.write_text(text.replace(old, new))
    return plan


def test_the_test_plan_passes(tmp_path, make_plan):
    pf = preflight(load_plan(make_plan(tmp_path)), tmp_path / "raw")
    assert pf.vocab_size == 152064 and "Qwen2.5-7B-Instruct" in pf.vocab_source  # the theory's config.json
    assert pf.context_tokens == 32768


def test_lengths_past_a_llama_cpp_slot(tmp_path, make_plan):
    plan = make_plan(tmp_path, ["-c", "64", "-np", "2"])  # 32 tokens per slot
    _refused(tmp_path, plan, r"p01-sweep-c001-i24-o16: .* exceeds the 32 a request may hold \(-c 64 / -np 2")


@pytest.mark.parametrize(
    "old, new, pattern",
    [
        pytest.param(
            "token_id_range = [32, 127]",
            "token_id_range = [1000, 160000]",
            r"\[model\].token_id_range \[1000, 160000\) reaches past the vocabulary of 152064 "
            r"tokens \(\[model\].config Qwen2.5-7B-Instruct vocab_size\)",
            id="token_ids_past_the_vocabulary",
        ),
        pytest.param(
            'gpu = "rtx4090"',
            'gpu = "rtx4090"\nmax_model_len = 32',
            r"point p01-sweep-c001-i24-o16: input_len 24 \+ output_len 16 = 40 tokens exceeds the "
            r"32 a request may hold \(\[model\].max_model_len\)",
            id="lengths_past_max_model_len",
        ),
        ("port = ", "port = 70000\n#", r"\[server\].port: must be in 1..65,535, got 70,000"),
        (
            "startup_timeout_s = 30",
            "startup_timeout_s = nan",
            r"\[server\].startup_timeout_s: must be a finite",
        ),
        (
            "interval_s = 0.2",
            "interval_s = inf",
            r"\[sampling\].interval_s: must be a finite number, got inf",
        ),
        ('model = "', 'model = "/no/such/', r"\[server\].model: /no/such/.*tiny.gguf does not exist"),
        ('"--token-ms"', '"--no-such-flag", "--token-ms"', r"\[server\].args: --no-such-flag: unknown flag"),
    ],
)
def test_bad_plan_values(tmp_path, old, new, pattern, make_plan):
    _refused(tmp_path, _edit(make_plan(tmp_path), old, new), pattern)


def test_raw_root_that_cannot_hold_a_store(tmp_path, make_plan):
    plan = make_plan(tmp_path)
    afile = tmp_path / "a-file"
    afile.write_text("x")
    with pytest.raises(
        PreflightError, match=rf"{afile}/raw: cannot hold a raw store: {afile} is not a directory"
    ):
        preflight(load_plan(plan), afile / "raw")


def test_raw_root_on_a_read_only_file_system(tmp_path, make_plan):
    ro = tmp_path / "ro"
    ro.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=64k", "tmpfs", str(ro)]).returncode:
        pytest.skip("cannot mount a tmpfs here")
    try:
        plan = make_plan(tmp_path)
        p = collector_cli("run", plan, "--raw", ro / "raw")
        assert p.returncode == 1 and "Traceback" not in p.stderr
        assert (
            p.stderr.strip()
            == f"Error: {ro / 'raw'}: the raw store is not writable ({ro}: permission denied or read-only)"
        )
    finally:
        subprocess.run(["umount", "-l", str(ro)])


def test_gguf_metadata_read_without_loading_the_file():
    engine_cache.require(PATHS.tiny_gguf)
    meta = read_gguf_meta(PATHS.tiny_gguf)
    r = gguf.GGUFReader(PATHS.tiny_gguf)  # the reference reader
    arch = bytes(r.fields["general.architecture"].parts[-1]).decode()
    assert meta["general.architecture"] == arch
    assert meta["tokenizer.ggml.tokens"] == len(r.fields["tokenizer.ggml.tokens"].data)
    assert meta[f"{arch}.context_length"] == int(r.fields[f"{arch}.context_length"].parts[-1][0])
    assert read_gguf_meta(PATHS.tiny_config_json) == {}  # not GGUF


def test_gguf_vocabulary_bounds_the_token_ids(tmp_path, make_plan):
    engine_cache.require(PATHS.llama_server, PATHS.tiny_gguf)
    n = read_gguf_meta(PATHS.tiny_gguf)["tokenizer.ggml.tokens"]
    plan = make_plan(tmp_path)
    text = plan.read_text().replace(str(tmp_path / "tiny.gguf"), str(PATHS.tiny_gguf))
    plan.write_text(text.replace("token_id_range = [32, 127]", f"token_id_range = [32, {n + 1}]"))
    _refused(
        tmp_path, plan, rf"reaches past the vocabulary of {n} tokens \({PATHS.tiny_gguf} \(GGUF metadata\)\)"
    )


def test_vllm_flags_checked_against_the_installed_source():
    engine_cache.require(PATHS.vllm_python)
    src = vllm_source_dir(PATHS.vllm_python)
    assert src is not None and (src / "engine" / "arg_utils.py").is_file()
    flags = ["--max-model-len", "--no-enable-prefix-caching", "--dtype", "-tp", "--no-such-flag-xyz"]
    assert vllm_unknown_flags(src, flags) == ["--no-such-flag-xyz"]


def test_a_plan_not_in_utf8(tmp_path, make_plan):
    plan = make_plan(tmp_path)
    plan.write_bytes(
        plan.read_bytes().replace(b'campaign = "fake"', b'campaign = "fake" # caf\xe9')
    )  # Latin-1
    p = collector_cli("run", plan, "--raw", tmp_path / "raw")
    assert p.returncode == 1 and "Traceback" not in p.stderr
    assert p.stderr.strip() == f"Error: {plan}:2: not UTF-8 text (byte 0xe9); save the plan as UTF-8"


def test_a_llama_cpp_overload_past_the_slot_is_a_note_not_a_refusal():
    """The committed H200 plans overload llama.cpp on purpose: 5,120 + 2,048 tokens into 6,144-token slots."""
    repo = Path(__file__).resolve().parents[1]
    for name in ("h200-llamacpp-q4km-sweep.toml", "h200-llamacpp-f16-sweep.toml"):
        plan = load_plan(repo / "plans" / name)
        pf = Preflight()
        check_lengths(plan, pf)
        assert any("stops after 1024 tokens" in n for n in pf.notes), pf.notes
        # a sweep point past the slot would still be refused: the overload is the one exemption
        assert all(p.input_len + p.output_len <= 6144 for p in plan.points if p.kind != "overload")
