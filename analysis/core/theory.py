"""Compute first: what a model on a GPU should cost, from its config.json and the GPU's datasheet.

One small function per formula; each docstring states the formula and its units. Symbols used throughout:

    h  hidden_size            I  intermediate_size       L  num_hidden_layers
    H  num_attention_heads    K  num_key_value_heads     d  head_dim
    V  vocab_size             b  bytes per element/parameter

    E  routed experts         k  experts per token       I_e  expert intermediate size
    r  kv_lora_rank (MLA)     W  a layer's attention window (None: full attention)

Layers are the decoder block transformers builds for the model type: RMSNorm -> attention -> RMSNorm ->
gated MLP (gate, up, down). Attention is grouped-query (q/k/v/o) or latent (MLA: DeepSeek-V2/V3); the MLP is
dense or a mixture of experts (a router, E experts of which k run per token, optional shared experts);
Gemma 2 adds a norm before and after the MLP; a layer may attend over a window of the last W tokens only.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from analysis.core.model_config import ModelConfig
from collector.raw.errors import PlanError

GIB = 2**30

# ---------------------------------------------------------------------------------------------------------
# Parameters, per component (counts of scalars; a bias or a norm gain is one scalar per channel)
# ---------------------------------------------------------------------------------------------------------


def embed_tokens_params(cfg: ModelConfig) -> int:
    """Token embedding table: V × h parameters."""
    return cfg.vocab_size * cfg.hidden_size


def lm_head_params(cfg: ModelConfig) -> int:
    """Output projection: V × h parameters, or 0 when tied (it *is* the embedding table, stored once)."""
    return 0 if cfg.tie_word_embeddings else cfg.vocab_size * cfg.hidden_size


def q_proj_params(cfg: ModelConfig) -> int:
    """Query projection per layer: h × (H·d) weights + H·d bias where the architecture has q/k/v bias
    (Qwen2)."""
    out = cfg.num_attention_heads * cfg.head_dim
    return cfg.hidden_size * out + (out if cfg.qkv_bias else 0)


def k_proj_params(cfg: ModelConfig) -> int:
    """Key projection per layer: h × (K·d) weights + K·d bias where the architecture has q/k/v bias."""
    out = cfg.num_key_value_heads * cfg.head_dim
    return cfg.hidden_size * out + (out if cfg.qkv_bias else 0)


def v_proj_params(cfg: ModelConfig) -> int:
    """Value projection per layer: h × (K·d) weights + K·d bias where the architecture has q/k/v bias."""
    out = cfg.num_key_value_heads * cfg.head_dim
    return cfg.hidden_size * out + (out if cfg.qkv_bias else 0)


def o_proj_params(cfg: ModelConfig) -> int:
    """Attention output projection per layer: (H·d) × h weights (+ h bias only with Llama's
    attention_bias)."""
    return cfg.num_attention_heads * cfg.head_dim * cfg.hidden_size + (cfg.hidden_size if cfg.o_bias else 0)


def gate_proj_params(cfg: ModelConfig) -> int:
    """SwiGLU gate projection per layer: h × I weights (+ I bias with mlp_bias)."""
    return cfg.hidden_size * cfg.intermediate_size + (cfg.intermediate_size if cfg.mlp_bias else 0)


def up_proj_params(cfg: ModelConfig) -> int:
    """SwiGLU up projection per layer: h × I weights (+ I bias with mlp_bias)."""
    return cfg.hidden_size * cfg.intermediate_size + (cfg.intermediate_size if cfg.mlp_bias else 0)


def down_proj_params(cfg: ModelConfig) -> int:
    """SwiGLU down projection per layer: I × h weights (+ h bias with mlp_bias)."""
    return cfg.intermediate_size * cfg.hidden_size + (cfg.hidden_size if cfg.mlp_bias else 0)


def input_layernorm_params(cfg: ModelConfig) -> int:
    """RMSNorm before attention, per layer: h gains."""
    return cfg.hidden_size


def post_attention_layernorm_params(cfg: ModelConfig) -> int:
    """RMSNorm before the MLP, per layer: h gains."""
    return cfg.hidden_size


def qk_norm_params(cfg: ModelConfig) -> int:
    """Per-head RMSNorm on q and on k (Qwen3), per layer: 2 × d gains (shared across heads); 0 elsewhere."""
    return 2 * cfg.head_dim if cfg.qk_norm else 0


def final_norm_params(cfg: ModelConfig) -> int:
    """Final RMSNorm after the last layer: h gains."""
    return cfg.hidden_size


def sandwich_norm_params(cfg: ModelConfig) -> int:
    """Each of Gemma 2's extra RMSNorms around the MLP (pre_feedforward_layernorm,
    post_feedforward_layernorm), per layer: h gains; 0 elsewhere."""
    return cfg.hidden_size if cfg.sandwich_norms else 0


def attention_sink_params(cfg: ModelConfig) -> int:
    """gpt-oss's learned attention sinks, per layer: H logits (one per head); 0 elsewhere."""
    return cfg.num_attention_heads if cfg.attention_sinks else 0


def mla_params_by_component(cfg: ModelConfig) -> dict[str, int]:
    """One latent-attention layer's parameters (DeepSeek-V2/V3, HF module names), with d_qk = d_nope + d_rope:

    q_proj h·H·d_qk, or with a query latent r_q: q_a_proj h·r_q + q_a_layernorm r_q + q_b_proj r_q·H·d_qk;
    kv_a_proj_with_mqa h·(r + d_rope) (the latent and the shared rotary key); kv_a_layernorm r;
    kv_b_proj r·H·(d_nope + d_v) (rebuilds K and V per head); o_proj H·d_v·h.
    """
    assert cfg.mla is not None
    m, h, heads = cfg.mla, cfg.hidden_size, cfg.num_attention_heads
    d_qk = m.qk_nope_head_dim + m.qk_rope_head_dim
    if m.q_lora_rank:
        parts = {
            "q_a_proj": h * m.q_lora_rank,
            "q_a_layernorm": m.q_lora_rank,
            "q_b_proj": m.q_lora_rank * heads * d_qk,
        }
    else:
        parts = {"q_proj": h * heads * d_qk}
    parts["kv_a_proj_with_mqa"] = h * (m.kv_lora_rank + m.qk_rope_head_dim)
    parts["kv_a_layernorm"] = m.kv_lora_rank
    parts["kv_b_proj"] = m.kv_lora_rank * heads * (m.qk_nope_head_dim + m.v_head_dim)
    parts["o_proj"] = heads * m.v_head_dim * h
    return parts


def attention_params_by_component(cfg: ModelConfig) -> dict[str, int]:
    """One layer's attention parameters by component: q/k/v/o projections, or MLA's
    (``mla_params_by_component``)."""
    if cfg.mla is not None:
        return mla_params_by_component(cfg)
    return {
        "q_proj": q_proj_params(cfg),
        "k_proj": k_proj_params(cfg),
        "v_proj": v_proj_params(cfg),
        "o_proj": o_proj_params(cfg),
    }


def expert_params(cfg: ModelConfig) -> int:
    """One routed expert (a gated MLP of width I_e), parameters: 3 × h × I_e, + 2·I_e + h biases where the
    experts carry them (gpt-oss's gate_up and down biases)."""
    assert cfg.moe is not None
    width, h = cfg.moe.expert_intermediate_size, cfg.hidden_size
    return 3 * h * width + ((2 * width + h) if cfg.moe.expert_bias else 0)


