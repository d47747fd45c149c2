"""Totals of the model's structure the reference study states as single numbers: the decoder layers'
parameters as a share of the whole model, one layer's matmul FLOPs per token, and (dense models) how many
layers' attention one layer's MLP outweighs.

Keys: ``model.params_decoder_layers_share_pct``, ``model.flops_per_layer_per_token``,
``model.mlp_over_attention_params_per_layer``.
"""

from __future__ import annotations

from analysis.core import findings as fnd
from analysis.core import theory
from analysis.core.keys import At
from analysis.core.model_config import ModelConfig
from analysis.reconcile import Section, SectionInput

MODEL = At(topic="model")


def layers_share_pct(params_per_layer: int, layers: int, params_total: int) -> float:
    """The decoder layers' share of all parameters, %: params per layer × layers ÷ total × 100."""
    return params_per_layer * layers / params_total * 100.0


MLP_COMPONENTS = ("gate_proj", "up_proj", "down_proj")


def mlp_over_attention(cfg: ModelConfig) -> float:
    """One layer's MLP parameters over its attention parameters, ratio: (gate + up + down) ÷ (q + k + v + o,
    biases included)."""
    per_layer = theory.params_per_layer_by_component(cfg)
    mlp = sum(per_layer[k] for k in MLP_COMPONENTS)
    return mlp / sum(theory.attention_params_by_component(cfg).values())


def run(s: SectionInput) -> Section:
    th = s.th
    cfg = th.cfg
    if cfg is None:
        return Section(name="structure_totals")
    src = list(th.model_source)
    per_layer = theory.params_per_layer(cfg)
    return Section(
        name="structure_totals",
        findings=[
            fnd.measured(
                MODEL("params_decoder_layers_share_pct"),
                layers_share_pct(per_layer, cfg.num_hidden_layers, theory.params_total(cfg)),
                "%",
                src,
                params_decoder_layers=per_layer * cfg.num_hidden_layers,
            ),
            fnd.measured(
                MODEL("flops_per_layer_per_token"),
                2 * theory.matmul_params_per_layer(cfg),
                "FLOPs/token",
                src,
            ),
        ]
        + (
            [
                fnd.measured(
                    MODEL("mlp_over_attention_params_per_layer"), mlp_over_attention(cfg), "ratio", src
                )
            ]
            if cfg.moe is None
            else []
        ),
    )
