"""How far the p99 TTFT moved between two runs of the same concurrency sweep, point by point (the reference
study states it as a range beside the throughput range the reproducibility section gives): across rounds (the
first sweep of each round, per engine) and within a round (its second sweep against its first).

Keys: ``reproducibility.<engine>.p99_ttft_delta_{min,max}_pct``;
``<round>.reproducibility.repeat_p99_ttft_delta_{min,max}_pct``. Imported campaigns only (ours run no
second round).
"""

from __future__ import annotations

import pandas as pd

from analysis.core import findings as fnd
from analysis.core.keys import At
from analysis.reconcile import Section, SectionInput

SWEEP = "concurrency_sweep"


def deltas_pct(a: pd.Series, b: pd.Series) -> pd.Series:
    """Per concurrency, how much b differs from a, %: (b ÷ a − 1) × 100 (concurrencies both measured)."""
    return ((b / a - 1.0) * 100.0).dropna()


def _p99(pts: pd.DataFrame, test: str) -> pd.Series:
    return pts[pts["test"] == test].set_index("concurrency")["p99_ttft_ms"].astype(float)


def _pair(at: At, prefix: str, pts: pd.DataFrame, a: str, b: str) -> list[fnd.Finding]:
    d = deltas_pct(_p99(pts, a), _p99(pts, b))
    if d.empty:
        return []
    src = sorted(pts[pts["test"].isin([a, b])]["file"].astype(str))[:2]
    return [
        fnd.measured(
            at(f"{prefix}_min_pct"), float(d.min()), "%", src, from_test=a, to_test=b, points=len(d)
        ),
        fnd.measured(
            at(f"{prefix}_max_pct"), float(d.max()), "%", src, from_test=a, to_test=b, points=len(d)
        ),
    ]


def run(s: SectionInput) -> Section:
    points, own = s.points, s.campaign.own
    findings: list[fnd.Finding] = []
    if own or points.empty:
        return Section(name="repro_tails")
    pts = points[~points["warmup"].astype(bool) & (points["test_kind"] == SWEEP)]
    for engine, g in pts.groupby("engine"):
        firsts = [sorted(r["test"].unique())[0] for _, r in sorted(g.groupby("round"))]
        if len(firsts) >= 2:
            at = At(level="engine", engine=str(engine), topic="reproducibility")
            findings += _pair(at, "p99_ttft_delta", g, firsts[0], firsts[-1])
        for rnd, r in g.groupby("round"):
            tests = sorted(r["test"].unique())
            if len(tests) >= 2 and isinstance(rnd, str) and rnd:
                findings += _pair(
                    At(round=rnd, topic="reproducibility"), "repeat_p99_ttft_delta", r, *tests[:2]
                )
    return Section(name="repro_tails", findings=findings)