def router_params(cfg: ModelConfig) -> int:
    """The router (gate) of one MoE layer, parameters: E × h, + E bias (gpt-oss's router bias, DeepSeek-V3's
    e_score_correction_bias)."""
    assert cfg.moe is not None
    e = cfg.moe.num_experts
    return e * cfg.hidden_size + (e if cfg.moe.router_bias else 0)


def shared_experts_params(cfg: ModelConfig) -> int:
    """The always-run shared experts of one MoE layer (DeepSeek), parameters: 3 × h × I_s (I_s = their
    total width, n_shared_experts × I_e)."""
    assert cfg.moe is not None
    return 3 * cfg.hidden_size * cfg.moe.shared_intermediate_size


def dense_mlp_layers(cfg: ModelConfig) -> int:
    """Layers with a dense MLP (width I), layers: L − MoE layers (DeepSeek's first_k_dense_replace)."""
    return cfg.num_hidden_layers - (cfg.moe.moe_layers if cfg.moe else 0)


def layer_component_counts(cfg: ModelConfig) -> dict[str, tuple[int, int]]:
    """Each layer component (HF module names, forward order) as (parameters in one layer that has it, layers
    that have it). Dense models: every component in all L layers."""
    n_layers = cfg.num_hidden_layers
    parts: dict[str, tuple[int, int]] = {"input_layernorm": (input_layernorm_params(cfg), n_layers)}
    parts |= {k: (v, n_layers) for k, v in attention_params_by_component(cfg).items()}
    parts["post_attention_layernorm"] = (post_attention_layernorm_params(cfg), n_layers)
    if cfg.sandwich_norms:
        parts["pre_feedforward_layernorm"] = (sandwich_norm_params(cfg), n_layers)
        parts["post_feedforward_layernorm"] = (sandwich_norm_params(cfg), n_layers)
    dense = dense_mlp_layers(cfg)
    if dense:
        parts |= {
            "gate_proj": (gate_proj_params(cfg), dense),
            "up_proj": (up_proj_params(cfg), dense),
            "down_proj": (down_proj_params(cfg), dense),
        }
    if cfg.moe is not None:
        parts["router"] = (router_params(cfg), cfg.moe.moe_layers)
        parts["experts"] = (cfg.moe.num_experts * expert_params(cfg), cfg.moe.moe_layers)
        if cfg.moe.shared_intermediate_size:
            parts["shared_experts"] = (shared_experts_params(cfg), cfg.moe.moe_layers)
    if cfg.qk_norm:
        parts["qk_norm"] = (qk_norm_params(cfg), n_layers)
    if cfg.attention_sinks:
        parts["sinks"] = (attention_sink_params(cfg), n_layers)
    return parts


def params_per_layer_by_component(cfg: ModelConfig) -> dict[str, int]:
    """One decoder layer's parameters by component (HF module names), in forward order; where layers differ
    (DeepSeek's dense first layers) each component as in a layer that has it (``layer_component_counts``)."""
    return {k: per for k, (per, _) in layer_component_counts(cfg).items()}


def params_per_layer(cfg: ModelConfig) -> int:
    """Parameters in one decoder layer: the sum of its components; where layers differ, the mean
    (Σ layer parameters ÷ L, rounded)."""
    counts = layer_component_counts(cfg)
    return round(sum(per * n for per, n in counts.values()) / cfg.num_hidden_layers)


def params_by_component(cfg: ModelConfig) -> dict[str, int]:
    """Whole-model parameters by component: each layer component × the layers that have it, plus
    embeddings, final norm, lm_head."""
    whole = {"embed_tokens": embed_tokens_params(cfg)}
    for name, (per, layers) in layer_component_counts(cfg).items():
        whole[name] = per * layers
    whole["norm"] = final_norm_params(cfg)
    whole["lm_head"] = lm_head_params(cfg)
    return whole


def params_total(cfg: ModelConfig) -> int:
    """All parameters: V·h (embeddings) + Σ layer components + h (final norm) + V·h unless tied (lm_head);
    with experts, every expert counts (resident parameters)."""
    return sum(params_by_component(cfg).values())


def params_idle_experts_per_token(cfg: ModelConfig) -> int:
    """Routed-expert parameters one token does not use, parameters: (E − k) × expert params × MoE layers;
    0 for a dense model."""
    if cfg.moe is None:
        return 0
    return (cfg.moe.num_experts - cfg.moe.experts_per_token) * expert_params(cfg) * cfg.moe.moe_layers


def params_active(cfg: ModelConfig, *, count_embedding: bool = True) -> int:
    """Parameters one token uses ("active"), parameters: total − (E − k) × expert params × MoE layers, less
    the embedding table V·h when ``count_embedding`` is false (it is gathered one row per token, not
    multiplied; a tied table stays: it is the lm_head too).

    Publishers differ here: Qwen3-30B-A3B's and Mixtral's active figures include the embedding table,
    gpt-oss's (the model card says so) and DeepSeek's (V2-Lite, V3) leave it out; the lm_head is in all.
    """
    active = params_total(cfg) - params_idle_experts_per_token(cfg)
    if not count_embedding and not cfg.tie_word_embeddings:
        active -= embed_tokens_params(cfg)
    return active


def expected_experts_touched(num_experts: int, experts_per_token: int, tokens: int) -> float:
    """Expected distinct experts one MoE layer runs for a step of B tokens, experts: E × (1 − (1 − k/E)^B).

    Under uniform, independent routing a token picks a given expert with probability k/E (k distinct of E),
    so all B tokens miss it with probability (1 − k/E)^B, and linearity of expectation over the E experts
    gives the classical occupancy expectation (Feller, An Introduction to Probability Theory and Its
    Applications I, ch. II.5, occupancy problems; tests/test_theory_shapes.py checks it against every
    routing of a small case). B = 1 gives k; large B tends to E (every resident expert is read). Real
    routers are skewed, which touches fewer distinct experts than this.
    """
    e, k = num_experts, experts_per_token
    return e * (1.0 - (1.0 - k / e) ** tokens)


def shares(counts: dict[str, int]) -> dict[str, float]:
    """Each entry's fraction of the sum (0–1)."""
    total = sum(counts.values())
    return {k: (v / total if total else 0.0) for k, v in counts.items()}


# ---------------------------------------------------------------------------------------------------------
# KV cache
# ---------------------------------------------------------------------------------------------------------

# Bytes per cached element. GGUF q8_0 stores blocks of 32 values as 32 int8 + one fp16 scale = 34 bytes;
# q4_0 stores 32 4-bit values + one fp16 scale = 18 bytes (ggml-common.h block_q8_0 / block_q4_0).
KV_BYTES_PER_ELEMENT: dict[str, float] = {
    "fp32": 4.0,
    "bf16": 2.0,
    "fp16": 2.0,
    "fp8": 1.0,
    "q8_0": 34 / 32,
    "q4_0": 18 / 32,
}
_KV_ALIASES = {
    "auto": "bf16",  # vLLM: auto = the model dtype; every bundled model is bf16
    "bfloat16": "bf16",
    "float16": "fp16",
    "half": "fp16",
    "f16": "fp16",
    "f32": "fp32",
    "float32": "fp32",
    "fp8_e4m3": "fp8",
    "fp8_e5m2": "fp8",
}


def kv_bytes_per_element(kv_dtype: str) -> float:
    """Bytes per cached K or V element for a KV dtype: bf16/fp16 2, fp8 1, q8_0 34/32, q4_0 18/32, fp32 4."""
    key = kv_dtype.strip().lower()
    key = _KV_ALIASES.get(key, key)
    if key not in KV_BYTES_PER_ELEMENT:
        raise PlanError(f"unknown KV dtype {kv_dtype!r}; known: {', '.join(KV_BYTES_PER_ELEMENT)}")
    return KV_BYTES_PER_ELEMENT[key]


