"""Prometheus scrape parser: the real round-1 metrics.log (vLLM), llama.cpp exposition text, bad scrapes."""

from __future__ import annotations

import pytest

from analysis.parse.prometheus import parse_prometheus, parse_prometheus_bytes, parse_prometheus_text
from collector.raw.errors import ParseError
from tests.seed import SEED

pytestmark = pytest.mark.skipif(not SEED.is_dir(), reason="reference campaign not on this machine")
SCRAPE = SEED / "Round1/01-perf-test/metrics.log"


def test_round1_scrape_cache_config_and_lookups():
    s = parse_prometheus(SCRAPE)
    assert s.engine == "vllm"
    cc = s.cache_config()
    assert cc.line == 522 and cc.num_gpu_blocks == 5431 and cc.block_size == 16
    assert cc.kv_cache_size_tokens == 86_896 and cc.kv_cache_max_concurrency == 10.607421875
    # by hand: 5431 x 16 = 86,896 tokens; 86,896 / 8,192 = 10.607421875 exactly
    assert cc.num_gpu_blocks * cc.block_size == cc.kv_cache_size_tokens
    assert cc.kv_cache_size_tokens / 8192 == cc.kv_cache_max_concurrency
    assert cc.enable_prefix_caching is False and cc.gpu_memory_utilization == 0.9 and cc.cache_dtype == "auto"
    assert cc.labels["num_cpu_blocks"] == "None"
    assert s.gauge("vllm:num_requests_running") == 0.0
    assert s.counter("vllm:num_preemptions") == 0.0 == s.counter("vllm:num_preemptions_total")
    assert (
        s.counter("vllm:estimated_flops_per_gpu") == 0.0
    )  # round 1 test 01 ran without --enable-mfu-metrics
    h = s.histogram("vllm:request_queue_time_seconds")
    assert (h.sum, h.count) == (0.0, 0.0) and h.buckets[-1][0] == float("inf")
    assert s.value("python_gc_objects_collected_total", generation="0") == 18907.0
    [g] = s.find("python_gc_objects_collected_total", generation="0")
    assert g.line == 3 and g.family == "python_gc_objects_collected" and g.type == "counter"
    with pytest.raises(LookupError):
        s.value("python_gc_objects_collected_total")  # three generations: ambiguous
    assert s.value("vllm:no_such_metric") is None and s.histogram("vllm:nothing") is None


LLAMACPP = """\
# HELP llamacpp:prompt_tokens_total Number of prompt tokens processed.
# TYPE llamacpp:prompt_tokens_total counter
llamacpp:prompt_tokens_total 33065
# HELP llamacpp:prompt_seconds_total Prompt process time
# TYPE llamacpp:prompt_seconds_total counter
llamacpp:prompt_seconds_total 235.743
# HELP llamacpp:tokens_predicted_total Number of generation tokens processed.
# TYPE llamacpp:tokens_predicted_total counter
llamacpp:tokens_predicted_total 7801
# HELP llamacpp:n_decode_total Total number of llama_decode() calls
# TYPE llamacpp:n_decode_total counter
llamacpp:n_decode_total 7810
# HELP llamacpp:n_busy_slots_per_decode Average number of busy slots per llama_decode() call
# TYPE llamacpp:n_busy_slots_per_decode gauge
llamacpp:n_busy_slots_per_decode 1.02
# HELP llamacpp:requests_processing Number of requests processing.
# TYPE llamacpp:requests_processing gauge
llamacpp:requests_processing 3
# HELP llamacpp:requests_deferred Number of requests deferred.
# TYPE llamacpp:requests_deferred gauge
llamacpp:requests_deferred 0
"""


def test_llamacpp_metrics():
    s = parse_prometheus_text(LLAMACPP, "scrape")
    assert s.engine == "llamacpp" and s.cache_config() is None
    assert (
        s.counter("llamacpp:prompt_tokens") == 33065.0
        and s.counter("llamacpp:tokens_predicted_total") == 7801.0
    )
    assert (
        s.gauge("llamacpp:requests_processing") == 3.0 and s.gauge("llamacpp:n_busy_slots_per_decode") == 1.02
    )
    assert [x.line for x in s.with_prefix("llamacpp:")] == [3, 6, 9, 12, 15, 18, 21]
    assert s.families["llamacpp:prompt_tokens"][0] == "counter"


def test_malformed_scrapes():
    lines = SCRAPE.read_text().split("\n")[:-1]
    dup = "\n".join(lines[:60] + [lines[56]] + lines[60:]) + "\n"  # line 57 (running) again as line 61
    with pytest.raises(ParseError) as exc:
        parse_prometheus_bytes(dup.encode(), "metrics.log")
    assert exc.value.line == 61 and "repeats line 57" in exc.value.what
    bad = "\n".join(lines[:56] + [lines[56].replace("} 0.0", "} zero")] + lines[57:]) + "\n"
    with pytest.raises(ParseError) as exc:
        parse_prometheus_bytes(bad.encode(), "metrics.log")
    assert exc.value.line == 57 and "not a Prometheus sample" in exc.value.what
    with pytest.raises(ParseError, match="no newline"):
        parse_prometheus_bytes(SCRAPE.read_bytes()[:-1], "metrics.log")
    with pytest.raises(ParseError, match="empty"):
        parse_prometheus_bytes(b"", "metrics.log")
    with pytest.raises(ParseError, match="holds no samples"):
        parse_prometheus_bytes(b"# HELP x y\n# TYPE x gauge\n", "metrics.log")
    bad_cc = SCRAPE.read_text().replace('num_gpu_blocks="5431"', 'num_gpu_blocks="many"')
    with pytest.raises(ParseError, match=r"metrics.log:522: cache_config_info label num_gpu_blocks"):
        parse_prometheus_bytes(bad_cc.encode(), "metrics.log").cache_config()
