"""Reproducibility: throughput deltas between rounds and repeat sweeps, what changed between the rounds
(``runs``), and how far the p99 TTFT moved between them (``tails``). ``run`` is the runs section;
analysis.pipeline.analyze.SECTIONS runs ``tails`` as its own section."""

from analysis.reconcile.reproducibility.runs import run

__all__ = ["run"]