def kv_bytes_per_token(cfg: ModelConfig, kv_dtype: str = "bf16") -> float:
    """KV cache per token, bytes: L × KV bytes per layer per token (``kv_bytes_per_layer_per_token``):
    2 (K and V) × L × K × d × b, or L × (r + d_rope) × b with latent attention. With windowed layers this
    is the cost of a token while the context is within every window (``kv_bytes_per_sequence`` caps it)."""
    return cfg.num_hidden_layers * kv_bytes_per_layer_per_token(cfg, kv_dtype)


def attended_tokens_sum(cfg: ModelConfig, context_tokens: int) -> int:
    """Cached tokens the layers attend over at context T, summed over layers, tokens: Σ_l min(T, W_l)
    (W_l = ∞ for full attention): L × T without windows."""
    if not cfg.layer_windows:
        return cfg.num_hidden_layers * context_tokens
    return sum(context_tokens if w is None else min(context_tokens, w) for w in cfg.layer_windows)


def kv_bytes_per_sequence(cfg: ModelConfig, context_tokens: int, kv_dtype: str = "bf16") -> float:
    """KV bytes one sequence of T tokens holds (and a decode step reads), bytes: Σ_l min(T, W_l) × KV bytes
    per layer per token — a sliding-window layer keeps only its last W tokens (Gemma 2 and gpt-oss
    alternate windowed and full layers). T × KV bytes/token without windows."""
    return attended_tokens_sum(cfg, context_tokens) * kv_bytes_per_layer_per_token(cfg, kv_dtype)


def kv_bytes_per_token_mha(cfg: ModelConfig, kv_dtype: str = "bf16") -> float:
    """KV cache per token had every query head its own K/V (full multi-head), bytes: 2 × L × H × d × b, or
    L × H × (d_qk + d_v) × b for latent attention (the K and V heads MLA rebuilds from its latent)."""
    b = kv_bytes_per_element(kv_dtype)
    if cfg.mla is not None:
        m = cfg.mla
        per_head = m.qk_nope_head_dim + m.qk_rope_head_dim + m.v_head_dim
        return cfg.num_hidden_layers * cfg.num_attention_heads * per_head * b
    return 2 * cfg.num_hidden_layers * cfg.num_attention_heads * cfg.head_dim * b


def gqa_factor(cfg: ModelConfig) -> float:
    """KV saving of grouped-query (or latent) attention, dimensionless: MHA KV bytes ÷ this model's KV
    bytes; H / K for grouped-query attention."""
    if cfg.mla is not None:
        return kv_bytes_per_token_mha(cfg) / kv_bytes_per_token(cfg)
    return cfg.num_attention_heads / cfg.num_key_value_heads


# ---------------------------------------------------------------------------------------------------------
# FLOPs (one multiply-add = 2 FLOPs)
# ---------------------------------------------------------------------------------------------------------


def attention_matmul_params_per_layer(cfg: ModelConfig) -> int:
    """Attention weights a token multiplies in one layer: h·H·d + 2·h·K·d + H·d·h (q, k, v, o), or MLA's
    projections (``mla_params_by_component`` without its norms)."""
    if cfg.mla is not None:
        return sum(v for k, v in mla_params_by_component(cfg).items() if not k.endswith("layernorm"))
    return cfg.hidden_size * cfg.head_dim * (2 * cfg.num_attention_heads + 2 * cfg.num_key_value_heads)


def matmul_params_per_token(cfg: ModelConfig) -> int:
    """Weights one token multiplies through all layers, parameters: L × attention matmuls + dense layers ×
    3·h·I + MoE layers × (E·h router + k × 3·h·I_e + 3·h·I_s shared).

    Biases and norm gains are element-wise (≈ h FLOPs each), not matmuls, and are left out.
    """
    total = cfg.num_hidden_layers * attention_matmul_params_per_layer(cfg)
    total += dense_mlp_layers(cfg) * 3 * cfg.hidden_size * cfg.intermediate_size
    if cfg.moe is not None:
        h, m = cfg.hidden_size, cfg.moe
        per_layer = m.num_experts * h + 3 * h * (m.experts_per_token * m.expert_intermediate_size)
        total += m.moe_layers * (per_layer + 3 * h * m.shared_intermediate_size)
    return total


def matmul_params_per_layer(cfg: ModelConfig) -> int:
    """Weights that take part in a matmul, per layer: h·H·d + 2·h·K·d + H·d·h + 3·h·I for a dense layer;
    where layers differ, the mean (``matmul_params_per_token`` ÷ L, rounded)."""
    return round(matmul_params_per_token(cfg) / cfg.num_hidden_layers)


def flops_per_token_matmul(cfg: ModelConfig) -> int:
    """Weight FLOPs per token through the layers, FLOPs: 2 × matmul_params_per_token (only the k routed
    experts a token runs).

    The embedding lookup is a gather (no FLOPs); the lm_head is counted separately
    (``flops_per_token_lm_head``) because only positions whose logits are needed pay it.
    """
    return 2 * matmul_params_per_token(cfg)


def flops_per_token_lm_head(cfg: ModelConfig) -> int:
    """Logits for one position, FLOPs: 2 × V × h (tied or not: the matmul runs either way).

    Paid once per decode step per sequence, and once per prompt in prefill (last position only; vLLM and
    llama.cpp compute logits only where a token is sampled).
    """
    return 2 * cfg.vocab_size * cfg.hidden_size


def attention_flops_per_context_token_per_layer(cfg: ModelConfig) -> int:
    """Attention-kernel FLOPs one query spends on one cached token in one layer, FLOPs: 2·H·(d_qk + d_v)
    (QKᵀ and PV per head): 4·H·d for grouped-query attention; MLA's un-absorbed heads have d_qk = d_nope +
    d_rope, d_v = v_head_dim."""
    if cfg.mla is not None:
        m = cfg.mla
        return 2 * cfg.num_attention_heads * (m.qk_nope_head_dim + m.qk_rope_head_dim + m.v_head_dim)
    return 4 * cfg.num_attention_heads * cfg.head_dim


def attention_flops_prefill(cfg: ModelConfig, prompt_tokens: int) -> int:
    """Attention-kernel FLOPs to prefill S tokens: 2·H·(d_qk + d_v) × S × Σ_l min(S, W_l) = 4 × S² × L × H ×
    d without windows (QKᵀ 2·S²·d + PV 2·S²·d per head); a windowed layer's queries see at most W keys.

    Full S×S square, no causal halving: that is what vLLM's MFU counters (``vllm/v1/metrics/perf.py``,
    attn_qk + attn_av = 4·H·d·L·Σ tokens×context) count, so theory and the server's own counter agree.
    The causal mask makes half of it useful work: halve it for "useful" FLOPs.
    """
    s = prompt_tokens
    return attention_flops_per_context_token_per_layer(cfg) * s * attended_tokens_sum(cfg, s)


def attention_flops_decode_per_token(cfg: ModelConfig, context_tokens: int) -> int:
    """Attention-kernel FLOPs for one new token at context T: 2·H·(d_qk + d_v) × Σ_l min(T, W_l) = 4 × T × L
    × H × d without windows (scores + weighted sum)."""
    return attention_flops_per_context_token_per_layer(cfg) * attended_tokens_sum(cfg, context_tokens)


