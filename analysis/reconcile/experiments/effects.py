"""What the sampling, CUDA-graph and KV-quantization experiments add beyond their predictions: the
per-extra-stream slope per arm and the share GPU sampling removes, an arm difference at one point with its
spread, each arm's largest repeat spread, llama.cpp's graph-reuse counter, and the KV bytes per token and the
capacity of a fixed KV budget per cache type."""

from __future__ import annotations

from typing import Any

from analysis.core import findings as fnd
from analysis.core import theory
from analysis.reconcile import run_at
from analysis.reconcile.experiments.arms import (
    SLOPE_CONCURRENCIES,
    ArmRuns,
    ExpData,
    diff,
    slope_spread,
    slopes,
)
from analysis.reconcile.experiments.formulas import (
    GIB,
    capacity_tokens,
    difference_pct,
    distinguishable,
    share_removed_pct,
    spread_pct,
)
from analysis.reconcile.experiments.predictions import cites
from analysis.reconcile.experiments.spec import Target, quote_line
from analysis.reconcile.theoryctx import TheoryCtx


def slope_rows_and_findings(e: ExpData, rows: list[dict[str, Any]]) -> list[fnd.Finding]:
    """The step time each extra stream adds (c = 8..64) per arm, and the share of it GPU sampling removes."""
    out: list[fnd.Finding] = []
    sl = slopes(e)
    for arm, s in sorted(sl.items()):
        sp, borrowed = slope_spread(sl, arm)
        for k, f in sorted(s.fits.items()):
            rows.append(
                {
                    "experiment": e.exp.name,
                    "arm": arm,
                    "variant": s.arm.arm.variant,
                    "run": s.arm.runs[k].name,
                    "repeat": k,
                    "weight_format": s.arm.arm.weight_format,
                    "slope_ms_per_stream": f.slope,
                    "intercept_ms": f.intercept,
                    "r2": f.r2,
                    "n": f.n,
                }
            )
        at = run_at(s.arm.first, s.arm.arm.weight_format, topic=e.exp.topic)
        out.append(
            fnd.measured(
                at("itl_slope_ms_per_stream"),
                s.value,
                "ms/request",
                [
                    p.cite()
                    for run in s.arm.runs.values()
                    for p in run.points
                    if p.concurrency in SLOPE_CONCURRENCIES
                ],
                detail=(
                    "least-squares slope of p50 ITL over concurrency 8..64 (analysis.core.fits), "
                    "mean over repeats"
                ),
                spread=sp,
                spread_borrowed=borrowed,
                r2=[f.r2 for _, f in sorted(s.fits.items())],
            )
        )
    for treatment, baseline in e.exp.pairs:
        if treatment not in sl or baseline not in sl:
            continue
        t, b = sl[treatment], sl[baseline]
        st, _ = slope_spread(sl, treatment)
        sb, _ = slope_spread(sl, baseline)
        st, sb = st or 0.0, sb or 0.0
        share = share_removed_pct(t.value, b.value)
        # the share's range over the two slopes' spread intervals
        ends = [share_removed_pct(t.value + a, b.value + c) for a in (-st, st) for c in (-sb, sb)]
        at = run_at(t.arm.first, t.arm.arm.weight_format, topic=e.exp.topic)
        out.append(
            fnd.measured(
                at("per_stream_cost_removed_pct"),
                share,
                "%",
                [t.arm.first.cite("requests.jsonl"), b.arm.first.cite("requests.jsonl")],
                detail="1 - slope(-bs) / slope(CPU sampling), slopes of p50 ITL over c = 8..64",
                share_lo=min(ends),
                share_hi=max(ends),
                slope_ms_per_stream=t.value,
                slope_baseline_ms_per_stream=b.value,
            )
        )
    return out


def delta_finding(
    e: ExpData, treatment: str, baseline: str, c: int, metric_name: str, input_len: int | None = None
) -> fnd.Finding | None:
    """The p50 ITL difference at one point (and the throughput's), with the spread beside it."""
    pids = e.find(treatment, Target(concurrency=c, input_len=input_len))
    d = diff(e, treatment, baseline, pids[0]) if pids else None
    if d is None:
        return None
    ar = e.arms[treatment]
    at = run_at(ar.first, ar.arm.weight_format, topic=e.exp.topic)
    thr = diff(e, treatment, baseline, pids[0], "output_throughput_tokens_per_s")
    return fnd.measured(
        at(metric_name),
        d.delta_pct,
        "%",
        cites(e, (treatment, baseline), pids[0]),
        detail=f"p50 ITL at concurrency {c}: arm vs baseline (means over repeats), with the repeat spread",
        spread_pct=d.spread_pct,
        spread_borrowed=d.borrowed,
        distinguishable=d.distinguishable,
        treatment_ms=d.treatment.value("p50_itl_ms"),
        baseline_ms=d.baseline.value("p50_itl_ms"),
        delta_ms=d.delta,
        concurrency=c,
        throughput_delta_pct=thr.delta_pct if thr else None,
        treatment_tokens_per_s=thr.treatment.value("output_throughput_tokens_per_s") if thr else None,
        baseline_tokens_per_s=thr.baseline.value("output_throughput_tokens_per_s") if thr else None,
    )


