"""Totals over a campaign's points: the requests it sent (every measured point, warm-ups left out, as the
reference study counts them), per round and engine the output tokens it got against what it asked for, and
per imported concurrency sweep the sampler's span and the iterations the engine ran over the whole run.

Keys: ``inventory.requests_total``; ``<round>.gates.<engine>.output_tokens_shortfall_total_pct``;
``<round>.concurrency.<engine>.sweep_sampler_span_s`` and ``sweep_iterations``.
"""

from __future__ import annotations

import math

import pandas as pd

from analysis.core import findings as fnd
from analysis.core.keys import At
from analysis.reconcile import Section, SectionInput, engine_at
from analysis.reconcile.gates.checks import shortfall_total_pct


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


def counter_rise(values: list[float]) -> float:
    """How much a cumulative counter rose over a series, its unit: last − first valid sample."""
    ok = [v for v in values if not math.isnan(v)]
    return ok[-1] - ok[0] if ok else 0.0


def _sweep_totals(s: SectionInput) -> list[fnd.Finding]:
    out: list[fnd.Finding] = []
    for run in s.campaign.runs:
        if run.own or run.test_kind != "concurrency_sweep" or run.name not in s.ctx.sampler_series:
            continue
        ts, cols = s.ctx.sampler_series[run.name]
        if len(ts) < 2 or "iter_tok_cnt" not in cols or run.counter_source is None:
            continue
        at = engine_at(run.round, run.engine, topic="concurrency")
        src = [run.cite(run.counter_source)]
        out.append(fnd.measured(at("sweep_sampler_span_s"), ts[-1] - ts[0], "s", src, samples=len(ts)))
        out.append(
            fnd.measured(at("sweep_iterations"), counter_rise(list(cols["iter_tok_cnt"])), "count", src)
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
    return Section(name="workload_totals", findings=found + _shortfall(points) + _sweep_totals(s))