def flops_prefill(cfg: ModelConfig, prompt_tokens: int) -> int:
    """Prefill FLOPs for one prompt of S tokens: S × 2·matmul + 2·V·h (last position) + attention(S)."""
    return (
        prompt_tokens * flops_per_token_matmul(cfg)
        + flops_per_token_lm_head(cfg)
        + attention_flops_prefill(cfg, prompt_tokens)
    )


def flops_decode_per_token(cfg: ModelConfig, context_tokens: int) -> int:
    """FLOPs for one decoded token at context T: 2·matmul + 2·V·h + attention(T)."""
    return (
        flops_per_token_matmul(cfg)
        + flops_per_token_lm_head(cfg)
        + attention_flops_decode_per_token(cfg, context_tokens)
    )


def capped_context_sum(prompt_tokens: int, steps: int, window: int | None) -> int:
    """Σ_{k=1}^{n} min(S + k, W), tokens: the keys one layer attends over in n decode steps after a prompt
    of S; n·S + n(n+1)/2 without a window (W = None)."""
    s, n = prompt_tokens, steps
    if window is None or s + n <= window:
        return n * s + n * (n + 1) // 2
    m = max(0, min(n, window - s))  # steps still inside the window
    return m * s + m * (m + 1) // 2 + (n - m) * window


def request_flops(cfg: ModelConfig, input_tokens: int, output_tokens: int) -> int:
    """FLOPs of one request of S prompt tokens and O output tokens, FLOPs:
    prefill(S) + Σ_{k=1}^{O−1} decode(S + k).

    The prefill emits the first token; each later token is one decode step at context S + k (the k-th
    generated token's own position is not yet cached). This is what vLLM's MFU counter
    (``estimated_flops_per_gpu_total``) counts: it agrees to 0.01 % on the reference campaign at
    concurrency 1. The decode sum is closed-form: (O−1)·(2·matmul + 2·V·h) + 2·H·(d_qk + d_v) × Σ_l
    ``capped_context_sum``(S, O−1, W_l).
    """
    s, o = input_tokens, output_tokens
    total = flops_prefill(cfg, s)
    if o > 1:
        n = o - 1
        per_step_fixed = flops_per_token_matmul(cfg) + flops_per_token_lm_head(cfg)
        windows = cfg.layer_windows or (None,) * cfg.num_hidden_layers
        context_sum = sum(capped_context_sum(s, n, w) for w in windows)
        total += n * per_step_fixed + attention_flops_per_context_token_per_layer(cfg) * context_sum
    return total


def attention_overtakes_weights_at_tokens(cfg: ModelConfig) -> int:
    """Smallest decode context T where attention FLOPs ≥ weight FLOPs per token, tokens:
    ceil((2·L·matmul + 2·V·h) / (4·L·H·d)). The lm_head is included because every decode step pays it.
    """
    weights = flops_per_token_matmul(cfg) + flops_per_token_lm_head(cfg)
    return math.ceil(weights / attention_flops_decode_per_token(cfg, 1))


def attention_overtakes_weights_prefill_at_tokens(cfg: ModelConfig) -> int:
    """Smallest prompt length S where prefill attention FLOPs ≥ layer weight FLOPs, tokens:
    4·S²·L·H·d ≥ S·2·L·matmul  ⇔  S ≥ 2·matmul_per_layer / (4·H·d). No causal halving: the length at which
    the engine's full-square counter says so; the useful work crosses at twice this
    (``attention_overtakes_weights_prefill_causal_at_tokens``).
    """
    return math.ceil(flops_per_token_matmul(cfg) / attention_flops_decode_per_token(cfg, 1))


def flops_per_token_by_matrix(cfg: ModelConfig) -> dict[str, int]:
    """Weight FLOPs per token in one layer, by matrix, FLOPs (2 per multiply-add):
    q_proj 2·h·H·d, k_proj 2·h·K·d, v_proj 2·h·K·d, o_proj 2·H·d·h, gate_proj 2·h·I, up_proj 2·h·I,
    down_proj 2·I·h. Their sum × L is ``flops_per_token_matmul``."""
    h, inter = cfg.hidden_size, cfg.intermediate_size
    q_out, kv_out = cfg.num_attention_heads * cfg.head_dim, cfg.num_key_value_heads * cfg.head_dim
    return {
        "q_proj": 2 * h * q_out,
        "k_proj": 2 * h * kv_out,
        "v_proj": 2 * h * kv_out,
        "o_proj": 2 * q_out * h,
        "gate_proj": 2 * h * inter,
        "up_proj": 2 * h * inter,
        "down_proj": 2 * inter * h,
    }


# Element-wise operations per element, counted as one FLOP per arithmetic operation (an exp, a rsqrt or a
# division counts one too): RMSNorm x²·Σ, ·rsqrt, ·gain = 4 per channel; RoPE x·cos + rot(x)·sin = 3 per
# rotated element; SiLU x·σ(x) with σ = 1/(1+e^−x) = 4 and the gate product 1 = 5 per MLP channel; a residual
# add 1 per channel; a bias add 1 per output. Softmax (≈ 5 per score: scale, max, subtract, exp, normalise)
# grows
# with the context and belongs to the attention kernel; it is counted separately.
ELEMENTWISE_OPS = {"rmsnorm": 4, "rope": 3, "swiglu": 5, "residual": 1, "bias": 1, "softmax": 5}


def elementwise_flops_per_layer_by_op(cfg: ModelConfig) -> dict[str, int]:
    """Non-matmul FLOPs per token in one layer, by operation, FLOPs (see ELEMENTWISE_OPS):
    rmsnorm 2 × 4·h, rope 3·(H + K)·d, swiglu 5·I, residual 2·h, bias (H + 2K)·d where the q/k/v projections
    carry a bias (+ h with an o bias, + 2I + h with MLP biases), and Qwen3's per-head q/k norms 4·(H +
    K)·d."""
    h, d, inter = cfg.hidden_size, cfg.head_dim, cfg.intermediate_size
    big_h, k = cfg.num_attention_heads, cfg.num_key_value_heads
    ops = ELEMENTWISE_OPS
    bias = (big_h + 2 * k) * d if cfg.qkv_bias else 0
    bias += h if cfg.o_bias else 0
    bias += (2 * inter + h) if cfg.mlp_bias else 0
    out = {
        "rmsnorm": 2 * ops["rmsnorm"] * h,
        "rope": ops["rope"] * (big_h + k) * d,
        "swiglu": ops["swiglu"] * inter,
        "residual": 2 * ops["residual"] * h,
        "bias": ops["bias"] * bias,
    }
    if cfg.qk_norm:
        out["qk_norm"] = ops["rmsnorm"] * (big_h + k) * d
    return out


def elementwise_flops_per_token(cfg: ModelConfig) -> int:
    """Non-matmul FLOPs per token through the model (softmax excluded), FLOPs:
    L × Σ elementwise_flops_per_layer_by_op + 4·h (the final RMSNorm)."""
    per_layer = sum(elementwise_flops_per_layer_by_op(cfg).values())
    return cfg.num_hidden_layers * per_layer + ELEMENTWISE_OPS["rmsnorm"] * cfg.hidden_size


def softmax_flops_decode_per_token(cfg: ModelConfig, context_tokens: int) -> int:
    """Softmax FLOPs for one new token at context T, FLOPs: 5 × T × H × L (one score per head and key)."""
    return ELEMENTWISE_OPS["softmax"] * context_tokens * cfg.num_attention_heads * cfg.num_hidden_layers


