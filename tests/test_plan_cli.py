"""`collector plan` through the real click command (CliRunner), and the library dict behind it."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from collector.cli import main
from collector.protocol.theory_sheet import SheetInputs, theory_sheet
from tests.cli import collector_cli

REQUIRED_KEYS = {
    "params_total",
    "params_by_component",
    "params_per_layer",
    "kv_bytes_per_token",
    "gqa_factor",
    "flops_per_token_matmul",
    "flops_per_token_lm_head",
    "weight_bytes",
    "weight_bytes_read_per_step",
    "kv_pool_bytes",
    "kv_pool_tokens",
    "max_concurrency",
    "max_concurrency_vllm",
    "decode_step_floor_ms",
    "decode_tokens_per_s_single_stream",
    "gpu_bandwidth_bytes_per_s",
    "gpu_bf16_flops_per_s",
    "max_model_len",
    "attention_overtakes_weights_at_tokens",
    "kv_pool_source",
}

REFERENCE = [
    "plan",
    "--model",
    "Qwen2.5-7B-Instruct",
    "--gpu",
    "rtx4090",
    "--kv-pool-gib",
    "6.41",
    "--max-model-len",
    "8192",
]


def test_table_has_every_section():
    result = CliRunner().invoke(main, REFERENCE)
    assert result.exit_code == 0, result.output
    for section in (
        "== Parameters ==",
        "== KV cache ==",
        "== FLOPs per token ==",
        "== Weights ==",
        "== Decode floor ==",
        "== KV pool ==",
    ):
        assert section in result.output
    assert "7,615,616,512" in result.output and "57,344 B" in result.output
    assert "(given)" in result.output


def test_json_has_the_keys_and_hand_checked_values():
    result = CliRunner().invoke(main, [*REFERENCE, "--json"])
    assert result.exit_code == 0, result.output
    d = json.loads(result.output)
    assert REQUIRED_KEYS <= d.keys()
    assert list(d) == sorted(d)
    assert d["params_total"] == 7_615_616_512
    assert d["params_per_layer"] == 233_057_792
    assert d["kv_bytes_per_token"] == 2 * 28 * 4 * 128 * 2
    assert d["gqa_factor"] == 7
    assert d["kv_pool_source"] == "given"
    assert d["kv_pool_bytes"] == 6.41 * 2**30
    assert d["vllm_num_gpu_blocks"] == (6.41 * 2**30) // (16 * 57_344)
    assert d["max_concurrency_vllm"] == d["vllm_num_gpu_blocks"] / (8192 // 16)
    lo, hi = d["vllm_kv_cache_tokens_range"]
    assert lo <= 120_064 <= hi  # what vLLM logged for this pool
    read = (7_615_616_512 - 152064 * 3584) * 2
    kv_read = 1 * d["decode_context_tokens"] * 57_344
    assert d["weight_bytes_read_per_step"] == read
    assert d["decode_step_floor_ms"] == pytest.approx((read + kv_read) / 1008e9 * 1e3, rel=1e-12)
    assert d["decode_tokens_per_s_single_stream"] == pytest.approx(1008e9 / (read + kv_read), rel=1e-12)
    by_batch = {r["batch"]: r for r in d["decode_by_batch"]}
    assert by_batch[64]["tokens_per_s"] == pytest.approx(
        64 * 1008e9 / (read + 64 * d["decode_context_tokens"] * 57_344), rel=1e-12
    )
    assert by_batch[128]["fits_kv_pool"] is (128 * d["decode_context_tokens"] <= d["kv_pool_tokens"])


def test_estimated_pool_is_labelled():
    d = theory_sheet(SheetInputs("qwen2.5-7b", "rtx4090"))
    assert d["kv_pool_source"] == "estimated"
    assert d["kv_pool_bytes"] == 0.9 * 24564 * 2**20 - 7_615_616_512 * 2 - 2**30
    assert d["max_model_len"] == 32768 and d["max_model_len_source"] == "config max_position_embeddings"
    out = CliRunner().invoke(main, ["plan", "--model", "qwen2.5-7b", "--gpu", "rtx4090"]).output
    assert "estimated" in out


def test_gguf_and_kv_dtype_options():
    result = CliRunner().invoke(
        main,
        [
            "plan",
            "--model",
            "qwen2.5-7b",
            "--gpu",
            "RTX4090",
            "--weight-format",
            "Q4_K_M",
            "--kv-dtype",
            "q8_0",
            "--kv-pool-gib",
            "10",
            "--max-model-len",
            "4096",
            "--json",
        ],
    )
    assert result.exit_code == 0, result.output
    d = json.loads(result.output)
    assert d["weight_format"] == "q4_k_m" and d["kv_bytes_per_token"] == 2 * 28 * 4 * 128 * 34 / 32
    assert d["kv_pool_tokens"] == (10 * 2**30) // (2 * 28 * 4 * 128 * 34 / 32)


def test_model_from_config_path(tmp_path):
    cfg = {
        "model_type": "qwen2",
        "hidden_size": 256,
        "intermediate_size": 512,
        "num_hidden_layers": 4,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "vocab_size": 4096,
        "max_position_embeddings": 2048,
    }
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    result = CliRunner().invoke(
        main, ["plan", "--model", str(path), "--gpu", "h200", "--kv-pool-gib", "1", "--json"]
    )
    assert result.exit_code == 0, result.output
    d = json.loads(result.output)
    assert d["kv_bytes_per_token"] == 2 * 4 * 2 * 64 * 2
    assert d["max_model_len"] == 2048


def test_unknown_gpu_is_one_line_and_exit_1():
    result = CliRunner().invoke(main, ["plan", "--model", "Qwen2.5-7B-Instruct", "--gpu", "gtx9090"])
    assert result.exit_code == 1
    lines = result.output.strip().splitlines()
    assert len(lines) == 1
    assert "unknown GPU 'gtx9090'" in lines[0] and "rtx4090" in lines[0] and "h200" in lines[0]


def test_bad_config_is_one_line_naming_file_and_key(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model_type": "llama", "hidden_size": 64}))
    result = CliRunner().invoke(main, ["plan", "--model", str(path), "--gpu", "h100"])
    assert result.exit_code == 1
    assert len(result.output.strip().splitlines()) == 1
    assert str(path) in result.output and "'intermediate_size'" in result.output


def test_bad_numbers_are_refused():
    result = CliRunner().invoke(main, ["plan", "--model", "qwen2.5-7b", "--gpu", "h200", "--block-size", "0"])
    assert result.exit_code == 1 and "--block-size must be positive" in result.output


def test_llama_cpp_slots_in_the_dict():
    d = theory_sheet(
        SheetInputs(
            "qwen2.5-7b",
            "rtx4090",
            weight_format="q4_k_m",
            kv_dtype="fp16",
            llama_cpp_ctx_total=262_144,
            llama_cpp_slots=64,
        )
    )
    assert d["llama_cpp_n_ctx_slot"] == 4096  # the reference server logged n_ctx_slot = 4096
    assert d["llama_cpp_kv_bytes"] == 262_144 * 2 * 28 * 4 * 128 * 2


def test_cpu_has_no_floor_but_keeps_the_config_theory():
    runner = CliRunner()
    no_pool = runner.invoke(main, ["plan", "--model", "Qwen2.5-0.5B-Instruct", "--gpu", "cpu"])
    assert no_pool.exit_code == 1 and "pass --kv-pool-gib" in no_pool.output
    res = runner.invoke(
        main, ["plan", "--model", "Qwen2.5-0.5B-Instruct", "--gpu", "cpu", "--kv-pool-gib", "1", "--json"]
    )
    assert res.exit_code == 0, res.output
    d = json.loads(res.output)
    # Qwen2.5-0.5B: 24 layers x 2 kv heads x 64 head_dim x 2 (K,V) x 2 B = 12,288 B/token
    assert d["kv_bytes_per_token"] == 12_288
    assert d["kv_pool_tokens"] == 2**30 // 12_288 == 87_381
    assert d["decode_step_floor_ms"] is None and d["gpu_bandwidth_bytes_per_s"] is None


def test_llamacpp_pool_is_its_context_cells_whatever_the_device():
    d = theory_sheet(
        SheetInputs(
            "Qwen2.5-0.5B-Instruct", "cpu", max_model_len=1024, llama_cpp_ctx_total=8192, llama_cpp_slots=8
        )
    )
    assert d["kv_pool_source"] == "llama.cpp -c"
    assert d["kv_pool_bytes"] == 8192 * 12_288  # -c cells x (24 x 2 x 64 x 2 x 2 B)
    assert d["llama_cpp_n_ctx_slot"] == 1024 and d["kv_pool_tokens"] == 8192


@pytest.mark.parametrize(
    ("model", "covers"),
    [  # every one refused on main (MoE, MLA or sliding-window keys); one per shape family
        ("Qwen3-30B-A3B", "MoE: 8 of 128 experts per token"),
        ("DeepSeek-V2-Lite", "MLA: KV holds one latent of 512"),
        ("gpt-oss-20b", "windows: 12 of 24 layers attend over the last 128 tokens"),
        ("gemma-2-9b-it", "windows: 21 of 42 layers attend over the last 4,096 tokens"),
    ],
)
def test_plan_takes_todays_shapes_and_says_what_its_theory_covers(model, covers):
    """As a user runs it (a child process): exit 0, the usual sections, and the coverage notes."""
    result = collector_cli("plan", "--model", model, "--gpu", "h200")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "== Decode floor ==" in out and "== What the theory covers here ==" in out and covers in out
    assert theory_sheet(SheetInputs(model, "h200"))["theory_notes"]  # the same notes in prediction.json
