"""The load client against ground truth: the metronome server (benchmarks/metronome.py) emits every token at a
known CLOCK_MONOTONIC time. At low load the client's records agree with it within generous bounds (the timing
targets live in ``nox -s bench``, not here); a deliberately overloaded point is flagged by the analysis' gate;
connections the server closes under the client do not lose requests."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import numpy as np
import pytest

from analysis.core import metrics
from analysis.loading.campaign import iter_points, load_campaign
from analysis.reconcile import gates
from benchmarks.metronome import MetronomeProcess, collector_plan
from collector.protocol.loadgen import (
    Abort,
    LagProbe,
    Listeners,
    LoadSettings,
    run_load,
    run_point,
    shards_for,
)
from collector.protocol.run import execute_run
from collector.raw.plan import TRANSPORTS, PointPlan
from collector.raw.records import EventRecord, RequestRecord
from tests.loopback import free_port


def _point(c: int, n: int, out: int) -> PointPlan:
    return PointPlan(phase="p", kind="concurrency", index=0, concurrency=c, requests=n, input_len=8,
                     output_len=out, seed=1, expect_preemptions="any")  # fmt: skip


def _client_args(
    url: str, recs: list[RequestRecord], transport: str = "aiohttp"
) -> tuple[LoadSettings, Listeners, Abort]:
    """run_point's / run_load's arguments against the metronome at ``url``, records appended to ``recs``."""
    settings = LoadSettings(base_url=url, model="metronome", token_id_range=(32, 127), engine_extra={},
                            plan_extra={}, request_timeout_s=60, read_timeout_s=30,
                            transport=transport)  # fmt: skip
    return settings, Listeners(sink=recs.append), Abort()


def _run_point(url: str, pt: PointPlan, transport: str = "aiohttp") -> tuple[list[RequestRecord], object]:
    recs: list[RequestRecord] = []
    out = asyncio.run(run_point(pt, *_client_args(url, recs, transport)))
    return recs, out


def test_low_load_records_agree_with_the_emit_times():
    with MetronomeProcess(free_port(), first_token_ms=30, interval_ms=10, spike_every=5, spike_ms=10) as m:
        recs, out = _run_point(m.url, _point(2, 4, 20))
        log = m.log()
    assert out.ok == 4 and all(r.ok and r.done for r in recs)
    emits = {r["id"]: r for r in log["requests"]}
    assert len(emits) == 4
    lat_ms, ttft_err_ms = [], []
    for r in recs:
        truth = emits[r.response_id]
        assert sum(r.chunk_tokens) == r.completion_tokens == 20 == len(truth["emit_ns"])
        # every chunk was received after it was emitted (one monotonic clock on one host), and soon after
        lat_ms += [(a - b) / 1e6 for a, b in zip(r.chunk_mono_ns, truth["emit_ns"], strict=True)]
        ttft_err_ms.append(metrics.ttft_ms(r) - (truth["emit_ns"][0] - truth["recv_ns"]) / 1e6)
    assert min(lat_ms) > 0 and np.median(lat_ms) < 50
    assert 0 < np.median(ttft_err_ms) < 100
    # the client sees the late token: the ITLs of every 5th token are ~10 ms longer (per-chunk timing)
    itls = [x for r in recs for x in metrics.itls_ms(r)]
    assert np.percentile(itls, 95) > np.percentile(itls, 50) + 5
    # the metronome checks itself (generous: without its own core a shared box delays it by milliseconds)
    assert log["emit_error_ns"]["n"] == 80 and log["emit_error_ns"]["p50"] < 20_000_000
    # the probe ran the whole point and recorded its wake-ups
    assert out.probe.lag_ns and len(out.probe.lag_ns) == len(out.probe.due_mono_ns)
    assert out.cpu_ns > 0


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_server_closing_kept_alive_connections_loses_no_request(transport):
    with MetronomeProcess(free_port(), first_token_ms=1, interval_ms=1, drop_after=1) as m:
        recs, out = _run_point(m.url, _point(3, 15, 4), transport)
        log = m.log()
    assert out.ok == 15 and all(r.ok for r in recs)
    # every request answered in full; a second arrival at the server is always a counted retry. (A retry
    # need not arrive twice: aiohttp may write into a connection whose close it has not read yet, and the
    # server never sees that attempt; httpcore checks an idle connection before reusing it.)
    assert 15 <= len(log["requests"]) <= 15 + sum(r.retries for r in recs)


def _plan(tmp_path: Path, url: str, c: int, n: int, out: int) -> Path:
    plan = tmp_path / f"c{c}.toml"
    plan.write_text(collector_plan(url, "fid", f"c{c}", c, n, 8, out))
    return plan


@pytest.mark.timeout(600)
def test_an_overloaded_client_point_is_flagged(tmp_path):
    raw = tmp_path / "raw"
    # 128 streams, a token every millisecond each: ~128,000 tokens/s offered, far past what one Python
    # process reads
    with MetronomeProcess(free_port(), first_token_ms=1, interval_ms=1) as m:
        res = execute_run(_plan(tmp_path, m.url, 128, 128, 200), raw)
    assert res.status == "complete"
    (ev_file,) = raw.glob("fid/*/events.jsonl")
    probes = [EventRecord.from_obj(json.loads(x)) for x in ev_file.read_text().splitlines()]
    probes = [e for e in probes if e.kind == "client_probe"]
    assert probes and all(len(e.get("lag_ns")) == len(e.get("due_mono_ns")) for e in probes)
    assert len(probes) == probes[0].get("shards")  # one per load-client process
    campaign = load_campaign([raw], "fid")
    verdicts = {
        p.label: gates.client_gate(p.run, p.label) for p in iter_points(campaign, include_warmup=True)
    }
    (g,) = [v for k, v in verdicts.items() if "load" in k]
    assert g.status == "fail" and g.reason == "client_saturated" and g.severity == "exclude", g
    assert "event-loop lag p99" in g.detail


def test_a_point_sharded_over_processes_records_every_request_once():
    recs: list[RequestRecord] = []
    with MetronomeProcess(free_port(), first_token_ms=5, interval_ms=2) as m:
        out = asyncio.run(run_load(_point(5, 12, 10), *_client_args(m.url, recs), shards=2))
        log = m.log()
    assert out.ok == out.sent == out.finished == 12 and out.aborted is None
    assert sorted(r.index for r in recs) == list(range(12)) and sorted({r.worker for r in recs}) == list(
        range(5)
    )
    assert sorted(p["shard"] for p in out.probes) == [0, 1] and all(
        p["lag_ns"] and p["cpu_ns"] for p in out.probes
    )
    # one monotonic clock across the processes: every chunk was received after the metronome emitted it
    emits = {r["id"]: r["emit_ns"] for r in log["requests"]}
    assert all(a > b for r in recs for a, b in zip(r.chunk_mono_ns, emits[r.response_id], strict=True))
    assert shards_for(0, 1) == 1 and shards_for(3, 2) == 2 and shards_for(0, 1024, cores=2) == 2


def test_the_live_warning_fires_on_a_stalled_loop_and_not_on_an_idle_one():
    """LagProbe's on_late: the gate's rule (loop-lag p99 > the limit) over the last 100 wake-ups."""

    async def probe_for(stall_s: float) -> list[int]:
        fired: list[int] = []
        probe = LagProbe(period_s=0.005, warn_ns=20_000_000, on_late=fired.append).start()
        for _ in range(20):
            await asyncio.sleep(0.01)
            if stall_s:
                time.sleep(stall_s)  # a client busy with Python work: the probe wakes late
        await probe.stop()
        return fired

    assert asyncio.run(probe_for(0.0)) == []
    fired = asyncio.run(probe_for(0.05))
    assert len(fired) == 1 and fired[0] > 20_000_000