def causal_pairs_doubled(prompt_tokens: int, window: int | None) -> int:
    """Twice the query-key pairs one layer scores under the causal mask, pairs: S² without a window (S(S+1)/2
    pairs, the diagonal's S left out), W² + 2·(S − W)·W when a window W < S caps each query's keys."""
    s = prompt_tokens
    if window is None or s <= window:
        return s * s
    return window * window + 2 * (s - window) * window


def attention_flops_prefill_causal(cfg: ModelConfig, prompt_tokens: int) -> int:
    """Useful attention-kernel FLOPs to prefill S tokens under the causal mask, FLOPs: H·(d_qk + d_v) × Σ_l
    ``causal_pairs_doubled``(S, W_l) = 2 × S² × L × H × d without windows.

    Query i sees only keys 1..i, so QKᵀ and PV cover half the S×S square: half of
    ``attention_flops_prefill``, which counts the full square the way vLLM's MFU counter does.
    """
    windows = cfg.layer_windows or (None,) * cfg.num_hidden_layers
    pairs_doubled = sum(causal_pairs_doubled(prompt_tokens, w) for w in windows)
    return attention_flops_per_context_token_per_layer(cfg) // 2 * pairs_doubled


def flops_prefill_causal(cfg: ModelConfig, prompt_tokens: int) -> int:
    """Useful prefill FLOPs for one prompt of S tokens, FLOPs: S × 2·L·matmul + 2·V·h + 2·S²·L·H·d."""
    return (
        prompt_tokens * flops_per_token_matmul(cfg)
        + flops_per_token_lm_head(cfg)
        + attention_flops_prefill_causal(cfg, prompt_tokens)
    )


def attention_overtakes_weights_prefill_causal_at_tokens(cfg: ModelConfig) -> int:
    """Smallest prompt length S where the causal prefill's attention FLOPs ≥ its layer weight FLOPs, tokens:
    2·S²·L·H·d ≥ S·2·L·matmul  ⇔  S ≥ matmul_per_layer ÷ (H·d) — twice the full-square length
    (``attention_overtakes_weights_prefill_at_tokens``), because the mask halves the attention work.
    """
    return math.ceil(2 * flops_per_token_matmul(cfg) / attention_flops_decode_per_token(cfg, 1))


def kv_saved_flops_per_token(cfg: ModelConfig, context_tokens: int) -> int:
    """FLOPs the KV cache saves on one decoded token at context T, FLOPs: without a cache the step re-runs the
    whole prefix (causal prefill of T + 1 tokens) instead of one decode step at context T:
    flops_prefill_causal(T + 1) − flops_decode_per_token(T)."""
    return flops_prefill_causal(cfg, context_tokens + 1) - flops_decode_per_token(cfg, context_tokens)


def kv_projection_weight_bytes(cfg: ModelConfig, bytes_per_param: float = 2.0) -> float:
    """The fixed W_k and W_v weights of every layer, bytes: L × (k_proj + v_proj parameters) × b (bf16: 2)."""
    return cfg.num_hidden_layers * (k_proj_params(cfg) + v_proj_params(cfg)) * bytes_per_param


def kv_outweighs_projections_tokens(cfg: ModelConfig, kv_dtype: str = "bf16") -> int:
    """Cached tokens whose K/V outweigh the W_k/W_v weights that produce them, tokens:
    ceil(L·(k_proj + v_proj)·b ÷ KV bytes per token) — h (+1 with a K/V bias): each token's K/V row is
    (K·d) wide, the weight that makes it is h × (K·d)."""
    return math.ceil(
        kv_projection_weight_bytes(cfg, kv_bytes_per_element(kv_dtype)) / kv_bytes_per_token(cfg, kv_dtype)
    )


def kv_bytes_per_layer_per_token(cfg: ModelConfig, kv_dtype: str = "bf16") -> float:
    """K and V of one token in one layer, bytes: 2 × K × d × b; with latent attention (MLA) the one cached
    latent, (r + d_rope) × b (kv_lora_rank + qk_rope_head_dim, as vLLM and llama.cpp cache it)."""
    if cfg.mla is not None:
        return (cfg.mla.kv_lora_rank + cfg.mla.qk_rope_head_dim) * kv_bytes_per_element(kv_dtype)
    return 2 * cfg.num_key_value_heads * cfg.head_dim * kv_bytes_per_element(kv_dtype)


def hidden_state_bytes_per_token(cfg: ModelConfig, dtype: str = "bf16") -> float:
    """The hidden state of one token at one layer's input, bytes: h × b (what a cache of activations would
    hold)."""
    return cfg.hidden_size * kv_bytes_per_element(dtype)


def kv_read_share_of_weights_pct(
    cfg: ModelConfig, context_tokens: int, weight_format: str = "bf16", kv_dtype: str = "bf16"
) -> float:
    """KV bytes one sequence's decode step reads at context T, as a share of the weight bytes the step reads,
    %: T × KV bytes/token ÷ weight_bytes_read_per_decode_step × 100."""
    kv = kv_bytes_read_per_step(kv_bytes_per_token(cfg, kv_dtype), 1, context_tokens)
    return kv / weight_bytes_read_per_decode_step(cfg, weight_format) * 100.0


# ---------------------------------------------------------------------------------------------------------
# Weight bytes
# ---------------------------------------------------------------------------------------------------------

# Checkpoint formats that store every parameter at one width (safetensors as vLLM loads it).
UNIFORM_BYTES_PER_PARAM: dict[str, float] = {"fp32": 4.0, "bf16": 2.0, "fp16": 2.0}
_WEIGHT_ALIASES = {
    "bfloat16": "bf16",
    "float16": "fp16",
    "f16": "fp16",
    "half": "fp16",
    "f32": "fp32",
    "float32": "fp32",
}

# ggml block layouts (ggml-common.h): type -> (values per block, bytes per block).
GGML_BLOCKS: dict[str, tuple[int, int]] = {
    "F32": (1, 4),
    "F16": (1, 2),
    "BF16": (1, 2),
    "Q8_0": (32, 34),  # 32 int8 + fp16 scale            = 8.5 bpw
    "Q4_0": (32, 18),  # 32 × 4 bit + fp16 scale         = 4.5 bpw
    "Q5_0": (32, 22),  # 32 × 5 bit + fp16 scale         = 5.5 bpw
    "Q5_1": (32, 24),  # + fp16 min                      = 6.0 bpw
    "Q4_K": (256, 144),  # 4 bit + 6-bit scales/mins + d, dmin = 4.5 bpw
    "Q5_K": (256, 176),  # = 5.5 bpw
    "Q6_K": (256, 210),  # = 6.5625 bpw
}

# llama-quantize file types -> the default ggml type of their 2-D tensors.
GGUF_FTYPES: dict[str, str] = {
    "q4_k_m": "Q4_K",
    "q5_k_m": "Q5_K",
    "q6_k": "Q6_K",
    "q8_0": "Q8_0",
    "q4_0": "Q4_0",
}

# Typical whole-file averages, bits per weight, for when only a bpw figure is at hand. Q8_0 and F16 follow
# from the
# block layouts above; Q4_K_M is a mix (Q4_K, with Q6_K for half of attn_v/ffn_down and for output) whose
# average depends on the shapes: ≈4.85 is the usual rule of thumb, 4.91 for Qwen2.5-7B (4.36 GiB,
# llama-quantize).
GGUF_TYPICAL_BPW: dict[str, float] = {"f16": 16.0, "q8_0": 8.5, "q6_k": 6.5625, "q4_k_m": 4.85, "q4_0": 4.5}


