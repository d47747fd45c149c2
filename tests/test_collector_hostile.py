"""``collector run`` against a server that misbehaves on purpose, and under signals (issue #20): every
network call has a total deadline, every signal is honoured within seconds and seals the run, bad data from
the server is a fact about one request, never a crash. The server is tests/fault_server.py (as a process,
started as if it were llama-server, or in-process); signals are real signals to a real ``collector run``
child process, whose stderr must hold no traceback."""

from __future__ import annotations

import contextlib
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

import httpx
import pytest
from rich.console import Console

from analysis.core import metrics
from analysis.loading.campaign import iter_points, load_campaign
from analysis.parse.events_jsonl import checks, parse_events_jsonl
from analysis.parse.requests_jsonl import parse_requests_jsonl
from analysis.parse.scrapes_jsonl import parse_scrapes_jsonl
from analysis.pipeline.analyze import analyze
from analysis.reconcile.gates import stream_counts_agree
from collector.protocol import bounded_http
from collector.protocol.run import execute_run
from collector.protocol.sampler import Sampler, ScrapeWriter
from collector.raw.errors import RunError
from collector.raw.store import verify
from tests.fault_server import PAD_LINE_BYTES
from tests.loopback import port_closed

ROOT = Path(__file__).resolve().parent.parent
PY = sys.executable
ONE_POINT = "[{concurrency = 2, requests = 400, seed = 5}]"


@pytest.fixture(autouse=True)
def _state_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("ANATOMY_STATE_DIR", str(tmp_path / "state"))


def _start(plan: Path, raw: Path) -> subprocess.Popen:
    """``collector run`` in a session of its own, as from a terminal: a signal to its process group reaches
    it and its load-client shards alike (the server is in a session of its own)."""
    return subprocess.Popen([PY, "-m", "collector.cli", "run", str(plan), "--raw", str(raw)], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                            env={**os.environ, "ANATOMY_STATE_DIR": str(raw.parent / "state")})  # fmt: skip


def _wait_event(raw: Path, needle: bytes, p: subprocess.Popen, timeout_s: float = 60.0) -> Path:
    """The run folder once its events.jsonl holds ``needle``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for ev in raw.glob("*/*/events.jsonl"):
            if needle in ev.read_bytes():
                return ev.parent
        assert p.poll() is None, p.communicate()
        time.sleep(0.05)
    raise AssertionError(f"no {needle!r} in events.jsonl within {timeout_s} s")


def _plan_port(plan: Path) -> int:
    return int(re.search(r"(?m)^port = (\d+)", plan.read_text())[1])


def _manifest(run: Path) -> dict:
    return json.loads((run / "manifest.json").read_text())


# -- signals and deadlines ------------------------------------------------------------------------------


@pytest.mark.parametrize("sigs", [("SIGINT", "SIGINT"), ("SIGTERM",)])
def test_a_signal_during_a_trickling_metrics_scrape_ends_the_run_within_5_s(tmp_path, make_plan, sigs):
    """/metrics answers the start-up scrape, then trickles one byte every 0.1 s for ever: the point-start
    scrape never ends. On main, SIGINT, SIGTERM and a second SIGINT did nothing (the scrape ran in a thread
    nobody could cancel). Now each ends the run within 5 s: server stopped, run sealed failed with the
    signal's name, no traceback."""
    raw = tmp_path / "raw"
    plan = make_plan(tmp_path, ["--trickle-after", "1"], points=ONE_POINT, output_len=50)
    p = _start(plan, raw)
    run = _wait_event(raw, b'"kind":"point_start"', p)
    time.sleep(0.5)  # inside the trickling point_start scrape
    t0 = time.monotonic()
    for name in sigs:
        p.send_signal(signal.Signals[name])
        time.sleep(0.2)
    out, err = p.communicate(timeout=30)
    took = time.monotonic() - t0
    assert took < 5.0, (took, err)
    assert p.returncode == 1 and "Traceback" not in err, err
    m = _manifest(run)
    assert m["status"] == "failed" and f"interrupted by {sigs[0]}" in m["note"], m["note"]
    assert port_closed(_plan_port(plan)) and verify(raw).ok


