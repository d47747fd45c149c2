"""Engine comparison (vLLM bf16 vs llama.cpp Q4_K_M): throughput and ITL of both, the byte ledger and
the roofline floor per point, single-stream step ratio against the bytes each step reads, marginal
cost per extra request in flight, the throughput crossover, and the workload shortfall where an engine
did not honour ignore-eos."""

from __future__ import annotations

from typing import Any

import pandas as pd

from analysis.core import findings as fnd
from analysis.core import fits
from analysis.core.keys import At
from analysis.loading.campaign import BenchPoint
from analysis.reconcile import Context, Section, SectionInput, engine_at
from analysis.reconcile.concurrency import sweep_points
from analysis.reconcile.roofline import (
    SweepSeries,
    achievement_pct,
    mean_context_tokens,
    roofline_floor_ms,
    step_ratio,
    sweep_series,
    throughput_ratio,
)
from analysis.reconcile.theoryctx import TheoryCtx

ENGINES = ("vllm", "llamacpp")
# The byte ledger predicts the single-stream ratio only if both engines reach the same share of their
# roofline; a gap beyond this is a failed reconciliation the page explains with roofline_achievement_pct.
STEP_RATIO_TOLERANCE_PCT = 10.0


def shortfall_pct(total_output_tokens: int, completed: int, requested_output_len: int) -> float:
    """Output tokens missing against the requested workload, %: (1 − total ÷ (completed × requested)) ×
    100."""
    return (1.0 - total_output_tokens / (completed * requested_output_len)) * 100.0


def byte_ledger(series: list[SweepSeries], bandwidth_bytes_per_s: float | None) -> list[dict[str, Any]]:
    """One row per series identity (engine × weight format): the bytes a decode step reads and its floor."""
    out: list[dict[str, Any]] = []
    seen: set[tuple[str, str | None]] = set()
    for s in series:
        ident = (s["engine"], s["weight_format"])
        if ident in seen or s["weight_bytes_per_step"] is None:
            continue
        seen.add(ident)
        wb = s["weight_bytes_per_step"]
        out.append(
            {
                "engine": s["engine"],
                "weight_format": s["weight_format"],
                "series": s["series"],
                "run": s["run"],
                "weight_bytes_per_step": wb,
                "kv_bytes_per_token": s["kv_bytes_per_token"],
                "bandwidth_bytes_per_s": bandwidth_bytes_per_s,
                "weight_floor_ms": wb / bandwidth_bytes_per_s * 1000 if bandwidth_bytes_per_s else None,
                "source": s["format_source"],
            }
        )
    return out


def _throughput_ratio(at: At, by_engine: dict[str, Any], ctx: Context) -> fnd.Finding:
    """vLLM ÷ llama.cpp output tokens/s at the highest concurrency both measured (gated-in points), with the
    single-stream ratio alongside: batching efficiency at high load against speed at one stream."""
    key = at("throughput_ratio_at_max_common_concurrency", topic="engines")
    ok = {
        e: {p.concurrency: p for p in by_engine[e] if ctx.gate_ok(p) and p.result.output_throughput_tok_s}
        for e in ENGINES
    }
    common = sorted(set(ok["vllm"]) & set(ok["llamacpp"]))
    if not common:
        return fnd.not_available(key, "ratio", "engine_missing", "no concurrency measured by both engines")
    top, low = common[-1], common[0]
    v, ll = ok["vllm"][top].result.output_throughput_tok_s, ok["llamacpp"][top].result.output_throughput_tok_s
    v1, l1 = (
        ok["vllm"][low].result.output_throughput_tok_s,
        ok["llamacpp"][low].result.output_throughput_tok_s,
    )
    return fnd.measured(
        key,
        throughput_ratio(v, ll),
        "ratio",
        [ok["vllm"][top].cite("output_throughput"), ok["llamacpp"][top].cite("output_throughput")],
        concurrency=top,
        vllm_tokens_per_s=v,
        llamacpp_tokens_per_s=ll,
        lowest_concurrency=low,
        ratio_at_lowest_concurrency=throughput_ratio(v1, l1),
        detail="vLLM ÷ llama.cpp output tokens/s at the highest gated-in concurrency both measured",
    )


