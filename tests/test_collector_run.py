"""``collector run`` end to end against the local test server started as if it were llama-server: the raw
run it leaves, and what happens to data, server and seal under each fault. (The same faults against the
real engines: test_collector_engines.py.)"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from analysis.parse.bench_json import parse_bench_json_bytes
from analysis.parse.events_jsonl import checks, parse_events_jsonl
from analysis.parse.requests_jsonl import parse_requests_jsonl
from analysis.parse.scrapes_jsonl import parse_scrapes_jsonl
from collector.protocol.run import execute_run
from collector.raw.errors import PlanError, RunError
from collector.raw.store import open_run, verify
from tests.loopback import port_closed

ROOT = Path(__file__).resolve().parent.parent
PY = sys.executable


def _run_dir(raw: Path) -> Path:
    (info,) = [p for p in (raw / "fake").iterdir()]
    return info


def _port(run: Path) -> int:
    return int(json.loads((run / "fingerprint" / "command.json").read_text())["url"].rsplit(":", 1)[1])


def test_happy_run_leaves_a_complete_sealed_readable_run(tmp_path, make_plan):
    raw = tmp_path / "raw"
    res = execute_run(make_plan(tmp_path), raw)
    run = res.path
    assert res.status == "complete" and res.points_done == 3 and not res.checks_failed, str(res)
    assert open_run(run).sealed and verify(raw).ok
    reqs = parse_requests_jsonl(run / "requests.jsonl")
    assert len(reqs) == 2 + 3 + 12 and all(r.ok for r in reqs)
    assert {r.phase_kind for r in reqs} == {"warmup", "concurrency"}
    assert all(sum(r.chunk_tokens) == r.max_tokens == r.completion_tokens for r in reqs)
    assert all(r.prompt_tokens == r.input_len for r in reqs)
    ev = parse_events_jsonl(run / "events.jsonl")
    kinds = [e.kind for e in ev]
    assert (
        kinds[0] == "run_start"
        and kinds[-1] == "run_end"
        and kinds.count("point_start") == kinds.count("point_end") == 3
    )
    assert all(c.ok is not False for c in checks(ev))
    # the plan's default client stack, as it ran: asyncio's loop and aiohttp under httpx
    (stack,) = [e for e in ev if e.kind == "client_stack"]
    assert stack.get("loop").startswith("asyncio") and stack.get("transport").startswith("aiohttp ")
    scrapes = parse_scrapes_jsonl(run / "scrapes.jsonl")
    ticks = [s for s in scrapes if s.tag == "tick"]
    assert ticks and all(s.ok for s in scrapes)
    assert [s.k for s in ticks] == sorted({s.k for s in ticks})
    assert {s.tag for s in scrapes} >= {"startup", "point_start", "point_end", "tick"}
    # each point in vllm bench serve's schema, in the result and not in raw/ (observations only)
    assert not (run / "bench").exists() and len(res.vllm_bench) == 3
    assert parse_bench_json_bytes(json.dumps(res.vllm_bench[max(res.vllm_bench)]).encode()).completed == 12
    # prediction.json is written before the first request is sent
    journal = [json.loads(x) for x in (run / "journal.jsonl").read_text().splitlines()]
    pred_at = next(j["written_at"]["unix_ns"] for j in journal if j["path"] == "prediction.json")
    assert pred_at < min(r.send_unix_ns for r in reqs)
    assert json.loads((run / "prediction.json").read_text())["prediction"]["kv_bytes_per_token"] == 57344
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["status"] == "complete" and manifest["plan"]["server"]["engine"] == "llamacpp"
    assert (run / "plan.toml").read_bytes() == (tmp_path / "fake.toml").read_bytes()
    assert b"fault_server listening" in (run / "server.log").read_bytes()
    assert port_closed(_port(run))


def test_server_dying_mid_point_keeps_finished_requests_and_seals_failed(tmp_path, make_plan):
    raw = tmp_path / "raw"
    with pytest.raises(RunError, match=r"failed.*server exited with code 3 during point p02-sweep-c004"):
        execute_run(make_plan(tmp_path, ["--die-after", "12"]), raw)
    run = _run_dir(raw)
    info = open_run(run)
    assert info.sealed and verify(raw).ok
    m = json.loads((run / "manifest.json").read_text())
    assert m["status"] == "failed" and "server exited with code 3" in m["note"]
    reqs = parse_requests_jsonl(run / "requests.jsonl")
    ok = [r for r in reqs if r.ok]
    assert 2 + 3 <= len(ok) <= 11  # request 12 killed the server: at most the 11 before it ended well
    failed = [r for r in reqs if not r.ok]
    assert failed and all(r.error_kind in ("stream_cut", "connect", "aborted") for r in failed)
    ev = parse_events_jsonl(run / "events.jsonl")
    assert any(e.kind == "server_exit" and e.get("code") == 3 and e.get("expected") is False for e in ev)
    assert any(e.kind == "abort" and "server exited" in e.get("reason") for e in ev)
    end = [e for e in ev if e.kind == "point_end"][-1]
    assert end.get("aborted") and end.get("point").startswith("p02")
    assert end.get("sent") == end.get("finished") == sum(r.point.startswith("p02") for r in reqs)
    assert [e.get("expected") for e in ev if e.kind == "server_exit"] == [False]
    assert port_closed(_port(run))


def test_http_errors_are_recorded_and_fail_the_point_checks(tmp_path, make_plan):
    raw = tmp_path / "raw"
    res = execute_run(make_plan(tmp_path, ["--fault", "http500:4", "--fault", "cut:7"]), raw)
    assert res.status == "complete"
    reqs = parse_requests_jsonl(res.path / "requests.jsonl")
    kinds = sorted(r.error_kind for r in reqs if not r.ok)
    assert len(reqs) == 17 and "http" in kinds and "stream_cut" in kinds
    assert any(r.http_status == 500 for r in reqs)
    failed = {c.name for c in checks(parse_events_jsonl(res.path / "events.jsonl")) if c.ok is False}
    assert {"failures", "completed_vs_sent"} <= failed
    summary = parse_bench_json_bytes(json.dumps(res.vllm_bench[max(res.vllm_bench)]).encode())
    assert summary.failed == sum(1 for r in reqs if not r.ok and r.point.startswith("p02"))


def test_metrics_that_stop_answering_are_noticed_not_fatal(tmp_path, make_plan):
    raw = tmp_path / "raw"
    res = execute_run(make_plan(tmp_path, ["--metrics-down-after", "3"], output_len=64), raw)
    assert res.status == "complete"
    ev = parse_events_jsonl(res.path / "events.jsonl")
    assert [e.kind for e in ev].count("metrics_unreachable") == 1
    scrapes = parse_scrapes_jsonl(res.path / "scrapes.jsonl")
    assert (
        any(s.status == 503 for s in scrapes) and len(parse_requests_jsonl(res.path / "requests.jsonl")) == 17
    )


def test_the_other_client_stack_runs_and_is_recorded(tmp_path, make_plan):
    """uvloop and httpx's own transport ([load] loop / transport) measure a whole run too."""
    plan = make_plan(tmp_path)
    plan.write_text(
        plan.read_text().replace("drain_s = 0.1", 'drain_s = 0.1\nloop = "uvloop"\ntransport = "httpcore"')
    )
    res = execute_run(plan, tmp_path / "raw")
    assert res.status == "complete" and not res.checks_failed, str(res)
    ev = parse_events_jsonl(res.path / "events.jsonl")
    (stack,) = [e for e in ev if e.kind == "client_stack"]
    assert stack.get("loop").startswith("uvloop ") and stack.get("transport").startswith("httpcore ")
    reqs = parse_requests_jsonl(res.path / "requests.jsonl")
    assert len(reqs) == 2 + 3 + 12 and all(r.ok for r in reqs)


