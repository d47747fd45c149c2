"""Experiment 6 (vLLM CPU, KV-pool size) predicts counts, so its predictions are exact: the lock-step wave
(``formulas.lockstep_preemptions``) gives each pool's preemptions, the output token after which each
preempted stream stops and the requests resident at the peak; measured by the preemption counter across the
point, the streams' longest pauses (requests.jsonl) and the running gauge, in every repeat. Each is cited
at the plan's table row for its pool (the arm's ``quote``)."""

from __future__ import annotations

import math
from typing import Any

from analysis.core import findings as fnd
from analysis.core.keys import At
from analysis.core.windows import PointWindowData
from analysis.loading.campaign import BenchPoint, RunData
from analysis.reconcile import Context, run_at
from analysis.reconcile.experiments.arms import ArmRuns, ExpData
from analysis.reconcile.experiments.formulas import (
    demand_over_pool,
    lockstep_preemptions,
    log_max_concurrency,
    stop_tokens,
)
from analysis.reconcile.experiments.spec import quote_line

# (metric, measured key, predicted key, unit, detail) of each count predicted exactly
_EXACT = (
    (
        "preemptions",
        "preemptions",
        "preemptions_predicted",
        "count",
        "vllm:num_preemptions_total across the overload point vs the lock-step prediction",
    ),
    (
        "stop_tokens",
        "stop_tokens",
        "stop_tokens_predicted",
        "list",
        "output tokens each preempted stream had before it stopped (its longest gap), requests.jsonl",
    ),
    (
        "residents_at_peak",
        "residents",
        "residents_predicted",
        "requests",
        "running requests at the wave's peak (running gauge) vs floor((N - 1) / blocks per request)",
    ),
    (
        "max_running",
        "max_running",
        "concurrency",
        "requests",
        "the running gauge's highest sample in the point: every request admitted with its prompt",
    ),
)


def _pool_row(run: RunData, p: BenchPoint, ctx: Context, n_blocks: int) -> dict[str, Any] | None:
    """Experiment 6, one run: the pool from the log, the prediction for its size, and what the streams, the
    preemption counter and the running gauge show."""
    rel, log = run.server_log
    _, req = run.requests
    w = ctx.window(p)
    if log is None or rel is None or log.kv_cache_tokens is None or req is None:
        return None
    c, inp, out = p.concurrency, p.input_len_tokens, p.requested_output_len_tokens
    if not isinstance(w, PointWindowData) or c is None or inp is None or out is None:
        return None
    block = log.kv_cache_tokens // n_blocks
    c, inp, out = int(c), int(round(inp)), int(out)
    stops_pred, residents_pred = lockstep_preemptions(n_blocks, block, c, inp, out)
    recs = p.records
    pre = w.delta("preemptions")
    stops = stop_tokens(recs, int(pre)) if pre is not None else []
    t0 = min(r.send_mono_ns for r in recs)
    # residents at the peak: the running gauge's lowest sample after it first showed its highest and before
    # the
    # first request ended (the survivors of the wave; preempted ones wait)
    residents = None
    max_running = w.gauges["running"].max if "running" in w.gauges else None
    if run.name in ctx.sampler_series and max_running is not None:
        ts, cols = ctx.sampler_series[run.name]
        first_end = min(r.end_mono_ns for r in recs) / 1e9
        idx = [i for i in range(w.first_row, w.last_row + 1) if not math.isnan(cols["running"][i])]
        top = next((i for i in idx if cols["running"][i] == max_running), None)
        peak = [cols["running"][i] for i in idx if top is not None and i >= top and ts[i] <= first_end]
        residents = int(min(peak)) if peak else None
    log_x = log.max_concurrency_x
    return {
        "experiment": "kv_pool",
        "run": run.name,
        "test_kind": p.test_kind,
        "concurrency": c,
        "input_len_tokens": inp,
        "output_len_tokens": out,
        "n_blocks": n_blocks,
        "block_tokens": block,
        "pool_tokens_log": log.kv_cache_tokens,
        "demand_over_pool": demand_over_pool(c, inp, out, block, n_blocks),
        "log_max_concurrency": log_x,
        "log_max_concurrency_theory": log_max_concurrency(
            n_blocks * block, log.max_concurrency_tokens_per_request
        )
        if log.max_concurrency_tokens_per_request
        else None,
        "preemptions_predicted": len(stops_pred),
        "preemptions": int(pre) if pre is not None else None,
        "stop_tokens_predicted": stops_pred,
        "stop_tokens": [t for t, _, _ in stops],
        "first_stop_s": (stops[0][1] - t0) / 1e9 if stops else None,
        "residents_predicted": residents_pred,
        "residents": residents,
        "max_running": int(max_running) if max_running is not None else None,
        "log_source": run.cite(rel, log.lines.get("max_concurrency_x")),
        "counter_source": ctx.sample_cite(run, w.first_row) if run.name in ctx.sample_lines else None,
        "source": p.cite(),
    }


