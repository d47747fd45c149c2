"""``[load] backend = "ray"`` (collector.protocol.ray_backend) on a real Ray cluster of two nodes on this
machine (one CPU each, no dashboard): the merged requests.jsonl holds every request once, both nodes carried
load, every shard's clock offset is recorded and within its stated uncertainty (one host: the true offset is
0); a short open-loop point against CPU llama.cpp; a shard whose process is killed mid-point is recorded and
ends the run without a hang. Skipped without Ray, except under CI (the tests session installs the ray extra).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from benchmarks.metronome import MetronomeProcess, collector_plan
from collector.protocol import ray_backend
from collector.protocol.loadgen import Abort, Listeners, LoadSettings, resolve_rate_point
from collector.protocol.run import execute_run
from collector.raw.errors import PlanError, RunError
from collector.raw.plan import PointPlan, load_plan
from collector.raw.records import RequestRecord
from tests import engine_cache
from tests.loopback import free_port

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def cluster() -> Iterator[str]:
    """A Ray cluster of two nodes (head + one), one CPU each; its address."""
    if os.environ.get("CI") is None:
        pytest.importorskip("ray")
    from ray.cluster_utils import Cluster

    # the nodes' worker processes import the collector (an installed package needs none of this)
    old = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join(x for x in (str(ROOT), old) if x)
    small = {"num_cpus": 1, "object_store_memory": 80 * 2**20}
    c = Cluster(initialize_head=True, head_node_args={**small, "include_dashboard": False})
    c.add_node(**small)
    c.wait_for_nodes()
    try:
        yield c.address
    finally:
        c.shutdown()
        if old is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = old


def _events(run: Path) -> list[dict]:
    return [json.loads(x) for x in (run / "events.jsonl").read_text().splitlines()]


def _settings(url: str) -> LoadSettings:
    return LoadSettings(base_url=url, model="metronome", token_id_range=(32, 127), engine_extra={},
                        plan_extra={}, request_timeout_s=60, read_timeout_s=30)  # fmt: skip


def _ray_plan(text: str, address: str) -> str:
    return text.replace("[load]\n", f'[load]\nbackend = "ray"\nray_address = "{address}"\nshards = 2\n', 1)


def test_plan_errors_name_the_file_and_key(tmp_path, monkeypatch):
    base = collector_plan("http://127.0.0.1:9", "c", "r", 2, 4, 8, 4)
    bad = tmp_path / "bad.toml"
    bad.write_text(base.replace("[load]\n", '[load]\nbackend = "dask"\n', 1))
    with pytest.raises(PlanError, match=r"bad.toml: \[load\].backend: must be one of local, ray"):
        load_plan(bad)
    bad.write_text(base.replace("[load]\n", '[load]\nray_address = "auto"\n', 1))
    with pytest.raises(PlanError, match=r"\[load\].ray_address: is the Ray cluster of backend"):
        load_plan(bad)
    ok = tmp_path / "ray.toml"
    ok.write_text(base.replace("[load]\n", '[load]\nbackend = "ray"\n', 1))
    plan = load_plan(ok)
    with pytest.raises(PlanError, match=r"ray.toml: \[load\].ray_address: missing: .*RAY_ADDRESS"):
        ray_backend.check_plan(plan, ok, {})
    ray_backend.check_plan(plan, ok, {"RAY_ADDRESS": "auto"})
    monkeypatch.setattr(ray_backend.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(
        PlanError, match=r"ray.toml: \[load\].backend: .*pip install 'inference-anatomy\[ray\]'"
    ):
        ray_backend.check_plan(plan, ok, {"RAY_ADDRESS": "auto"})


def test_clock_sync_takes_the_shortest_round_trip_and_shifts_every_time():
    # (driver before, actor mono, actor unix on the driver's wall base, driver after)
    sync = ray_backend.clock_sync([(100, 1050, 5050, 300), (400, 1420, 5420, 440), (500, 1600, 5600, 700)])
    assert sync.round_trip_ns == [200, 40, 200]
    assert (sync.offset_ns, sync.unix_offset_ns, sync.uncertainty_ns) == (420 - 1420, 420 - 5420, 20)
    rec = {"send_mono_ns": 10, "chunk_mono_ns": [11, 12], "chunk_unix_ns": [7], "headers_mono_ns": None,
           "index": 3}  # fmt: skip
    assert ray_backend.shifted(rec, sync) == {
        "send_mono_ns": 10 - 1000, "chunk_mono_ns": [11 - 1000, 12 - 1000], "chunk_unix_ns": [7 - 5000],
        "headers_mono_ns": None, "index": 3,
    }  # fmt: skip


def test_two_nodes_share_a_point_and_merge_on_the_drivers_clock(tmp_path, cluster):
    raw = tmp_path / "raw"
    plan = tmp_path / "plan.toml"
    with MetronomeProcess(free_port(), first_token_ms=5, interval_ms=2) as m:
        plan.write_text(_ray_plan(collector_plan(m.url, "ray", "two-nodes", 6, 24, 8, 10), cluster))
        res = execute_run(plan, raw)
        log = m.log()
    assert res.status == "complete", str(res)
    recs = [
        RequestRecord.from_obj(json.loads(x)) for x in (res.path / "requests.jsonl").read_text().splitlines()
    ]
    load = [r for r in recs if r.phase == "load"]
    assert sorted(r.index for r in load) == list(range(24)) and all(r.ok for r in load)
    assert sorted({r.worker for r in load}) == list(range(6))
    ev = _events(res.path)
    (backend,) = [e for e in ev if e["kind"] == "load_backend"]
    assert backend["backend"] == "ray" and backend["nodes"] == 2 and backend["ray_version"]
    clocks = [e for e in ev if e["kind"] == "shard_clock" and e["point"] == load[0].point]
    assert sorted(e["shard"] for e in clocks) == [0, 1]
    assert len({e["node_id"] for e in clocks}) == 2  # one shard a node: both nodes carried load
    for e in clocks:  # one host, one CLOCK_MONOTONIC: the true offset 0 lies within the stated bound
        assert len(e["round_trip_ns"]) == ray_backend.SYNC_ROUNDS
        assert (
            e["uncertainty_ns"] == min(e["round_trip_ns"]) // 2 and abs(e["offset_ns"]) <= e["uncertainty_ns"]
        )
    assert {r.index % 2 for r in load} == {0, 1}  # shard k sends every 2nd request from k
    probes = [e for e in ev if e["kind"] == "client_probe" and e["point"] == load[0].point]
    assert sorted(p["shard"] for p in probes) == [0, 1] and all(p["lag_ns"] for p in probes)
    # on the driver's clock: every chunk received after the metronome emitted it (within the offset's bound)
    slack = max(e["uncertainty_ns"] for e in clocks)
    emits = {x["id"]: x["emit_ns"] for x in log["requests"]}
    assert all(
        a > b - slack for r in load for a, b in zip(r.chunk_mono_ns, emits[r.response_id], strict=True)
    )
    start, end = [
        e["mono_ns"] for e in ev if e["kind"] in ("point_start", "point_end") and e["point"] == load[0].point
    ]
    assert all(start < r.send_mono_ns and r.end_mono_ns < end for r in load)


@pytest.mark.engines
def test_a_short_open_loop_point_against_cpu_llamacpp(tmp_path, cluster, local_plan, engines):
    engine_cache.require(engines.llama_server, engines.tiny_gguf, engines.tiny_config_json)
    edits = {
        "request_rates = [8, 64]": "request_rates = [16]\nmax_concurrency = 8",
        "duration_s = 3 ": "duration_s = 1.5 ",
        "[load]\n": f'[load]\nbackend = "ray"\nray_address = "{cluster}"\nshards = 2\n',
    }
    plan = local_plan(tmp_path, "cpu-tiny-llamacpp-rate.toml", edits)
    res = execute_run(plan, tmp_path / "raw")
    assert res.status == "complete" and res.points_done == 2, str(res)
    recs = [json.loads(x) for x in (res.path / "requests.jsonl").read_text().splitlines()]
    rate = [r for r in recs if r["phase"] == "rate"]
    ev = _events(res.path)
    (start,) = [e for e in ev if e["kind"] == "point_start" and e["phase"] == "rate"]
    assert sorted(r["index"] for r in rate) == list(range(start["requests"])) and all(
        r["error"] is None for r in rate
    )
    # the driver's one schedule, split over the nodes and shifted back onto the driver's clock: to the ns
    (pt,) = [p for p in load_plan(plan).points if p.point_id == start["point"]]
    offsets = resolve_rate_point(pt)[1]
    t0 = min(r["scheduled_mono_ns"] - offsets[r["index"]] for r in rate)
    assert all(r["scheduled_mono_ns"] == t0 + offsets[r["index"]] for r in rate)
    clocks = [e for e in ev if e["kind"] == "shard_clock" and e["point"] == start["point"]]
    assert len({e["node_id"] for e in clocks}) == 2
    # never sent before its time (a full cap sends late): both times on the actor's clock, moved alike
    assert all(r["send_mono_ns"] >= r["scheduled_mono_ns"] for r in rate)


def test_a_shard_killed_mid_point_is_recorded_and_ends_the_point(cluster):
    events: list[tuple[str, dict]] = []
    recs: list[RequestRecord] = []
    pt = PointPlan(phase="p", kind="concurrency", index=0, concurrency=2, requests=6, input_len=8,
                   output_len=20, seed=1, expect_preemptions="any")  # fmt: skip

    def emit(kind: str, **fields) -> None:
        events.append((kind, fields))

    async def kill_shard_1() -> None:
        while not any(k == "shard_clock" and f["shard"] == 1 for k, f in events):
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.5)  # mid-point: its first request is streaming (20 tokens × 50 ms)
        pid = next(f["pid"] for k, f in events if k == "shard_clock" and f["shard"] == 1)
        os.kill(pid, signal.SIGKILL)

    async def main(url: str) -> object:
        settings = _settings(url)
        killer = asyncio.create_task(kill_shard_1())
        out = await ray_cluster.run_load(pt, settings, Listeners(sink=recs.append), Abort(), shards=2)
        await killer
        return out

    previous = signal.signal(signal.SIGTERM, signal.SIG_IGN)
    ray_cluster = ray_backend.RayCluster(cluster, emit).connect()
    assert signal.signal(signal.SIGTERM, previous) == signal.SIG_IGN  # ray.init's own handler did not stay
    t0 = time.monotonic()
    try:
        with MetronomeProcess(free_port(), first_token_ms=5, interval_ms=50) as m:
            out = asyncio.run(main(m.url))
    finally:
        ray_cluster.close()
    took_s = time.monotonic() - t0
    (lost,) = [f for k, f in events if k == "shard_lost"]
    assert lost["shard"] == 1 and "Actor" in lost["reason"], lost
    # shard 1 sends requests 1, 3, 5: none ended before the kill, so none has a record
    assert lost["received"] == 0 and lost["lost_request_ids"] == [
        f"{pt.point_id}-r{i:05d}" for i in (1, 3, 5)
    ]
    assert sorted(r.index for r in recs) == [0, 2, 4] and all(r.ok for r in recs)  # shard 0 finished
    assert out.aborted and "shard_lost" in out.aborted
    assert took_s < 30, took_s  # 3 requests of 1 s on shard 0, plus start-up: no wait on the dead one


def test_an_unplaceable_shard_count_fails_the_point_with_one_line(cluster, monkeypatch):
    monkeypatch.setattr(ray_backend, "PLACE_TIMEOUT_S", 1.0)
    rc = ray_backend.RayCluster(cluster, lambda kind, **f: None).connect()
    pt = PointPlan(phase="p", kind="concurrency", index=0, concurrency=3, requests=3, input_len=8,
                   output_len=4, seed=1, expect_preemptions="any")  # fmt: skip
    settings = _settings("http://127.0.0.1:9")
    try:
        with pytest.raises(RunError, match=r"cannot place 3 load shards of 1 CPU each .*2 nodes, 2 CPUs"):
            asyncio.run(rc.run_load(pt, settings, Listeners(sink=lambda r: None), Abort(), shards=3))
    finally:
        rc.close()
