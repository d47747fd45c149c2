"""Per-request metrics from hand-made request records, read through the real requests.jsonl parser,
and a campaign of our own (requests.jsonl only) flowing through `analyze`."""

from __future__ import annotations

import json

import pytest

from analysis import metrics
from analysis.parse.requests_jsonl import parse_requests_jsonl

MS = 1_000_000


def test_request_timing_is_chunk_aware():
    # sent at 0; tokens at 100 ms (1), 110 ms (1), 130 ms (2 tokens in one chunk); ended at 131 ms
    t = metrics.request_timing(0, 131 * MS, [100 * MS, 110 * MS, 130 * MS], [1, 1, 2])
    assert t.ttft_ms == 100
    assert t.itls_ms == (10.0, 10.0, 10.0)  # the 20 ms gap carried 2 tokens: two 10 ms intervals
    assert t.output_tokens == 4
    assert t.e2el_ms == 131
    assert t.tpot_ms == pytest.approx((131 - 100) / 3)


def test_request_without_tokens():
    t = metrics.request_timing(0, 5 * MS, [3 * MS], [0])
    assert t.ttft_ms is None and t.output_tokens == 0 and t.tpot_ms is None


def test_stats_percentiles_linear():
    s = metrics.stats([1.0, 2.0, 3.0, 4.0])
    assert s.mean_ms == 2.5 and s.median_ms == 2.5
    assert s.percentiles_ms[90.0] == pytest.approx(3.7)  # 1 + 0.9 × 3


def _record(i: int, send_ms: int, chunks_ms: list[int], end_ms: int, point: str = "c2", error=None) -> dict:
    return {
        "v": 1,
        "request_id": f"r{i}",
        "phase": "sweep",
        "phase_kind": "concurrency",
        "point": point,
        "point_index": 0,
        "index": i,
        "worker": i % 2,
        "concurrency": 2,
        "seed": 1,
        "input_len": 8,
        "max_tokens": 3,
        "send_mono_ns": send_ms * MS,
        "send_unix_ns": 1_700_000_000_000_000_000 + send_ms * MS,
        "headers_mono_ns": None,
        "end_mono_ns": end_ms * MS,
        "end_unix_ns": 1_700_000_000_000_000_000 + end_ms * MS,
        "http_status": 200,
        "chunk_mono_ns": [c * MS for c in chunks_ms],
        "chunk_unix_ns": [c * MS for c in chunks_ms],
        "chunk_tokens": [1] * len(chunks_ms),
        "token_count_source": "usage",
        "done": True,
        "usage": {"prompt_tokens": 8, "completion_tokens": len(chunks_ms)},
        "finish_reason": "length",
        "engine_timings": None,
        "response_id": None,
        "error": error,
    }


def test_bench_result_from_records(tmp_path):
    p = tmp_path / "requests.jsonl"
    recs = [
        _record(0, 0, [50, 60, 70], 71),
        _record(1, 0, [40, 60, 80], 81),
        _record(2, 71, [120, 130, 140], 141),
    ]
    p.write_text("".join(json.dumps(r) + "\n" for r in recs))
    res = metrics.bench_result(parse_requests_jsonl(p), str(p))
    assert res.completed == 3 and res.failed == 0
    assert res.duration_s == pytest.approx(0.141)
    assert res.total_output_tokens == 9 and res.total_input_tokens == 24
    assert res.output_throughput_tok_s == pytest.approx(9 / 0.141)
    # TTFTs 50, 40, 49 ms -> mean 46.333
    assert res.mean_ttft_ms == pytest.approx((50 + 40 + 49) / 3)
    # ITLs: 10,10 | 20,20 | 10,10 -> p50 10
    assert res.stat_ms("p50", "itl") == 10


def test_own_campaign_flows_through_analyze(tmp_path):
    from analysis.pipeline import analyze
    from collector.raw.store import RawStore

    store = RawStore(tmp_path / "raw")
    run = store.create_run(
        "own",
        "sweep-1",
        kind="collected",
        meta={"engine": "llamacpp", "test_kind": "concurrency_sweep", "test": "sweep"},
    )
    with run.open_stream("requests.jsonl") as s:
        for r in (_record(0, 0, [50, 60, 70], 71), _record(1, 0, [40, 60, 80], 81)):
            s.write_line(json.dumps(r))
        for r in (_record(2, 200, [250, 300, 350], 351, point="c1"),):
            s.write_line(json.dumps(r))
    run.seal("complete")
    lines = list(analyze([tmp_path / "raw"], tmp_path / "out", ["own"]))
    assert "own" in lines[0]
    found = json.loads((tmp_path / "out" / "own" / "findings.json").read_text())
    assert found["llamacpp.peak_output_throughput_tokens_per_s"]["value"] == pytest.approx(6 / 0.081)
