"""Theory numbers checked against hand computations written out from the config values (never against the
code's own output), against published totals, and against the real vLLM start-up log of the reference run."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from analysis.core import theory as th
from analysis.core.gpus import GPUS, get_gpu
from analysis.core.model_config import bundled_model_names, load_model_config
from collector.raw.errors import PlanError
from tests.seed import SEED

GIB = 2**30
VLLM_HEAD_LOG = SEED / "Round2" / "01-02-perf-test" / "vllm-server.head.log"


@pytest.fixture(scope="module")
def qwen7b():
    return load_model_config("Qwen2.5-7B-Instruct")


@pytest.fixture(scope="module")
def llama8b():
    return load_model_config("Llama-3.1-8B-Instruct")


@pytest.fixture(scope="module")
def qwen05b():
    return load_model_config("Qwen2.5-0.5B-Instruct")


# --- configs -------------------------------------------------------------------------------------------


def test_bundled_configs_are_the_hub_values():
    assert {"Llama-3.1-8B-Instruct", "Qwen2.5-0.5B-Instruct", "Qwen2.5-7B-Instruct"} <= set(
        bundled_model_names()
    )
    q = load_model_config("Qwen2.5-7B-Instruct")
    assert (q.hidden_size, q.intermediate_size, q.num_hidden_layers) == (3584, 18944, 28)
    assert (q.num_attention_heads, q.num_key_value_heads, q.head_dim, q.vocab_size) == (28, 4, 128, 152064)
    assert (q.tie_word_embeddings, q.qkv_bias, q.o_bias) == (False, True, False)
    ll = load_model_config("Llama-3.1-8B-Instruct")
    assert (ll.hidden_size, ll.intermediate_size, ll.num_hidden_layers) == (4096, 14336, 32)
    assert (ll.num_attention_heads, ll.num_key_value_heads, ll.head_dim, ll.vocab_size) == (
        32,
        8,
        128,
        128256,
    )
    assert (ll.tie_word_embeddings, ll.qkv_bias, ll.o_bias) == (False, False, False)
    raw = json.loads(Path(ll.source).read_text())
    assert raw["rope_scaling"]["rope_type"] == "llama3" and raw["rope_theta"] == 500000.0
    s = load_model_config("Qwen2.5-0.5B-Instruct")
    assert (s.hidden_size, s.intermediate_size, s.num_hidden_layers) == (896, 4864, 24)
    assert (s.num_attention_heads, s.num_key_value_heads, s.head_dim, s.vocab_size) == (14, 2, 64, 151936)
    assert s.tie_word_embeddings is True


@pytest.mark.parametrize(
    "name", ["qwen2.5-7b-instruct", "QWEN2.5-7B", "Qwen/Qwen2.5-7B-Instruct", "qwen2.5-7b"]
)
def test_model_names_are_case_insensitive(name):
    assert load_model_config(name).name == "Qwen2.5-7B-Instruct"


def test_model_from_a_config_path_and_a_folder(tmp_path):
    cfg = {
        "model_type": "qwen2",
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "vocab_size": 1000,
        "tie_word_embeddings": True,
    }
    folder = tmp_path / "tiny-qwen"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(cfg))
    by_file = load_model_config(folder / "config.json")
    by_dir = load_model_config(str(folder))
    assert by_file == by_dir and by_file.name == "tiny-qwen" and by_file.head_dim == 16
    # hand count: embed 1000*64; per layer q 64*64+64, k 64*32+32, v 64*32+32, o 64*64, mlp 3*64*128, norms
    # 2*64
    layer = (64 * 64 + 64) + 2 * (64 * 32 + 32) + 64 * 64 + 3 * 64 * 128 + 2 * 64
    assert th.params_total(by_file) == 1000 * 64 + 2 * layer + 64


def test_bad_configs_name_the_file_and_key(tmp_path):
    broken = tmp_path / "config.json"
    broken.write_text("{not json")
    with pytest.raises(PlanError, match=r"config\.json: not valid JSON"):
        load_model_config(broken)
    broken.write_text(json.dumps({"model_type": "qwen2", "hidden_size": 64}))
    with pytest.raises(PlanError) as err:
        load_model_config(broken)
    assert str(broken) in str(err.value) and "'intermediate_size'" in str(err.value)
    broken.write_text(
        json.dumps(
            {
                "model_type": "qwen2",
                "hidden_size": "64",
                "intermediate_size": 1,
                "num_hidden_layers": 1,
                "num_attention_heads": 1,
                "vocab_size": 1,
            }
        )
    )
    with pytest.raises(PlanError, match="'hidden_size' must be a positive integer"):
        load_model_config(broken)
    with pytest.raises(PlanError, match="no such model config file"):
        load_model_config(tmp_path / "missing.json")
    with pytest.raises(PlanError, match="unknown model 'gpt-9'.*Qwen2.5-7B-Instruct"):
        load_model_config("gpt-9")


# --- parameters ----------------------------------------------------------------------------------------


def test_qwen7b_parameters_by_hand(qwen7b):
    h, inter, L, V = 3584, 18944, 28, 152064
    embed = 152064 * 3584
    q = 3584 * 3584 + 3584  # 28 heads x 128 = 3584 outputs, with bias
    k = 3584 * 512 + 512  # 4 kv heads x 128 = 512 outputs, with bias
    v = 3584 * 512 + 512
    o = 3584 * 3584  # no bias on o_proj in Qwen2
    gate = up = down = 3584 * 18944
    norms = 3584 + 3584
    layer = q + k + v + o + gate + up + down + norms
    assert layer == 233_057_792
    assert th.embed_tokens_params(qwen7b) == embed
    assert th.lm_head_params(qwen7b) == V * h
    assert th.q_proj_params(qwen7b) == q and th.k_proj_params(qwen7b) == k and th.v_proj_params(qwen7b) == v
    assert th.o_proj_params(qwen7b) == o
    assert th.gate_proj_params(qwen7b) == gate and th.up_proj_params(qwen7b) == up
    assert th.down_proj_params(qwen7b) == inter * h
    assert th.params_per_layer(qwen7b) == layer
    total = embed + L * layer + 3584 + V * h
    assert total == 7_615_616_512  # the Hub's safetensors parameter count
    assert th.params_total(qwen7b) == total
    by = th.params_by_component(qwen7b)
    assert by["q_proj"] == 28 * q and by["norm"] == 3584 and by["lm_head"] == embed
    share = th.shares(by)
    assert share["gate_proj"] == pytest.approx(28 * gate / total)
    assert sum(share.values()) == pytest.approx(1.0)


def test_llama8b_parameters_by_hand(llama8b):
    q = o = 4096 * 4096
    k = v = 4096 * 1024  # 8 kv heads x 128
    mlp = 3 * 4096 * 14336
    layer = q + k + v + o + mlp + 2 * 4096
    total = 2 * 128256 * 4096 + 32 * layer + 4096
    assert total == 8_030_261_248  # Meta's published count for Llama 3.1 8B
    assert th.params_per_layer(llama8b) == layer
    assert th.params_total(llama8b) == total


def test_qwen05b_tied_embeddings_by_hand(qwen05b):
    q = 896 * 896 + 896
    k = v = 896 * 128 + 128  # 2 kv heads x 64
    o = 896 * 896
    layer = q + k + v + o + 3 * 896 * 4864 + 2 * 896
    total = 151936 * 896 + 24 * layer + 896  # tied: no separate lm_head
    assert total == 494_032_768
    assert th.lm_head_params(qwen05b) == 0
    assert th.params_total(qwen05b) == total


# --- KV cache ------------------------------------------------------------------------------------------


def test_kv_bytes_per_token_by_hand(qwen7b, llama8b):
    assert th.kv_bytes_per_token(qwen7b, "bf16") == 2 * 28 * 4 * 128 * 2 == 57_344
    assert th.kv_bytes_per_token(qwen7b, "fp16") == 57_344
    assert th.kv_bytes_per_token(qwen7b, "fp8") == 2 * 28 * 4 * 128 * 1
    assert th.kv_bytes_per_token(qwen7b, "q8_0") == 2 * 28 * 4 * 128 * 34 / 32 == 30_464
    assert th.kv_bytes_per_token_mha(qwen7b, "bf16") == 2 * 28 * 28 * 128 * 2
    assert th.gqa_factor(qwen7b) == 28 / 4
    assert th.kv_bytes_per_token(llama8b, "bf16") == 2 * 32 * 8 * 128 * 2 == 131_072
    assert th.gqa_factor(llama8b) == 4
    with pytest.raises(PlanError, match="unknown KV dtype 'int3'"):
        th.kv_bytes_per_element("int3")


# --- FLOPs ---------------------------------------------------------------------------------------------


def test_flops_by_hand(qwen7b):
    matmul_layer = 3584 * 3584 + 3584 * 512 + 3584 * 512 + 3584 * 3584 + 3 * 3584 * 18944
    assert th.flops_per_token_matmul(qwen7b) == 2 * 28 * matmul_layer
    assert th.flops_per_token_lm_head(qwen7b) == 2 * 152064 * 3584
    assert th.attention_flops_prefill(qwen7b, 1024) == 4 * 1024 * 1024 * 28 * 28 * 128
    assert th.attention_flops_decode_per_token(qwen7b, 1024) == 4 * 1024 * 28 * 28 * 128
    assert th.flops_prefill(qwen7b, 1024) == (
        1024 * 2 * 28 * matmul_layer + 2 * 152064 * 3584 + 4 * 1024 * 1024 * 28 * 28 * 128
    )
    assert (
        th.flops_decode_per_token(qwen7b, 2000)
        == 2 * 28 * matmul_layer + 2 * 152064 * 3584 + 4 * 2000 * 28 * 28 * 128
    )


def test_attention_overtakes_weights(qwen7b):
    weights = 2 * 28 * (2 * 3584 * 3584 + 2 * 3584 * 512 + 3 * 3584 * 18944) + 2 * 152064 * 3584
    per_context_token = 4 * 28 * 28 * 128
    t = th.attention_overtakes_weights_at_tokens(qwen7b)
    assert t == 35_228
    assert per_context_token * t >= weights > per_context_token * (t - 1)
    s = th.attention_overtakes_weights_prefill_at_tokens(qwen7b)
    layers_only = weights - 2 * 152064 * 3584
    assert s == 32_512 and 4 * s * s * 28 * 28 * 128 >= s * layers_only


# --- weights -------------------------------------------------------------------------------------------


def test_bf16_weight_bytes_and_bytes_read_per_step(qwen7b, qwen05b):
    assert th.weight_bytes(qwen7b, "bf16") == 7_615_616_512 * 2
    assert round(th.weight_bytes(qwen7b, "bf16") / GIB, 2) == 14.19  # vLLM: "Checkpoint size: 14.19 GiB"
    # the embedding table is gathered, not read; lm_head is read
    assert th.weight_bytes_read_per_decode_step(qwen7b, "bf16") == (7_615_616_512 - 152064 * 3584) * 2
    # tied: the one table is read whole, as lm_head
    assert th.weight_bytes_read_per_decode_step(qwen05b, "bf16") == 494_032_768 * 2


def test_bpw_and_file_size_helpers():
    assert th.weight_bytes_from_bpw(1_000_000, 4.85) == 606_250
    assert th.bits_per_weight_from_file_bytes(4_677_120_000, 7_615_616_512) == pytest.approx(
        4_677_120_000 * 8 / 7_615_616_512
    )
    assert th.weight_bytes(load_model_config("qwen2.5-7b"), "8.5bpw") == pytest.approx(
        7_615_616_512 * 8.5 / 8
    )
    with pytest.raises(PlanError, match="unknown weight format 'q3_x'"):
        th.weight_bytes(load_model_config("qwen2.5-7b"), "q3_x")


def test_qwen7b_q4_k_m_by_hand(qwen7b):
    q4k = lambda n: n // 256 * 144  # noqa: E731 - ggml block_q4_K: 256 values in 144 bytes
    q6k = lambda n: n // 256 * 210  # noqa: E731 - ggml block_q6_K: 256 values in 210 bytes
    more_bits = {
        0,
        1,
        2,
        5,
        8,
        11,
        14,
        17,
        20,
        23,
        24,
        25,
        26,
        27,
    }  # first/last eighth of 28, every third between
    embd = q4k(152064 * 3584)
    output = q6k(152064 * 3584)
    layers = 0
    for i in range(28):
        layers += q4k(3584 * 3584) * 2 + q4k(3584 * 512)  # q, o, k
        layers += q6k(3584 * 512) if i in more_bits else q4k(3584 * 512)  # v
        layers += q4k(3584 * 18944) * 2  # gate, up
        layers += q6k(18944 * 3584) if i in more_bits else q4k(18944 * 3584)  # down
        layers += (3584 + 3584 + 3584 + 512 + 512) * 4  # norms and q/k/v biases stay F32
    total = embd + layers + 3584 * 4 + output
    assert th.weight_bytes(qwen7b, "q4_k_m") == total
    # llama-quantize on a Qwen2.5-7B-shaped model wrote 4.36 GiB (shared/engines.md)
    assert round(total / GIB, 2) == 4.36
    assert th.weight_bytes_read_per_decode_step(qwen7b, "q4_k_m") == total - embd


def test_qwen05b_q4_k_m_fallbacks_by_hand(qwen05b):
    # rows of 896 do not fill 256-wide K blocks: Q4_K -> Q5_0 (22 B / 32), Q6_K -> Q8_0 (34 B / 32);
    # the tied table plays the output tensor -> Q8_0 because 896 % 256 != 0
    q5_0 = lambda n: n // 32 * 22  # noqa: E731
    q8_0 = lambda n: n // 32 * 34  # noqa: E731
    q4k = lambda n: n // 256 * 144  # noqa: E731
    q6k = lambda n: n // 256 * 210  # noqa: E731
    more_bits = {0, 1, 2, 5, 8, 11, 14, 17, 20, 21, 22, 23}  # n = 24
    total = q8_0(151936 * 896) + 896 * 4
    for i in range(24):
        total += q5_0(896 * 896) * 2 + q5_0(896 * 128)  # q, o, k
        total += q8_0(896 * 128) if i in more_bits else q5_0(896 * 128)  # v
        total += q5_0(896 * 4864) * 2  # gate, up
        total += q6k(4864 * 896) if i in more_bits else q4k(4864 * 896)  # down: 4864 = 19 x 256
        total += (896 + 896 + 896 + 128 + 128) * 4  # two norms + q/k/v biases, in F32
    assert th.weight_bytes(qwen05b, "q4_k_m") == total
    assert th.weight_bytes_read_per_decode_step(qwen05b, "q4_k_m") == total  # tied: read whole as lm_head


@pytest.mark.parametrize(
    ("ftype", "table_gib"),
    # llama.cpp tools/quantize: "Q4_K_M : 4.58G @ Llama-3-8B", "Q5_K_M : 5.33G", "Q6_K : 6.14G", "Q8_0 :
    # 7.96G"
    [("q4_k_m", 4.58), ("q5_k_m", 5.33), ("q6_k", 6.14), ("q8_0", 7.96)],
)
def test_gguf_sizes_match_llama_quantize_table(llama8b, ftype, table_gib):
    tensor_gib = th.weight_bytes(llama8b, ftype) / GIB
    # the table is rounded to 0.01 and counts the whole file (vocabulary and header: under 0.015 GiB more)
    assert table_gib - 0.02 <= tensor_gib <= table_gib + 0.005


# --- decode floor --------------------------------------------------------------------------------------


def test_decode_floor_by_hand(qwen7b):
    read = (7_615_616_512 - 152064 * 3584) * 2
    kv = 8 * 1000 * 57_344
    step = (read + kv) / 1008e9
    assert th.kv_bytes_read_per_step(57_344, 8, 1000) == kv
    assert th.decode_step_floor_s(read, kv, 1008e9) == pytest.approx(step)
    assert th.tokens_per_s(8, step) == pytest.approx(8 / step)
    assert 1 / th.decode_step_floor_s(read, 0, get_gpu("rtx4090").bandwidth_bytes_per_s) == pytest.approx(
        1008e9 / read
    )


# --- KV pool -------------------------------------------------------------------------------------------


def test_vllm_concurrency_from_exact_tokens():
    # 120,064 tokens / 16 = 7,504 blocks; 8,192 / 16 = 512 blocks per request
    assert th.vllm_max_concurrency(120_064 // 16, 16, 8192) == 7504 / 512
    assert f"{th.vllm_max_concurrency(7504, 16, 8192):.2f}" == "14.66"
    assert th.vllm_max_concurrency(100, 16, 8200) == 100 / 513  # a request reserves whole blocks
    assert th.max_concurrency_plain(120_064, 8192) == 120_064 / 8192


def test_vllm_blocks_from_pool_bytes():
    pool = 6.41 * GIB
    assert th.vllm_num_gpu_blocks(pool, 16, 57_344) == math.floor(pool / (16 * 57_344)) == 7_501
    assert th.vllm_kv_cache_tokens(7_501, 16) == 120_016
    assert th.kv_pool_tokens(pool, 57_344) == math.floor(6.41 * 2**30 / 57_344)
    assert th.logged_gib_tolerance_tokens(57_344) == pytest.approx(0.005 * 2**30 / 57_344)  # ≈ 93.6


def _log_values(path: Path) -> tuple[float, int, int, float]:
    gib = tokens = max_len = conc = None
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        if "Available KV cache memory:" in line:
            gib = float(line.split("Available KV cache memory:")[1].split("GiB")[0])
        elif "GPU KV cache size:" in line:
            tokens = int(line.split("GPU KV cache size:")[1].split("tokens")[0].replace(",", ""))
        elif "Maximum concurrency for" in line:
            tail = line.split("Maximum concurrency for")[1]
            max_len = int(tail.split("tokens")[0].replace(",", ""))
            conc = float(tail.split(":")[1].strip().rstrip("x"))
    assert None not in (gib, tokens, max_len, conc), f"{path}: KV lines not found"
    return gib, tokens, max_len, conc


@pytest.mark.skipif(not VLLM_HEAD_LOG.is_file(), reason=f"reference log not found at {VLLM_HEAD_LOG}")
def test_against_the_real_vllm_log(qwen7b):
    gib, tokens, max_len, conc = _log_values(VLLM_HEAD_LOG)
    assert (gib, tokens, max_len, conc) == (6.41, 120_064, 8192, 14.66)
    kv = th.kv_bytes_per_token(qwen7b, "bf16")  # vLLM logs cache_byte_size=2 for this run
    # with the exact token count the vLLM formula reproduces the logged concurrency
    assert round(th.vllm_max_concurrency(tokens // 16, 16, max_len), 2) == conc
    # the rounded GiB figure brackets the real token count
    lo, hi = th.vllm_tokens_range_for_logged_gib(gib, kv, 16)
    assert lo <= tokens <= hi
    assert abs(th.vllm_kv_cache_tokens(th.vllm_num_gpu_blocks(gib * GIB, 16, kv), 16) - tokens) <= (
        th.logged_gib_tolerance_tokens(kv) + 16
    )


def test_llama_cpp_slots():
    assert th.llama_cpp_n_ctx_slot(262_144, 64) == 4096  # reference: -c 262144 -np 64 -> n_ctx_slot = 4096
    assert th.llama_cpp_n_ctx_slot(262_144, 64, kv_unified=True) == 262_144
    assert th.llama_cpp_kv_bytes(load_model_config("qwen2.5-7b"), 262_144, "fp16") == 262_144 * 57_344


def test_estimated_pool_the_vllm_way(qwen7b):
    mem = 24564 * 2**20  # RTX 4090, nvidia-smi memory.total
    weights = 7_615_616_512 * 2
    est = th.estimated_kv_pool_bytes(mem, weights)
    assert est == 0.9 * mem - weights - 1 * GIB
    assert est / GIB == pytest.approx(6.41, abs=0.02)  # the real run's profiled pool: 6.41 GiB
    assert th.estimated_kv_pool_bytes(1 * GIB, weights) == 0.0


# --- GPUs ----------------------------------------------------------------------------------------------


def test_gpu_specs():
    assert set(GPUS) >= {"rtx4090", "a100-80gb", "h100-sxm", "h200", "l40s"}
    g = get_gpu("RTX 4090")
    assert (g.name, g.bandwidth_bytes_per_s, g.bf16_flops_per_s, g.memory_bytes) == (
        "rtx4090",
        1008e9,
        165.2e12,
        24564 * 2**20,
    )
    assert get_gpu("NVIDIA H200").bandwidth_bytes_per_s == 4.8e12
    assert get_gpu("H100").bf16_flops_per_s == 989.4e12
    assert get_gpu("A100-SXM4-80GB").bandwidth_bytes_per_s == 2039e9
    assert get_gpu("l40s").bf16_flops_per_s == 362.05e12
    with pytest.raises(PlanError) as err:
        get_gpu("tpu-v9")
    assert "unknown GPU 'tpu-v9'" in str(err.value) and "rtx4090, a100-80gb, h100-sxm, h200, l40s" in str(
        err.value
    )
