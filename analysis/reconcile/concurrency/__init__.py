"""Concurrency: the concurrency sweep's points (``points``: throughput and latency against concurrency, the
knee, the counters; the master per-point table) and what the sweep says beyond the curve (``depth``: the
gain from one stream, per-slot efficiency, the waiting queue, the KV pool's ceiling, batching economics).
``run`` is the points section; analysis.pipeline.analyze.SECTIONS runs ``depth`` as its own section."""

from analysis.reconcile.concurrency.points import (
    POINT_ID_COLUMNS,
    SWEEP_KINDS,
    achieved_rate,
    concurrency_of,
    counter_file,
    knee_finding,
    peak_throughput_finding,
    percentile_stats,
    percentile_table,
    points_frame,
    points_value,
    run,
    run_sweep_points,
    sweep_points,
    throughput_gain_finding,
    tokens_from_throughput,
    utilization_pct,
)

__all__ = [
    "POINT_ID_COLUMNS",
    "SWEEP_KINDS",
    "achieved_rate",
    "concurrency_of",
    "counter_file",
    "knee_finding",
    "peak_throughput_finding",
    "percentile_stats",
    "percentile_table",
    "points_frame",
    "points_value",
    "run",
    "run_sweep_points",
    "sweep_points",
    "throughput_gain_finding",
    "tokens_from_throughput",
    "utilization_pct",
]
