"""Self-check gates: per benchmark point, pass/fail/unknown with the reason and the file it rests on
(``checks``), and the campaign's totals over its points (``totals``: requests sent, output tokens short).
``run`` is the checks section; analysis.pipeline.analyze.SECTIONS runs ``totals`` as its own section."""

from analysis.reconcile.gates.checks import (
    OWN_POINT_CHECKS,
    SEVERITY,
    client_gate,
    evaluate,
    gate_completed,
    gate_output_tokens,
    run,
    shortfall_total_pct,
    stream_counts_agree,
)

__all__ = [
    "OWN_POINT_CHECKS",
    "SEVERITY",
    "client_gate",
    "evaluate",
    "gate_completed",
    "gate_output_tokens",
    "run",
    "shortfall_total_pct",
    "stream_counts_agree",
]
