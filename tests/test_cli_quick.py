"""The quick path as a user types it: `collector run --base-url URL --model NAME` with vllm bench serve's
flags, `collector init --url`, a fast `--help`, and the end-of-run verdict on the points analysis will leave
out."""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
import time
import tomllib
from pathlib import Path

from analysis.core import metrics
from analysis.parse.bench_json import parse_bench_json
from analysis.reconcile import gates
from collector import cli
from collector.protocol import checks as ck
from collector.protocol.run import PointRow, RunResult, verdict
from collector.raw.plan import load_plan
from tests.cli import ROOT, collector_cli

# vllm bench serve's default --save-result name:
# {label}-{rate}qps[-concurrency{N}]-{model}-{%Y%m%d-%H%M%S}.json
VLLM_NAME = re.compile(r"openai-infqps-concurrency(\d+)-fault-model-\d{8}-\d{6}\.json")


def test_help_imports_no_heavy_library():
    """`collector --help` loads click and the raw contract only: pandas, numpy, altair, httpx and rich are
    imported by the commands that use them (2.4 s → about 0.1 s on an idle machine)."""
    code = (
        "import sys, runpy; sys.argv = ['collector', '--help']\n"
        "try: runpy.run_module('collector.cli', run_name='__main__')\n"
        "except SystemExit: pass\n"
        "heavy = sorted(m for m in ('pandas', 'numpy', 'altair', 'httpx', 'rich', "
        "'analysis.pipeline.analyze') "
        "if m in sys.modules)\n"
        "print('HEAVY', heavy)"
    )
    p = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert "HEAVY []" in p.stdout, p.stdout + p.stderr
    assert "run" in p.stdout and "analyze" in p.stdout


def test_the_shipped_commands_import_no_lab_tooling():
    """Engine builds (lab.engines) and random-weight model writers (lab.modelgen) serve tests,
    benchmarks and scripts only: no module behind a `collector` command imports them (init and run did,
    for GPT-2's byte alphabet)."""
    mods = [
        "collector.cli",
        "collector.protocol.run",
        "collector.protocol.init",
        "collector.protocol.quick",
        "collector.protocol.importer",
        # fmt: skip
        "collector.protocol.inspect",
        "collector.protocol.theory_sheet",
        "collector.protocol.stepcost",
    ]
    code = f"import importlib, sys\nfor m in {mods!r}: importlib.import_module(m)\n" + (
        "print('LAB', sorted(m for m in ('lab.engines', 'lab.modelgen') if m in sys.modules))"
    )
    p = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert "LAB []" in p.stdout, p.stdout + p.stderr


def test_default_percentiles_are_the_analysis_ones():
    assert metrics.parse_percentiles(cli.DEFAULT_PERCENTILES) == metrics.DEFAULT_PERCENTILES


def test_quick_run_writes_a_sealed_run_and_vllm_named_results(tmp_path, fault_server):
    """vllm bench serve's flags against a running server: a sealed run whose plan.toml says what the flags
    meant, num-prompts requests per --max-concurrency point, and --save-result files by vLLM's default names
    that the analysis' vllm-bench parser reads back with the same counts."""
    srv = fault_server(token_ms=1.0)
    raw, res = tmp_path / "raw", tmp_path / "res"
    p = collector_cli("run", "--base-url", srv.url, "--model", "fault-model", "--model-config",
                      "Qwen2.5-0.5B-Instruct", "--num-prompts", "12", "--max-concurrency", "1,4",
                      "--random-input-len", "16", "--random-output-len", "8", "--goodput", "ttft:5000",
                      "--save-result", "--result-dir", res, "--raw", raw, timeout=180)  # fmt: skip
    assert "Traceback" not in p.stderr
    assert p.returncode in (0, 1, 3), p.stderr  # 1/3: the loaded test machine may saturate the client
    (run,) = raw.glob("quick/*")
    assert (run / "SEALED").is_file()
    plan = load_plan(run / "plan.toml")
    assert plan.server.url == srv.url and plan.server.engine == "llamacpp"  # the fault server's /metrics
    assert plan.slo == {"ttft_ms": 5000.0}
    sweep = [pt for pt in plan.points if pt.kind == "concurrency"]
    assert [(pt.concurrency, pt.requests, pt.input_len, pt.output_len) for pt in sweep] == [
        (1, 12, 16, 8),
        (4, 12, 16, 8),
    ]
    recs = [json.loads(ln) for ln in (run / "requests.jsonl").read_text().splitlines()]
    assert sum(r["phase_kind"] == "concurrency" for r in recs) == 24
    saved = sorted(res.iterdir())
    assert sorted(int(VLLM_NAME.fullmatch(f.name)[1]) for f in saved) == [1, 4]
    for f in saved:
        b = parse_bench_json(f)
        assert b.completed + (b.failed or 0) == 12
    assert "goodput req/s" in p.stderr and "checks p01-sweep-c001-i16-o8:" in p.stderr


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_nothing_listening_is_named_at_once(tmp_path):
    t0 = time.monotonic()
    p = collector_cli("run", "--base-url", f"http://127.0.0.1:{_free_port()}", "--raw", tmp_path / "raw")
    assert time.monotonic() - t0 < 20  # the interpreter's start on a loaded machine; no 300 s wait
    assert p.returncode == 1 and "Traceback" not in p.stderr
    assert "connection refused — is the server running?" in p.stderr
    assert not (tmp_path / "raw").exists()