def weight_bytes_uniform(params: int, bytes_per_param: float) -> float:
    """Weights stored at one width, bytes: params × bytes/param (bf16/fp16 = 2)."""
    return params * bytes_per_param


def weight_bytes_from_bpw(params: int, bits_per_weight: float) -> float:
    """Weights at an average bit width, bytes: params × bpw / 8."""
    return params * bits_per_weight / 8


def bits_per_weight_from_file_bytes(file_bytes: int, params: int) -> float:
    """Average bit width of a real weight file, bits/param: file bytes × 8 / params (metadata included, a few
    MB)."""
    return file_bytes * 8 / params


def ggml_type_bytes(ggml_type: str, elements: int) -> int:
    """Bytes of a tensor of n elements in a ggml type: n / values_per_block × bytes_per_block."""
    per_block, block_bytes = GGML_BLOCKS[ggml_type]
    if elements % per_block:
        raise ValueError(f"{elements} elements do not fill {ggml_type} blocks of {per_block}")
    return elements // per_block * block_bytes


@dataclass(frozen=True)
class GgufTensor:
    """One tensor as llama.cpp names it; ne0 is the row length (the input dimension of a matmul weight)."""

    name: str
    group: str  # "embedding", "lm_head", "layers", "final_norm"
    ne0: int
    ne1: int  # 1 for vectors
    layer: int | None

    @property
    def elements(self) -> int:
        return self.ne0 * self.ne1


def gguf_recipe_covers(cfg: ModelConfig) -> bool:
    """Whether ``gguf_tensors`` lays out this model: dense layers with grouped-query attention (not experts,
    not latent attention, whose tensors and quantization rules differ)."""
    return cfg.moe is None and cfg.mla is None


def gguf_tensors(cfg: ModelConfig) -> list[GgufTensor]:
    """The tensors of a llama-architecture GGUF (qwen2/llama/qwen3 share the layout), in file order."""
    h, inner_q, inner_kv = (
        cfg.hidden_size,
        cfg.num_attention_heads * cfg.head_dim,
        cfg.num_key_value_heads * cfg.head_dim,
    )
    out = [GgufTensor("token_embd.weight", "embedding", h, cfg.vocab_size, None)]
    for i in range(cfg.num_hidden_layers):
        p = f"blk.{i}."
        layer = [
            GgufTensor(p + "attn_norm.weight", "layers", h, 1, i),
            GgufTensor(p + "attn_q.weight", "layers", h, inner_q, i),
            GgufTensor(p + "attn_k.weight", "layers", h, inner_kv, i),
            GgufTensor(p + "attn_v.weight", "layers", h, inner_kv, i),
            GgufTensor(p + "attn_output.weight", "layers", inner_q, h, i),
            GgufTensor(p + "ffn_norm.weight", "layers", h, 1, i),
            GgufTensor(p + "ffn_gate.weight", "layers", h, cfg.intermediate_size, i),
            GgufTensor(p + "ffn_up.weight", "layers", h, cfg.intermediate_size, i),
            GgufTensor(p + "ffn_down.weight", "layers", cfg.intermediate_size, h, i),
        ]
        if cfg.qkv_bias:
            layer += [
                GgufTensor(p + "attn_q.bias", "layers", inner_q, 1, i),
                GgufTensor(p + "attn_k.bias", "layers", inner_kv, 1, i),
                GgufTensor(p + "attn_v.bias", "layers", inner_kv, 1, i),
            ]
        if cfg.o_bias:
            layer.append(GgufTensor(p + "attn_output.bias", "layers", h, 1, i))
        if cfg.mlp_bias:
            layer += [
                GgufTensor(p + "ffn_gate.bias", "layers", cfg.intermediate_size, 1, i),
                GgufTensor(p + "ffn_up.bias", "layers", cfg.intermediate_size, 1, i),
                GgufTensor(p + "ffn_down.bias", "layers", h, 1, i),
            ]
        if cfg.qk_norm:
            layer += [
                GgufTensor(p + "attn_q_norm.weight", "layers", cfg.head_dim, 1, i),
                GgufTensor(p + "attn_k_norm.weight", "layers", cfg.head_dim, 1, i),
            ]
        if cfg.sandwich_norms:  # llama.cpp's Gemma 2 names
            layer += [
                GgufTensor(p + "post_attention_norm.weight", "layers", h, 1, i),
                GgufTensor(p + "post_ffw_norm.weight", "layers", h, 1, i),
            ]
        out += layer
    out.append(GgufTensor("output_norm.weight", "final_norm", h, 1, None))
    if not cfg.tie_word_embeddings:
        out.append(GgufTensor("output.weight", "lm_head", h, cfg.vocab_size, None))
    return out


def _use_more_bits(i_layer: int, n_layer: int) -> bool:
    # llama.cpp (src/llama-quant.cpp): the first and last eighth of the layers, and every third one between.
    return i_layer < n_layer // 8 or i_layer >= 7 * n_layer // 8 or (i_layer - n_layer // 8) % 3 == 2


def _fallback_type(ggml_type: str, ne0: int) -> str:
    # llama.cpp: a row length that does not fill the type's blocks falls back to a 32-wide type, then to F16.
    if ne0 % GGML_BLOCKS[ggml_type][0] == 0:
        return ggml_type
    fallback = {"Q4_K": "Q5_0", "Q5_K": "Q5_1", "Q6_K": "Q8_0"}.get(ggml_type, "F16")
    return fallback if ne0 % GGML_BLOCKS[fallback][0] == 0 else "F16"


def gguf_tensor_type(cfg: ModelConfig, tensor: GgufTensor, ftype: str) -> str:
    """The ggml type llama-quantize gives a tensor for a file type (q4_k_m, q8_0, ...), following
    ``llama_tensor_get_type`` in llama.cpp's src/llama-quant.cpp for dense models:

    - vectors (norms, biases) stay F32;
    - ``output.weight`` (or ``token_embd.weight`` when tied, as it doubles as the output) -> Q6_K, or Q8_0 for
      the Q8_0 file type or when the row length does not fill the default type's blocks;
    - Q4_K_M / Q5_K_M: ``attn_v`` and ``ffn_down`` -> Q6_K in the layers where ``use_more_bits`` holds
      (first and last eighth, every third between);
    - everything else -> the file type's default; rows that do not fill 256-wide K blocks fall back
      (Q4_K -> Q5_0, Q5_K -> Q5_1, Q6_K -> Q8_0).
    """
    if tensor.ne1 == 1:
        return "F32"
    default = GGUF_FTYPES[ftype]
    is_output = tensor.group == "lm_head" or (tensor.group == "embedding" and cfg.tie_word_embeddings)
    if is_output:
        if tensor.ne0 % GGML_BLOCKS[default][0] != 0:
            return "Q8_0"
        return default if default == "Q8_0" else "Q6_K"
    new = default
    if ftype in ("q4_k_m", "q5_k_m") and tensor.layer is not None:
        if tensor.name.endswith(("attn_v.weight", "ffn_down.weight")) and _use_more_bits(
            tensor.layer, cfg.num_hidden_layers
        ):
            new = "Q6_K"
    return _fallback_type(new, tensor.ne0)


def gguf_weight_bytes_by_group(cfg: ModelConfig, ftype: str) -> dict[str, int]:
    """Tensor-data bytes of a GGUF file by group (embedding, layers, final_norm, lm_head), bytes:
    Σ over tensors of elements / values_per_block × bytes_per_block. Header, vocabulary and 32-byte
    alignment padding (a few MB) are not included.
    """
    groups = {"embedding": 0, "layers": 0, "final_norm": 0, "lm_head": 0}
    for t in gguf_tensors(cfg):
        groups[t.group] += ggml_type_bytes(gguf_tensor_type(cfg, t, ftype), t.elements)
    return groups


