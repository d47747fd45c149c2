"""The H200 campaign's preparation, as far as it can be checked without the GPU: the plans load and their
slot arithmetic holds (numbers recomputed here by hand), the device script parses, the carry bundle's size
limit bites, and a sealed run packed by campaign.sh (split into parts) comes home byte-identical through
unpack.py, which `collector verify` accepts and which refuses to overwrite or to take a changed run."""

from __future__ import annotations

import hashlib
import io
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from collector.protocol.ceilings import copy_bytes_per_s, matmul_flops_per_s
from collector.raw.errors import StoreError
from collector.raw.plan import load_plan
from collector.raw.store import RawStore, verify

ROOT = Path(__file__).resolve().parent.parent
CAMPAIGN_SH = ROOT / "scripts" / "h200" / "campaign.sh"
BUNDLE_SH = ROOT / "scripts" / "h200" / "bundle.sh"
EXP_SH = ROOT / "scripts" / "h200" / "exp.sh"
LIB_SH = ROOT / "scripts" / "h200" / "lib.sh"  # sourced by campaign.sh and exp.sh
PLANS = {
    "q4": ROOT / "plans" / "h200-llamacpp-q4km-sweep.toml",
    "f16": ROOT / "plans" / "h200-llamacpp-f16-sweep.toml",
}
CAMPAIGN = "h200-qwen2.5-7b-random"

sys.path.insert(0, str(ROOT / "scripts" / "h200"))
import unpack  # noqa: E402


def _flag(args: tuple[str, ...], name: str) -> str:
    return args[args.index(name) + 1]


# ------------------------------------------------------------------------------------------------- plans


@pytest.mark.parametrize("which", ["q4", "f16"])
def test_plan_loads_and_its_slots_fit_every_point(which):
    p = load_plan(PLANS[which])
    args = p.server.args
    n_slots, ctx_total = int(_flag(args, "-np")), int(_flag(args, "-c"))
    slot_ctx = ctx_total // n_slots
    assert (n_slots, ctx_total, slot_ctx) == (256, 1_572_864, 6144)
    assert _flag(args, "-ngl") == "99" and _flag(args, "--cache-ram") == "0"
    assert float(_flag(args, "--slot-prompt-similarity")) == 0.0
    assert p.model.gpu == "h200" and p.sampling.nvidia_smi == "on" and p.sampling.metrics
    # Qwen2.5-7B KV cache in f16: 2 (K,V) x 28 layers x 4 kv heads x 128 dims x 2 bytes = 57,344 B/token
    assert p.model.kv_pool_gib == pytest.approx(1_572_864 * 57_344 / 2**30) == pytest.approx(84.0)
    assert p.model.max_model_len == slot_ctx
    kinds = {ph.kind for ph in p.phases}
    assert kinds == {"warmup", "concurrency", "length", "overload"}
    for pt in p.points:
        assert pt.concurrency <= n_slots, pt.point_id  # nobody waits for a slot
        if pt.kind == "overload":  # the prompt fits a slot, prompt + output does not
            assert pt.input_len < slot_ctx < pt.input_len + pt.output_len
        else:
            assert pt.input_len + pt.output_len <= slot_ctx, pt.point_id
    sweep = [pt.concurrency for pt in p.points if pt.kind == "concurrency"]
    assert sweep == [1, 2, 4, 8, 16, 32, 64, 128, 256]
    assert {pt.input_len for pt in p.points if pt.kind == "length"} == {256, 512, 1024, 2048, 4096}
    low, high = p.model.token_id_low, p.model.token_id_high
    assert (low, high) == (0x20, 0x7F)  # printable single-byte tokens only
    for words in ("random weights", "same shape as Qwen2.5-7B-Instruct", "text output is noise"):
        assert words in p.description
    assert p.campaign == CAMPAIGN
    assert Path(p.server.binary).as_posix() == ".engines/h200/bin/llama-server"


