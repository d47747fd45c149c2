"""Lengths: the length sweep (``series``: KV per token, prefill cost per token, the chunked-prefill budget,
the step against the context) and what each length costs (``costs``). ``run`` is the series section;
analysis.pipeline.analyze.SECTIONS runs ``costs`` as its own section."""

from analysis.reconcile.lengths.series import (
    LengthSeries,
    budget_tokens,
    iterations,
    pool_tokens,
    prefill_ms,
    run,
    series,
)

__all__ = ["LengthSeries", "budget_tokens", "iterations", "pool_tokens", "prefill_ms", "run", "series"]