def normalise_weight_format(weight_format: str) -> str:
    """Canonical weight-format name: bf16, fp16, fp32, a GGUF file type (q4_k_m, ...), or '<x>bpw'."""
    key = weight_format.strip().lower().replace("-", "_")
    key = _WEIGHT_ALIASES.get(key, key)
    if key in UNIFORM_BYTES_PER_PARAM or key in GGUF_FTYPES or key == MXFP4:
        return key
    m = re.fullmatch(r"(\d+(?:\.\d+)?)\s*bpw", key)
    if m and float(m.group(1)) > 0:
        return f"{float(m.group(1)):g}bpw"
    known = ", ".join([*UNIFORM_BYTES_PER_PARAM, *GGUF_FTYPES, MXFP4, "<x>bpw"])
    raise PlanError(f"unknown weight format {weight_format!r}; known: {known}")


# gpt-oss's checkpoint layout (its config's quantization_config: everything but attention, router, embedding
# and lm_head converted): routed-expert matmul weights in MXFP4, the rest bf16. OCP Microscaling Formats (MX)
# v1.0: MXFP4 blocks hold 32 FP4 (E2M1) values and one shared 8-bit (E8M0) scale, (32·4 + 8) / 32 bits each.
MXFP4 = "mxfp4"
MXFP4_BITS_PER_WEIGHT = (32 * 4 + 8) / 32


def routed_expert_matmul_params(cfg: ModelConfig) -> int:
    """The routed experts' matmul weights (biases left out), parameters: E × 3·h·I_e × MoE layers."""
    if cfg.moe is None:
        return 0
    m = cfg.moe
    return m.num_experts * 3 * cfg.hidden_size * m.expert_intermediate_size * m.moe_layers


def mxfp4_weight_bytes_by_group(cfg: ModelConfig) -> dict[str, float]:
    """Weight bytes by group for gpt-oss's MXFP4 checkpoint, bytes: every group at bf16 (2 B/param), except
    the routed experts' matmul weights in the layers at 4.25 bits: layers = 2 × (layer params − W_e) +
    W_e × 4.25 / 8 with W_e = ``routed_expert_matmul_params``."""
    if cfg.moe is None:
        raise PlanError(f"weight format {MXFP4}: MXFP4 expert weights, but {cfg.name} has no experts")
    groups = weight_bytes_by_group(cfg, "bf16")
    experts = routed_expert_matmul_params(cfg)
    groups["layers"] += weight_bytes_from_bpw(experts, MXFP4_BITS_PER_WEIGHT) - weight_bytes_uniform(
        experts, 2.0
    )
    return groups


def weight_bytes_by_group(cfg: ModelConfig, weight_format: str) -> dict[str, float]:
    """Weight bytes by group (embedding, layers, final_norm, lm_head) for a weight format, bytes.

    bf16/fp16/fp32: params × 2/2/4. GGUF file types: the per-tensor recipe (``gguf_tensor_type``).
    '<x>bpw': params × x / 8 for every group (an average, e.g. from a file size). A GGUF file type on a
    layout the per-tensor recipe does not cover (experts, latent attention) takes the type's typical
    average (``GGUF_TYPICAL_BPW``). 'mxfp4': gpt-oss's checkpoint (``mxfp4_weight_bytes_by_group``).
    """
    fmt = normalise_weight_format(weight_format)
    by = params_by_component(cfg)
    layer_params = sum(v for k, v in by.items() if k not in ("embed_tokens", "norm", "lm_head"))
    counts = {
        "embedding": by["embed_tokens"],
        "layers": layer_params,
        "final_norm": by["norm"],
        "lm_head": by["lm_head"],
    }
    if fmt in UNIFORM_BYTES_PER_PARAM:
        return {k: weight_bytes_uniform(v, UNIFORM_BYTES_PER_PARAM[fmt]) for k, v in counts.items()}
    if fmt == MXFP4:
        return mxfp4_weight_bytes_by_group(cfg)
    if fmt in GGUF_FTYPES and gguf_recipe_covers(cfg):
        return {k: float(v) for k, v in gguf_weight_bytes_by_group(cfg, fmt).items()}
    bpw = average_bits_per_param(cfg, fmt)
    return {k: weight_bytes_from_bpw(v, bpw) for k, v in counts.items()}


def average_bits_per_param(cfg: ModelConfig, weight_format: str) -> float:
    """Bits per parameter where one width stands for all, bits: 16/16/32 for bf16/fp16/fp32, x for '<x>bpw',
    and for a GGUF file type on a layout the per-tensor recipe does not cover (experts, latent attention)
    the type's typical average (``GGUF_TYPICAL_BPW``)."""
    fmt = normalise_weight_format(weight_format)
    if fmt in UNIFORM_BYTES_PER_PARAM:
        return 8 * UNIFORM_BYTES_PER_PARAM[fmt]
    if fmt in GGUF_FTYPES:
        if fmt not in GGUF_TYPICAL_BPW:
            raise PlanError(
                f"weight format {fmt}: no per-tensor recipe for {cfg.name}'s experts or latent attention "
                "and no typical average; pass the file's bits per weight as '<x>bpw'"
            )
        return GGUF_TYPICAL_BPW[fmt]
    if fmt == MXFP4:
        raise PlanError(f"weight format {MXFP4} mixes widths: no single bits per parameter")
    return float(fmt.removesuffix("bpw"))


def weight_bytes(cfg: ModelConfig, weight_format: str = "bf16") -> float:
    """All weights as stored, bytes: Σ weight_bytes_by_group."""
    return sum(weight_bytes_by_group(cfg, weight_format).values())


def weight_bytes_read_per_decode_step(cfg: ModelConfig, weight_format: str = "bf16", batch: int = 1) -> float:
    """Weight bytes one decode step of B sequences streams from memory, bytes: every layer weight — less,
    for a mixture of experts, the routed experts no sequence of the step touches: (1 − touched/E) × their
    bytes (``expected_experts_touched``) — + final norm + lm_head.

    The embedding table is not read whole (a step gathers one row per sequence), so it is left out —
    unless tied: then the same matrix is read whole once, as the lm_head.
    """
    groups = weight_bytes_by_group(cfg, weight_format)
    read = groups["layers"] + groups["final_norm"] + groups["lm_head"]
    if cfg.moe is not None:
        m = cfg.moe
        untouched = 1.0 - expected_experts_touched(m.num_experts, m.experts_per_token, batch) / m.num_experts
        read -= untouched * routed_expert_bytes(cfg, weight_format)
    if cfg.tie_word_embeddings:
        read += groups["embedding"]
    return read


def routed_expert_bytes(cfg: ModelConfig, weight_format: str) -> float:
    """All routed experts as stored, bytes: E × expert params × MoE layers at the format's bits per
    parameter (``average_bits_per_param``); with mxfp4 the matmul weights at 4.25 bits, biases at bf16."""
    assert cfg.moe is not None
    fmt = normalise_weight_format(weight_format)
    params = cfg.moe.num_experts * expert_params(cfg) * cfg.moe.moe_layers
    if fmt == MXFP4:
        matmul = routed_expert_matmul_params(cfg)
        return weight_bytes_from_bpw(matmul, MXFP4_BITS_PER_WEIGHT) + weight_bytes_uniform(
            params - matmul, 2.0
        )
    return weight_bytes_from_bpw(params, average_bits_per_param(cfg, fmt))