def test_a_plan_attaching_to_nothing_fails_at_once(tmp_path):
    plan = tmp_path / "attach.toml"
    plan.write_text(
        f'campaign = "c"\n[server]\nengine = "vllm"\nurl = "http://127.0.0.1:{_free_port()}"\n'
        'served_model_name = "m"\n[model]\nconfig = "Qwen2.5-0.5B-Instruct"\ngpu = "cpu"\n'
        'token_id_range = [1000, 2000]\n[[phase]]\nname = "s"\nkind = "concurrency"\n'
        "concurrency = 1\nrequests = 1\ninput_len = 8\noutput_len = 4\nseed = 0\n"
    )
    t0 = time.monotonic()
    p = collector_cli("run", plan, "--raw", tmp_path / "raw")
    assert time.monotonic() - t0 < 30 and p.returncode == 1, p.stderr  # not the 300 s start-up timeout
    assert "connection refused — is the server running?" in p.stderr and "Traceback" not in p.stderr


def test_init_url_plans_a_sweep_of_real_sizes(tmp_path, fault_server):
    srv = fault_server()
    out = tmp_path / "plan.toml"
    p = collector_cli("init", "--url", srv.url, "--out", out, "--model-config", "Qwen2.5-0.5B-Instruct")
    assert p.returncode == 0, p.stderr
    plan = load_plan(out)
    sweep = [pt for pt in plan.points if pt.kind == "concurrency"]
    assert [pt.concurrency for pt in sweep] == [1, 2, 4, 8, 16, 32, 64]
    assert min(pt.requests for pt in sweep) >= 32  # never 3 requests at one stream
    assert '# kind = "rate"' in out.read_text()  # the open-loop phase, commented until a rate is known
    assert collector_cli("init", "--url", srv.url, "--out", out).returncode == 1  # never replaced


def _result(rows: list[PointRow]) -> RunResult:
    return RunResult(Path("raw/c/r"), "complete", None, len(rows), len(rows), points=rows)


def _row(point: str, saturated: bool | None, kind: str = "concurrency") -> PointRow:
    return PointRow(point, kind, 10, 0, 100.0, 10.0, 1.0, None, client_lag_p99_ms=12.0 if saturated else 1.0,
                    client_saturated=saturated)  # fmt: skip


def test_points_the_client_paced_are_named_with_the_fix():
    res = _result([_row("p00-warmup", True, "warmup"), _row("p01-a", False), _row("p02-b", True)])
    v = verdict(res)
    left = v.left_out
    assert list(left) == ["p02-b"] and "client saturated (event-loop lag p99 12.0 ms)" in left["p02-b"]
    assert "[load] shards" in left["p02-b"] and v.unusable is None and v.status == "partial"
    every = verdict(_result([_row("p01-a", True), _row("p02-b", True)]))
    assert every.status == "unusable"
    assert every.unusable.startswith("every measured point fails a gate that excludes it (first: p01-a")
    assert verdict(_result([_row("p01-a", False)])).status == "usable"


