"""Structure (theory only, for the campaign's model): parameters by component and per layer with shares,
FLOPs per token (trunk vs lm_head), attention-kernel FLOPs against sequence length and the length where
attention overtakes the weights, KV bytes per token and the GQA factor, weight bytes per format."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pandas as pd

from analysis.core import findings as fnd
from analysis.core import theory
from analysis.core.keys import At
from analysis.core.model_config import ModelConfig
from analysis.loading.campaign import Campaign
from analysis.reconcile import Section, SectionInput
from analysis.reconcile.theoryctx import TheoryCtx

# group of each HF module, for the share chart
GROUPS = {
    "embed_tokens": "embedding",
    "lm_head": "lm_head",
    "norm": "norm",
    "input_layernorm": "norm",
    "post_attention_layernorm": "norm",
    "qk_norm": "norm",
    "q_proj": "attention",
    "k_proj": "attention",
    "v_proj": "attention",
    "o_proj": "attention",
    "gate_proj": "mlp",
    "up_proj": "mlp",
    "down_proj": "mlp",
}
SEQ_LENS = (128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536)
CONFIG_FIELDS = (
    "name",
    "model_type",
    "hidden_size",
    "intermediate_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "vocab_size",
    "tie_word_embeddings",
    "qkv_bias",
)
WEIGHT_FORMATS = ("bf16", "q4_k_m", "q8_0")  # the formats the weights table compares
# what the structure page states from a model config; n/a together without one
NO_THEORY_KEYS = (
    "params_total",
    "kv_bytes_per_token",
    "gqa_factor",
    "flops_per_token_trunk",
    "flops_per_token_lm_head",
    "attention_overtakes_weights_decode_tokens",
    "weight_bytes_bf16",
)
MODEL = At(topic="model")  # theory of the campaign's model: findings `model.<metric>`
MODELS_DIR = Path(__file__).resolve().parents[2] / "core" / "models"


def config_sources(config_path: str, found_in: list[str]) -> list[str]:
    """Where the model's shape really came from: the campaign's own citation (a run's model-config.json or
    prediction.json, an imported result's model id), plus the bundled config file when the shape was read from
    one (`analysis/core/models/<name>.json`, repository-relative) — never a path that does not exist."""
    out = list(found_in)
    p = Path(config_path)
    if p.is_file() and p.resolve().parent == MODELS_DIR:
        out.append(f"analysis/core/models/{p.name}")
    return out


def run(s: SectionInput) -> Section:
    campaign, th = s.campaign, s.th
    cfg = th.cfg
    if cfg is None:
        why = "no bundled config matches the campaign's model id"
        return Section(
            name="structure",
            findings=[fnd.not_available(MODEL(k), "", "no_theory", why) for k in NO_THEORY_KEYS],
        )
    src = config_sources(cfg.source, th.model_source)
    params_rows = _params_rows(cfg)
    f = _count_findings(cfg, params_rows, src)
    depth_tables, depth = depth_findings(campaign, th, src)
    f += depth
    # the inputs of every derivation, as the structure page lists them (config.json's fields)
    config = {k: getattr(cfg, k) for k in CONFIG_FIELDS}
    return Section(
        name="structure",
        tables={
            "model_config": pd.DataFrame([{**config, "source": ";".join(src)}]),
            "structure_params": pd.DataFrame(params_rows),
            "structure_flops": pd.DataFrame(_flops_rows(cfg)),
            "structure_weights": pd.DataFrame(
                [
                    {
                        "weight_format": k,
                        "weight_bytes": v,
                        "weight_bytes_read_per_step": theory.weight_bytes_read_per_decode_step(cfg, k),
                    }
                    for k, v in _weight_bytes(cfg).items()
                ]
            ),
            **depth_tables,
        },
        findings=f,
    )


def _weight_bytes(cfg: ModelConfig) -> dict[str, float]:
    """The model's weight bytes per format the structure page compares, bytes."""
    return {fmt: theory.weight_bytes(cfg, fmt) for fmt in WEIGHT_FORMATS}


def _params_rows(cfg: ModelConfig) -> list[dict[str, Any]]:
    """Parameters by component (whole model and per layer), with each one's share of the total."""
    whole = theory.params_by_component(cfg)
    total = theory.params_total(cfg)
    per_layer = theory.params_per_layer_by_component(cfg)
    return [
        {
            "component": k,
            "group": GROUPS.get(k, "other"),
            "params": v,
            "share_pct": v / total * 100,
            "params_per_layer": per_layer.get(k),
        }
        for k, v in whole.items()
    ]


def _flops_rows(cfg: ModelConfig) -> list[dict[str, Any]]:
    """GFLOP per decoded token against the sequence length: the weights' (flat) and the attention kernel's."""
    trunk = theory.flops_per_token_matmul(cfg)
    head = theory.flops_per_token_lm_head(cfg)
    rows = []
    for seq in SEQ_LENS:
        rows.append({"seq_len_tokens": seq, "part": "weights", "gflop_per_token": (trunk + head) / 1e9})
        rows.append(
            {
                "seq_len_tokens": seq,
                "part": "attention_kernel",
                "gflop_per_token": theory.attention_flops_decode_per_token(cfg, seq) / 1e9,
            }
        )
    return rows


def _count_findings(cfg: ModelConfig, params_rows: list[dict[str, Any]], src: list[str]) -> list[fnd.Finding]:
    """The structure's counts: parameters and their shares, KV bytes per token and the GQA factor, FLOPs per
    token, where attention overtakes the weights, weight bytes (stored and read per step)."""
    trunk = theory.flops_per_token_matmul(cfg)
    head = theory.flops_per_token_lm_head(cfg)
    wb = _weight_bytes(cfg)
    return [
        fnd.measured(
            MODEL("params_total"), theory.params_total(cfg), "params", src, detail="theory: Σ components"
        ),
        fnd.measured(MODEL("params_per_layer"), theory.params_per_layer(cfg), "params", src),
        fnd.measured(
            MODEL("params_mlp_share_pct"),
            sum(r["share_pct"] for r in params_rows if r["group"] == "mlp"),
            "%",
            src,
        ),
        fnd.measured(
            MODEL("params_embedding_and_lm_head_share_pct"),
            sum(r["share_pct"] for r in params_rows if r["group"] in ("embedding", "lm_head")),
            "%",
            src,
        ),
        fnd.measured(
            MODEL("kv_bytes_per_token"),
            theory.kv_bytes_per_token(cfg, "bf16"),
            "bytes/token",
            src,
            kv_dtype="bf16",
        ),
        fnd.measured(
            MODEL("kv_bytes_per_token_mha"), theory.kv_bytes_per_token_mha(cfg, "bf16"), "bytes/token", src
        ),
        fnd.measured(MODEL("gqa_factor"), theory.gqa_factor(cfg), "ratio", src),
        fnd.measured(MODEL("flops_per_token_trunk"), trunk, "FLOPs/token", src),
        fnd.measured(MODEL("flops_per_token_lm_head"), head, "FLOPs/token", src),
        fnd.measured(MODEL("lm_head_flops_share_pct"), head / (trunk + head) * 100, "%", src),
        fnd.measured(
            MODEL("attention_overtakes_weights_decode_tokens"),
            theory.attention_overtakes_weights_at_tokens(cfg),
            "tokens",
            src,
        ),
        fnd.measured(
            MODEL("attention_overtakes_weights_prefill_tokens"),
            theory.attention_overtakes_weights_prefill_causal_at_tokens(cfg),
            "tokens",
            src,
            # the page used to state the full-square length; the causal mask halves the attention work
            full_square_tokens=theory.attention_overtakes_weights_prefill_at_tokens(cfg),
            detail="causal prefill: 2·S²·L·H·d ≥ S·2·L·matmul ⇔ S ≥ matmul per layer ÷ (H·d); the full S×S "
            "square (what vLLM's FLOPs counter counts) crosses at half this length",
        ),
        fnd.measured(MODEL("weight_bytes_bf16"), wb["bf16"], "bytes", src),
        fnd.measured(MODEL("weight_bytes_q4_k_m"), wb["q4_k_m"], "bytes", src),
        fnd.measured(
            MODEL("weight_bytes_read_per_step_bf16"),
            theory.weight_bytes_read_per_decode_step(cfg, "bf16"),
            "bytes",
            src,
        ),
        fnd.measured(
            MODEL("weight_bytes_read_per_step_q4_k_m"),
            theory.weight_bytes_read_per_decode_step(cfg, "q4_k_m"),
            "bytes",
            src,
        ),
    ]


# --- issue #11: what the structure implies, beyond the counts ------------------------------------------
KV_READ_CONTEXTS = (1024, 8192, 32768)  # the contexts at which the KV read is set against the weights


def typical_request(campaign: Campaign) -> tuple[float, int, str] | None:
    """The campaign's typical request: the first concurrency-sweep point's prompt and requested output
    (tokens), and where they are stated; None without a sweep that knows both."""
    for p in campaign.points():
        if p.warmup or p.test_kind not in ("concurrency_sweep", "engine_comparison"):
            continue
        if p.input_len_tokens and p.requested_output_len_tokens:
            return p.input_len_tokens, p.requested_output_len_tokens, p.protocol_source or p.cite()
    return None


def depth_findings(
    campaign: Campaign, th: TheoryCtx, src: list[str]
) -> tuple[dict[str, Any], list[fnd.Finding]]:
    """FLOPs per layer by matrix and the element-wise rest; attention-kernel FLOPs; the KV cache against the
    W_k/W_v weights, the hidden state and the weight bytes a step reads; what the cache saves in compute."""
    cfg = th.cfg
    assert cfg is not None
    rows, out = _flops_depth(cfg, src)
    out += _kv_depth(cfg, src)
    out += _typical_request_findings(cfg, typical_request(campaign), src)
    return {"structure_flops_by_matrix": pd.DataFrame(rows)}, out


def _flops_depth(cfg: ModelConfig, src: list[str]) -> tuple[list[dict[str, Any]], list[fnd.Finding]]:
    """FLOPs per layer per token by matrix (table structure_flops_by_matrix, with the element-wise ops), the
    element-wise share, and the attention kernel's FLOPs at one round length."""
    by_matrix = theory.flops_per_token_by_matrix(cfg)
    layer_matmul = sum(by_matrix.values())
    out = [
        fnd.measured(
            MODEL(f"flops_per_layer_per_token_{name}"),
            v,
            "FLOPs/token",
            src,
            share_of_layer_pct=v / layer_matmul * 100,
        )
        for name, v in by_matrix.items()
    ]
    ew_ops = theory.elementwise_flops_per_layer_by_op(cfg)
    ew = theory.elementwise_flops_per_token(cfg)
    weights = theory.flops_per_token_matmul(cfg) + theory.flops_per_token_lm_head(cfg)
    out.append(
        fnd.measured(
            MODEL("elementwise_flops_per_token"),
            ew,
            "FLOPs/token",
            src,
            per_layer=ew_ops,
            ops_per_element=theory.ELEMENTWISE_OPS,
            detail="RMSNorm, RoPE, SwiGLU, residual adds, biases; softmax counted with the attention kernel",
        )
    )
    out.append(
        fnd.measured(
            MODEL("elementwise_flops_share_pct"),
            ew / (ew + weights) * 100,
            "%",
            src,
            detail="element-wise ÷ (element-wise + weight matmuls incl. lm_head), per decoded token",
        )
    )
    rows = [
        {"matrix": k, "flops_per_token": v, "share_of_layer_pct": v / layer_matmul * 100}
        for k, v in by_matrix.items()
    ]
    rows += [
        {"matrix": f"elementwise_{k}", "flops_per_token": v, "share_of_layer_pct": v / layer_matmul * 100}
        for k, v in ew_ops.items()
    ]
    s_ref = 1024  # the attention-kernel FLOPs are stated at one round length; the figure has the curve
    out.append(
        fnd.measured(
            MODEL("attention_flops_prefill_causal_1k"),
            theory.attention_flops_prefill_causal(cfg, s_ref),
            "FLOPs",
            src,
            prompt_tokens=s_ref,
            full_square_flops=theory.attention_flops_prefill(cfg, s_ref),
            detail="2·S²·L·H·d at S = 1024: the causal mask halves the 4·S²·L·H·d of the full square",
        )
    )
    out.append(
        fnd.measured(
            MODEL("attention_flops_decode_per_token_1k"),
            theory.attention_flops_decode_per_token(cfg, s_ref),
            "FLOPs/token",
            src,
            context_tokens=s_ref,
            detail="4·T·L·H·d at T = 1024",
        )
    )
    return rows, out


def _kv_depth(cfg: ModelConfig, src: list[str]) -> list[fnd.Finding]:
    """The KV cache against the weights that produce it (W_k + W_v), against the hidden state, and its read
    per decode step against the weight bytes the step reads."""
    out = [
        fnd.measured(
            MODEL("kv_projection_weight_bytes"),
            theory.kv_projection_weight_bytes(cfg),
            "bytes",
            src,
            dtype="bf16",
        ),
        fnd.measured(
            MODEL("kv_outweighs_projections_tokens"),
            theory.kv_outweighs_projections_tokens(cfg),
            "tokens",
            src,
            detail="cached tokens whose K/V (bf16) outweigh the bf16 W_k + W_v of every layer",
        ),
    ]
    kv_layer = theory.kv_bytes_per_layer_per_token(cfg)
    hidden = theory.hidden_state_bytes_per_token(cfg)
    out.append(
        fnd.measured(
            MODEL("kv_over_hidden_state_ratio"),
            kv_layer / hidden,
            "ratio",
            src,
            kv_bytes_per_layer=kv_layer,
            hidden_state_bytes=hidden,
            detail="K + V of one token in one layer (2·K·d·b) ÷ the hidden state there (h·b)",
        )
    )
    for t in KV_READ_CONTEXTS:
        out.append(
            fnd.measured(
                MODEL(f"kv_read_share_of_weights_{t // 1024}k_pct"),
                theory.kv_read_share_of_weights_pct(cfg, t),
                "%",
                src,
                context_tokens=t,
                kv_bytes=t * theory.kv_bytes_per_token(cfg),
                weight_bytes_read_per_step=theory.weight_bytes_read_per_decode_step(cfg, "bf16"),
                q4_k_m_pct=theory.kv_read_share_of_weights_pct(cfg, t, "q4_k_m"),
                detail="one sequence's KV read per decode step ÷ the bf16 weight bytes the step reads",
            )
        )
    return out


def _typical_request_findings(
    cfg: ModelConfig, req: tuple[float, int, str] | None, src: list[str]
) -> list[fnd.Finding]:
    """At the campaign's typical request: the concurrency whose KV outweighs W_k + W_v, and what the cache
    saves in compute (re-running the prefix ÷ one cached step); n/a without a sweep that knows both
    lengths."""
    if req is None:
        why = "no concurrency sweep with known prompt and output lengths"
        return [
            fnd.not_available(MODEL(k), u, "no_such_test", why)
            for k, u in (
                ("kv_outweighs_projections_concurrency", "requests"),
                ("kv_saved_flops_ratio", "ratio"),
            )
        ]
    inp, outp, wsrc = req
    held = inp + outp  # what one request holds in the cache at its last token
    ctx_tokens = round(inp + outp / 2)  # the mean context while a request decodes
    saved = theory.kv_saved_flops_per_token(cfg, ctx_tokens)
    step = theory.flops_decode_per_token(cfg, ctx_tokens)
    return [
        fnd.measured(
            MODEL("kv_outweighs_projections_concurrency"),
            math.ceil(theory.kv_outweighs_projections_tokens(cfg) / held),
            "requests",
            [*src, wsrc],
            tokens_per_request=held,
            detail=("ceil(tokens whose K/V outweigh W_k + W_v ÷ (prompt + output) of the campaign's sweep)"),
        ),
        fnd.measured(
            MODEL("kv_saved_flops_ratio"),
            (saved + step) / step,
            "ratio",
            [*src, wsrc],
            context_tokens=ctx_tokens,
            saved_flops_per_token=saved,
            decode_flops_per_token=step,
            detail="FLOPs to re-run the prefix (causal prefill of T + 1) ÷ one cached decode step at T, "
            "T = prompt + output ÷ 2 of the campaign's sweep",
        ),
    ]
