"""Overload: the overload points (``points``: KV demand against the pool, preemption or truncation,
failures, whether every request got its output), what they say beyond it (``depth``: KV demand per request,
the price in TTFT, Little's law, the counter conflict) and the preemptions' cadence (``cadence``). ``run``
is the points section; analysis.pipeline.analyze.SECTIONS runs ``depth`` and ``cadence`` as their own
sections."""

from analysis.reconcile.overload.points import (
    headline,
    itl_share_touched_pct,
    overload_points,
    oversubscription,
    run,
    slot_output_limit_tokens,
    slot_oversubscription,
    tokens_freed,
)

__all__ = [
    "headline",
    "itl_share_touched_pct",
    "overload_points",
    "oversubscription",
    "run",
    "slot_output_limit_tokens",
    "slot_oversubscription",
    "tokens_freed",
]
