"""``collector run`` against the real engines on CPU (llama-server and vLLM's CPU build, tiny random model):
the shipped CPU plans end to end, then faults caused for real (the server killed mid-point, Ctrl-C to
``collector run``). Skipped when the engine cache is missing, except under CI (env ``CI`` set), where that is
a failure. The cache is <repo>/.engines or $ENGINES_CACHE.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from analysis.parse.events_jsonl import checks, parse_events_jsonl
from analysis.parse.requests_jsonl import parse_requests_jsonl
from analysis.parse.scrapes_jsonl import counter_total, metric_samples, parse_scrapes_jsonl
from collector.protocol.run import execute_run
from collector.raw.errors import RunError
from collector.raw.store import open_run
from lab.engines import EnginePaths
from tests import engine_cache

pytestmark = pytest.mark.engines
REPO = engine_cache.REPO
CACHE = engine_cache.CACHE
_require = engine_cache.require


def _assert_clean_campaign(res, n_points: int) -> list:
    assert res.status == "complete" and res.points_done == n_points, str(res)
    assert not res.checks_failed, str(res)
    run = res.path
    assert open_run(run).sealed
    reqs = parse_requests_jsonl(run / "requests.jsonl")
    assert reqs and all(r.ok for r in reqs)
    # every generated token arrived in some chunk (vLLM's API server coalesces several steps into one chunk
    # when it falls behind: seen under CPU contention, 1..6 tokens per chunk)
    assert all(sum(r.chunk_tokens) == r.max_tokens and min(r.chunk_tokens) >= 0 for r in reqs)
    assert all(r.prompt_tokens == r.input_len and r.completion_tokens == r.max_tokens for r in reqs)
    assert len(res.vllm_bench) == n_points and not (run / "bench").exists()  # raw/ holds observations only
    ev = parse_events_jsonl(run / "events.jsonl")
    names = {c.name for c in checks(ev) if c.scope == "startup" and c.ok}
    assert {"health", "kv_pool", "prefix_caching_off", "greedy_sampling"} <= names
    return reqs


def _verify_cli(raw: Path) -> None:
    p = subprocess.run(
        [sys.executable, "-m", "collector.cli", "verify", "--raw", str(raw)], capture_output=True, text=True
    )
    assert p.returncode == 0 and "OK:" in p.stdout, p.stdout + p.stderr


def test_llamacpp_cpu_campaign(tmp_path, local_plan, engines):
    _require(engines.llama_server, engines.tiny_gguf, engines.tiny_config_json)
    raw = tmp_path / "raw"
    res = execute_run(local_plan(tmp_path, "cpu-tiny-llamacpp.toml"), raw)
    reqs = _assert_clean_campaign(res, 8)
    # the tiny model is built to stream one token per event; llama.cpp adds a last chunk with no text
    assert all([t for t in r.chunk_tokens if t] == [1] * r.max_tokens for r in reqs)
    assert {r.concurrency for r in reqs if r.phase == "sweep"} == {1, 2, 4, 8}
    assert {r.input_len for r in reqs if r.phase == "length"} == {32, 128, 512}
    assert {r.token_count_source for r in reqs} == {"timings"}
    ev = parse_events_jsonl(res.path / "events.jsonl")
    pool = next(c for c in checks(ev) if c.name == "kv_pool")
    assert "slots 8, context per slot 1024" in pool.detail  # -np 8 -c 8192
    _verify_cli(raw)


def test_vllm_cpu_campaign_with_real_preemption(tmp_path, local_plan, engines):
    _require(engines.vllm_python, engines.tiny_hf_dir, engines.tiny_config_json)
    raw = tmp_path / "raw"
    res = execute_run(local_plan(tmp_path, "cpu-tiny-vllm.toml"), raw)
    reqs = _assert_clean_campaign(res, 9)
    assert {r.token_count_source for r in reqs} == {"usage"}
    ev = parse_events_jsonl(res.path / "events.jsonl")
    pre = {c.point: c for c in checks(ev) if c.name == "preemptions"}
    assert pre["p08-overload-c008-i512-o256"].ok and all(
        c.ok for p, c in pre.items() if not p.startswith("p08")
    )  # overload preempted, nothing else did
    # the counter itself, read back from the raw scrapes
    scr = [s for s in parse_scrapes_jsonl(res.path / "scrapes.jsonl") if s.source == "metrics" and s.ok]
    assert counter_total(metric_samples(scr[-1]), "vllm:num_preemptions_total") > 0
    pool = next(c for c in checks(ev) if c.name == "kv_pool")
    assert "KV cache 4096 tokens" in pool.detail  # 32 blocks x 128
    _verify_cli(raw)


def _server_pid(binary: Path, port: int) -> int:
    """The pid of the llama-server this test's collector started (found by its exact binary and port)."""
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if argv and argv[0] == str(binary).encode() and str(port).encode() in argv:
            return int(proc.name)
    raise AssertionError("server process not found")


