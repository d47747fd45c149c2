"""Values no field can hold are refused where they are read (issue #12): NaN, Infinity and negative numbers in
bench JSON (Python's JSON reader accepts NaN/Infinity), in a sampler CSV, and request times that would make a
negative latency. Each is one ParseError naming the file and the field. The files are our own committed run's
files with one value changed (written to tmp_path), so everything else about them is real."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from analysis.parse.bench_json import parse_bench_json
from analysis.parse.requests_jsonl import parse_requests_jsonl
from analysis.parse.sampler_csv import parse_sampler_csv_bytes
from collector.raw.errors import ParseError

REPO = Path(__file__).resolve().parent.parent
RUN = REPO / "raw" / "cpu-tiny-qwen2" / "llamacpp"
BENCH = sorted((RUN / "bench").glob("*.json"))[-1]


def _bench(tmp_path: Path, key: str, raw_value: str) -> Path:
    """The committed bench file with ``key``'s value replaced by the JSON text ``raw_value``."""
    text = BENCH.read_text()
    new, n = re.subn(rf'("{key}": )[^,\n}}]+', lambda m: m[1] + raw_value, text, count=1)
    assert n == 1, key
    out = tmp_path / "c.json"
    out.write_text(new)
    return out


def test_the_committed_bench_file_reads():
    r = parse_bench_json(BENCH)
    assert r.completed > 0 and r.output_throughput_tok_s > 0


@pytest.mark.parametrize(
    "key, value",
    [
        ("output_throughput", "NaN"),
        ("output_throughput", "Infinity"),
        ("output_throughput", "-1.5"),
        ("duration", "-3.0"),
        ("mean_itl_ms", "NaN"),
        ("median_ttft_ms", "-0.25"),
        ("p99_e2el_ms", "Infinity"),
        ("std_tpot_ms", "-1e-9"),
        ("completed", "-1"),
        ("total_output_tokens", "NaN"),
        ("request_rate", "NaN"),
    ],
)
def test_bench_values_no_field_can_hold(tmp_path, key, value):
    with pytest.raises(
        ParseError, match=rf"c\.json:\d+: key '{key}' should be .*got {re.escape(repr(json.loads(value)))}"
    ):
        parse_bench_json(_bench(tmp_path, key, value))


def test_bench_request_rate_may_be_infinite(tmp_path):
    assert parse_bench_json(_bench(tmp_path, "request_rate", "Infinity")).request_rate_req_s == float("inf")


def test_bench_detailed_arrays(tmp_path):
    obj = json.loads(BENCH.read_text())
    for key, value, item in (("ttfts", [0.1, float("nan")], 1), ("itls", [[0.01, -0.002]], 0)):
        f = tmp_path / f"{key}.json"
        f.write_text(json.dumps({**obj, key: value}))
        with pytest.raises(ParseError, match=rf"key '{key}' item {item} should hold finite numbers >= 0"):
            parse_bench_json(f)


SAMPLER_HEADER = b"ts,running,waiting,kv_usage,preemptions,gpu_util,power_w,custom\n"


@pytest.mark.parametrize(
    "row, what",
    [
        (b"1787692641.5,1,0,nan,0,50,300,1\n", "column 'kv_usage': 'nan' is not a finite number"),
        (b"1787692641.5,1,0,0.5,inf,50,300,1\n", "column 'preemptions': 'inf' is not a finite number"),
        (b"1787692641.5,-1,0,0.5,0,50,300,1\n", "column 'running': -1 is negative"),
        (b"1787692641.5,1,0,0.5,0,50,-300,1\n", "column 'power_w': -300 is negative"),
        (b"1787692641.5,1,0,0.5,0,50,300,-inf\n", "column 'custom': '-inf' is not a finite number"),
    ],
)
def test_sampler_values_no_column_can_hold(row, what):
    with pytest.raises(ParseError, match=rf"m\.csv:2: {re.escape(what)}"):
        parse_sampler_csv_bytes(SAMPLER_HEADER + row, "m.csv")


def test_sampler_unknown_columns_may_be_negative():
    t = parse_sampler_csv_bytes(SAMPLER_HEADER + b"1787692641.5,1,0,0.5,0,50,300,-4\n", "m.csv")
    assert t.rows[0].extra["custom"] == -4.0 and t.rows[0].running_reqs == 1.0


def _requests(tmp_path: Path, mutate) -> Path:
    lines = (RUN / "requests.jsonl").read_text().splitlines()
    obj = json.loads(lines[2])
    mutate(obj)
    lines[2] = json.dumps(obj)
    out = tmp_path / "requests.jsonl"
    out.write_text("\n".join(lines) + "\n")
    return out


@pytest.mark.parametrize(
    "mutate, what",
    [
        (
            lambda o: o.update(end_mono_ns=o["send_mono_ns"] - 1),
            "key 'end_mono_ns' .* is earlier than send_mono_ns",
        ),
        (
            lambda o: o.update(headers_mono_ns=o["send_mono_ns"] - 5),
            "key 'headers_mono_ns' .* earlier than send",
        ),
        (
            lambda o: o["chunk_mono_ns"].__setitem__(0, o["send_mono_ns"] - 7),
            "key 'chunk_mono_ns' .* earlier",
        ),
        (
            lambda o: o.update(end_mono_ns=o["chunk_mono_ns"][-1] - 1),
            "key .end_mono_ns. .* earlier than the last chunk_mono_ns",
        ),
        (lambda o: o.update(send_mono_ns=-1), "key 'send_mono_ns' is negative"),
        (lambda o: o.update(end_mono_ns=float("nan")), "key 'end_mono_ns' should be an integer"),
    ],
)
def test_request_times_that_would_make_a_negative_latency(tmp_path, mutate, what):
    with pytest.raises(ParseError, match=rf"requests\.jsonl:3: {what}"):
        parse_requests_jsonl(_requests(tmp_path, mutate))


def test_the_committed_requests_read():
    assert len(parse_requests_jsonl(RUN / "requests.jsonl")) > 0