def _point_row(
    rnd: str | None, series: SweepSeries, p: BenchPoint, head: str | None, ctx: Context, bw: float | None
) -> dict[str, Any]:
    """One sweep point of an engine's series: throughput, ITL, and where theory allows the roofline floor
    (ms) and how much of the requested output the engine produced."""
    r = p.result
    wb, kvb = series["weight_bytes_per_step"], series["kv_bytes_per_token"]
    mean_out = (
        r.total_output_tokens / r.completed if r.completed and r.total_output_tokens is not None else None
    )
    row = {
        "round": rnd or "",
        "engine": series["engine"],
        "weight_format": series["weight_format"],
        "series": series["series"],
        "run": series["run"],
        "headline": series["run"] == head,
        "point": p.label,
        "test_kind": p.test_kind,
        "concurrency": p.concurrency,
        "gate_ok": ctx.gate_ok(p),
        "output_throughput_tokens_per_s": r.output_throughput_tok_s,
        "p50_itl_ms": r.itl.p50_ms,
        "p99_itl_ms": r.itl.p99_ms,
        "mean_output_tokens_per_request": mean_out,
        "source": p.cite("p50_itl_ms"),
    }
    if wb is not None and bw and kvb is not None and p.input_len_tokens and mean_out and p.concurrency:
        kv_req = mean_context_tokens(p.input_len_tokens, mean_out) * kvb
        floor = roofline_floor_ms(wb, p.concurrency, kv_req, bw)
        row["roofline_floor_ms"] = floor
        row["roofline_achievement_pct"] = achievement_pct(floor, r.itl.p50_ms) if r.itl.p50_ms else None
    if p.requested_output_len_tokens and r.completed and r.total_output_tokens is not None:
        row["requested_output_len_tokens"] = p.requested_output_len_tokens
        row["workload_shortfall_pct"] = shortfall_pct(
            r.total_output_tokens, r.completed, p.requested_output_len_tokens
        )
    return row


def _achievement(
    rnd: str | None, engine: str, frame: pd.DataFrame, th: TheoryCtx, bw: float | None
) -> tuple[fnd.Finding, pd.DataFrame | None]:
    """Roofline achievement: the single-stream value as the headline, every concurrency alongside; with
    the engine's points that carry one (None when none do)."""
    key = engine_at(rnd, engine, th.weight_formats.get(engine))("roofline_achievement_pct")
    sub = frame[frame["engine"] == engine] if len(frame) else frame
    if not len(sub) or "roofline_achievement_pct" not in sub or sub["roofline_achievement_pct"].isna().all():
        reason = "engine_missing" if not len(sub) else ("no_gpu_datasheet" if not bw else "no_theory")
        why = (
            th.gpu_reason or f"{th.gpu.display_name if th.gpu else 'the device'} has no datasheet bandwidth"
            if reason == "no_gpu_datasheet"
            else f"no {engine} sweep or no theory for it in {rnd or 'the campaign'}"
        )
        return fnd.not_available(key, "%", reason, why), None
    sub = sub.dropna(subset=["roofline_achievement_pct"]).sort_values("concurrency")
    first = sub.iloc[0]
    finding = fnd.measured(
        engine_at(rnd, engine, first["weight_format"])("roofline_achievement_pct"),
        float(first["roofline_achievement_pct"]),
        "%",
        [first["source"], th.weight_format_source.get(engine, ""), *th.gpu_source],
        concurrency=int(first["concurrency"]),
        floor_ms=float(first["roofline_floor_ms"]),
        p50_itl_ms=float(first["p50_itl_ms"]),
        rests_on_run=first["run"],
        by_concurrency={
            str(int(c)): float(v)
            for c, v in zip(sub["concurrency"], sub["roofline_achievement_pct"], strict=True)
        },
        detail="floor ÷ measured p50 ITL at the lowest concurrency; table engines_points has every point",
    )
    return finding, sub


