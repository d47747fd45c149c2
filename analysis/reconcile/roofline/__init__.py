"""Roofline and model structure: what a step costs in bytes and FLOPs, against what the card can move.

- ``series``: the roofline's definitions every section shares (sweep series, bytes per step, floors,
  ratios);
- ``points``: the roofline section (every sweep point against its floors, per-run knee, single stream,
  achievement); ``quantization``: the step ratio of two weight formats vs the byte ledger;
- ``structure``: the model's structure (parameters, bytes and FLOPs per token) from its config;
  ``structure_totals``: its totals; ``flops_phases``: prefill vs decode FLOPs per point;
- ``ceilings``: the card's measured copy bandwidth and matmul throughput against its datasheet.

Each section module exposes ``run(s: SectionInput) -> Section``; analysis.pipeline.analyze.SECTIONS orders
them.
"""

from analysis.reconcile.roofline.series import (
    SweepSeries,
    achievement_pct,
    kv_bytes_per_request,
    mean_context_tokens,
    roofline_floor_ms,
    server_token_ms,
    step_bytes,
    step_ratio,
    sweep_series,
    throughput_ratio,
)

__all__ = [
    "SweepSeries",
    "achievement_pct",
    "kv_bytes_per_request",
    "mean_context_tokens",
    "roofline_floor_ms",
    "server_token_ms",
    "step_bytes",
    "step_ratio",
    "sweep_series",
    "throughput_ratio",
]
