"""Sweep console-log parser on all real sweep logs (with and without markers), cross-checked with the
JSONs."""

from __future__ import annotations

import math

import pytest

from analysis.parse.bench_json import parse_bench_json
from analysis.parse.sweep_log import parse_kwargs, parse_sweep_log, parse_sweep_log_bytes, split_kwargs
from collector.raw.errors import ParseError
from tests.seed import SEED

pytestmark = pytest.mark.skipif(not SEED.is_dir(), reason="reference campaign not on this machine")
R1 = SEED / "Round1/01-perf-test/sweep.log"


def test_kwargs_repr():
    body = (
        "a=1, b='x, y', c={(256, 256, 1): 0.5}, d=<function f.cmd at 0x72>, e=inf, f=torch.bfloat16, g=None"
    )
    assert [k for k, _ in split_kwargs(body)] == list("abcdefg")
    v = parse_kwargs(body)
    assert v["a"] == 1 and v["b"] == "x, y" and v["c"] == {(256, 256, 1): 0.5}
    assert (
        v["d"] == "<function f.cmd at 0x72>"
        and v["e"] == math.inf
        and v["f"] == "torch.bfloat16"
        and v["g"] is None
    )
    for bad in ("a=(1, 2", "a='x", "1=2", "a=1, b"):
        with pytest.raises(ValueError):
            split_kwargs(bad)


def test_round1_points_read_by_eye():
    log = parse_sweep_log(R1)
    assert [p.concurrency for p in log.points] == [8, 1, 2, 4, 8, 16, 32, 64]
    assert [p.line for p in log.points] == [2, 51, 100, 149, 198, 247, 296, 345]
    assert log.phases == [(1, ">>> WARMUP"), (394, ">>> DONE. results in /workspace/results")]
    w = log.points[0]
    assert w.phase == "WARMUP" and log.points[1].phase is None and w.tag is None and w.seed is None
    assert w.result_filename == "_warmup.json" and w.namespace_line == 3
    ns = w.namespace
    assert (
        ns["seed"] == 42
        and ns["num_prompts"] == 32
        and ns["temperature"] is None
        and ns["request_rate"] == math.inf
    )
    assert ns["random_mm_bucket_config"] == {(256, 256, 1): 0.5, (720, 1280, 1): 0.5, (720, 1280, 16): 0.0}
    assert ns["dispatch_function"].startswith("<function BenchmarkServingSubcommand.cmd")
    assert w.result_line == 14 and w.result["completed"] == 32 and w.result["duration_s"] == 19.95
    assert w.result["mean_ttft_ms"] == 420.73 and w.result["p99_itl_ms"] == 30.16
    assert w.result["max_output_tokens_per_s"] == 480.0 and w.result["max_concurrent_requests"] == 14.0
    assert w.result_lines["mean_ttft_ms"] == 27 and w.result_labels["mean_ttft_ms"] == "Mean TTFT (ms)"
    assert len(w.result) == 31
    [(no, text)] = w.warnings
    assert no == 5 and "no longer sets temperature==0" in text


def test_round2_markers_errors_and_unmarked_logs():
    ll = parse_sweep_log(SEED / "Round2/05-perf-test/sweep_llamacpp.log")
    p32 = ll.points[6]
    assert (p32.tag, p32.concurrency, p32.seed, p32.line) == ("llamacpp", 32, 132, 296)
    assert (
        p32.result["completed"] == 319 and p32.result["failed"] == 1 and p32.namespace["temperature"] == 0.0
    )
    assert p32.errors[0][1].startswith("Failed requests during benchmark run detected")
    assert any("ServerDisconnectedError" in text for _, text in p32.errors)
    assert all("tokenizer mismatch" in p.warnings[0][1] for p in ll.points)
    ln = parse_sweep_log(SEED / "Round2/03-perf-test/sweep_vllm.log")
    assert [p.line for p in ln.points] == [1, 48, 95, 142, 189] and ln.phases == []
    assert [p.namespace["random_input_len"] for p in ln.points] == [256, 512, 1024, 2048, 4096]
    assert all(p.concurrency is None and p.namespace["max_concurrency"] == 16 for p in ln.points)
    [stress] = parse_sweep_log(SEED / "Round2/04-perf-test/sweep_vllm.log").points
    assert stress.namespace["random_input_len"] == 6144 and stress.result["completed"] == 128


def test_every_point_agrees_with_its_result_json():
    """The console block rounds to 2 decimals; the JSON next to it holds the full numbers."""
    n = 0
    for log_path in SEED.rglob("sweep*.log"):
        for p in parse_sweep_log(log_path).points:
            j = log_path.parent / p.result_filename
            if not j.exists():
                continue
            r = parse_bench_json(j)
            assert p.result["completed"] == r.completed and p.result["failed"] == r.failed, j
            assert p.result["total_output_tokens"] == r.total_output_tokens, j
            assert p.result["duration_s"] == pytest.approx(r.duration_s, abs=0.006), j
            assert p.result["mean_ttft_ms"] == pytest.approx(r.mean_ttft_ms, abs=0.006), j
            n += 1
    assert n == 30  # round 1 test 01: 8; round 2: 8 + 5 + 1 + 8; round 1 test 02's sweep.log was not kept


def test_malformed_sweep_logs(tmp_path):
    lines = R1.read_bytes().decode().split("\n")[:-1]  # not read_text(): it splits at every CR
    cut = "\n".join(lines[:30]) + "\n"  # inside the first result block
    with pytest.raises(ParseError) as exc:
        parse_sweep_log_bytes(cut.encode(), "sweep.log")
    assert exc.value.line == 30 and "never closed" in exc.value.what
    bad = list(lines)
    bad[26] = "Mean TTFT (ms):                          fast"
    with pytest.raises(ParseError, match=r"sweep.log:27: 'Mean TTFT \(ms\)': 'fast' is not a number"):
        parse_sweep_log_bytes(("\n".join(bad) + "\n").encode(), "sweep.log")
    bad = list(lines)
    bad[2] = bad[2][:300]
    with pytest.raises(ParseError, match=r"sweep.log:3: Namespace\(...\) line is cut short"):
        parse_sweep_log_bytes(("\n".join(bad) + "\n").encode(), "sweep.log")
    no_result = "\n".join(lines[:13]) + "\n"  # marker + Namespace, then the log ends
    with pytest.raises(ParseError, match=r"sweep.log:2: the last point has no result block"):
        parse_sweep_log_bytes(no_result.encode(), "sweep.log")
    bad = list(lines)
    bad[20] = "Some new garbage in the block"
    with pytest.raises(ParseError, match=r"sweep.log:21: unexpected line in the result block"):
        parse_sweep_log_bytes(("\n".join(bad) + "\n").encode(), "sweep.log")
