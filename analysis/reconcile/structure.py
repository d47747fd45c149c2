"""Structure (theory only, for the campaign's model): parameters by component and per layer with shares,
FLOPs per token (trunk vs lm_head), attention-kernel FLOPs against sequence length and the length where
attention overtakes the weights, KV bytes per token and the GQA factor, weight bytes per format."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from analysis import findings as fnd
from analysis import theory
from analysis.campaign import Campaign
from analysis.keys import At
from analysis.reconcile import Section
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
MODEL = At(topic="model")  # theory of the campaign's model: findings `model.<metric>`
MODELS_DIR = Path(__file__).resolve().parents[1] / "models"


def config_sources(config_path: str, found_in: list[str]) -> list[str]:
    """Where the model's shape really came from: the campaign's own citation (a run's model-config.json or
    prediction.json, an imported result's model id), plus the bundled config file when the shape was read from
    one (`analysis/models/<name>.json`, repository-relative) — never a path that does not exist."""
    out = list(found_in)
    p = Path(config_path)
    if p.is_file() and p.resolve().parent == MODELS_DIR:
        out.append(f"analysis/models/{p.name}")
    return out


def run(campaign: Campaign, th: TheoryCtx) -> Section:
    cfg = th.cfg
    keys = (
        "params_total",
        "kv_bytes_per_token",
        "gqa_factor",
        "flops_per_token_trunk",
        "flops_per_token_lm_head",
        "attention_overtakes_weights_decode_tokens",
        "weight_bytes_bf16",
    )
    if cfg is None:
        return Section(
            name="structure",
            findings=[
                fnd.not_available(
                    MODEL(k), "", "no_theory", "no bundled config matches the campaign's model id"
                )
                for k in keys
            ],
        )
    src = config_sources(cfg.source, th.model_source)
    whole = theory.params_by_component(cfg)
    total = theory.params_total(cfg)
    per_layer = theory.params_per_layer_by_component(cfg)
    params_rows = [
        {
            "component": k,
            "group": GROUPS.get(k, "other"),
            "params": v,
            "share_pct": v / total * 100,
            "params_per_layer": per_layer.get(k),
        }
        for k, v in whole.items()
    ]
    flops_rows = []
    trunk = theory.flops_per_token_matmul(cfg)
    head = theory.flops_per_token_lm_head(cfg)
    for s in SEQ_LENS:
        flops_rows.append({"seq_len_tokens": s, "part": "weights", "gflop_per_token": (trunk + head) / 1e9})
        flops_rows.append(
            {
                "seq_len_tokens": s,
                "part": "attention_kernel",
                "gflop_per_token": theory.attention_flops_decode_per_token(cfg, s) / 1e9,
            }
        )
    wb = {fmt: theory.weight_bytes(cfg, fmt) for fmt in ("bf16", "q4_k_m", "q8_0")}
    f = [
        fnd.measured(MODEL("params_total"), total, "params", src, detail="theory: Σ components"),
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
            theory.attention_overtakes_weights_prefill_at_tokens(cfg),
            "tokens",
            src,
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
    weights = pd.DataFrame(
        [
            {
                "weight_format": k,
                "weight_bytes": v,
                "weight_bytes_read_per_step": theory.weight_bytes_read_per_decode_step(cfg, k),
            }
            for k, v in wb.items()
        ]
    )
    return Section(
        name="structure",
        tables={
            "structure_params": pd.DataFrame(params_rows),
            "structure_flops": pd.DataFrame(flops_rows),
            "structure_weights": weights,
        },
        findings=f,
    )