def _marginal_cost(
    rnd: str | None, engine: str, sub: pd.DataFrame, first_point: BenchPoint, th: TheoryCtx, bw: float | None
) -> fnd.Finding | None:
    """Marginal cost per extra request in flight: the least-squares slope of p50 ITL against concurrency
    over every gated-in point (concurrency_depth's step_marginal_ms_per_request is the chord from 1 to the
    highest instead: fits.chord_slope says when the two differ). None with fewer than two points."""
    ok = sub[sub["gate_ok"]]
    if len(ok) < 2:
        return None
    first = sub.iloc[0]
    fit = fits.least_squares(ok["concurrency"].astype(float).tolist(), ok["p50_itl_ms"].tolist())
    kv_req = None
    kvb = th.kv_bytes_per_token_for(engine)
    if kvb and bw and first_point.input_len_tokens is not None:
        mo = float(ok["mean_output_tokens_per_request"].mean())
        inp = float(first_point.input_len_tokens)
        kv_req = mean_context_tokens(inp, mo) * kvb / bw * 1000
    return fnd.measured(
        engine_at(rnd, engine, first["weight_format"])("itl_marginal_ms_per_request"),
        fit.slope,
        "ms/request",
        ok["source"].tolist(),
        floor_ms_per_request=kv_req,
        r2=fit.r2,
        n=fit.n,
        rests_on_run=first["run"],
        detail="least-squares slope of p50 ITL vs concurrency over gated-in sweep points "
        "(not the 1 → highest chord: concurrency step_marginal_ms_per_request); "
        "floor: one more request's mean KV bytes ÷ bandwidth (a lower bound, not a prediction)",
    )


def _floors_at_1(frame: pd.DataFrame) -> dict[str, float] | None:
    """Each engine's roofline floor (ms) at concurrency 1 of the headline series; None unless both have."""
    if "roofline_floor_ms" not in frame:
        return None
    fl = {
        e: frame[(frame["engine"] == e) & (frame["concurrency"] == 1)]["roofline_floor_ms"] for e in ENGINES
    }
    if not len(fl["vllm"]) or not len(fl["llamacpp"]):
        return None
    return {e: float(fl[e].iloc[0]) for e in ENGINES}


def _step_ratio(
    at: At, rnd: str | None, by_engine: dict[str, list[BenchPoint]], frame: pd.DataFrame, th: TheoryCtx
) -> fnd.Finding:
    """vLLM ÷ llama.cpp single-stream p50 ITL against the ratio of their roofline floors (bytes read per
    step); measured ÷ predicted = llama.cpp's achievement ÷ vLLM's, the gap's one-line reason."""
    key = at("single_stream_step_ratio")
    c1 = {e: next((p for p in by_engine[e] if p.concurrency == 1), None) for e in ENGINES}
    v, ll = c1["vllm"], c1["llamacpp"]
    if v is None or ll is None:
        reason = "no_concurrency_1" if all(by_engine.values()) else "engine_missing"
        return fnd.not_available(
            key, "ratio", reason, f"needs both engines at concurrency 1 in {rnd or 'the campaign'}"
        )
    v_itl, l_itl = v.result.itl.p50_ms, ll.result.itl.p50_ms
    if v_itl is None or l_itl is None:
        why = f"a concurrency-1 point in {rnd or 'the campaign'} has no ITL (no request with a second token)"
        return fnd.not_available(key, "ratio", "point_cut", why)
    meas = step_ratio(v_itl, l_itl)
    floors = _floors_at_1(frame)
    pred = floors["vllm"] / floors["llamacpp"] if floors else None
    achieved = (
        {
            "vllm": achievement_pct(floors["vllm"], v_itl),
            "llamacpp": achievement_pct(floors["llamacpp"], l_itl),
        }
        if floors
        else None
    )
    wb_v, wb_l = th.weight_bytes_per_step("vllm"), th.weight_bytes_per_step("llamacpp")
    return fnd.measured(
        key,
        meas,
        "ratio",
        [v.cite("p50_itl_ms"), ll.cite("p50_itl_ms")],
        theory=pred,
        tolerance_pct=STEP_RATIO_TOLERANCE_PCT if pred is not None else None,
        detail="vLLM p50 ITL ÷ llama.cpp p50 ITL at concurrency 1; theory: ratio of "
        "the roofline floors (bytes read per step)",
        achievement_pct=achieved,
        gap_direction=None if pred is None else ("below" if meas < pred else "above"),
        weight_bytes_ratio=wb_v / wb_l if wb_l and wb_v is not None else None,
    )


