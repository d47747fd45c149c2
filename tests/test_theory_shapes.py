"""The theory for today's shapes (mixture of experts, latent attention, sliding-window and mixed local/global
attention) on the bundled configs of real models, checked against the parameter counts their publishers
give, and each new formula against a count done the long way.

Published figures (total; active per token; the convention each publisher uses for "active"):

- Qwen3-30B-A3B, model card (huggingface.co/Qwen/Qwen3-30B-A3B): "Number of Parameters: 30.5B in total and
  3.3B activated; Number of Parameters (Non-Embedding): 29.9B" — non-embedding leaves out the embedding
  table and the lm_head, active counts both;
- DeepSeek-V2-Lite, model card (huggingface.co/deepseek-ai/DeepSeek-V2-Lite): "15.7B parameters, activates
  2.4B" (the embedding table left out);
- gpt-oss-20b, "gpt-oss-120b & gpt-oss-20b Model Card" (OpenAI, arXiv 2508.10925) table 1: 20.91B total,
  3.61B active (unembedding counted, embedding not);
- Mixtral-8x7B-v0.1, "Mixtral of experts" (Mistral AI, 2023-12-11; arXiv 2401.04088): "46.7B total
  parameters but only uses 12.9B parameters per token";
- DeepSeek-V3, technical report (arXiv 2412.19437): "671B total parameters with 37B activated for each
  token" (the multi-token-prediction module not counted; the embedding table left out, as for V2-Lite);
- Gemma 2 technical report (arXiv 2408.00118) table 1: non-embedding parameters 2,024,517,888 (2B) and
  8,324,201,984 (9B) — exact counts; Gemma 3 technical report (arXiv 2503.19786) table 1: 1B, 302M
  embedding and 698M non-embedding parameters.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from analysis.core import theory as th
from analysis.core.model_config import load_model_config, model_config_from_dict
from collector.protocol.theory_sheet import SheetInputs, theory_sheet
from collector.raw.errors import PlanError

# name -> (total, active, active counts the embedding table, relative tolerance = the published rounding)
PUBLISHED = {
    "Qwen3-30B-A3B": (30.5e9, 3.3e9, True, 0.02),
    "DeepSeek-V2-Lite": (15.7e9, 2.4e9, False, 0.025),
    "gpt-oss-20b": (20.91e9, 3.61e9, False, 0.002),
    "Mixtral-8x7B-v0.1": (46.7e9, 12.9e9, True, 0.005),
    "DeepSeek-V3": (671e9, 37e9, False, 0.02),
}


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_moe_totals_and_actives_match_the_published_counts(name):
    total, active, with_embedding, rel = PUBLISHED[name]
    cfg = load_model_config(name)
    assert th.params_total(cfg) == pytest.approx(total, rel=0.005)
    assert th.params_active(cfg, count_embedding=with_embedding) == pytest.approx(active, rel=rel)
    # the other convention misses: the convention is part of the check, not a tolerance
    other = th.params_active(cfg, count_embedding=not with_embedding)
    assert abs(other / active - 1) > abs(th.params_active(cfg, count_embedding=with_embedding) / active - 1)


def test_qwen3_moe_non_embedding_count_leaves_out_both_tables():
    cfg = load_model_config("Qwen3-30B-A3B")
    non_embedding = th.params_total(cfg) - th.embed_tokens_params(cfg) - th.lm_head_params(cfg)
    assert non_embedding == pytest.approx(29.9e9, rel=0.002)


@pytest.mark.parametrize(
    ("name", "non_embedding"), [("gemma-2-2b-it", 2_024_517_888), ("gemma-2-9b-it", 8_324_201_984)]
)
def test_gemma2_non_embedding_parameters_are_exact(name, non_embedding):
    cfg = load_model_config(name)  # refused on main for its sliding windows
    assert cfg.tie_word_embeddings  # Gemma configs omit the key: tied by default
    assert (
        th.params_total(cfg) - th.embed_tokens_params(cfg) == non_embedding
    )  # the 4 norms per layer counted


def test_gemma3_counts_and_its_five_local_one_global_layers():
    """Gemma 3 technical report (arXiv 2503.19786) table 1, 1B: 302M embedding, 698M non-embedding
    parameters (to the million); layers 6, 12, 18, 24 (every sixth) global, the rest a 512-token window."""
    cfg = load_model_config("gemma-3-1b-it")
    assert th.embed_tokens_params(cfg) == pytest.approx(302e6, abs=0.5e6)
    assert th.params_total(cfg) - th.embed_tokens_params(cfg) == pytest.approx(698e6, abs=0.5e6)
    assert [i for i, w in enumerate(cfg.layer_windows) if w is None] == [5, 11, 17, 23]
    per_layer = th.kv_bytes_per_layer_per_token(cfg)
    assert th.kv_bytes_per_sequence(cfg, 32768) == (22 * 512 + 4 * 32768) * per_layer


def test_expected_experts_touched_is_the_exact_occupancy_expectation():
    """E(1-(1-k/E)^B) against the mean over every routing of B tokens choosing k distinct of E experts."""
    e, k, b = 6, 2, 3
    choices = list(itertools.combinations(range(e), k))
    touched = [len(set().union(*route)) for route in itertools.product(choices, repeat=b)]
    assert th.expected_experts_touched(e, k, b) == pytest.approx(sum(touched) / len(touched), rel=1e-12)
    assert th.expected_experts_touched(128, 8, 1) == pytest.approx(8)
    assert th.expected_experts_touched(8, 2, 256) == pytest.approx(8)


def test_moe_decode_reads_the_touched_experts_only():
    cfg = load_model_config("Qwen3-30B-A3B")
    one = th.weight_bytes_read_per_decode_step(cfg, "bf16", 1)
    many = th.weight_bytes_read_per_decode_step(cfg, "bf16", 4096)
    # batch 1: everything but the 120 idle experts of every layer; a large batch reads every resident weight
    assert one == pytest.approx(
        (th.params_total(cfg) - th.params_idle_experts_per_token(cfg)) * 2 - 2 * th.embed_tokens_params(cfg)
    )
    assert many == pytest.approx(th.weight_bytes(cfg, "bf16") - 2 * th.embed_tokens_params(cfg), rel=1e-9)
    assert one < th.weight_bytes_read_per_decode_step(cfg, "bf16", 8) < many
    # FLOPs follow the k active experts, not the resident ones
    assert th.flops_per_token_matmul(cfg) < 2 * th.params_active(cfg)


def test_mla_caches_the_latent_and_the_rotary_key():
    cfg = load_model_config("DeepSeek-V2-Lite")
    # vLLM and llama.cpp cache kv_lora_rank + qk_rope_head_dim = 576 values per token per layer
    assert th.kv_bytes_per_token(cfg, "bf16") == 27 * (512 + 64) * 2
    assert th.kv_bytes_per_token_mha(cfg, "bf16") == 27 * 16 * (128 + 64 + 128) * 2
    v3 = load_model_config("DeepSeek-V3")
    assert th.kv_bytes_per_token(v3, "bf16") == 61 * 576 * 2  # q_lora_rank does not touch the cache


def test_windowed_layers_cap_the_kv_at_the_window():
    gemma = load_model_config("gemma-2-9b-it")
    assert gemma.layer_windows[:2] == (4096, None)  # local first, then global (transformers Gemma2)
    per_layer = th.kv_bytes_per_layer_per_token(gemma)
    assert th.kv_bytes_per_sequence(gemma, 4096) == 42 * 4096 * per_layer
    assert th.kv_bytes_per_sequence(gemma, 8192) == (21 * 4096 + 21 * 8192) * per_layer
    oss = load_model_config("gpt-oss-20b")  # layer_types: 12 sliding (128 tokens) + 12 full
    ctx = 131072
    assert th.kv_bytes_per_sequence(oss, ctx, "bf16") == (12 * 128 + 12 * ctx) * 2 * 8 * 64 * 2


def test_windowed_request_flops_equal_the_step_by_step_sum():
    cfg = load_model_config("gemma-2-2b-it")
    s, o = 4000, 300  # the decode crosses the 4,096-token window
    by_step = th.flops_prefill(cfg, s) + sum(th.flops_decode_per_token(cfg, s + k) for k in range(1, o))
    assert th.request_flops(cfg, s, o) == by_step
    dense = load_model_config("Qwen2.5-0.5B-Instruct")
    by_step = th.flops_prefill(dense, s) + sum(th.flops_decode_per_token(dense, s + k) for k in range(1, o))
    assert th.request_flops(dense, s, o) == by_step


def test_windowed_causal_prefill_counts_each_querys_keys():
    cfg = load_model_config("gemma-2-2b-it")
    s, w = 6000, 4096
    per_key = th.attention_flops_per_context_token_per_layer(cfg)
    # full layers: half the square; windowed layers: query i sees min(i, W) keys (diagonal left out as before)
    full = s * s / 2
    windowed = w * w / 2 + (s - w) * w
    assert th.attention_flops_prefill_causal(cfg, s) == per_key * 13 * (full + windowed)


@pytest.mark.parametrize("name", [*sorted(PUBLISHED), "gemma-2-9b-it"])
def test_a_predictions_config_rebuilds_the_same_shape(name):
    """analysis reads a run's model from prediction.json's "config" (theoryctx): the MoE, MLA and window keys
    travel there by their config.json names, so the run is reconciled against the same theory."""
    data = theory_sheet(SheetInputs(name, "h200"))
    cfg = model_config_from_dict(
        {**data["config"], "model_type": data["model_type"]}, name=name, source=Path("p")
    )
    assert th.params_total(cfg) == data["params_total"] and th.params_active(cfg) == data.get(
        "params_active", th.params_total(cfg)
    )
    assert th.kv_bytes_per_sequence(cfg, 8192) == th.kv_bytes_per_sequence(load_model_config(name), 8192)


def test_gpt_oss_mxfp4_checkpoint_bytes():
    """gpt-oss ships its routed-expert weights in MXFP4 (4.25 bits: 32 FP4 values + one 8-bit scale), the
    rest in bf16 (config quantization_config.modules_to_not_convert): 12.82 GiB, the checkpoint size the
    model card's table 1 gives (12.8 GiB); a decode step at batch 1 reads 3.45 GiB of it, not bf16's 6.7."""
    cfg = load_model_config("gpt-oss-20b")
    assert th.weight_bytes(cfg, "mxfp4") / 2**30 == pytest.approx(12.8, abs=0.05)
    one = th.weight_bytes_read_per_decode_step(cfg, "mxfp4", 1)
    assert one < th.weight_bytes_read_per_decode_step(cfg, "bf16", 1) / 1.9
    assert th.weight_bytes_read_per_decode_step(cfg, "mxfp4", 10_000) == pytest.approx(
        th.weight_bytes(cfg, "mxfp4") - th.weight_bytes_by_group(cfg, "mxfp4")["embedding"]
    )
    with pytest.raises(PlanError, match="has no experts"):
        th.weight_bytes(load_model_config("Qwen3-8B"), "mxfp4")
