"""The length sweep's counters read the way the reference study reads them (issue #22): the bytes one
iteration reads against the two-term model (weights once, plus every running request's KV), the FLOPs the
engine books per iteration token as a line in the context, the arithmetic intensity of a decode step at the
shortest and the longest input, the p99 ITL a smaller chunked-prefill budget would give, and the KV gauge's
sawtooth (one request's life: a request frees its KV when it ends, the next one fills it again).

Keys: ``<round>.length.<engine>.<metric>`` (imported campaigns), ``runs.<run>.length.<metric>`` (ours).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from analysis.core import findings as fnd
from analysis.core import fits, theory
from analysis.core.keys import At
from analysis.core.windows import PointWindowData, window_indices
from analysis.loading.campaign import BenchPoint, Campaign
from analysis.reconcile import Context, Section, SectionInput
from analysis.reconcile.lengths import LengthSeries, budget_tokens, iterations, series
from analysis.reconcile.theoryctx import TheoryCtx

GFLOP = 1e9
# a budget a quarter of the one the engine ran: the reference's "set it to 512" beside vLLM's 2,048
SMALLER_BUDGET_FRACTION = 0.25


def two_term_bytes_per_iteration(
    weight_bytes: float, running: float, context_tokens: float, kv_bytes_per_token: float
) -> float:
    """Bytes one decode iteration reads in the two-term model, bytes: weights once + running requests ×
    their context [tokens] × KV bytes per token."""
    return weight_bytes + running * context_tokens * kv_bytes_per_token


def deviation_pct(model: float, measured: float) -> float:
    """How far a model is from the measurement, %: (model ÷ measured − 1) × 100."""
    return (model / measured - 1.0) * 100.0


def decode_step_intensity(
    flops_per_token: float, running: float, weight_bytes: float, context_tokens: float, kv_bytes: float
) -> float:
    """Arithmetic intensity of a decode step, FLOP/byte: running × FLOPs per token ÷ the two-term bytes."""
    return (
        running
        * flops_per_token
        / two_term_bytes_per_iteration(weight_bytes, running, context_tokens, kv_bytes)
    )


def p99_itl_at_budget_ms(p50_ms: float, p99_ms: float, budget: float, smaller_budget: float) -> float:
    """The p99 ITL with a smaller chunked-prefill budget, ms: the decode step (p50) plus the prefill chunk's
    share of the p99 step scaled to the smaller chunk, p50 + (p99 − p50) × smaller ÷ budget (a step that
    carries a chunk costs in proportion to the chunk's tokens)."""
    return p50_ms + (p99_ms - p50_ms) * smaller_budget / budget


def autocorr_period_s(ts: Sequence[float], values: Sequence[float]) -> float | None:
    """The period of a sampled wave, s: the lag of the autocorrelation's first local maximum after it first
    falls below zero, × the mean sample spacing; None when there is none."""
    n = len(values)
    if n < 8:
        return None
    mean = math.fsum(values) / n
    d = [v - mean for v in values]
    var = math.fsum(x * x for x in d)
    if var == 0:
        return None
    ac = [math.fsum(d[i] * d[i + k] for i in range(n - k)) / var for k in range(n // 2)]
    first_neg = next((k for k, a in enumerate(ac) if a < 0), None)
    if first_neg is None:
        return None
    lag = next(
        (k for k in range(first_neg, len(ac) - 1) if ac[k - 1] < ac[k] >= ac[k + 1] and ac[k] > 0), None
    )
    return None if lag is None else lag * (ts[-1] - ts[0]) / (n - 1)


def swing_per_cycle(values: Sequence[float], samples_per_cycle: int) -> float | None:
    """Trough to peak of a wave, its unit: the median over consecutive whole cycles of (max − min) inside
    one cycle; None below one whole cycle."""
    if samples_per_cycle < 2:
        return None
    spans = [
        max(values[i : i + samples_per_cycle]) - min(values[i : i + samples_per_cycle])
        for i in range(0, len(values) - samples_per_cycle + 1, samples_per_cycle)
    ]
    return sorted(spans)[len(spans) // 2] if spans else None


def _row(p: BenchPoint, ctx: Context) -> dict[str, Any] | None:
    w: PointWindowData | None = ctx.window(p)
    tpi, iters, _ = iterations(p, ctx)
    r = p.result
    if w is None or not iters or not r.completed or not p.input_len_tokens:
        return None
    running = w.gauges.get("running")
    out_mean = r.total_output_tokens / r.completed if r.total_output_tokens else None
    return {
        "p": p,
        "w": w,
        "iterations": iters,
        "running": running.mean if running is not None else None,
        # mean context of a request over its decode: prompt + half its output
        "context": p.input_len_tokens + (out_mean or 0) / 2,
        "read_bytes": w.delta("read_bytes"),
        "flops": w.delta("flops"),
        "iter_tokens": w.delta("iter_tok_sum"),
    }


def _read_model(at: At, rows: list[dict[str, Any]], wb: float, kvb: float) -> list[fnd.Finding]:
    """Two findings: the two-term model against the byte counter at the shortest and the longest input."""
    ok = [x for x in rows if x["read_bytes"] and x["running"]]
    if len(ok) < 2:
        return []
    out = []
    for metric, x in (
        ("read_model_deviation_shortest_pct", ok[0]),
        ("read_model_deviation_longest_pct", ok[-1]),
    ):
        measured = x["read_bytes"] / x["iterations"]
        model = two_term_bytes_per_iteration(wb, x["running"], x["context"], kvb)
        out.append(
            fnd.measured(
                at(metric),
                deviation_pct(model, measured),
                "%",
                [x["p"].run.cite(x["p"].run.counter_source, "read_bytes"), x["p"].cite()],
                point=x["p"].label,
                model_gb_per_iteration=model / 1e9,
                measured_gb_per_iteration=measured / 1e9,
                running_mean=x["running"],
                context_tokens=x["context"],
            )
        )
    return out


def _flops_fit(at: At, rows: list[dict[str, Any]]) -> list[fnd.Finding]:
    """GFLOP the engine books per iteration token, as a line in the mean context."""
    ok = [x for x in rows if x["flops"] and x["iter_tokens"]]
    if len(ok) < 3:
        return []
    xs = [x["context"] for x in ok]
    ys = [x["flops"] / x["iter_tokens"] / GFLOP for x in ok]
    fit = fits.least_squares(xs, ys)
    return [
        fnd.measured(
            at("flops_per_token_slope_gflop_per_context_token"),
            fit.slope,
            "GFLOP/token per token",
            [ok[0]["p"].run.cite(ok[0]["p"].run.counter_source, "flops")] + [x["p"].cite() for x in ok],
            intercept_gflop_per_token=fit.intercept,
            r2=fit.r2,
            points=len(ok),
        )
    ]


def _intensity(at: At, rows: list[dict[str, Any]], th: TheoryCtx, wb: float, kvb: float) -> list[fnd.Finding]:
    ok = [x for x in rows if x["running"]]
    if th.cfg is None or len(ok) < 2:
        return []
    per_token = theory.flops_per_token_matmul(th.cfg) + theory.flops_per_token_lm_head(th.cfg)
    lo, hi = (decode_step_intensity(per_token, x["running"], wb, x["context"], kvb) for x in (ok[0], ok[-1]))
    return [
        fnd.measured(
            at("decode_step_intensity_longest_flop_per_byte"),
            hi,
            "FLOP/byte",
            [x["p"].cite() for x in (ok[0], ok[-1])],
            shortest_flop_per_byte=lo,
            flops_per_token=per_token,
        )
    ]


def _budget(at: At, s: LengthSeries, campaign: Campaign) -> list[fnd.Finding]:
    pts = [p for p in s.points if p.result.completed]
    budget, bsrc, _ = budget_tokens(pts[0].run, campaign) if pts else (None, None, None)
    if not pts or not budget or bsrc is None:
        return []
    p = max(pts, key=lambda q: q.input_len_tokens or 0)
    p50, p99 = p.result.itl.p50_ms, p.result.itl.p99_ms
    if p50 is None or p99 is None:
        return []
    smaller = budget * SMALLER_BUDGET_FRACTION
    return [
        fnd.measured(
            at("p99_itl_at_smaller_budget_ms"),
            p99_itl_at_budget_ms(p50, p99, budget, smaller),
            "ms",
            [bsrc, p.cite("p99_itl_ms"), p.cite("median_itl_ms")],
            budget_tokens=budget,
            smaller_budget_tokens=smaller,
            p99_itl_ms=p99,
            point=p.label,
            detail="a prediction, not a measurement: no run with the smaller budget",
        )
    ]


def _balance(at: At, pts: list[BenchPoint]) -> list[fnd.Finding]:
    """The prompt length at which the GPU takes in as many tokens per second as it gives out: input tok/s ÷
    output tok/s = prompt ÷ output per request at every point, so equal where the prompt is as long as a
    request's mean output; the measured ratio at each point beside it."""
    done = [
        p for p in pts if p.result.completed and p.result.total_output_tokens and p.result.total_input_tokens
    ]
    if len(done) < 2:
        return []
    out_per_request = done[0].result.total_output_tokens / done[0].result.completed  # type: ignore[operator]
    return [
        fnd.measured(
            at("input_equals_output_throughput_at_input_tokens"),
            round(out_per_request),
            "tokens",
            [p.cite("total_output_tokens") for p in done],
            # [point, input ÷ output tokens] in the sweep's order (a list: findings.json sorts a dict's keys)
            input_over_output_by_point=[
                [p.label, p.result.total_input_tokens / p.result.total_output_tokens]  # type: ignore[operator]
                for p in done
            ],
        )
    ]


def _sawtooth(at: At, p: BenchPoint, ctx: Context) -> list[fnd.Finding]:
    """The KV gauge's period and swing over the longest input's window, beside the point's p50 E2E."""
    w: PointWindowData | None = ctx.window(p)
    if w is None or p.run.name not in ctx.sampler_series:
        return []
    ts, cols = ctx.sampler_series[p.run.name]
    if "kv_usage" not in cols:
        return []
    idx = [i for i in window_indices(ts, w.window) if not math.isnan(cols["kv_usage"][i])]
    period = autocorr_period_s([ts[i] for i in idx], [cols["kv_usage"][i] for i in idx])
    e2e = p.result.e2el.p50_ms
    if period is None:
        return []
    kv = [cols["kv_usage"][i] * 100.0 for i in idx]
    spacing = (ts[idx[-1]] - ts[idx[0]]) / (len(idx) - 1)
    swing = swing_per_cycle(kv, round(period / spacing))
    out = [
        fnd.measured(
            at("kv_sawtooth_period_s"),
            period,
            "s",
            [p.run.cite(p.run.counter_source or "", "kv_usage"), p.cite("median_e2el_ms")],
            point=p.label,
            p50_e2el_s=e2e / 1000.0 if e2e else None,
            samples=len(idx),
        )
    ]
    if swing is not None:
        out.append(
            fnd.measured(
                at("kv_sawtooth_swing_pp"),
                swing,
                "pp",
                [p.run.cite(p.run.counter_source or "", "kv_usage")],
                point=p.label,
                period_s=period,
            )
        )
    return out


def run(s: SectionInput) -> Section:
    campaign, ctx, th = s.campaign, s.ctx, s.th
    findings: list[fnd.Finding] = []
    for sr in series(campaign, th):
        if sr.engine != "vllm":
            continue
        at = sr.at
        pts = sorted((p for p in sr.points if ctx.gate_ok(p)), key=lambda p: p.input_len_tokens or 0)
        rows = [r for r in (_row(p, ctx) for p in pts) if r is not None]
        wb, kvb = sr.wb, sr.kvb
        if wb and kvb:
            findings += _read_model(at, rows, wb, kvb) + _intensity(at, rows, th, wb, kvb)
        findings += _flops_fit(at, rows) + _budget(at, sr, campaign)
        findings += _balance(at, pts)
        if pts:
            findings += _sawtooth(at, pts[-1], ctx)
    return Section(name="length_counters", findings=findings)