def test_sigint_while_the_server_is_loading_seals_the_run(tmp_path, make_plan):
    """Ctrl-C (twice, 50 ms apart) while the server is still starting: the run is sealed as interrupted
    before the load, exit 1. On a loaded box, main ended once in a bare KeyboardInterrupt (exit −2, run not
    sealed): a second signal during the clean-up escaped it; now only the first signal unwinds."""
    raw = tmp_path / "raw"
    plan = make_plan(tmp_path, ["--slow-start-s", "30"])
    p = _start(plan, raw)
    deadline = time.monotonic() + 60
    while (
        not list(raw.glob("*/*/server.log"))
        or b"fault_server:" not in next(raw.glob("*/*/server.log")).read_bytes()
    ):
        assert time.monotonic() < deadline and p.poll() is None, p.communicate()
        time.sleep(0.05)
    p.send_signal(signal.SIGINT)
    time.sleep(0.05)
    p.send_signal(signal.SIGINT)
    _, err = p.communicate(timeout=30)
    assert p.returncode == 1 and "Traceback" not in err, err
    assert "interrupted by SIGINT before the load" in err
    (run,) = raw.glob("*/*")
    assert _manifest(run)["status"] == "failed" and port_closed(_plan_port(plan))


def test_a_trickling_health_respects_the_startup_timeout(tmp_path, make_plan):
    """/health sends a byte every 0.1 s and never finishes: before, the wait never ended (per-read timeouts
    only); now start-up fails after startup_timeout_s (3 s here) plus at most one poll."""
    raw = tmp_path / "raw"
    plan = make_plan(tmp_path, ["--trickle-health"])
    plan.write_text(plan.read_text().replace("startup_timeout_s = 30", "startup_timeout_s = 3"))
    t0 = time.monotonic()
    with pytest.raises(RunError, match=r"/health: not healthy after 3 s \(last: BoundExceeded: no complete"):
        execute_run(plan, raw, console=Console(file=io.StringIO()))
    assert time.monotonic() - t0 < 12.0
    (run,) = raw.glob("*/*")
    assert _manifest(run)["status"] == "failed"


def test_bounded_get_and_the_sampler_stop_on_a_trickling_metrics(fault_server):
    """The scrape itself: a body that trickles ends as a failed scrape after its total deadline (the
    sampler's: twice the interval, at least 2 s), and Sampler.stop() returns although a scrape hangs."""
    srv = fault_server(trickle_after=0)
    with httpx.Client() as c:
        t0 = time.monotonic()
        with pytest.raises(bounded_http.BoundExceeded, match="within 1 s"):
            bounded_http.get(c, f"{srv.url}/metrics", deadline_s=1.0)
        assert time.monotonic() - t0 < 2.5
    got: list[dict] = []
    log = ScrapeWriter(type("Stream", (), {"write_json": lambda self, obj: got.append(obj)})())
    sampler = Sampler(srv.url, 0.2, log, lambda *a, **k: None)
    sampler.start()
    deadline = time.monotonic() + 10
    while not got and time.monotonic() < deadline:
        time.sleep(0.05)
    assert got and got[0]["text"] is None and "no complete answer within 2 s" in got[0]["error"]
    t0 = time.monotonic()
    sampler.stop()
    assert time.monotonic() - t0 < 4.0


# -- bad data from the server -------------------------------------------------------------------------------


def _run(tmp_path, make_plan, args, **kw):
    out = io.StringIO()
    try:
        res = execute_run(
            make_plan(tmp_path, args, **kw), tmp_path / "raw", console=Console(file=out, width=250)
        )
        path = res.path
    except RunError as err:  # a point failing every gate ends the run failed: the data is what matters
        path = next((tmp_path / "raw").glob("fake/*"))
        assert "Traceback" not in str(err)
    return path, out.getvalue()


def test_malformed_chunks_are_one_requests_error_and_the_run_goes_on(tmp_path, make_plan):
    """``{"choices": [null]}`` and ``{"choices": "abc"}`` mid-stream: on main the first killed the run with
    a traceback (AttributeError), the request that caused it got no record and later points never ran. Now
    that request is recorded as a protocol error, and every planned request has its record."""
    run, screen = _run(tmp_path, make_plan, ["--fault", "choices_null:3", "--fault", "choices_str:4"])
    reqs = parse_requests_jsonl(run / "requests.jsonl")
    assert len(reqs) == 2 + 3 + 12 and _manifest(run)["points_done"] == 3
    bad = [r for r in reqs if not r.ok]
    assert bad and {r.error_kind for r in bad} == {"protocol"}
    msgs = {r.error_message for r in bad}
    assert msgs == {
        "SSEError: malformed chunk: choices is [null]",
        'SSEError: malformed chunk: choices is "abc"',
    }
    assert all(len(r.chunk_tokens) == 1 for r in bad)  # the chunk before the bad one is kept
    assert "Traceback" not in screen


