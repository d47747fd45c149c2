"""Issue #15's controlled experiments: one knob varied between runs, everything else fixed; each arm's
numbers, the repeat spread, the difference between arms with the spread beside it, the plan's prediction and a
verdict.

The experiments are data in their plans (``spec``): each arm's plan.toml holds an ``[[experiment]]`` entry
naming the experiment, its question, its knob, every arm's plan and this arm's knob value, and the
predictions stated in that plan, each with the words of the header line that stated it before the run. An
arm IS a run name (its plan's ``run``; repeats ``-r<k>`` / ``-<k>``, see ``spec.repeat_of``); one run may be
an arm of several experiments (the ``-np 256`` Q4_K_M run is the baseline of the slot, sampling and CUDA-graph
experiments). The knob is then read from the run's own plan.toml copy and must state the arm's value; a run
whose plan disagrees is reported as a failed check, never silently compared. Where the plan derived its
number from the byte ledger (KV quantization), the number is recomputed from ``analysis.core.theory`` and the
plan's figure kept beside it (``Target.stated``). A new experiment needs plans, not code: the arms'
tables, differences and predictions follow from its entries; what an experiment adds beyond them (llama.cpp's
buffers and slot ids, slopes, graph counters, the KV pool's exact counts) is keyed by its name here.

Numbers (``arms``): per arm and point, the mean over its repeats and the repeat spread (max − min). A
difference between two arms carries the larger of their spreads; an arm with one run borrows the largest
relative spread the experiment's repeated arms show at the same point (marked ``spread_borrowed``); a spread
in % is relative to the arm's mean. A difference no larger than its spread is "not distinguishable".

Verdicts (``formulas.verdict``): the measurement is the interval [m − s, m + s] (m the value or difference,
s its spread). A bound prediction [lo, hi] is confirmed when the interval lies inside it, refuted when they
do not meet, inconclusive otherwise; a point prediction p (a predicted change) is refuted when p lies outside
the interval, confirmed when inside and the interval excludes 0 (the change is seen), inconclusive when the
interval holds both p and 0; an exact prediction (a buffer size from the block formats) is confirmed when the
log's number equals it to the log's printed precision. A prediction over several points is refuted when any
point refutes it, confirmed when every point confirms it, inconclusive otherwise.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from analysis.core import findings as fnd
from analysis.core.keys import At
from analysis.loading.campaign import Campaign
from analysis.reconcile import Context, Section, SectionInput
from analysis.reconcile.experiments import effects, kv_pool, llamacpp, tables
from analysis.reconcile.experiments.arms import ExpData, arm_runs, point_metrics, slopes
from analysis.reconcile.experiments.formulas import (
    INF,
    combine,
    consecutive_runs,
    difference,
    distinguishable,
    lockstep_preemptions,
    mean,
    repeat_spread,
    spread_pct,
    verdict,
)
from analysis.reconcile.experiments.predictions import evaluate, prediction_finding
from analysis.reconcile.experiments.spec import (
    Experiment,
    Prediction,
    Target,
    load_experiments,
    repeat_of,
)
from analysis.reconcile.theoryctx import TheoryCtx

__all__ = [
    "INF",
    "Prediction",
    "Target",
    "combine",
    "consecutive_runs",
    "difference",
    "distinguishable",
    "load_experiments",
    "lockstep_preemptions",
    "mean",
    "point_metrics",
    "repeat_of",
    "repeat_spread",
    "run",
    "spread_pct",
    "verdict",
]

H200 = "h200-qwen2.5-7b-random"
# experiments with a section of their own (analysis.reconcile.model_size)
OWN_SECTION = ("model_size",)
# Experiments the campaign could not run, and why (labels_zh.REASONS codes): n/a findings, so the page says
# so. Experiment 4 (model size) ran: analysis.reconcile.model_size. Speculative decoding (by its mechanism:
# step costs, the theory, server runs at natural and synthetic acceptance) and llama.cpp's chunked prefill
# (-b/-ub) ran in issue #26: analysis.reconcile.speculative and ladder, the campaign's ladder page.
NOT_RUN: dict[str, tuple[tuple[str, str, str], ...]] = {
    H200: (
        (
            "two_gpus",
            "exp_not_run_two_gpus",
            "experiment 5 not run: no nvidia-h200-x2 machine was lent in the session",
        ),
    ),
}
TABLES = (
    "experiment_runs",
    "experiment_points",
    "experiment_arms",
    "experiment_diffs",
    "experiment_predictions",
    "experiment_buffers",
    "experiment_slots",
    "experiment_slopes",
    "experiment_pool",
)


def _plan_check(e: ExpData) -> fnd.Finding:
    """Every arm's runs state the arm's knob value in their plan.toml (the rule's second half)."""
    bad = {
        ar.runs[k].name: {"expected": ar.arm.value, "plan": v}
        for ar in e.arms.values()
        for k, v in ar.knob_values.items()
        if v != ar.arm.value
    }
    return fnd.checked(
        At(topic=e.exp.topic)("arms_match_plans"),
        not bad,
        [r.cite("plan.toml") for ar in e.arms.values() for r in ar.runs.values()],
        detail=f"knob {e.exp.knob.kind} {e.exp.knob.name}: each arm's plan.toml states the arm's value",
        mismatched=bad,
        runs=sorted(r.name for ar in e.arms.values() for r in ar.runs.values()),
        arms=len(e.arms),
        item=e.exp.item,
        definitions=sorted({ar.arm.source for ar in e.arms.values()}),
    )


def _deltas(
    e: ExpData, at: tuple[int, ...], input_len: int | None = None, tag: str = ""
) -> list[fnd.Finding]:
    """Each pair's p50 ITL difference at the given concurrencies (and input length, ``tag`` in the name)."""
    out = []
    for treatment, baseline in e.exp.pairs:
        for c in at:
            name = f"c{c}{tag}_p50_itl_delta_pct"
            f = effects.delta_finding(e, treatment, baseline, c, name, input_len=input_len)
            if f is not None:
                out.append(f)
    return out


def _extras(e: ExpData, ctx: Context, th: TheoryCtx, t: dict[str, list[dict[str, Any]]]) -> list[fnd.Finding]:
    """What an experiment adds beyond its arms, differences and predictions (by its name)."""
    name, out = e.exp.name, []
    if name in ("slots", "kv_quant"):
        out += llamacpp.buffer_findings(e, th, t["experiment_buffers"])
    if name == "slots":
        out += llamacpp.slots_findings(e, t["experiment_slots"])
    if name == "sampling":
        out += effects.slope_rows_and_findings(e, t["experiment_slopes"]) + _deltas(e, (64,))
    if name == "graphs":
        out += effects.graphs_findings(e) + _deltas(e, (1, 32))
    if name == "kv_pool":
        out += kv_pool.kv_pool_findings(e, ctx, t["experiment_pool"])
        out += effects.repeat_spread_findings(e, "output_throughput_tokens_per_s")
    if name == "kv_quant":
        out += effects.kv_quant_findings(e, th) + _deltas(e, (8,), input_len=16384, tag="_16k")
    return out


def _missing(exp: Experiment) -> fnd.Finding:
    arms = ", ".join([a.run for a in exp.arms] + list(exp.missing))
    return fnd.not_available(
        At(topic=exp.topic)("arms_match_plans"),
        "bool",
        "exp_runs_missing",
        f"experiment {exp.name}: fewer than two of its arms ({arms}) have runs in this campaign",
    )


def _experiment(exp: Experiment, s: SectionInput, t: dict[str, list[dict[str, Any]]]) -> list[fnd.Finding]:
    """One experiment's rows (into ``t``) and findings."""
    arms = arm_runs(s.campaign, exp)
    if len(arms) < 2:
        return [_missing(exp)]
    e = ExpData(exp, arms)
    out = [_plan_check(e)]
    t["experiment_runs"] += tables.run_rows(e)
    t["experiment_points"] += tables.points_rows(e, s.ctx)
    t["experiment_arms"] += tables.arm_rows(e)
    t["experiment_diffs"] += tables.diff_rows(e)
    sl = slopes(e)
    for pred in exp.predictions:
        ev = evaluate(pred, e, s.th, sl)
        if ev is not None:
            t["experiment_predictions"] += ev.rows
            out.append(prediction_finding(ev, e, s.campaign))
    return out + _extras(e, s.ctx, s.th, t)


def run(s: SectionInput) -> Section:
    campaign: Campaign = s.campaign
    t: dict[str, list[dict[str, Any]]] = {name: [] for name in TABLES}
    out: list[fnd.Finding] = []
    for exp in load_experiments(campaign):
        if exp.name not in OWN_SECTION:
            out += _experiment(exp, s, t)
    for name, reason, detail in NOT_RUN.get(campaign.name, ()):
        out.append(fnd.not_available(At(topic="experiments")(name), "", reason, detail))
    frames = {name: pd.DataFrame(rows) for name, rows in t.items() if rows}
    return Section(name="experiments", tables=frames, findings=out)
