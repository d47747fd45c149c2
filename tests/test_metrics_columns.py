"""The columnar read of requests.jsonl and the vectorised metrics (issue #25 item 1) against the reference:
the per-line parser (``parse_requests_jsonl``) and the per-record definitions (``analysis.core.metrics``), on
committed sealed runs and on a hand-made file of edge cases — equal records, bit-identical summaries, the same
one-line ParseError for bad input."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from analysis.core import metrics, metrics_columns
from analysis.parse.request_columns import RequestColumns, parse_request_columns
from analysis.parse.requests_jsonl import parse_requests_jsonl
from analysis.reconcile.gates.checks import _stream_counts, stream_counts_agree
from collector.raw.errors import ParseError
from tests.test_analysis_metrics import obj

RAW = Path(__file__).resolve().parents[1] / "raw"
REAL = [
    RAW / "cpu-tiny-qwen2" / "llamacpp-rate" / "requests.jsonl",  # open loop, llama.cpp's closing chunks
    RAW / "cpu-tiny-qwen2" / "vllm" / "requests.jsonl",
]
SLOS = [{"ttft_ms": 50.0}, {"tpot_ms": 5.0, "e2e_ms": 400.0}, {"itl_ms": 0.5}]


def _agree(cols: RequestColumns, path: Path) -> None:
    """Columns hold the reference's records; per point, every number the analysis takes from them is the
    reference's, bit for bit."""
    ref = parse_requests_jsonl(path, allow_torn_tail=True)
    assert cols.records() == ref
    for point, idx in cols.groups().items():
        recs = [ref[int(i)] for i in idx]
        sub = cols.take(idx)
        assert metrics_columns.point_result(sub, str(path)) == metrics.point_result(recs, str(path)), point
        for slos in SLOS:
            assert metrics_columns.good_requests(sub, slos) == metrics.good_requests(recs, slos)
        assert metrics_columns.offered_rate_req_s(sub) == metrics.offered_rate_req_s(recs)
        assert metrics_columns.achieved_rate_req_s(sub) == metrics.achieved_rate_req_s(recs)
        late = [x for r in recs if (x := metrics.send_lateness_ms(r)) is not None]
        assert metrics_columns.send_lateness_ms(sub).tolist() == late
        done = [r for r in recs if r.ok]
        bad = sum(not stream_counts_agree(r) for r in done)
        absurd = sum(not metrics.token_counts_plausible(r) for r in done)
        sources = sorted({str(r.token_count_source) for r in done})
        assert _stream_counts(sub) == (len(done), bad, absurd, sources)


@pytest.mark.parametrize("path", REAL, ids=lambda p: p.parent.name)
def test_a_committed_run_reads_and_summarises_as_the_reference(path):
    _agree(parse_request_columns(path), path)


def _line(o: dict) -> bytes:
    return json.dumps(o, sort_keys=True, separators=(",", ":")).encode() + b"\n"


EDGE = [
    obj(0, 0, [(100, 1), (110, 1), (130, 2), (132, 0)], 140, completion=4),  # a 2-token chunk, a closing 0
    obj(1, 50, [(250, 3), (270, 1)], 280, completion=4, point="b"),  # lines of two points interleaved
    obj(2, 60, [], 90, error="HTTP 500: boom"),  # failed, no chunk
    obj(3, 0, [(30, 0), (40, 1), (45, 0)], 50, completion=1, prompt=11),  # one token: no TPOT
    obj(4, 5, [], 20, completion=0),  # completed with zero chunks
    obj(5, 200, [(201, 1)], 202, completion=3, point="b"),  # one chunk; usage disagrees with the stream
    {**obj(6, 7, [(9, 2**62)], 12, completion=2**62), "token_count_source": "token_ids"},  # absurd counts
    obj(7, 1, [(3, 1), (3, 1), (8, 2)], 9),  # no usage: the streamed count; two chunks at one instant
]