def _crossover(at: At, rnd: str | None, by_engine: dict[str, list[BenchPoint]]) -> fnd.Finding:
    """The concurrency where the engines' throughputs cross: log–log interpolation on the common
    concurrencies (the first crossing; every crossing alongside)."""
    key = at("throughput_crossover_concurrency", topic="engines")
    tput = {e: {p.concurrency: p.result.output_throughput_tok_s for p in by_engine[e]} for e in ENGINES}
    common = sorted(c for c in set(tput["vllm"]) & set(tput["llamacpp"]) if c is not None)
    va = [tput["vllm"][c] for c in common]
    lb = [tput["llamacpp"][c] for c in common]
    if len(common) < 2 or None in va or None in lb:
        why = f"fewer than two common points in {rnd or 'the campaign'}"
        return fnd.not_available(key, "requests", "engine_missing", why)
    va_f, lb_f = [float(x) for x in va if x is not None], [float(x) for x in lb if x is not None]
    xs = fits.loglog_crossings([float(c) for c in common], va_f, lb_f)
    srcs = [p.cite("output_throughput") for e in ENGINES for p in by_engine[e] if p.concurrency in common]
    if xs:
        faster_below = "llamacpp" if lb_f[0] > va_f[0] else "vllm"
        return fnd.measured(key, xs[0], "requests", srcs, all_crossings=xs, faster_below=faster_below)
    why = f"{'vllm' if va_f[0] > lb_f[0] else 'llamacpp'} leads at every common point"
    return fnd.not_available(key, "requests", "no_crossing", why, srcs)


def _shortfall(rnd: str | None, frame: pd.DataFrame, th: TheoryCtx) -> fnd.Finding:
    """The largest workload shortfall of llama.cpp's sweep (ignore-eos not honoured), % of the requested
    output tokens, with every concurrency alongside."""
    key = engine_at(rnd, "llamacpp", th.weight_formats.get("llamacpp"))("workload_shortfall_max_pct")
    sub = frame[frame["engine"] == "llamacpp"] if len(frame) else frame
    if not len(sub) or "workload_shortfall_pct" not in sub or sub["workload_shortfall_pct"].isna().all():
        return fnd.not_available(key, "%", "engine_missing", f"no llama.cpp sweep in {rnd or 'the campaign'}")
    pts = sub.dropna(subset=["workload_shortfall_pct"])
    i = pts["workload_shortfall_pct"].idxmax()
    return fnd.measured(
        key,
        float(pts.loc[i, "workload_shortfall_pct"]),
        "%",
        [pts.loc[i, "source"]],
        concurrency=int(pts.loc[i, "concurrency"]),
        by_concurrency={
            str(int(c)): float(v)
            for c, v in zip(pts["concurrency"], pts["workload_shortfall_pct"], strict=True)
        },
    )


def _round_findings(
    rnd: str | None, by_engine: dict[str, list[BenchPoint]], frame: pd.DataFrame, s: SectionInput
) -> list[fnd.Finding]:
    """One round's engine findings; the per-engine ones rest on each engine's first sweep (``frame``)."""
    th = s.th
    bw = th.gpu.bandwidth_bytes_per_s if th.gpu else None
    at = At(round=rnd)
    out: list[fnd.Finding] = []
    for engine in ENGINES:
        finding, sub = _achievement(rnd, engine, frame, th, bw)
        out.append(finding)
        if sub is not None and (marginal := _marginal_cost(rnd, engine, sub, by_engine[engine][0], th, bw)):
            out.append(marginal)
    out.append(_step_ratio(at, rnd, by_engine, frame, th))
    out.append(_crossover(at, rnd, by_engine))
    out.append(_throughput_ratio(at, by_engine, s.ctx))
    out.append(_shortfall(rnd, frame, th))
    return out


def run(s: SectionInput) -> Section:
    campaign, th = s.campaign, s.th
    findings: list[fnd.Finding] = []
    rows: list[dict[str, Any]] = []
    bw = th.gpu.bandwidth_bytes_per_s if th.gpu else None
    all_series = sweep_series(campaign, th)
    ledger = byte_ledger(all_series, bw)
    for rnd in campaign.rounds:
        by_engine = {e: sweep_points(campaign, rnd, e) for e in ENGINES}
        # the series whose points the per-engine findings rest on: the engine's first sweep of the round
        head = {e: (by_engine[e][0].run.name if by_engine[e] else None) for e in ENGINES}
        round_rows = [
            _point_row(rnd, series, p, head[series["engine"]], s.ctx, bw)
            for series in all_series
            if series["round"] == (rnd or "") and series["engine"] in ENGINES
            for p in series["points"]
        ]
        rows += round_rows
        frame = pd.DataFrame([r for r in round_rows if r["headline"]])
        findings += _round_findings(rnd, by_engine, frame, s)
    return Section(
        name="engines",
        tables={"engines_points": pd.DataFrame(rows), "engines_byte_ledger": pd.DataFrame(ledger)},
        findings=findings,
    )