def _exact_finding(
    at: At,
    got: list[Any],
    pred: Any,
    unit: str,
    detail: str,
    srcs: list[str],
    plan: str,
    extra: dict[str, Any],
) -> fnd.Finding:
    """A count predicted exactly, measured in every repeat: confirmed when every repeat equals it."""
    ok = all(g == pred for g in got)
    return fnd.Finding(
        at=at,
        value=got[0],
        unit=unit,
        sources=tuple(dict.fromkeys(srcs)),
        status="ok" if ok else "mismatch",
        detail=detail,
        extra={
            "verdict": "confirmed" if ok else "refuted",
            "predicted_value": pred,
            "per_repeat": got,
            "plan_source": plan,
            **extra,
        },
    )


def _pool_runs(arm: str, ar: ArmRuns, ctx: Context, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each repeat's overload point of one pool (``_pool_row``), also added to the table ``rows``."""
    per_run = []
    for k, run in sorted(ar.runs.items()):
        p = next((q for q in run.points if q.test_kind == "overload" and not q.warmup), None)
        row = _pool_row(run, p, ctx, int(ar.arm.value)) if p is not None else None
        if row is None:
            continue
        row |= {"arm": arm, "variant": ar.arm.variant, "repeat": k}
        # the table is a CSV the page prints: token lists as text, not a Python list's repr
        rows.append(row | {c: ", ".join(map(str, row[c])) for c in ("stop_tokens", "stop_tokens_predicted")})
        per_run.append(row)
    return per_run


def _pool_findings(at: At, per_run: list[dict[str, Any]], plan: str, n_blocks: int) -> list[fnd.Finding]:
    """One pool: each exact count in every repeat against the lock-step prediction, and the log's maximum
    concurrency against pool tokens ÷ T."""
    first = per_run[0]
    srcs = [plan] + [r["source"] for r in per_run] + [r["log_source"] for r in per_run]
    srcs += [r["counter_source"] for r in per_run if r["counter_source"]]
    common = {"n_blocks": n_blocks, "demand_over_pool": first["demand_over_pool"], "repeats": len(per_run)}
    log_x = first["log_max_concurrency"]
    extras: dict[str, dict[str, Any]] = {
        "stop_tokens": {"first_stop_s": [r["first_stop_s"] for r in per_run]},
        "residents_at_peak": {
            "log_max_concurrency": log_x,
            "residents_minus_log": (
                first["residents"] - log_x if first["residents"] is not None and log_x is not None else None
            ),
        },
    }
    out = [
        _exact_finding(
            at(metric),
            [r[key] for r in per_run],
            first[pred_key],
            unit,
            detail,
            srcs,
            plan,
            common | extras.get(metric, {}),
        )
        for metric, key, pred_key, unit, detail in _EXACT
    ]
    out.append(
        fnd.measured(
            at("log_max_concurrency"),
            log_x,
            "x",
            [first["log_source"], plan],
            theory=first["log_max_concurrency_theory"],
            tolerance_pct=0.5,  # the log prints two decimals: 8.12 for 8.125
            detail=(
                "the log's 'Maximum concurrency for T tokens per request' vs pool tokens / T "
                "(null block counted)"
            ),
            **common,
        )
    )
    return out


def kv_pool_findings(e: ExpData, ctx: Context, rows: list[dict[str, Any]]) -> list[fnd.Finding]:
    """Experiment 6: per pool size, preemptions (count, onset, stop points) against the lock-step prediction
    and demand ÷ pool, and the requests resident at the wave's peak against the log's max-concurrency line."""
    out: list[fnd.Finding] = []
    for arm, ar in sorted(e.arms.items(), key=lambda x: int(x[1].arm.value)):
        per_run = _pool_runs(arm, ar, ctx, rows)
        if not per_run:
            continue
        at = run_at(ar.first, ar.arm.weight_format, topic=e.exp.topic)
        plan = ar.first.cite("plan.toml", quote_line(ar.first, ar.arm.quote) if ar.arm.quote else None)
        out += _pool_findings(at, per_run, plan, int(ar.arm.value))
    return out