def test_the_two_plans_differ_only_in_model_file_format_port_and_name():
    q4, f16 = load_plan(PLANS["q4"]), load_plan(PLANS["f16"])
    assert q4.points == f16.points and q4.server.args == f16.server.args
    assert (q4.model.weight_format, f16.model.weight_format) == ("q4_k_m", "f16")
    assert q4.run_name != f16.run_name and q4.server.port != f16.server.port
    assert q4.server.model.endswith("q4_k_m.gguf") and f16.server.model.endswith("f16.gguf")


# ------------------------------------------------------------------------------------------------ scripts


@pytest.mark.parametrize("script", [CAMPAIGN_SH, BUNDLE_SH, EXP_SH, LIB_SH])
def test_shell_scripts_parse(script):
    r = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def _fake_carry(carry: Path, extra_bytes: int = 0) -> None:
    carry.mkdir(parents=True)
    src = carry.parent / "src" / "llama.cpp"
    for rel in ("CMakeLists.txt", "tools/server/server.cpp", "tools/quantize/quantize.cpp",
                "ggml/src/ggml-cuda/ggml-cuda.cu", "ggml/src/ggml-cpu/ggml-cpu.c"):  # fmt: skip
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        (src / rel).write_text("x\n")
    with tarfile.open(carry / "llama-src.tar.gz", "w:gz") as tf:
        tf.add(src, arcname="llama.cpp")
    (carry / "whl").mkdir()
    (carry / "whl" / "gguf-0.19.0-py3-none-any.whl").write_bytes(b"PK")
    if extra_bytes:
        (carry / "padding.bin").write_bytes(os.urandom(extra_bytes))


def _bundle_check(carry: Path, limit_mib: int) -> subprocess.CompletedProcess:
    env = {**os.environ, "CARRY_DIR": str(carry), "CARRY_LIMIT_MIB": str(limit_mib)}
    return subprocess.run(["bash", str(BUNDLE_SH), "check"], capture_output=True, text=True, env=env)


def test_bundle_check_enforces_the_size_limit(tmp_path):
    small, big = tmp_path / "a" / "carry", tmp_path / "b" / "carry"
    _fake_carry(small)
    _fake_carry(big, extra_bytes=(1 << 20) + 1)
    ok = _bundle_check(small, 1)
    assert ok.returncode == 0, ok.stderr
    assert "bundle ok" in ok.stdout
    over = _bundle_check(big, 1)
    assert over.returncode == 1 and "over the 1 MiB limit" in over.stderr


def test_bundle_check_refuses_an_unstripped_tree(tmp_path):
    carry = tmp_path / "carry"
    _fake_carry(carry)
    vk = tmp_path / "src" / "llama.cpp" / "ggml" / "src" / "ggml-vulkan"
    vk.mkdir(parents=True)
    (vk / "v.cpp").write_text("x\n")
    with tarfile.open(carry / "llama-src.tar.gz", "w:gz") as tf:
        tf.add(tmp_path / "src" / "llama.cpp", arcname="llama.cpp")
    r = _bundle_check(carry, 48)
    assert r.returncode == 1 and "ggml-vulkan" in r.stderr