# ---------------------------------------------------------------------------------------------------------
# Decode roofline
# ---------------------------------------------------------------------------------------------------------


def kv_bytes_read_per_step(kv_bytes_per_token_: float, batch: int, context_tokens: float) -> float:
    """KV bytes one decode step reads, bytes: B sequences × T cached tokens × KV bytes/token."""
    return batch * context_tokens * kv_bytes_per_token_


def decode_step_floor_s(
    weight_bytes_read: float, kv_bytes_read: float, bandwidth_bytes_per_s: float
) -> float:
    """Memory-bound floor of one decode step, s: (weight bytes read + KV bytes read) ÷ bandwidth (B/s)."""
    return (weight_bytes_read + kv_bytes_read) / bandwidth_bytes_per_s


def decode_compute_floor_s(flops_per_step: float, flops_per_s: float) -> float:
    """Compute-bound floor of one decode step, s: FLOPs in the step ÷ peak FLOP/s."""
    return flops_per_step / flops_per_s


def tokens_per_s(batch: int, step_s: float) -> float:
    """Generated tokens per second when each step emits one token per sequence, tokens/s: B ÷ step time."""
    return batch / step_s


# ---------------------------------------------------------------------------------------------------------
# KV pool capacity
# ---------------------------------------------------------------------------------------------------------


def kv_pool_tokens(pool_bytes: float, kv_bytes_per_token_: float) -> int:
    """Tokens a KV pool holds, tokens: floor(pool bytes ÷ KV bytes/token)."""
    return math.floor(pool_bytes / kv_bytes_per_token_)


def max_concurrency_plain(pool_tokens: int, max_model_len: int) -> float:
    """Full-length requests the pool holds at once, requests: pool tokens ÷ max_model_len."""
    return pool_tokens / max_model_len


def max_concurrency_by_bytes(pool_bytes: float, kv_bytes_per_sequence_: float) -> float:
    """Full-length requests the pool holds when each keeps only what its layers attend over, requests: pool
    bytes ÷ ``kv_bytes_per_sequence``(max_model_len). Equals ``max_concurrency_plain`` without windows; with
    windowed layers it is what an engine that frees KV beyond each window (vLLM's hybrid KV cache manager,
    llama.cpp's SWA cache) can reach."""
    return pool_bytes / kv_bytes_per_sequence_


def vllm_num_gpu_blocks(pool_bytes: float, block_size: int, kv_bytes_per_token_: float) -> int:
    """vLLM's block count, blocks: floor(pool bytes ÷ (block_size × KV bytes/token))."""
    return math.floor(pool_bytes / (block_size * kv_bytes_per_token_))


def vllm_kv_cache_tokens(num_blocks: int, block_size: int) -> int:
    """vLLM's 'GPU KV cache size: N tokens', tokens: num_blocks × block_size."""
    return num_blocks * block_size


def vllm_max_concurrency(num_blocks: int, block_size: int, max_model_len: int) -> float:
    """vLLM's 'Maximum concurrency for N tokens per request', requests:
    num_blocks ÷ ceil(max_model_len ÷ block_size) (a request reserves whole blocks).
    """
    return num_blocks / math.ceil(max_model_len / block_size)


def vllm_kv_cache_tokens_reported(num_blocks: int, block_size: int, max_model_len: int) -> int:
    """The token count vLLM (V1, 0.32) logs as 'CPU/GPU KV cache size: N tokens', tokens:
    floor(num_blocks ÷ ceil(max_model_len ÷ block_size) × max_model_len) — its maximum concurrency times
    max_model_len (``kv_cache_utils.get_kv_cache_capacity``). Equals num_blocks × block_size whenever
    block_size divides max_model_len (then both read the same on older versions too).
    """
    return math.floor(num_blocks / math.ceil(max_model_len / block_size) * max_model_len)


def llama_cpp_kv_mib(n_ctx: int, kv_bytes_per_token_: float) -> float:
    """llama.cpp's 'llama_kv_cache: size = X MiB' for -c C cells (all slots' streams together), MiB:
    C × KV bytes/token ÷ 2^20."""
    return n_ctx * kv_bytes_per_token_ / 2**20


def logged_gib_tolerance_tokens(kv_bytes_per_token_: float, decimals: int = 2) -> float:
    """How many tokens a GiB figure rounded to `decimals` hides, ± tokens: 0.5·10^-decimals · 2^30 ÷ KV
    bytes/token.

    vLLM logs 'Available KV cache memory: 6.41 GiB' with two decimals, so the pool is known to ±0.005 GiB.
    """
    return 0.5 * 10 ** (-decimals) * GIB / kv_bytes_per_token_


def vllm_tokens_range_for_logged_gib(
    logged_gib: float, kv_bytes_per_token_: float, block_size: int = 16, decimals: int = 2
) -> tuple[int, int]:
    """The KV cache sizes (tokens) vLLM can report for a pool it logged as `logged_gib` (rounded), tokens:
    vllm_kv_cache_tokens(vllm_num_gpu_blocks(bytes)) for bytes = (logged ± 0.5·10^-decimals) GiB.
    """
    half = 0.5 * 10 ** (-decimals)
    lo = vllm_num_gpu_blocks((logged_gib - half) * GIB, block_size, kv_bytes_per_token_)
    hi = vllm_num_gpu_blocks((logged_gib + half) * GIB, block_size, kv_bytes_per_token_)
    return vllm_kv_cache_tokens(lo, block_size), vllm_kv_cache_tokens(hi, block_size)


def llama_cpp_n_ctx_slot(n_ctx: int, n_parallel: int, kv_unified: bool = False) -> int:
    """llama.cpp's context per slot, tokens: -c total ÷ -np slots (n_ctx_slot); with -kvu every slot sees all
    of -c.

    The reference log: -c 262144 -np 64 -> n_ctx_slot = 4096.
    """
    return n_ctx if kv_unified else n_ctx // n_parallel


def llama_cpp_kv_bytes(cfg: ModelConfig, n_ctx: int, kv_dtype: str = "fp16") -> float:
    """llama.cpp's KV buffer for -c C cells, bytes: C × KV bytes/token (the cache is allocated whole at
    start)."""
    return n_ctx * kv_bytes_per_token(cfg, kv_dtype)


# vLLM sizes its KV pool as  gpu_memory_utilization × total − (weights + non-torch memory + peak activation).
# This reserve stands for everything but the weights, on the nvidia-smi total: on the reference RTX 4090 run
# (Qwen2.5-7B, vLLM 0.27.1) non-torch memory was ≈0.30 GiB (14.49 − 14.19 weights), peak activation 0.26 GiB,
# and 0.9 × the 0.47 GiB that nvidia-smi counts but CUDA never hands out ≈ 0.42 GiB: ≈ 1 GiB in all.
DEFAULT_GPU_MEMORY_UTILIZATION = 0.9
DEFAULT_KV_RESERVE_BYTES = 1 * GIB


def estimated_kv_pool_bytes(
    gpu_memory_bytes: float,
    weight_bytes_: float,
    gpu_memory_utilization: float = DEFAULT_GPU_MEMORY_UTILIZATION,
    reserve_bytes: float = DEFAULT_KV_RESERVE_BYTES,
) -> float:
    """Estimated KV pool the vLLM way, bytes: max(0, utilization × GPU memory − weight bytes − reserve).

    An estimate (label it so): the real pool comes from vLLM's profiling run and is in its log.
    """
    return max(0.0, gpu_memory_utilization * gpu_memory_bytes - weight_bytes_ - reserve_bytes)