def test_impossible_token_counts_are_flagged_per_request(tmp_path, make_plan):
    """A cumulative counter that jumps 4 ahead and back (sum still right: main passed every gate and
    published a p50 ITL far below the truth) and one of 2^62 (main: MemoryError in the run's summary): each
    request says so (``token_count_problem``, counts clipped to 0..max_tokens), the point's token_counts
    check fails at run time, and the stream_token_counts gate fails those requests."""
    run, screen = _run(tmp_path, make_plan, ["--fault", "counter_jump:3", "--fault", "huge:4"])
    reqs = parse_requests_jsonl(run / "requests.jsonl")
    assert len(reqs) == 17 and all(r.ok for r in reqs)
    odd = [r for r in reqs if r.token_count_problem]
    assert {r.request_id for r in odd} == {r.request_id for r in reqs if not stream_counts_agree(r)}
    problems = " ".join(r.token_count_problem for r in odd)
    assert "gave -3 tokens (a cumulative count that went back)" in problems
    assert f"gave {2**62 - 1} tokens (more than max_tokens=" in problems
    assert all(0 <= n <= r.max_tokens for r in reqs for n in r.chunk_tokens)
    failed = [c for c in checks(parse_events_jsonl(run / "events.jsonl")) if c.name == "token_counts"]
    assert any(c.ok is False for c in failed) and "FAIL point" in screen


def test_usage_that_disagrees_with_the_stream_counts_what_was_streamed(tmp_path, make_plan):
    """The final usage claims 256 tokens after 16 streamed (counted exactly from llama.cpp's cumulative
    timings): throughput counts the 16 (main counted 256: 16x the truth) and the gate flags the request."""
    run, _ = _run(
        tmp_path, make_plan, ["--fault", "usage_lie:5"], points="[{concurrency = 1, requests = 5, seed = 3}]"
    )
    reqs = parse_requests_jsonl(run / "requests.jsonl")
    liar = [r for r in reqs if r.completion_tokens == 256]
    assert liar and all(metrics.output_tokens(r) == sum(r.chunk_tokens) == 16 for r in liar)
    assert all(not stream_counts_agree(r) for r in liar)
    assert all(stream_counts_agree(r) for r in reqs if r.completion_tokens != 256)


def test_blank_line_runs_in_a_stream_are_decoded_in_time(tmp_path, make_plan):
    """128 KiB of blank lines before the first event of every 2nd request: main's decoder took seconds per
    request (quadratic) on the event loop; now they stream like the others."""
    run, _ = _run(
        tmp_path,
        make_plan,
        ["--fault", "blank_lines:2"],
        points="[{concurrency = 2, requests = 6, seed = 3}]",
    )
    reqs = parse_requests_jsonl(run / "requests.jsonl")
    assert len(reqs) == 8 and all(r.ok for r in reqs)
    assert max(metrics.e2el_ms(r) for r in reqs) < 2000


def test_oversized_metrics_are_stored_bounded_and_flagged(tmp_path, make_plan):
    """A /metrics of 2 MB (a series per tenant): main stored every one whole (a 629 MB scrapes.jsonl for
    100 MB ones), then failed them (no counters at all). Now each is stored as the families analysis reads,
    the rest counted per scrape, the run says so once, and analysis reads the counters."""
    page = 2_000_000
    run, screen = _run(tmp_path, make_plan, ["--metrics-bytes", str(page), "--partial-log-line"],
                       points="[{concurrency = 1, requests = 2, seed = 3}]")  # fmt: skip
    every = [s for s in parse_scrapes_jsonl(run / "scrapes.jsonl") if s.source == "metrics"]
    scrapes = [s for s in every if s.ok]  # a loaded machine may miss a scrape's 2 s deadline: a failed one
    assert len(scrapes) >= 3 and all(s.bounded for s in scrapes)
    assert all("within 2 s" in (s.error or "") for s in every if not s.ok)
    assert all("llamacpp:tokens_predicted_total" in s.text and "fault_tenant" not in s.text for s in scrapes)
    n_pad = (page - len(scrapes[0].text)) // PAD_LINE_BYTES
    assert {s.dropped_series for s in scrapes} == {n_pad}
    assert all(s.dropped_bytes + len(s.text) == page for s in scrapes)
    assert (run / "scrapes.jsonl").stat().st_size < 2_000 * len(every)
    (ev,) = [e for e in parse_events_jsonl(run / "events.jsonl") if e.kind == "metrics_bounded"]
    assert ev.fields["dropped_series"] == n_pad and ev.fields["received_bytes"] == page
    assert screen.count("[metrics_bounded]") == 1
    list(analyze([tmp_path / "raw"], tmp_path / "out", None))
    found = json.loads((tmp_path / "out" / "fake" / "findings.json").read_text())
    (flag,) = [f for k, f in found.items() if k.endswith("trust.metrics_bounded_scrapes")]
    assert flag["value"] == len(scrapes) and flag["max_dropped_series"] == n_pad