@pytest.mark.parametrize(
    "line, message",
    [
        ("drian_s = 1", r"\[load\].drian_s: unknown key"),
        ('transport = "curl"', r"\[load\].transport: .*curl"),
    ],
)
def test_bad_plan_is_one_line_and_writes_nothing(tmp_path, make_plan, line, message):
    plan = make_plan(tmp_path)
    plan.write_text(plan.read_text().replace("drain_s = 0.1", f"drain_s = 0.1\n{line}"))
    with pytest.raises(PlanError, match=rf"fake.toml: {message}"):
        execute_run(plan, tmp_path / "raw")
    assert not (tmp_path / "raw").exists()


def test_missing_server_binary_is_refused_before_any_run_folder(tmp_path, make_plan):
    plan = make_plan(tmp_path)
    plan.write_text(plan.read_text().replace("fake-llama-server", "no-such-server"))
    with pytest.raises(RunError, match=r"fake.toml: \[server\].binary: .*no-such-server does not exist"):
        execute_run(plan, tmp_path / "raw")
    assert not (tmp_path / "raw").exists()


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_signal_to_collector_run_stops_server_and_seals_failed(tmp_path, sig, make_plan):
    raw = tmp_path / "raw"
    plan = make_plan(tmp_path, points="[{concurrency = 2, requests = 400, seed = 5}]", output_len=200)
    p = subprocess.Popen([PY, "-m", "collector.cli", "run", str(plan), "--raw", str(raw)], cwd=ROOT,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
    deadline = time.monotonic() + 60
    req_file = None
    while time.monotonic() < deadline:  # wait until the sweep point has finished requests on disk
        runs = list((raw / "fake").glob("*/requests.jsonl")) if (raw / "fake").exists() else []
        if runs and sum(b'"phase":"sweep"' in ln for ln in runs[0].read_bytes().splitlines()) >= 3:
            req_file = runs[0]
            break
        time.sleep(0.1)
    assert req_file is not None, p.communicate(timeout=30)
    p.send_signal(sig)
    out, err = p.communicate(timeout=60)
    assert p.returncode == 1, err.decode()
    run = req_file.parent
    name = signal.Signals(sig).name
    assert f"interrupted by {name} during point p01-sweep" in out.decode() + err.decode()
    m = json.loads((run / "manifest.json").read_text())
    assert m["status"] == "failed" and name in m["note"]
    reqs = parse_requests_jsonl(run / "requests.jsonl")
    sweep = [r for r in reqs if r.phase == "sweep"]
    assert sum(r.ok for r in sweep) >= 3 and {r.error_kind for r in sweep if not r.ok} <= {"aborted"}
    end = [e for e in parse_events_jsonl(run / "events.jsonl") if e.kind == "point_end"][-1]
    assert end.get("sent") == end.get("finished") == len(sweep) and end.get("aborted")
    assert port_closed(_port(run)) and verify(raw).ok


def test_attach_to_a_running_server_records_it_and_notices_it_vanish(tmp_path, make_plan, fault_server):
    srv = fault_server(token_ms=2.0)
    plan = make_plan(tmp_path, points="[{concurrency = 2, requests = 300, seed = 5}]", output_len=50)
    text = plan.read_text()
    start = text.index('binary = "')
    text = (
        text[:start]
        + f'url = "{srv.url}"\nserved_model_name = "fault-model"\n'
        + text[text.index("port = ") :]
    )
    plan.write_text(text)

    def stop_mid_point() -> None:  # the attached server goes away once the sweep point has begun
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            found = list((tmp_path / "raw").glob("fake/*/requests.jsonl"))
            if found and found[0].read_bytes().count(b'"phase":"sweep"') >= 3:
                break
            time.sleep(0.05)
        srv.stop()

    threading.Thread(target=stop_mid_point, daemon=True).start()
    with pytest.raises(RunError, match="server unreachable"):
        execute_run(plan, tmp_path / "raw")
    run = _run_dir(tmp_path / "raw")
    cmd = json.loads((run / "fingerprint" / "command.json").read_text())
    assert cmd["mode"] == "attach" and cmd["argv"] is None and not (run / "server.log").exists()
    assert open_run(run).meta["server_mode"] == "attach"
    reqs = parse_requests_jsonl(run / "requests.jsonl")
    assert sum(r.ok for r in reqs if r.phase == "sweep") > 0 and any(r.error_kind == "connect" for r in reqs)
