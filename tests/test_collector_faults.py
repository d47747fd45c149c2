"""``collector run`` under the faults a rented box brings (issue #12): the collector killed with SIGKILL, a
server left running by an earlier collector, a foreign process on the port, a disk that fills up, a point
whose every request fails, a server that cannot start. The server is the local test server started as if it
were llama-server (``tests/fault_server.py``); the same kill against the real llama-server is marked
``engines``. Every case checks the promise it is about: no server process left, no wrong server measured, one
line on the terminal (no traceback), nothing that looks complete when it is not.
"""

from __future__ import annotations

import errno
import io
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from rich.console import Console

from analysis.core import metrics
from analysis.parse.events_jsonl import checks, parse_events_jsonl
from analysis.parse.requests_jsonl import parse_requests_jsonl
from collector.protocol import server as srvmod
from collector.protocol.run import execute_run
from collector.raw.errors import RunError
from collector.raw.store import Stream, open_run
from tests import engine_cache
from tests.cli import collector_cli
from tests.fault_server import FaultServer
from tests.loopback import port_closed

ROOT = Path(__file__).resolve().parent.parent
PY = sys.executable
FAULT_SERVER = ROOT / "tests" / "fault_server.py"


@pytest.fixture(autouse=True)
def _state_dir(tmp_path, monkeypatch):
    """Each test records its servers in its own state folder (never the machine's)."""
    monkeypatch.setenv("ANATOMY_STATE_DIR", str(tmp_path / "state"))


def _port(plan: Path) -> int:
    return int(re.search(r"(?m)^port = (\d+)", plan.read_text())[1])


