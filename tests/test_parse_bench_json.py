"""bench JSON parser on the 47 real result files, plus malformed variants written to tmp_path."""

from __future__ import annotations

import json
import math

import pytest

from analysis.parse.bench_json import parse_bench_json
from collector.raw.errors import ParseError
from tests.seed import SEED

pytestmark = pytest.mark.skipif(not SEED.is_dir(), reason="reference campaign not on this machine")


def test_round1_c001_values_read_by_eye():
    r = parse_bench_json(SEED / "Round1/01-perf-test/c001.json")
    assert r.completed == 40 and r.failed == 0 and r.num_prompts == 40
    assert r.duration_s == 166.54737041145563
    assert r.total_input_tokens == 40960 and r.total_output_tokens == 10240
    assert r.max_concurrency == 1 and r.max_concurrent_requests == 2
    assert r.request_rate_req_s == math.inf  # "inf" in the file
    assert r.mean_ttft_ms == 104.89686718210578
    assert r.ttft.p99_ms == 111.30200022831559
    assert r.e2el.p90_ms == 4167.503839731216
    assert r.latency["tpot"].std_ms == 0.00870689970054096
    assert r.label is None and r.request_goodput_req_s is None
    assert r.model_id == "Qwen/Qwen2.5-7B-Instruct"
    assert r.extra == {}


def test_round2_c001_and_llamacpp_quirks():
    assert parse_bench_json(SEED / "Round2/01-02-perf-test/vllm_c001.json").completed == 40
    ll = parse_bench_json(SEED / "Round2/05-perf-test/llamacpp_c064.json")
    # llama.cpp stops some requests short: 129485 < 256 x 512 = 131072
    assert ll.total_output_tokens == 129485 and ll.completed == 512
    assert ll.model_id == "/models/Qwen2.5-7B-Instruct-Q4_K_M.gguf"
    assert ll.max_concurrent_requests == 75  # client-side in flight exceeds max_concurrency 64
    r1 = parse_bench_json(SEED / "Round1/05-perf-test/llamacpp_c32.json")
    assert (r1.completed, r1.failed) == (312, 8)


def test_every_result_is_internally_consistent():
    """Independent check of the field mapping: throughput x duration = token counts (README's own check)."""
    files = sorted(SEED.rglob("*.json"))
    assert len(files) == 47
    for f in files:
        r = parse_bench_json(f)
        assert r.output_throughput_tok_s * r.duration_s == pytest.approx(r.total_output_tokens, rel=1e-9), f
        assert r.request_throughput_req_s * r.duration_s == pytest.approx(r.completed, rel=1e-9), f
        total = r.total_input_tokens + r.total_output_tokens
        assert r.total_token_throughput_tok_s * r.duration_s == pytest.approx(total, rel=1e-9), f
        for metric in ("ttft", "tpot", "itl", "e2el"):
            assert r.stat_ms("median", metric) == r.stat_ms("p50", metric), f


def test_unknown_keys_kept_and_other_versions_read(tmp_path):
    obj = {
        "completed": 3,
        "duration": 2.0,
        "failed": 0,
        "request_rate": 4.0,
        "p95_ttft_ms": 12.5,
        "p99.9_itl_ms": 40.0,
        "mean_ttft_ms": 10.0,
        "ttfts": [0.01, 0.012, 0.011],
        "itls": [[0.02, 0.021], [], [0.03]],
        "input_lens": [5, 5, 5],
        "errors": ["", "", ""],
        "some_future_key": {"x": [1, 2]},
        "completed_per_phase": None,
    }
    p = tmp_path / "bench.json"
    p.write_text(json.dumps(obj))
    r = parse_bench_json(p)
    assert r.ttft.p95_ms == 12.5 and r.latency["itl"].percentiles_ms[99.9] == 40.0
    assert r.ttfts_s == [0.01, 0.012, 0.011] and r.itls_s == [[0.02, 0.021], [], [0.03]]
    assert r.extra == {"some_future_key": {"x": [1, 2]}, "completed_per_phase": None}
    assert r.request_rate_req_s == 4.0 and r.max_concurrency is None


@pytest.mark.parametrize(
    ("text", "line", "what"),
    [
        ('{"completed": 40, "duration": 1.5', 1, "not valid JSON"),
        ('{"completed": 40,\n "duration": 1.5,\n "failed": "0"}', 3, "'failed' should be an integer"),
        ('{"completed": 40}', 1, "missing key 'duration'"),
        ("[1, 2]", 1, "expected a JSON object"),
        (
            '{"completed": 40, "duration": 1.0, "mean_ttft_ms": "fast"}',
            1,
            "'mean_ttft_ms' should be a number",
        ),
        ('{"completed": true, "duration": 1.0}', 1, "'completed' should be an integer"),
        ('{"completed": 1, "duration": 1.0, "ttfts": [0.1, "x"]}', 1, "'ttfts' item 1"),
    ],
)
def test_malformed_raises_parse_error_with_file_and_line(tmp_path, text, line, what):
    p = tmp_path / "c001.json"
    p.write_text(text)
    with pytest.raises(ParseError) as exc:
        parse_bench_json(p)
    assert exc.value.line == line and what in exc.value.what
    assert str(exc.value).startswith(f"{p}:{line}: ")


def test_truncated_real_file(tmp_path):
    data = (SEED / "Round2/04-perf-test/stress.json").read_bytes()
    p = tmp_path / "stress.json"
    p.write_bytes(data[: len(data) // 2])
    with pytest.raises(ParseError, match="not valid JSON"):
        parse_bench_json(p)
    with pytest.raises(ParseError, match="cannot read file"):
        parse_bench_json(tmp_path / "missing.json")
