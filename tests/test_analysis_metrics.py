"""analysis.core.metrics, the one definition of every latency/throughput metric: each function against numbers
computed by hand on request records of the real shape (read through the real record reader), the two views
(canonical, vllm-bench-compatible) differing exactly where they should, the committed raw runs, and a campaign
of our own flowing through `analyze` from requests.jsonl alone.

The hand fixture (ms from 0; every request asked for 10 prompt tokens):
- A, ok: send 0; chunks 100 (1 token), 110 (1), 130 (2), 132 (0: llama.cpp's closing chunk); end 140;
  usage 4 completion tokens.
- B, ok: send 50; chunks 250 (3 tokens in the first chunk), 270 (1); end 280; usage 4.
- C, failed: send 60; HTTP 500, no chunk; end 90.
- D, ok, 1 token: send 0; chunks 30 (0: a chunk with no token), 40 (1), 45 (0); end 50; usage 1 completion,
  11 prompt tokens (the server counted one more than the client sent).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from analysis.core import metrics
from analysis.parse.bench_json import parse_bench_json
from analysis.parse.requests_jsonl import parse_requests_jsonl
from collector.raw.records import RequestRecord
from tests.seed import SEED

MS = 1_000_000  # ns per ms
RAW = Path(__file__).resolve().parents[1] / "raw"
CPU_VLLM = RAW / "cpu-tiny-qwen2" / "vllm"
T0_UNIX_NS = 1_700_000_000_000 * MS


def obj(i, send_ms, chunks, end_ms, completion=None, prompt=10, error=None, point="pt", concurrency=2):
    """One requests.jsonl line; chunks = [(receive ms, tokens), ...]."""
    return {
        "v": 1,
        "request_id": f"r{i}",
        "phase": "p",
        "phase_kind": "concurrency",
        "point": point,
        "point_index": 0,
        "index": i,
        "worker": i % 2,
        "concurrency": concurrency,
        "seed": 1,
        "input_len": 10,
        "max_tokens": 4,
        "send_mono_ns": send_ms * MS,
        "send_unix_ns": T0_UNIX_NS + send_ms * MS,
        "headers_mono_ns": None,
        "end_mono_ns": end_ms * MS,
        "end_unix_ns": T0_UNIX_NS + end_ms * MS,
        "http_status": 200 if error is None else 500,
        "chunk_mono_ns": [t * MS for t, _ in chunks],
        "chunk_unix_ns": [T0_UNIX_NS + t * MS for t, _ in chunks],
        "chunk_tokens": [n for _, n in chunks],
        "token_count_source": "usage",
        "done": error is None,
        "usage": None if completion is None else {"prompt_tokens": prompt, "completion_tokens": completion},
        "finish_reason": "length",
        "engine_timings": None,
        "response_id": None,
        "error": None if error is None else {"kind": "http", "message": error},
    }


A = RequestRecord.from_obj(obj(0, 0, [(100, 1), (110, 1), (130, 2), (132, 0)], 140, completion=4))
B = RequestRecord.from_obj(obj(1, 50, [(250, 3), (270, 1)], 280, completion=4))
C = RequestRecord.from_obj(obj(2, 60, [], 90, error="HTTP 500: boom"))
D = RequestRecord.from_obj(obj(3, 0, [(30, 0), (40, 1), (45, 0)], 50, completion=1, prompt=11))
POINT = [A, B, C, D]


# --- canonical, per request ---------------------------------------------------------------------------------


def test_ttft_is_the_first_chunk_that_carried_a_token():
    assert metrics.ttft_ms(A) == 100
    assert metrics.ttft_ms(B) == 200
    assert metrics.ttft_ms(D) == 40  # the empty chunk at 30 ms is no token
    assert metrics.ttft_ms(C) is None


def test_e2el_runs_to_the_stream_end():
    assert (metrics.e2el_ms(A), metrics.e2el_ms(B), metrics.e2el_ms(C), metrics.e2el_ms(D)) == (
        140,
        230,
        30,
        50,
    )


def test_itls_are_chunk_aware():
    # A: 100→110 one token (10); 110→130 carried 2 tokens: two intervals of 10; the empty closing chunk is
    # none
    assert metrics.itls_ms(A) == [10.0, 10.0, 10.0]
    # B: 3 tokens in the first chunk arrived together (two intervals of 0), then 20 ms for one token
    assert metrics.itls_ms(B) == [0.0, 0.0, 20.0]
    assert metrics.itls_ms(C) == [] and metrics.itls_ms(D) == []  # one token: no interval
    # one interval per token after the first
    assert len(metrics.itls_ms(A)) == metrics.output_tokens(A) - 1


def test_output_and_input_tokens():
    assert [metrics.output_tokens(r) for r in POINT] == [4, 4, 0, 1]
    # without usage (a cut stream) the tokens the chunks carried
    cut = RequestRecord.from_obj(
        {**obj(4, 0, [(10, 1), (20, 2)], 25), "error": {"kind": "stream_cut", "message": "x"}, "done": False}
    )
    assert metrics.output_tokens(cut) == 3
    assert [metrics.input_tokens(r) for r in (A, C, D)] == [10, 10, 11]  # usage when sent, else input_len


def test_tpot_is_first_to_last_token_over_the_intervals():
    # A: tokens at 100 .. 130 (the empty closing chunk at 132 and the end at 140 are the stream's tail)
    assert metrics.tpot_ms(A) == pytest.approx((130 - 100) / 3)
    assert metrics.tpot_ms(B) == pytest.approx((270 - 250) / 3)
    # it is the mean of the request's chunk-aware ITLs
    for r in (A, B):
        assert metrics.tpot_ms(r) == pytest.approx(sum(metrics.itls_ms(r)) / len(metrics.itls_ms(r)))
    assert metrics.tpot_ms(C) is None and metrics.tpot_ms(D) is None  # fewer than 2 tokens


# --- canonical, per point -----------------------------------------------------------------------------------


def test_completed_duration_and_throughputs():
    assert metrics.completed(POINT) == [A, B, D]
    assert metrics.duration_s(POINT) == pytest.approx(0.280)  # first send 0 .. last end 280 ms, C included
    assert metrics.request_throughput_req_s(3, 0.28) == pytest.approx(3 / 0.28)
    assert metrics.output_throughput_tok_s(9, 0.28) == pytest.approx(9 / 0.28)
    assert metrics.total_token_throughput_tok_s(31, 9, 0.28) == pytest.approx(40 / 0.28)
    assert metrics.output_throughput_tok_s(9, 0.0) is None


def test_stats_percentiles_linear_and_population_std():
    s = metrics.stats([1.0, 2.0, 3.0, 4.0])
    assert s.mean_ms == 2.5 and s.median_ms == 2.5
    assert s.std_ms == pytest.approx(math.sqrt(1.25))  # population: Σ(x − 2.5)² ÷ 4
    assert s.percentiles_ms[90.0] == pytest.approx(3.7)  # 1 + 0.9 × 3
    assert s.percentiles_ms[99.0] == pytest.approx(3.97)
    empty = metrics.stats([])
    assert empty.mean_ms is None and empty.percentiles_ms == {}  # missing, never a zero


def test_point_result_by_hand():
    res = metrics.point_result(POINT, "requests.jsonl")
    assert (res.completed, res.failed, res.num_prompts, res.max_concurrency) == (3, 1, 4, 2)
    assert res.duration_s == pytest.approx(0.28)
    assert (res.total_input_tokens, res.total_output_tokens) == (31, 9)
    assert res.request_throughput_req_s == pytest.approx(3 / 0.28)
    assert res.output_throughput_tok_s == pytest.approx(9 / 0.28)
    assert res.total_token_throughput_tok_s == pytest.approx(40 / 0.28)
    assert res.mean_ttft_ms == pytest.approx((100 + 200 + 40) / 3) and res.median_ttft_ms == 100
    assert res.mean_tpot_ms == pytest.approx((30 / 3 + 20 / 3) / 2)
    assert res.mean_itl_ms == pytest.approx(50 / 6) and res.itl.median_ms == 10
    assert res.mean_e2el_ms == pytest.approx((140 + 230 + 50) / 3)
    assert res.date == "20231114-221320"  # 1,700,000,000.28 s → UTC, truncated to the second
    assert res.max_output_tokens_per_s is None and res.max_concurrent_requests is None  # vllm-bench only
    with pytest.raises(ValueError):
        metrics.point_result([], "requests.jsonl")


def test_a_point_of_failures_only_has_no_latencies():
    res = metrics.point_result([C], "requests.jsonl")
    assert res.completed == 0 and res.failed == 1
    assert res.mean_ttft_ms is None and res.itl.p99_ms is None  # n/a, not 0


# --- the vllm-bench-compatible view: differs exactly where vllm bench's quirks are -------------------------


def test_views_differ_exactly_where_vllm_bench_counts_chunks():
    # TTFT: the first chunk, even one without a token (D)
    assert [metrics.ttft_ms_vllm_bench(r) for r in (A, B, D)] == [100, 200, 30]
    # E2E: to the last chunk, not the stream end
    assert [metrics.e2el_ms_vllm_bench(r) for r in (A, B, D)] == [132, 220, 45]
    # ITL: one gap per chunk, whatever it carried (A's 2-token chunk is one 20 ms gap, the empty one a 2 ms
    # gap)
    assert metrics.itls_ms_vllm_bench(A) == [10, 20, 2]
    assert metrics.itls_ms_vllm_bench(B) == [20]
    assert metrics.itls_ms_vllm_bench(D) == [10, 5]
    assert metrics.tpot_ms_vllm_bench(A) == pytest.approx((132 - 100) / 3)
    assert metrics.tpot_ms_vllm_bench(D) is None
    # the prompt the client built, not the server's count
    assert metrics.input_tokens_vllm_bench(D) == 10 != metrics.input_tokens(D)
    # successful = ended without error and got a chunk
    assert metrics.completed_vllm_bench(POINT) == [A, B, D]
    # where there is no quirk the views agree: a request of one-token chunks ending at its last chunk
    plain = RequestRecord.from_obj(obj(5, 0, [(10, 1), (15, 1), (22, 1)], 22, completion=3))
    assert metrics.ttft_ms(plain) == metrics.ttft_ms_vllm_bench(plain)
    assert metrics.itls_ms(plain) == metrics.itls_ms_vllm_bench(plain)
    assert metrics.e2el_ms(plain) == metrics.e2el_ms_vllm_bench(plain)
    assert metrics.tpot_ms(plain) == metrics.tpot_ms_vllm_bench(plain)


def test_per_second_buckets_like_vllm():
    a = RequestRecord.from_obj(obj(0, 0, [(500, 1), (1200, 1)], 1210, completion=2))
    b = RequestRecord.from_obj(obj(1, 900, [(1100, 1), (1300, 1), (2050, 1)], 2060, completion=3))
    # chunks per 1-s bucket from t=0: [1, 3, 1]; active: a in buckets 0..1, b in 0..2 → [2, 2, 1]
    assert metrics.peaks_vllm_bench([a, b]) == (3.0, 2)
    assert metrics.peaks_vllm_bench([]) == (0.0, 0)


def test_point_summary_vllm_bench_by_hand():
    s = metrics.point_summary_vllm_bench(POINT, model_id="m", max_concurrency=2, num_prompts=4, label=None)
    assert (s["completed"], s["failed"], s["total_input_tokens"], s["total_output_tokens"]) == (3, 1, 30, 9)
    assert s["duration"] == pytest.approx(0.280)
    assert s["request_throughput"] == pytest.approx(3 / 0.28)
    assert s["total_token_throughput"] == pytest.approx(39 / 0.28)
    assert (s["mean_ttft_ms"], s["median_ttft_ms"]) == pytest.approx((110, 100))
    assert s["mean_itl_ms"] == pytest.approx((10 + 20 + 2 + 20 + 10 + 5) / 6)
    assert s["median_itl_ms"] == pytest.approx(10)
    assert s["mean_tpot_ms"] == pytest.approx((32 / 3 + 20 / 3) / 2)
    assert s["mean_e2el_ms"] == pytest.approx((132 + 220 + 45) / 3)
    assert (s["max_output_tokens_per_s"], s["max_concurrent_requests"]) == (9.0, 3)
    # no completed request: vllm bench writes zeros, not missing values
    only_failed = metrics.point_summary_vllm_bench(
        [C], model_id="m", max_concurrency=1, num_prompts=1, label=None
    )
    assert only_failed["mean_ttft_ms"] == 0 and only_failed["p99_itl_ms"] == 0
    with pytest.raises(ValueError):
        metrics.point_summary_vllm_bench([], model_id="m", max_concurrency=1, num_prompts=0, label=None)


@pytest.mark.skipif(not SEED.is_dir(), reason="reference campaign not available")
def test_vllm_bench_view_has_the_tools_keys_and_the_parser_reads_it(tmp_path):
    s = metrics.point_summary_vllm_bench(POINT, model_id="m", max_concurrency=2, num_prompts=4, label="x")
    ref = json.loads((SEED / "Round2/01-02-perf-test/vllm_c001.json").read_text())
    assert list(s) == list(ref)
    p = tmp_path / "pt.json"
    p.write_text(json.dumps(s))
    parsed = parse_bench_json(p)
    assert parsed.completed == 3 and parsed.failed == 1 and parsed.mean_ttft_ms == pytest.approx(110)
    assert not parsed.extra


# --- the committed raw runs ---------------------------------------------------------------------------------


def _raw_lines(run: Path) -> list[dict]:
    return [json.loads(x) for x in (run / "requests.jsonl").read_text().splitlines() if x]


@pytest.mark.skipif(not CPU_VLLM.is_dir(), reason="raw/cpu-tiny-qwen2 is not committed")
def test_canonical_tpot_on_the_committed_cpu_vllm_run_by_hand():
    # p06: vLLM's API server coalesced several steps into one chunk under CPU contention
    point = "p06-length-c004-i128-o32"
    lines = [x for x in _raw_lines(CPU_VLLM) if x["point"] == point and x["error"] is None]
    line = next(x for x in lines if max(x["chunk_tokens"]) > 1)
    toks = [(t, n) for t, n in zip(line["chunk_mono_ns"], line["chunk_tokens"], strict=True) if n > 0]
    n = sum(k for _, k in toks)
    rec = RequestRecord.from_obj(line)
    assert metrics.tpot_ms(rec) == pytest.approx((toks[-1][0] - toks[0][0]) / 1e6 / (n - 1), rel=1e-12)
    # the point's canonical mean TPOT is the mean of that formula over its completed requests ...
    by_hand = []
    for x in lines:
        ts = [(t, k) for t, k in zip(x["chunk_mono_ns"], x["chunk_tokens"], strict=True) if k > 0]
        by_hand.append((ts[-1][0] - ts[0][0]) / 1e6 / (sum(k for _, k in ts) - 1))
    recs = [r for r in parse_requests_jsonl(CPU_VLLM / "requests.jsonl") if r.point == point]
    res = metrics.point_result(recs, "requests.jsonl")
    assert res.mean_tpot_ms == pytest.approx(sum(by_hand) / len(by_hand), rel=1e-12)
    # ... and not the collector's frozen vllm-bench copy of the same point (10.21 ms there)
    frozen = json.loads((CPU_VLLM / "bench" / f"{point}.json").read_text())
    assert round(frozen["mean_tpot_ms"], 2) == 10.21
    print(f"canonical mean TPOT {res.mean_tpot_ms:.2f} ms vs frozen vllm-bench copy 10.21 ms")