def test_the_collectors_excluding_checks_are_the_gates_analysis_excludes_by():
    """The run's exit status comes from the collector's own checks (collector.protocol.checks.POINT_EXCLUDING,
    STARTUP_EXCLUDING); analysis gates on the same checks: the two must agree on what leaves a point out."""
    check_gate = {**gates.OWN_POINT_CHECKS, "prefix_cache_hits": "prefix_caching_off"}
    excluding = {c for c, g in check_gate.items() if gates.SEVERITY[g] == "exclude"}
    assert excluding == ck.POINT_EXCLUDING
    assert {c for c in ck.STARTUP_EXCLUDING if gates.SEVERITY[c] == "exclude"} == ck.STARTUP_EXCLUDING
    assert gates.SEVERITY["client_not_saturated"] == "exclude"  # verdict leaves a client-paced point out


def test_goodput_flags_read_as_vllm_spells_them():
    assert metrics.parse_goodput(["ttft:730 tpot:50", "e2el:2000"]) == {
        "ttft_ms": 730.0,
        "tpot_ms": 50.0,
        "e2e_ms": 2000.0,
    }
    p = collector_cli("analyze", "--raw", "nowhere", "--goodput", "ttft=730")
    assert p.returncode == 1 and "--goodput 'ttft=730': want KEY:MS" in p.stderr


def test_quick_plan_text_is_the_plan_loader_s(tmp_path):
    """A finite rate makes an open-loop phase capped by --max-concurrency, bounded by --num-prompts."""
    from collector.protocol import quick

    spec = quick.QuickSpec(base_url="http://h:1", model="m", engine="vllm", request_rates=(2.0, 4.0),
                           max_concurrency=(8,), num_prompts=50, burstiness=0.5)  # fmt: skip
    facts = quick.ServerFacts("vllm", ["m"], None, 4096)
    theory = quick.TheoryInputs("Qwen2.5-0.5B-Instruct", (1000, 150000, "test"), "bf16")
    text = quick.plan_text(spec, facts, theory, "h200", "Qwen2.5-0.5B-Instruct")
    doc = tomllib.loads(text)
    (rate,) = [ph for ph in doc["phase"] if ph["kind"] == "rate"]
    assert (rate["request_rates"], rate["max_concurrency"], rate["max_requests"]) == ([2.0, 4.0], 8, 50)
    assert (rate["arrival"], rate["burstiness"]) == ("gamma", 0.5)
    (tmp_path / "p.toml").write_text(text)
    assert [pt.rate.request_rate for pt in load_plan(tmp_path / "p.toml").points if pt.rate] == [2.0, 4.0]
    # neither vLLM nor llama.cpp by its /metrics and /props: any OpenAI-compatible server (SGLang, TGI, ...)
    unknown = quick.ServerFacts(None, ["m"], None, None)
    generic = quick.plan_text(quick.QuickSpec(base_url="http://h:1", model="m"), unknown, theory, "cpu", "x")
    (tmp_path / "g.toml").write_text(generic)
    assert load_plan(tmp_path / "g.toml").server.engine == "openai"


def test_a_hung_engine_binary_fails_in_seconds(tmp_path, make_plan):
    """A llama-server that never answers (not --help, not --version, not /health): the probes are bounded
    by seconds, so the start-up timeout decides (was 60 s + 180 s of probes before a 15 s timeout)."""
    plan = make_plan(tmp_path)
    (tmp_path / "fake-llama-server").write_text(
        "#!/bin/sh\necho 'loading the model, slowly'\nexec sleep 600\n"
    )
    plan.write_text(plan.read_text().replace("startup_timeout_s = 30", "startup_timeout_s = 3"))
    t0 = time.monotonic()
    p = collector_cli("run", plan, "--raw", tmp_path / "raw", timeout=120)
    took = time.monotonic() - t0
    assert p.returncode == 1 and "Traceback" not in p.stderr, p.stderr
    assert "not healthy after 3 s" in p.stderr and "loading the model, slowly" in p.stderr
    assert took < 90, f"{took:.0f} s"  # 35 s on the loaded 2-core box; 240 s of probes before