def test_garbage_metrics_warn_at_run_time(tmp_path, make_plan):
    """/metrics answering 200 with text no Prometheus parser takes: main sealed the run complete without a
    word (and analysis then refused the campaign). Now a start-up check fails, on the terminal too."""
    run, screen = _run(
        tmp_path, make_plan, ["--metrics-garbage"], points="[{concurrency = 1, requests = 2, seed = 3}]"
    )
    (fmt,) = [c for c in checks(parse_events_jsonl(run / "events.jsonl")) if c.name == "metrics_format"]
    assert fmt.ok is False and "not Prometheus text" in fmt.detail
    assert "FAIL startup  metrics_format" in screen


def test_a_second_client_on_the_server_is_refused_before_the_first_point(tmp_path, make_plan, fault_server):
    """Another client streams from the attached server: main measured beside it (each collector reported
    half the throughput, no warning). Now the server's in-flight gauge at start-up refuses the run."""
    srv = fault_server(token_ms=5.0)
    plan = make_plan(tmp_path, points="[{concurrency = 1, requests = 2, seed = 3}]")
    text = plan.read_text()
    attach = f'url = "{srv.url}"\nserved_model_name = "fault-model"\n'
    plan.write_text(text[: text.index('binary = "')] + attach + text[text.index("port = ") :])
    body = {"model": "fault-model", "prompt": [40, 41], "max_tokens": 2000, "stream": True}

    def other_client() -> None:
        with contextlib.suppress(httpx.HTTPError):  # the server goes away with the test
            httpx.post(f"{srv.url}/v1/completions", json=body, timeout=30)

    other = threading.Thread(target=other_client, daemon=True)
    other.start()
    deadline = time.monotonic() + 10
    while srv.running == 0 and time.monotonic() < deadline:
        time.sleep(0.02)
    with pytest.raises(RunError, match=r"another client is using the server: 1 request\(s\) in flight"):
        execute_run(plan, tmp_path / "raw", console=Console(file=io.StringIO()))
    (run,) = (tmp_path / "raw").glob("fake/*")
    assert (run / "requests.jsonl").read_bytes() == b""


def test_sighup_seals_and_a_log_cut_mid_line_is_analysed(tmp_path, make_plan):
    """The ssh session drops mid-point: SIGHUP to the terminal's process group, the collector and its two
    load-client shards; the server's log ends mid-line. On main the collector died at once, unsealed, and
    analyze skipped the run. Now the shards (and multiprocessing's resource tracker) leave the stopping to
    the collector, the run is sealed failed with its finished requests, and analysis reads it."""
    raw = tmp_path / "raw"
    plan = make_plan(tmp_path, ["--partial-log-line"], points=ONE_POINT, output_len=50, extra="shards = 2")
    p = _start(plan, raw)
    run = _wait_event(raw, b'"kind":"point_start"', p)
    deadline = time.monotonic() + 120  # the shards are two fresh Python processes: slow on a loaded box
    while (run / "requests.jsonl").read_bytes().count(b'"phase":"sweep"') < 3:
        assert time.monotonic() < deadline and p.poll() is None, p.communicate()
        time.sleep(0.05)
    os.killpg(p.pid, signal.SIGHUP)
    _, err = p.communicate(timeout=30)
    assert p.returncode == 1 and "Traceback" not in err, err
    assert _manifest(run)["status"] == "failed" and (run / "server.log").read_bytes().endswith(b"half a li")
    ok = [r for r in parse_requests_jsonl(run / "requests.jsonl") if r.ok and r.phase == "sweep"]
    assert len(ok) >= 3
    campaign = load_campaign([raw], "fake")  # what analyze reads: a run it cannot parse is "broken"
    assert not campaign.broken and [r.name for r in campaign.runs] == [run.name]
    assert any(pt.label.startswith("p01-sweep") for pt in iter_points(campaign))
