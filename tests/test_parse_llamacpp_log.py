"""llama.cpp server log parser on the real start-up logs, with dumped model output and malformed blocks."""

from __future__ import annotations

import pytest

from analysis.parse.llamacpp_log import parse_llamacpp_log, parse_llamacpp_log_bytes
from collector.raw.errors import ParseError
from tests.seed import SEED

pytestmark = pytest.mark.skipif(not SEED.is_dir(), reason="reference campaign not on this machine")
R1 = SEED / "Round1/05-perf-test/llamacpp-server.head.log"
R2 = SEED / "Round2/05-perf-test/llamacpp-server.head.log"


def test_round1_slots_and_the_one_timing_block():
    log = parse_llamacpp_log(R1)
    assert (log.n_slots, log.n_ctx_slot, log.kv_unified) == (32, 2048, False) and log.lines["n_slots"] == 11
    assert log.model_path == "/models/Qwen2.5-7B-Instruct-Q4_K_M.gguf" and log.n_threads == 24
    assert log.build_number is None  # default verbosity does not log the build
    [t] = log.timings
    assert (t.line, t.slot_id, t.task_id) == (18, 31, 0)
    assert (t.prompt_eval_ms, t.prompt_tokens, t.prompt_ms_per_token, t.prompt_tokens_per_s) == (
        107.51,
        1024,
        0.10,
        9524.34,
    )
    assert (t.eval_ms, t.eval_tokens, t.eval_ms_per_token, t.eval_tokens_per_s) == (
        1510.35,
        256,
        5.92,
        168.84,
    )
    assert (t.total_ms, t.total_tokens, t.graphs_reused) == (1617.86, 1280, 255)
    # by hand: 107.51 + 1510.35 = 1617.86 ms; 1024 + 256 = 1280 tokens
    assert t.prompt_eval_ms + t.eval_ms == pytest.approx(t.total_ms)
    assert t.elapsed_s == pytest.approx(5 * 60 + 41.307415)
    [r] = log.releases
    assert (r.line, r.slot_id, r.task_id, r.n_tokens, r.truncated) == (22, 31, 0, 1279, False)
    assert log.kv_buffer_mib is None and log.buffers == []
    assert len(log.warnings) == 8 and log.warnings[0].line == 3


def test_round2_progress_lines_and_slots():
    log = parse_llamacpp_log(R2)
    assert (log.n_slots, log.n_ctx_slot) == (64, 4096)
    assert [(p.line, p.slot_id, p.task_id, p.n_gen, p.tg_tok_s, p.tg_3s_tok_s) for p in log.progress] == [
        (33, 63, 2, 237, 78.59, 78.92),
        (34, 56, 10, 254, 84.33, 84.66),
    ]
    [t] = log.timings
    assert (t.line, t.eval_ms, t.eval_tokens, t.graphs_reused) == (35, 3192.22, 256, 251)


VERBOSE = """\
0.00.010.100 I build: 6500 (eab8ee41f) with cc (Ubuntu 13.3.0) for x86_64-linux-gnu
0.00.900.000 I llama_context: n_ctx         = 262144
0.00.900.001 I llama_context: flash_attn    = auto
0.01.000.000 I load_tensors:        CUDA0 model buffer size =  4168.09 MiB
0.01.100.000 I llama_kv_cache:      CUDA0 KV buffer size = 14336.00 MiB
0.01.100.001 I llama_kv_cache: size = 14336.00 MiB (262144 cells,  28 layers, 64/64 seqs), K (f16): 7168.00 MiB, V (f16): 7168.00 MiB
0.01.200.000 I llama_context:      CUDA0 compute buffer size =   304.00 MiB
"""  # noqa: E501 - real llama.cpp log lines, kept whole


def test_build_buffers_and_model_output_dumped_in_the_log():
    dump = (
        '6.01.300.000 I srv  log_server_r: response: {"content": "slot print_timing: id 1 | task 2 | '
        'prompt eval time = nonsense"}\n'
        "好的，这是第二行模型输出\n\tprompt eval time = 1 ms\n"
    ).encode() + b"broken utf-8 from a byte token: \xe4\xbd\n"
    data = VERBOSE.encode() + R2.read_bytes() + dump
    log = parse_llamacpp_log_bytes(data, "llamacpp-server.log")
    assert (log.build_number, log.build_commit) == (6500, "eab8ee41f")
    assert log.context_params == {"n_ctx": "262144", "flash_attn": "auto"}
    kinds = [(b.kind, b.device, b.mib, b.line) for b in log.buffers]
    assert kinds == [
        ("model", "CUDA0", 4168.09, 4),
        ("KV", "CUDA0", 14336.0, 5),
        ("compute", "CUDA0", 304.0, 7),
    ]
    assert log.kv_buffer_mib == 14336.0
    assert (log.kv_cache_mib, log.kv_cache_cells, log.kv_cache_layers, log.kv_k_type) == (
        14336.0,
        262144,
        28,
        "f16",
    )
    # 7 lines were put in front: the timing block moved from line 35 to 42, and the dump changed nothing
    assert [t.line for t in log.timings] == [42] and log.n_slots == 64


def test_incomplete_or_malformed_blocks_are_errors(tmp_path):
    lines = R1.read_bytes().split(b"\n")
    no_eval = b"\n".join(lines[:18] + lines[19:])  # drop line 19 ("eval time")
    with pytest.raises(ParseError) as exc:
        parse_llamacpp_log_bytes(no_eval, "l.log")
    assert exc.value.line == 19 and "without its eval lines" in exc.value.what
    cut = b"\n".join(lines[:19]) + b"\n"  # ends after "eval time": no total
    with pytest.raises(ParseError) as exc:
        parse_llamacpp_log_bytes(cut, "l.log")
    assert exc.value.line == 18 and "has no 'total time'" in exc.value.what
    bad = R1.read_bytes().replace(b"prompt eval time =     107.51 ms", b"prompt eval time =     1O7.51 ms")
    with pytest.raises(ParseError) as exc:
        parse_llamacpp_log_bytes(bad, "l.log")
    assert exc.value.line == 18 and "prompt eval time = X ms" in exc.value.what
    bad = R1.read_bytes().replace(b"n_ctx_slot = 2048", b"n_ctx_slot = lots")
    with pytest.raises(ParseError, match=r"l.log:11: expected 'initializing, n_slots"):
        parse_llamacpp_log_bytes(bad, "l.log")
    p = tmp_path / "llamacpp-server.log"  # cut in its last line: read as if it ended before that line
    data = R1.read_bytes()[:-1]
    p.write_bytes(data)
    assert parse_llamacpp_log(p) == parse_llamacpp_log_bytes(data[: data.rindex(b"\n") + 1], str(p))
