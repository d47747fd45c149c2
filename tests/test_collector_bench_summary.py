"""The vllm-bench-schema summary against numbers computed by hand, and against the bench_json parser."""

from __future__ import annotations

import json
import math

import pytest

from analysis.parse.bench_json import parse_bench_json
from analysis.parse.requests_jsonl import record_from_obj
from collector.bench_summary import bench_summary, per_second_peaks
from tests.seed import SEED

MS = 1_000_000  # ns per ms
REF = str(SEED / "Round2/01-02-perf-test/vllm_c001.json")


def rec(i, send_ms, chunks_ms, tokens, completion, error=None, end_ms=None):
    return record_from_obj({
        "v": 1, "request_id": f"r{i}", "phase": "p", "phase_kind": "concurrency", "point": "pt", "point_index": 0,
        "index": i, "worker": 0, "concurrency": 2, "seed": 1, "input_len": 10, "max_tokens": 3,
        "send_mono_ns": send_ms * MS, "send_unix_ns": 1_700_000_000_000 * MS + send_ms * MS, "headers_mono_ns": None,
        "end_mono_ns": (end_ms or (chunks_ms[-1] + 5 if chunks_ms else send_ms + 30)) * MS,
        "end_unix_ns": 1_700_000_000_000 * MS + (end_ms or 0) * MS, "http_status": 200 if error is None else 500,
        "chunk_mono_ns": [c * MS for c in chunks_ms], "chunk_unix_ns": [c * MS for c in chunks_ms],
        "chunk_tokens": tokens, "token_count_source": "usage", "done": error is None,
        "usage": None if completion is None else {"prompt_tokens": 10, "completion_tokens": completion},
        "finish_reason": "length", "engine_timings": None, "response_id": None,
        "error": None if error is None else {"kind": "http", "message": error},
    })  # fmt: skip


RECORDS = [
    rec(0, 0, [100, 110, 125], [1, 1, 1], 3, end_ms=130),
    rec(1, 50, [250, 270], [1, 2], 3, end_ms=280),
    rec(2, 60, [], [], None, error="HTTP 500", end_ms=90),
]


def test_summary_matches_hand_computation():
    s = bench_summary(RECORDS, model_id="m", max_concurrency=2, num_prompts=3, label=None)
    assert (s["completed"], s["failed"], s["total_input_tokens"], s["total_output_tokens"]) == (2, 1, 20, 6)
    assert s["duration"] == pytest.approx(0.280)  # first send 0 ms .. last end 280 ms
    assert s["request_throughput"] == pytest.approx(2 / 0.28)
    assert s["output_throughput"] == pytest.approx(6 / 0.28)
    assert s["total_token_throughput"] == pytest.approx(26 / 0.28)
    # TTFT 100 and 200 ms
    assert (s["mean_ttft_ms"], s["median_ttft_ms"], s["std_ttft_ms"]) == pytest.approx((150, 150, 50))
    assert (s["p90_ttft_ms"], s["p99_ttft_ms"]) == pytest.approx((190, 199))
    # ITL gaps 10, 15, 20 ms
    assert (s["mean_itl_ms"], s["median_itl_ms"], s["p90_itl_ms"]) == pytest.approx((15, 15, 19))
    assert s["std_itl_ms"] == pytest.approx(math.sqrt(50 / 3))
    # TPOT (125-100)/2 = 12.5 and (220-200)/2 = 10
    assert s["mean_tpot_ms"] == pytest.approx(11.25)
    # E2EL to the last chunk: 125 and 220 ms
    assert s["mean_e2el_ms"] == pytest.approx(172.5)
    assert (s["max_output_tokens_per_s"], s["max_concurrent_requests"]) == (5.0, 2)


def test_per_second_buckets_like_vllm():
    a = rec(0, 0, [500, 1200], [1, 1], 2)
    b = rec(1, 900, [1100, 1300, 2050], [1, 1, 1], 3)
    # chunks per 1-s bucket from t=0: [1, 3, 1]; active: a in 0..1, b in 0..2 -> [2, 2, 1]
    assert per_second_peaks([a, b]) == (3.0, 2)


def test_same_keys_as_vllm_bench_and_parser_reads_it(tmp_path):
    s = bench_summary(RECORDS, model_id="m", max_concurrency=2, num_prompts=3, label="x")
    with open(REF) as f:
        ref = json.load(f)
    assert list(s) == list(ref)
    p = tmp_path / "pt.json"
    p.write_text(json.dumps(s))
    parsed = parse_bench_json(p)
    assert parsed.completed == 2 and parsed.failed == 1 and parsed.mean_ttft_ms == pytest.approx(150)
    assert not parsed.extra


def test_no_requests_is_an_error():
    with pytest.raises(ValueError):
        bench_summary([], model_id="m", max_concurrency=1, num_prompts=0, label=None)