def repeat_spread_findings(e: ExpData, metric: str) -> list[fnd.Finding]:
    """Per repeated arm: the largest repeat spread of a metric over its points, % of the first run."""
    out: list[fnd.Finding] = []
    for arm, ar in sorted(e.arms.items()):
        pcts = []
        for pid in e.pids(arm):
            ap = e.point(arm, pid)
            s, v = (ap.spread(metric), ap.value(metric)) if ap is not None else (None, None)
            if s is not None and v:
                pcts.append((spread_pct(s, v), pid[1]))
        if pcts:
            worst = max(pcts)
            at = run_at(ar.first, ar.arm.weight_format, topic=e.exp.topic)
            out.append(
                fnd.measured(
                    at(f"max_repeat_spread_pct_{'itl' if metric == 'p50_itl_ms' else 'throughput'}"),
                    worst[0],
                    "%",
                    cites(e, (arm,), None),
                    detail=(
                        f"largest repeat spread of {metric} over the arm's points: (max - min) / "
                        "mean of the repeats"
                    ),
                    concurrency=worst[1],
                )
            )
    return out


def graphs_findings(e: ExpData) -> list[fnd.Finding]:
    """The repeat spread of each arm (largest over points) beside the effect, and llama.cpp's own graph-reuse
    counter (print_timing "graphs reused"), which does not see CUDA graphs."""
    out = repeat_spread_findings(e, "p50_itl_ms")
    for _arm, ar in sorted(e.arms.items()):
        at = run_at(ar.first, ar.arm.weight_format, topic=e.exp.topic)
        zero, total, srcs = 0, 0, []
        for run in ar.runs.values():
            rel, log = run.server_log
            if log is None or rel is None:
                continue
            blocks = [t for t in log.timings if t.graphs_reused is not None]
            total += len(blocks)
            zero += sum(1 for t in blocks if t.graphs_reused == 0)
            srcs.append(run.cite(rel))
        if total:
            out.append(
                fnd.measured(
                    at("graphs_reused_zero_blocks"),
                    zero,
                    "count",
                    srcs,
                    detail=(
                        "print_timing blocks whose 'graphs reused' (llama.cpp graph reuse, not CUDA "
                        "graphs) is 0"
                    ),
                    blocks=total,
                )
            )
    return out


def _kv_theory_findings(e: ExpData, ar: ArmRuns, th: TheoryCtx) -> list[fnd.Finding]:
    """One KV type's bytes per token (block formats) and the tokens the plan's fixed KV budget holds, cited
    at the plan line stating them (the arm's ``quote``)."""
    assert th.cfg is not None
    kvb = theory.kv_bytes_per_token(th.cfg, ar.arm.value)
    at = run_at(ar.first, ar.arm.weight_format, topic=e.exp.topic)
    src = ar.first.cite("plan.toml", quote_line(ar.first, ar.arm.quote) if ar.arm.quote else None)
    out = [
        fnd.measured(
            at("kv_bytes_per_token"),
            kvb,
            "bytes/token",
            [src],
            detail="2 x L x K x d x bytes per element",
            kv_type=ar.arm.value,
            theory_only=True,
        )
    ]
    budget_gib = ar.arm.params.get("kv_budget_gib")
    if budget_gib is not None:
        out.append(
            fnd.measured(
                at("capacity_tokens_at_budget"),
                capacity_tokens(budget_gib * GIB, kvb),
                "tokens",
                [src],
                detail=(
                    f"floor({budget_gib:g} GiB / KV bytes per token): the tokens issue #6's KV "
                    "pool would hold"
                ),
                budget_gib=budget_gib,
                kv_type=ar.arm.value,
                theory_only=True,
            )
        )
    return out


def kv_quant_findings(e: ExpData, th: TheoryCtx) -> list[fnd.Finding]:
    """Theory per KV type: bytes per token from the block formats and the tokens the plan's fixed KV budget
    holds; and whether the baseline's step grows from 8k to 16k of context at all (are KV reads visible in the
    step?)."""
    out: list[fnd.Finding] = []
    if th.cfg is None:
        return out
    for _arm, ar in sorted(e.arms.items()):
        out += _kv_theory_findings(e, ar, th)
    base = next((b for _t, b in e.exp.pairs if b in e.arms), None)
    growth = _context_growth_finding(e, base) if base is not None else None
    return out + ([growth] if growth is not None else [])


def _context_growth_finding(e: ExpData, base: str) -> fnd.Finding | None:
    """Whether the baseline arm's step grows from 8k to 16k of context at concurrency 8 (mean over
    repeats), with the larger of the two points' spreads."""
    p8 = e.find(base, Target(concurrency=8, input_len=8192))
    p16 = e.find(base, Target(concurrency=8, input_len=16384))
    a8 = e.point(base, p8[0]) if p8 else None
    a16 = e.point(base, p16[0]) if p16 else None
    if a8 is None or a16 is None:
        return None
    v8, v16 = a8.value("p50_itl_ms"), a16.value("p50_itl_ms")
    if v8 is None or v16 is None:
        return None
    s = max(x for x in (a8.spread("p50_itl_ms"), a16.spread("p50_itl_ms"), 0.0) if x is not None)
    ar = e.arms[base]
    at = run_at(ar.first, ar.arm.weight_format, topic=e.exp.topic)
    return fnd.measured(
        at("f16_itl_growth_8k_to_16k_pct"),
        difference_pct(v16, v8),
        "%",
        cites(e, (base,), p8[0]) + cites(e, (base,), p16[0]),
        detail="p50 ITL at concurrency 8: 16,384 vs 8,192 input tokens, f16 KV (mean over repeats)",
        spread_pct=spread_pct(s, v8),
        distinguishable=distinguishable(v16 - v8, s),
        itl_8k_ms=v8,
        itl_16k_ms=v16,
    )