@pytest.mark.skipif(not (ROOT / ".device-carry" / "llama-src.tar.gz").exists(), reason="no bundle made here")
def test_the_real_bundle_passes_its_check():
    r = subprocess.run(["bash", str(BUNDLE_SH), "check"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


# ------------------------------------------------------------------------------------------ pack / unpack


def _sealed_run(raw: Path, run: str = "llamacpp-q4km") -> Path:
    r = RawStore(raw).create_run(
        CAMPAIGN, run, kind="collector-run", meta={"engine": "llamacpp", "gpu": "h200"}
    )
    r.write_bytes("fingerprint/blob.bin", os.urandom(300_000))  # incompressible: forces several parts
    r.write_json("bench/p00.json", {"completed": 3})
    s = r.open_stream("requests.jsonl")
    for i in range(50):
        s.write_json({"i": i, "chunk_tokens": [1] * 16})
    r.seal("complete")
    return r.path


def _sha_tree(d: Path) -> dict[str, str]:
    return {
        p.relative_to(d).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(d.rglob("*"))
        if p.is_file()
    }


def _pack(run_dir: Path, out: Path, part_bytes: int) -> subprocess.CompletedProcess:
    env = {**os.environ, "OUT": str(out), "PART_BYTES": str(part_bytes)}
    return subprocess.run(
        ["bash", str(CAMPAIGN_SH), "pack", str(run_dir)], capture_output=True, text=True, env=env
    )


def test_pack_splits_and_unpack_restores_a_sealed_run_byte_for_byte(tmp_path):
    run_dir = _sealed_run(tmp_path / "device-raw")
    out = tmp_path / "out"
    r = _pack(run_dir, out, 65_536)
    assert r.returncode == 0, r.stdout + r.stderr
    parts = sorted(out.glob("llamacpp-q4km.tar.gz.part*"))
    assert len(parts) >= 5 and not (out / "llamacpp-q4km.tar.gz").exists()
    assert all(p.stat().st_size <= 65_536 for p in parts)
    log = (out / "campaign.log").read_text()
    assert "=== summary" in log and "pack " in log

    home = tmp_path / "home" / "raw"
    assert unpack.main([*map(str, reversed(parts)), "--raw", str(home)]) == 0  # order given does not matter
    back = home / CAMPAIGN / "llamacpp-q4km"
    assert _sha_tree(back) == _sha_tree(run_dir)
    assert verify(home).ok
    cli = subprocess.run([sys.executable, "-m", "collector.cli", "verify", "--raw", str(home)],
                         capture_output=True, text=True, cwd=ROOT)  # fmt: skip
    assert cli.returncode == 0 and "OK: 1 runs (1 sealed" in cli.stdout
    assert not list(home.parent.glob(".unpack-*"))  # the extraction folder is gone

    # a second unpack of the same run: refused, the run untouched
    before = _sha_tree(back)
    assert unpack.main([*map(str, parts), "--raw", str(home)]) == 1
    assert _sha_tree(back) == before


def test_small_run_packs_as_one_file(tmp_path):
    raw = tmp_path / "device-raw"
    r = RawStore(raw).create_run(CAMPAIGN, "ceilings", kind="ceilings", meta={})
    r.write_json("ceilings.json", {"copy_bytes_per_s": 4.3e12})
    r.seal("complete")
    out = tmp_path / "out"
    assert _pack(r.path, out, 15 << 20).returncode == 0
    assert sorted(p.name for p in out.iterdir()) == ["campaign.log", "ceilings.tar.gz"]
    home = tmp_path / "raw"
    assert unpack.main([str(out / "ceilings.tar.gz"), "--raw", str(home)]) == 0
    assert json.loads((home / CAMPAIGN / "ceilings" / "ceilings.json").read_text()) == {
        "copy_bytes_per_s": 4.3e12
    }


def _tar_of(src_root: Path, campaign: str, run: str) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tf:
        tf.add(src_root / campaign / run, arcname=f"{campaign}/{run}")
    return buf.getvalue()


def test_unpack_refuses_a_run_changed_after_its_seal_and_writes_nothing(tmp_path):
    run_dir = _sealed_run(tmp_path / "device-raw")
    with open(run_dir / "requests.jsonl", "ab") as f:  # one byte more than the manifest says
        f.write(b"\n")
    tgz = tmp_path / "bad.tar.gz"
    tgz.write_bytes(_tar_of(tmp_path / "device-raw", CAMPAIGN, "llamacpp-q4km"))
    home = tmp_path / "raw"
    with pytest.raises(StoreError, match="does not verify"):
        unpack.unpack(unpack.group_archives([tgz]), home, CAMPAIGN)
    assert not (home / CAMPAIGN / "llamacpp-q4km").exists()


def test_unpack_refuses_unsealed_runs_missing_parts_and_other_campaigns(tmp_path):
    raw = tmp_path / "device-raw"
    r = RawStore(raw).create_run(CAMPAIGN, "cut", kind="collector-run", meta={})
    r.write_text("server.log", "x\n")
    r.close_unsealed()
    tgz = tmp_path / "cut.tar.gz"
    tgz.write_bytes(_tar_of(raw, CAMPAIGN, "cut"))
    with pytest.raises(StoreError, match="not sealed"):
        unpack.unpack(unpack.group_archives([tgz]), tmp_path / "raw", CAMPAIGN)
    assert unpack.unpack(unpack.group_archives([tgz]), tmp_path / "raw", CAMPAIGN, allow_unsealed=True)

    with pytest.raises(StoreError, match="holds campaign"):
        unpack.unpack(unpack.group_archives([tgz]), tmp_path / "raw2", "other-campaign")

    data = tgz.read_bytes()
    (tmp_path / "x.tar.gz.part00").write_bytes(data[:100])
    (tmp_path / "x.tar.gz.part02").write_bytes(data[100:])
    with pytest.raises(StoreError, match="part 01 missing"):
        unpack.group_archives([tmp_path / "x.tar.gz.part00", tmp_path / "x.tar.gz.part02"])


# ---------------------------------------------------------------------------------------------- ceilings


def test_ceiling_formulas_against_hand_numbers():
    # 4 GiB copied in 2.0 ms: 2 x 4,294,967,296 B read+written / 0.002 s = 4.294967296e12 B/s
    assert copy_bytes_per_s(4 << 30, 0.002) == pytest.approx(4.294967296e12)
    # 8192^3 bf16 in 1.4 ms: 2 x 549,755,813,888 / 0.0014 s = 785.36508...e12 FLOP/s
    assert matmul_flops_per_s(8192, 8192, 8192, 0.0014) == pytest.approx(785.3654484e12)


def test_ceilings_without_cuda_exit_2_and_write_nothing(tmp_path):
    try:
        import torch

        if torch.cuda.is_available():
            pytest.skip("this machine has CUDA")
    except ImportError:
        pass
    out = tmp_path / "c.json"
    cmd = [sys.executable, "-m", "collector.protocol.ceilings", "--out", str(out)]
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 2 and "no CUDA device" in r.stderr
    assert not out.exists()


def test_campaign_sh_needs_out(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "OUT"}
    r = subprocess.run(["bash", str(CAMPAIGN_SH), "pack"], capture_output=True, text=True, env=env)
    assert r.returncode != 0 and "OUT must name" in r.stderr


def test_device_tree_hides_raw_from_the_copy_and_restores_the_index(tmp_path):
    """device_tree.sh hide takes raw/ out of what the device tool ships (tracked + untracked-not-ignored)
    without touching a file in it; restore leaves the repository exactly as before."""
    repo = tmp_path / "repo"
    (repo / "scripts" / "h200").mkdir(parents=True)
    (repo / "raw" / "c" / "run").mkdir(parents=True)
    (repo / "raw" / "c" / "run" / "requests.jsonl").write_text("{}\n")
    (repo / "code.py").write_text("x = 1\n")
    script = repo / "scripts" / "h200" / "device_tree.sh"
    script.write_bytes((ROOT / "scripts" / "h200" / "device_tree.sh").read_bytes())

    def git(*args: str) -> str:
        r = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True)
        return r.stdout

    git("init", "-q")
    git("-c", "user.name=t", "-c", "user.email=t@t", "add", ".")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "init")
    shipped = lambda: set(git("ls-files", "-co", "--exclude-standard").split())  # noqa: E731
    assert "raw/c/run/requests.jsonl" in shipped()

    subprocess.run(["bash", str(script), "hide"], check=True, capture_output=True)
    assert not any(p.startswith("raw/") for p in shipped()) and "code.py" in shipped()
    assert (repo / "raw" / "c" / "run" / "requests.jsonl").read_text() == "{}\n"  # nothing touched

    subprocess.run(["bash", str(script), "restore"], check=True, capture_output=True)
    assert git("status", "--porcelain") == ""
    assert "raw/c/run/requests.jsonl" in shipped()