def test_edge_cases_and_a_torn_last_line_agree_with_the_reference(tmp_path):
    path = tmp_path / "requests.jsonl"
    body = b"".join(_line(o) for o in EDGE)
    path.write_bytes(body + _line(EDGE[0])[:57])  # a crashed collector's half-written last line
    cols = parse_request_columns(path, allow_torn_tail=True)
    assert len(cols) == len(EDGE) and list(cols.groups()) == ["pt", "b"]
    _agree(cols, path)
    with pytest.raises(ParseError) as err:
        parse_request_columns(path)
    assert str(err.value) == str(pytest.raises(ParseError, parse_requests_jsonl, path).value)
    assert f"{path}:{len(EDGE) + 1}:" in str(err.value) and "\n" not in str(err.value)


def test_json_only_python_reads_falls_back_to_the_reference(tmp_path):
    """orjson refuses NaN; json (the reference) reads it: the columns are built from its records."""
    path = tmp_path / "requests.jsonl"
    odd = {**EDGE[0], "engine_timings": {"prompt_ms": float("nan")}}
    path.write_bytes(_line(EDGE[1]) + json.dumps(odd).encode() + b"\n")
    cols = parse_request_columns(path)
    assert np.isnan(cols.fields[1]["engine_timings"]["prompt_ms"])
    assert cols.record(0) == parse_requests_jsonl(path)[0]


@pytest.mark.parametrize(
    "change",
    [
        {"chunk_tokens": [1, "2", 1, 0]},
        {"chunk_tokens": [1, True, 1, 0]},
        {"chunk_mono_ns": [100 * 10**6, 90 * 10**6, 130 * 10**6, 132 * 10**6]},
        {"send_mono_ns": 101 * 10**6},
        {"end_mono_ns": 131 * 10**6},
        {"headers_mono_ns": -1},
        {"chunk_unix_ns": [1]},
        {"v": 2},
    ],
    ids=["str", "bool", "backwards", "send", "end", "headers", "lengths", "version"],
)
def test_bad_input_is_the_reference_one_line_error(tmp_path, change):
    path = tmp_path / "requests.jsonl"
    path.write_bytes(_line(EDGE[3]) + _line({**EDGE[0], **change}) + _line(EDGE[1]))
    with pytest.raises(ParseError) as ref:
        parse_requests_jsonl(path)
    with pytest.raises(ParseError) as got:
        parse_request_columns(path)
    assert str(got.value) == str(ref.value) and f"{path}:2:" in str(got.value)


def test_an_integer_beyond_64_bits_is_one_line_naming_the_key(tmp_path):
    """The reference reads 2^64 (Python ints); the columns name the key instead of wrapping it."""
    path = tmp_path / "requests.jsonl"
    path.write_bytes(_line({**EDGE[0], "concurrency": 2**64}))
    with pytest.raises(ParseError, match=r"key 'concurrency' holds an integer beyond 64 bits"):
        parse_request_columns(path).ints("concurrency")


def test_edge_values_computed_by_hand(tmp_path):
    """Numbers worked out from EDGE's timestamps by hand (not from either implementation): TTFT = first
    token chunk − send, E2E = end − send, TPOT = (last token chunk − first) / (tokens − 1)."""
    path = tmp_path / "requests.jsonl"
    path.write_bytes(b"".join(_line(o) for o in EDGE))
    cols = parse_request_columns(path)
    ttft, e2e, tpot = (
        f(cols).tolist() for f in (metrics_columns.ttft_ms, metrics_columns.e2el_ms, metrics_columns.tpot_ms)
    )
    assert ttft[0] == 100.0 and e2e[0] == 140.0 and tpot[0] == pytest.approx((130 - 100) / 3)
    assert ttft[3] == 40.0 and np.isnan(tpot[3])  # one token: no TPOT
    assert np.isnan(ttft[2]) and e2e[2] == 30.0  # failed before any chunk
    assert ttft[1] == 200.0 and e2e[1] == 230.0 and tpot[1] == pytest.approx((270 - 250) / 3)
