"""Totals over a campaign's points: the requests it sent (every measured point, warm-ups left out, as the
reference study counts them) and, per round and engine, the output tokens it got against what it asked for.

Keys: ``inventory.requests_total``; ``<round>.gates.<engine>.output_tokens_shortfall_total_pct``.
"""

from __future__ import annotations

import pandas as pd

from analysis import findings as fnd
from analysis.keys import At
from analysis.reconcile import Section, SectionInput, engine_at
from analysis.reconcile.gates import shortfall_total_pct


def _shortfall(points: pd.DataFrame) -> list[fnd.Finding]:
    out: list[fnd.Finding] = []
    pts = points[~points["warmup"].astype(bool)]
    for (rnd, engine), g in pts.groupby(["round", "engine"], dropna=False):
        asked = (g["completed"] * g["requested_output_len_tokens"]).sum()
        got = g["total_output_tokens"].sum()
        if not asked or pd.isna(asked) or pd.isna(got) or not isinstance(rnd, str) or not rnd:
            continue
        at = engine_at(rnd, str(engine), topic="gates")
        out.append(
            fnd.measured(
                at("output_tokens_shortfall_total_pct"),
                shortfall_total_pct(int(asked), int(got)),  # the gates page's one definition
                "%",
                sorted(g["file"].astype(str))[:1],
                output_tokens=int(got),
                requested_tokens=int(asked),
            )
        )
    return out


def run(s: SectionInput) -> Section:
    points = s.points
    if points.empty:
        return Section(name="workload_totals")
    measured = points[~points["warmup"].astype(bool)]
    total = int(measured["num_prompts"].fillna(0).sum())
    runs = sorted({str(k).rsplit("/", 1)[0] for k in measured["key"]})
    found = [
        fnd.measured(
            At(topic="inventory", metric="requests_total"),
            total,
            "requests",
            sorted(set(measured["file"].astype(str))),  # the total is a sum over every point's file
            runs=len(runs),
        )
    ]
    return Section(name="workload_totals", findings=found + _shortfall(points))