def _alive(pid: int) -> bool:
    """A live process (a zombie waiting for its parent counts as gone)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _wait_gone(pids: list[int], timeout_s: float = 30.0) -> list[int]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        left = [p for p in pids if _alive(p)]
        if not left:
            return []
        time.sleep(0.1)
    return [p for p in pids if _alive(p)]


def _cli_run(plan: Path, raw: Path, env: dict | None = None) -> subprocess.Popen:
    return subprocess.Popen([PY, "-m", "collector.cli", "run", str(plan), "--raw", str(raw)], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)  # fmt: skip


def _wait_for(pred, timeout_s: float = 60.0, proc: subprocess.Popen | None = None):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        v = pred()
        if v:
            return v
        if proc is not None and proc.poll() is not None:
            raise AssertionError(proc.communicate())
        time.sleep(0.1)
    raise AssertionError("timed out")


def _server_log_pids(raw: Path, pattern: bytes) -> int | None:
    for log in raw.glob("*/*/server.log"):
        m = re.search(pattern, log.read_bytes())
        if m:
            return int(m[1])
    return None


def _listener(port: int) -> int | None:
    owners = srvmod.port_owner_pids(port)
    return owners[0] if owners else None


# -- no orphans -------------------------------------------------------------------------------------------


def test_sigkill_of_the_collector_takes_the_server_and_its_children_down(tmp_path, make_plan):
    """The server (and the child it spawned, as vLLM spawns its engine core) must not outlive a collector
    killed with SIGKILL: the parent-death signal takes the server, the watchdog its process group."""
    raw = tmp_path / "raw"
    plan = make_plan(tmp_path, ["--spawn-child"], points="[{concurrency = 2, requests = 400, seed = 5}]",
                     output_len=200)  # fmt: skip
    port = _port(plan)
    p = _cli_run(plan, raw, env={**os.environ, "ANATOMY_STATE_DIR": str(tmp_path / "state")})
    child = _wait_for(lambda: _server_log_pids(raw, rb"fault_server child pid (\d+)"), proc=p)
    server = _wait_for(lambda: _listener(port), proc=p)
    _wait_for(lambda: b'"phase":"sweep"' in next(raw.glob("*/*/requests.jsonl")).read_bytes(), proc=p)
    assert _alive(server) and _alive(child)
    os.kill(p.pid, signal.SIGKILL)
    p.communicate(timeout=30)
    assert _wait_gone([server, child]) == [], "server or its child outlived the collector"
    assert port_closed(port)


def test_a_server_left_by_a_dead_collector_is_stopped_before_the_next_run(tmp_path, make_plan):
    """Both guards defeated (say the watchdog was killed too): the record in the state folder lets the next
    run on the port stop exactly that server, then measure its own."""
    plan = make_plan(tmp_path, points="[{concurrency = 1, requests = 2, seed = 5}]", output_len=4)
    port = _port(plan)
    orphan = subprocess.Popen([PY, str(FAULT_SERVER), "--port", str(port)], start_new_session=True,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    _wait_for(lambda: _listener(port) == orphan.pid)
    dead = subprocess.Popen([PY, "-c", "pass"])  # a collector pid that no longer exists
    dead.wait()
    assert srvmod.write_server_record(port, orphan.pid, ["fault_server"], tmp_path / "raw" / "old-run")
    rec = json.loads(srvmod._record_path(port).read_text())
    rec["collector_pid"], rec["collector_start_ticks"] = dead.pid, 1
    srvmod._record_path(port).write_text(json.dumps(rec))
    out = io.StringIO()
    res = execute_run(plan, tmp_path / "raw", console=Console(file=out, width=200))
    assert res.status == "complete", str(res)
    assert f"stopped server pid {orphan.pid} left running on port {port}" in out.getvalue()
    assert orphan.wait(timeout=10) is not None
    ident = next(
        c for c in checks(parse_events_jsonl(res.path / "events.jsonl")) if c.name == "server_identity"
    )
    assert ident.ok is True and ident.facts["listener_pids"] != [orphan.pid]
    assert not srvmod._record_path(port).exists()  # our own record went with our server


def test_a_recorded_server_of_a_live_collector_is_never_touched(tmp_path, make_plan):
    plan = make_plan(tmp_path, points="[{concurrency = 1, requests = 2, seed = 5}]", output_len=4)
    port = _port(plan)
    other = subprocess.Popen([PY, str(FAULT_SERVER), "--port", str(port)], start_new_session=True,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        _wait_for(lambda: _listener(port) == other.pid)
        srvmod.write_server_record(port, other.pid, ["fault_server"], None)  # recorded by us: we are alive
        with pytest.raises(
            RunError, match=rf"port {port} is already in use by pid {other.pid} \(.*fault_server"
        ):
            execute_run(plan, tmp_path / "raw")
        assert other.poll() is None and not (tmp_path / "raw").exists()
    finally:
        other.kill()


def test_a_foreign_process_on_the_port_is_named_and_nothing_is_written(tmp_path, make_plan, fault_server):
    srv = fault_server(token_ms=2.0)
    plan = make_plan(tmp_path)
    plan.write_text(re.sub(r"(?m)^port = \d+", f"port = {srv.port}", plan.read_text()))
    p = subprocess.run(
        [PY, "-m", "collector.cli", "run", str(plan), "--raw", str(tmp_path / "raw")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    srv.stop()
    assert p.returncode == 1 and "Traceback" not in p.stderr
    assert re.search(rf"port {srv.port} is already in use by pid {os.getpid()} \(", p.stderr), p.stderr
    assert len(p.stderr.strip().splitlines()) == 1 and not (tmp_path / "raw").exists()


def test_an_orphan_that_answers_on_the_port_is_not_measured(tmp_path, make_plan, fault_server):
    """A server that binds late (as vLLM does) after pre-flight found the port free: /health answers, but from
    a process outside the server we started — refused before any fingerprint of it is saved."""
    script = tmp_path / "never-listens"
    script.write_text(f'#!/bin/sh\n[ "$1" = "--help" ] && exec {PY} {FAULT_SERVER} --help\nexec sleep 300\n')
    script.chmod(0o755)
    plan = make_plan(tmp_path)
    plan.write_text(plan.read_text().replace(str(tmp_path / "fake-llama-server"), str(script)))
    port = _port(plan)
    raw = tmp_path / "raw"
    intruder: list[FaultServer] = []

    def bind_after_preflight() -> None:
        _wait_for(lambda: list(raw.glob("fake/*/run.json")), timeout_s=60)
        intruder.append(fault_server(port=port, token_ms=2.0))

    threading.Thread(target=bind_after_preflight, daemon=True).start()
    with pytest.raises(
        RunError, match=rf"port {port} answers, but from pid {os.getpid()} .*not from the server"
    ):
        execute_run(plan, raw)
    intruder[0].stop()
    (run,) = raw.glob("fake/*")
    assert not (run / "fingerprint" / "server-props.json").exists()
    m = json.loads((run / "manifest.json").read_text())
    assert m["status"] == "failed" and "not from the server this run started" in m["note"]


def test_without_proc_the_served_model_must_be_ours(tmp_path, monkeypatch, make_plan, fault_server):
    """Where /proc cannot name the listener (not Linux, hidden pids; simulated), a server answering with
    another model name is still refused."""
    monkeypatch.setattr(srvmod, "port_owner_pids", lambda port: [])
    script = tmp_path / "never-listens"
    script.write_text(f'#!/bin/sh\n[ "$1" = "--help" ] && exec {PY} {FAULT_SERVER} --help\nexec sleep 300\n')
    script.chmod(0o755)
    plan = make_plan(tmp_path)
    plan.write_text(plan.read_text().replace(str(tmp_path / "fake-llama-server"), str(script)))
    port, raw = _port(plan), tmp_path / "raw"
    intruder: list[FaultServer] = []

    def bind_after_preflight() -> None:
        _wait_for(lambda: list(raw.glob("fake/*/run.json")), timeout_s=60)
        intruder.append(fault_server(port=port, token_ms=2.0, alias="someone-else"))

    threading.Thread(target=bind_after_preflight, daemon=True).start()
    with pytest.raises(RunError, match=rf"port {port} answers as \['someone-else'\], not as 'tiny'"):
        execute_run(plan, raw)
    intruder[0].stop()


# -- exit codes and messages -----------------------------------------------------------------------------


def test_every_request_failing_stops_the_run_with_the_http_cause(tmp_path, make_plan):
    """Token ids past the server's vocabulary: HTTP 400 on every request. The run stops after that point,
    failed, and the terminal says why in one line (status + body)."""
    raw = tmp_path / "raw"
    plan = make_plan(tmp_path, ["--vocab", "100"])  # the plan draws ids up to 126
    p = subprocess.run([PY, "-m", "collector.cli", "run", str(plan), "--raw", str(raw)], cwd=ROOT,
                       capture_output=True, text=True, timeout=180)  # fmt: skip
    assert p.returncode == 1 and "Traceback" not in p.stderr
    last = p.stderr.strip().splitlines()[-1]
    assert re.search(
        r"failed, 0/3 points \(point p00-warmup\S*: all 2 requests failed \(first: HTTP 400: "
        r"\{\"error\": \{\"message\": \"Token id \d+ is out of vocabulary\"",
        last,
    ), last
    (run,) = raw.glob("fake/*")
    m = json.loads((run / "manifest.json").read_text())
    assert m["status"] == "failed" and "all 2 requests failed" in m["note"]
    assert {r.point for r in parse_requests_jsonl(run / "requests.jsonl")} == {"p00-warmup-c002-i8-o4"}


def test_a_complete_run_whose_every_point_fails_a_gate_exits_nonzero(tmp_path, make_plan):
    """HTTP 500 on every 2nd request: each point completes but fails the `failures` check, which the analysis'
    gates treat as excluding the point — `collector run` says the run is unusable and exits 1."""
    raw = tmp_path / "raw"
    p = collector_cli("run", make_plan(tmp_path, ["--fault", "http500:2"]), "--raw", raw, timeout=180)
    assert p.returncode == 1 and "Traceback" not in p.stderr
    assert (
        "complete, but unusable: every measured point fails a gate that excludes it (first: p01-sweep"
        in p.stderr
    )
    assert "first failed request: HTTP 500" in p.stderr
    (run,) = raw.glob("fake/*")
    assert json.loads((run / "manifest.json").read_text())["status"] == "complete"


def test_startup_failure_names_the_log_and_its_error_line(tmp_path, make_plan):
    raw = tmp_path / "raw"
    msg = "couldn't bind HTTP server socket, hostname: 127.0.0.1, port: 1"
    plan = make_plan(tmp_path, ["--exit-at-start", msg])
    with pytest.raises(RunError) as exc:
        execute_run(plan, raw)
    (run,) = raw.glob("fake/*")
    assert f"server exited with code 1 during start-up; {run / 'server.log'}: {msg}" in str(exc.value)


def test_end_of_run_summary_table_per_point(tmp_path, make_plan):
    """The table at the end: per point, requests ok/failed, output tok/s, TTFT, TPOT and ITL at p50 / p99 —
    the numbers analysis.core.metrics computes from the run's requests.jsonl — and one line of checks per
    point."""
    out = io.StringIO()
    res = execute_run(make_plan(tmp_path, ["--fault", "http500:5"]), tmp_path / "raw",
                      console=Console(file=out, width=200))  # fmt: skip
    table = out.getvalue().split("points measured", 1)[1]
    reqs = parse_requests_jsonl(res.path / "requests.jsonl")
    for point in ("p00-warmup-c002-i8-o4", "p01-sweep-c001-i24-o16", "p02-sweep-c004-i24-o16"):
        b = metrics.point_result([r for r in reqs if r.point == point], point)
        lat = b.latency
        cells = next(ln for ln in table.splitlines() if point in ln).replace("│", " ").split()
        assert cells == [
            point,
            str(b.completed),
            str(b.failed),
            f"{b.output_throughput_tok_s:.1f}",
            f"{lat['ttft'].median_ms:.1f}", "/", f"{lat['ttft'].percentiles_ms[99.0]:.1f}",
            f"{lat['tpot'].median_ms:.2f}", "/", f"{lat['tpot'].percentiles_ms[99.0]:.2f}",
            f"{lat['itl'].median_ms:.2f}", "/", f"{lat['itl'].percentiles_ms[99.0]:.2f}",
        ]  # fmt: skip
        (line,) = [ln for ln in out.getvalue().splitlines() if ln.startswith(f"checks {point}:")]
        assert " pass" in line and ("FAIL" in line) == (b.failed > 0)
        assert (f"FAIL point {point} failures:" in out.getvalue()) == (b.failed > 0)
    assert sum(int(ln.replace("│", " ").split()[2]) for ln in table.splitlines() if "-c0" in ln) == 3


def test_startup_spinner_shows_the_logs_last_line(tmp_path, make_plan):
    out = io.StringIO()
    plan = make_plan(tmp_path, ["--slow-start-s", "2"])
    execute_run(plan, tmp_path / "raw", console=Console(file=out, width=200, force_terminal=True))
    screen = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", out.getvalue())
    # a spinner frame: the wait, the seconds so far and the last line the server printed while it started
    assert re.search(
        r"waiting for http://127\.0\.0\.1:\d+/health \(up to 30 s\): \d+ s +fault_server: ", screen
    )


# -- disk full ---------------------------------------------------------------------------------------------


def _small_tmpfs(path: Path, size: str) -> bool:
    path.mkdir(parents=True)
    p = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True
    )
    return p.returncode == 0


def _assert_disk_full_outcome(raw: Path, port: int, message: str) -> None:
    assert "disk full" in message and "No space left on device" in message
    (run,) = raw.glob("fake/*")
    assert port_closed(port)
    info = open_run(run)
    if info.sealed:  # the seal itself fitted: it must say failed, with the reason
        m = json.loads((run / "manifest.json").read_text())
        assert m["status"] == "failed" and "disk full" in m["note"]
    else:
        assert "not sealed" in message
    # every request line that made it to disk is whole, except perhaps a torn last line
    reqs = parse_requests_jsonl(run / "requests.jsonl", allow_torn_tail=True)
    assert all(r.request_id for r in reqs)


def test_disk_full_on_a_small_tmpfs_ends_the_run_failed_in_one_line(tmp_path, make_plan):
    raw = tmp_path / "raw"
    if not _small_tmpfs(raw, "400k"):
        pytest.skip("cannot mount a tmpfs here (not root?): see the injected-ENOSPC test")
    try:
        plan = make_plan(tmp_path, points="[{concurrency = 4, requests = 2000, seed = 5}]", output_len=64)
        p = subprocess.run([PY, "-m", "collector.cli", "run", str(plan), "--raw", str(raw)], cwd=ROOT,
                           capture_output=True, text=True, timeout=300,
                           env={**os.environ, "ANATOMY_STATE_DIR": str(tmp_path / "state")})  # fmt: skip
        assert p.returncode == 1, p.stderr
        assert "Traceback" not in p.stderr and "Exception" not in p.stderr, p.stderr
        _assert_disk_full_outcome(raw, _port(plan), p.stderr.strip().splitlines()[-1])
    finally:
        subprocess.run(["umount", "-l", str(raw)], capture_output=True)


def test_disk_full_injected_in_every_writer_thread(tmp_path, monkeypatch, make_plan):
    """Without a small file system: every stream write fails with ENOSPC from the 60th on — whichever thread
    (load loop, sampler, server-log pump, event writers) meets it first ends the run, failed, with the
    reason."""
    writes = {"n": 0}
    real_write = Stream.write

    def write(self, data: bytes) -> None:
        writes["n"] += 1
        if writes["n"] >= 60:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(self._run.path / self.rel))
        real_write(self, data)

    monkeypatch.setattr(Stream, "write", write)
    raw = tmp_path / "raw"
    plan = make_plan(tmp_path, points="[{concurrency = 4, requests = 400, seed = 5}]", output_len=64)
    with pytest.raises(RunError) as exc:
        execute_run(plan, raw)
    msg = str(exc.value)
    assert len(msg.splitlines()) == 1 and "failed" in msg
    _assert_disk_full_outcome(raw, _port(plan), msg)


# -- the real llama-server ---------------------------------------------------------------------------------


@pytest.mark.engines
def test_sigkill_of_the_collector_leaves_no_llama_server(tmp_path, local_plan, engines, long_sweep):
    engine_cache.require(engines.llama_server, engines.tiny_gguf, engines.tiny_config_json)
    raw = tmp_path / "raw"
    plan = local_plan(tmp_path, "cpu-tiny-llamacpp.toml", long_sweep)
    port = _port(plan)
    p = _cli_run(plan, raw, env={**os.environ, "ANATOMY_STATE_DIR": str(tmp_path / "state")})
    server = _wait_for(lambda: _listener(port), timeout_s=180, proc=p)
    _wait_for(lambda: list(raw.glob("*/*/requests.jsonl")) and b'"phase":"sweep"'
              in next(raw.glob("*/*/requests.jsonl")).read_bytes(), timeout_s=180, proc=p)  # fmt: skip
    assert Path(f"/proc/{server}/exe").resolve() == engines.llama_server.resolve()
    os.kill(p.pid, signal.SIGKILL)
    p.communicate(timeout=30)
    assert _wait_gone([server]) == [], "llama-server outlived the collector"
    assert port_closed(port)


@pytest.mark.engines
def test_a_run_stopped_before_any_point_is_analysed_without_a_traceback(tmp_path, local_plan, engines):
    """Ctrl-C while llama-server is still loading: a run with a real server log and no point at all. `analyze`
    reports it and exits 0 (it used to end in ``KeyError: 'round'``)."""
    engine_cache.require(engines.llama_server, engines.tiny_gguf, engines.tiny_config_json)
    raw = tmp_path / "raw"
    p = _cli_run(local_plan(tmp_path, "cpu-tiny-llamacpp.toml"), raw,
                 env={**os.environ, "ANATOMY_STATE_DIR": str(tmp_path / "state")})  # fmt: skip

    def loading() -> bool:
        logs = list(raw.glob("*/*/server.log"))
        return bool(logs) and b"llama_model_loader" in logs[0].read_bytes()

    _wait_for(loading, timeout_s=180, proc=p)
    p.send_signal(signal.SIGINT)
    _, err = p.communicate(timeout=120)
    assert p.returncode == 1 and "interrupted by SIGINT before the load" in err.decode()
    (run,) = raw.glob("*/*")
    assert (run / "requests.jsonl").read_bytes() == b""
    a = subprocess.run(
        [PY, "-m", "collector.cli", "analyze", "--raw", str(raw), "--out", str(tmp_path / "out")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert a.returncode == 0 and "Traceback" not in a.stderr, a.stderr
    assert (tmp_path / "out" / "cpu-tiny-qwen2" / "findings.json").is_file()


def _group(pgid: int) -> list[int]:
    return [
        int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit() and srvmod._pgid(int(p.name)) == pgid
    ]


@pytest.mark.engines
def test_sigkill_of_the_collector_leaves_no_vllm_process(tmp_path, local_plan, engines):
    """vLLM's API server spawns its engine core and workers (the parent-death signal reaches only the API
    server): the watchdog stops the whole process group when the collector is killed."""
    engine_cache.require(engines.vllm_python, engines.tiny_hf_dir, engines.tiny_config_json)
    raw = tmp_path / "raw"
    plan = local_plan(tmp_path, "cpu-tiny-vllm.toml")
    port = _port(plan)
    p = _cli_run(plan, raw, env={**os.environ, "ANATOMY_STATE_DIR": str(tmp_path / "state")})

    def healthy() -> bool:
        ev = list(raw.glob("*/*/events.jsonl"))
        return bool(ev) and b'"kind":"server_healthy"' in ev[0].read_bytes()

    _wait_for(healthy, timeout_s=600, proc=p)
    server = _listener(port)
    members = _group(server)
    assert len(members) >= 2, members  # the API server and at least its engine core
    os.kill(p.pid, signal.SIGKILL)
    p.communicate(timeout=30)
    assert _wait_gone(members, timeout_s=60) == [], "a vLLM process outlived the collector"
    assert port_closed(port)