def _wait_sweep_records(raw: Path, campaign: str, n: int, proc: subprocess.Popen | None = None) -> Path:
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        for f in (raw / campaign).glob("*/requests.jsonl") if (raw / campaign).exists() else []:
            if sum(b'"phase":"sweep"' in ln for ln in f.read_bytes().splitlines()) >= n:
                return f.parent
        assert proc is None or proc.poll() is None, proc.communicate()
        time.sleep(0.2)
    raise AssertionError("no sweep requests on disk in time")


def _long_llamacpp_run(
    tmp_path: Path, local_plan, long_sweep: dict[str, str], engines: EnginePaths
) -> tuple[subprocess.Popen, Path, int]:
    """`collector run` of the CPU llama.cpp plan with a long sweep, once 4 sweep requests are on disk."""
    _require(engines.llama_server, engines.tiny_gguf, engines.tiny_config_json)
    raw = tmp_path / "raw"
    plan = local_plan(tmp_path, "cpu-tiny-llamacpp.toml", long_sweep)
    port = int(re.search(r"(?m)^port = (\d+)", plan.read_text())[1])
    p = subprocess.Popen(
        [sys.executable, "-m", "collector.cli", "run", str(plan), "--raw", str(raw)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    return p, _wait_sweep_records(raw, "cpu-tiny-qwen2", 4, p), port


def test_llamacpp_server_killed_mid_point(tmp_path, engines, long_sweep, local_plan):
    p, run, port = _long_llamacpp_run(tmp_path, local_plan, long_sweep, engines)
    os.kill(_server_pid(engines.llama_server, port), signal.SIGKILL)
    out, err = p.communicate(timeout=120)
    assert p.returncode == 1
    assert "server exited with code -9 during point p01-sweep" in out.decode() + err.decode()
    m = json.loads((run / "manifest.json").read_text())
    assert m["status"] == "failed" and "code -9" in m["note"]
    reqs = [r for r in parse_requests_jsonl(run / "requests.jsonl") if r.phase == "sweep"]
    assert sum(r.ok for r in reqs) >= 4
    assert {r.error_kind for r in reqs if not r.ok} <= {"stream_cut", "connect", "aborted"}
    ev = parse_events_jsonl(run / "events.jsonl")
    assert [e.get("expected") for e in ev if e.kind == "server_exit"] == [False]


def test_sigint_to_collector_run_stops_real_server(tmp_path, engines, long_sweep, local_plan):
    p, run, port = _long_llamacpp_run(tmp_path, local_plan, long_sweep, engines)
    pid = _server_pid(engines.llama_server, port)
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=120)
    assert p.returncode == 1 and "interrupted by SIGINT during point p01-sweep" in out.decode() + err.decode()
    assert not Path(f"/proc/{pid}").exists()
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"http://127.0.0.1:{port}/health", timeout=2)
    m = json.loads((run / "manifest.json").read_text())
    assert m["status"] == "failed"
    reqs = [r for r in parse_requests_jsonl(run / "requests.jsonl") if r.phase == "sweep"]
    assert sum(r.ok for r in reqs) >= 4 and {r.error_kind for r in reqs if not r.ok} <= {"aborted"}
    end = [e for e in parse_events_jsonl(run / "events.jsonl") if e.kind == "point_end"][-1]
    assert end.get("sent") == end.get("finished") == len(reqs)  # every request sent has its record


def test_startup_failure_is_sealed_with_the_reason(tmp_path, local_plan, engines):
    """A model file pre-flight cannot judge (it exists; its tensors are cut short): llama-server exits during
    start-up, and the one-line reason names the server log and the log's first error line."""
    _require(engines.llama_server, engines.tiny_gguf)
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(engines.tiny_gguf.read_bytes()[: engines.tiny_gguf.stat().st_size // 2])
    plan = local_plan(tmp_path, "cpu-tiny-llamacpp.toml")
    plan.write_text(re.sub(r'(?m)^model = ".*"$', f'model = "{cut}"', plan.read_text()))
    with pytest.raises(RunError, match="server exited with code") as exc:
        execute_run(plan, tmp_path / "raw")
    (run,) = (tmp_path / "raw" / "cpu-tiny-qwen2").iterdir()
    m = json.loads((run / "manifest.json").read_text())
    assert m["status"] == "failed" and "during start-up" in m["note"]
    log = (run / "server.log").read_text(errors="replace")
    cause = str(exc.value).split(f"{run / 'server.log'}: ", 1)[1].rstrip(")")
    assert cause and cause in log and re.search(r"(?i)error|fail", cause), str(exc.value)


def test_unknown_llama_server_flag_is_refused_before_any_run_folder(tmp_path, local_plan, engines):
    _require(engines.llama_server, engines.tiny_gguf)
    plan = local_plan(tmp_path, "cpu-tiny-llamacpp.toml", {'"-lv", "4",': '"-lv", "4", "--no-such-flag",'})
    with pytest.raises(
        RunError, match=r"\[server\].args: --no-such-flag: unknown flag \(`.*llama-server --help`"
    ):
        execute_run(plan, tmp_path / "raw")
    assert not (tmp_path / "raw").exists()
