"""Engine comparison (vLLM bf16 vs llama.cpp Q4_K_M): throughput and ITL of both, the byte ledger and
the roofline floor per point, single-stream step ratio against the bytes each step reads, marginal
cost per extra request in flight, the throughput crossover, and the workload shortfall where an engine
did not honour ignore-eos."""

from __future__ import annotations

import pandas as pd

from analysis import findings as fnd
from analysis import fits
from analysis.keys import At
from analysis.reconcile import Context, Section, SectionInput, engine_at
from analysis.reconcile.concurrency import sweep_points
from analysis.reconcile.roofline import (
    achievement_pct,
    mean_context_tokens,
    roofline_floor_ms,
    step_ratio,
    sweep_series,
    throughput_ratio,
)

ENGINES = ("vllm", "llamacpp")
# The byte ledger predicts the single-stream ratio only if both engines reach the same share of their
# roofline; a gap beyond this is a failed reconciliation the page explains with roofline_achievement_pct.
STEP_RATIO_TOLERANCE_PCT = 10.0


def shortfall_pct(total_output_tokens: int, completed: int, requested_output_len: int) -> float:
    """Output tokens missing against the requested workload, %: (1 − total ÷ (completed × requested)) ×
    100."""
    return (1.0 - total_output_tokens / (completed * requested_output_len)) * 100.0


def byte_ledger(series: list[dict], bandwidth_bytes_per_s: float | None) -> list[dict]:
    """One row per series identity (engine × weight format): the bytes a decode step reads and its floor."""
    out: list[dict] = []
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


def _throughput_ratio(at: At, by_engine: dict, ctx: Context) -> fnd.Finding:
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


def run(s: SectionInput) -> Section:
    campaign, ctx, th = s.campaign, s.ctx, s.th
    findings: list[fnd.Finding] = []
    rows: list[dict] = []
    bw = th.gpu.bandwidth_bytes_per_s if th.gpu else None
    all_series = sweep_series(campaign, th)
    ledger = byte_ledger(all_series, bw)
    for rnd in campaign.rounds:
        at = At(round=rnd)
        by_engine = {e: sweep_points(campaign, rnd, e) for e in ENGINES}
        # the series whose points the per-engine findings rest on: the engine's first sweep of the round
        head = {e: (by_engine[e][0].run.name if by_engine[e] else None) for e in ENGINES}
        for s in all_series:
            if s["round"] != (rnd or "") or s["engine"] not in ENGINES:
                continue
            wb, kvb = s["weight_bytes_per_step"], s["kv_bytes_per_token"]
            for p in s["points"]:
                r = p.result
                mean_out = r.total_output_tokens / r.completed if r.completed else None
                row = {
                    "round": rnd or "",
                    "engine": s["engine"],
                    "weight_format": s["weight_format"],
                    "series": s["series"],
                    "run": s["run"],
                    "headline": s["run"] == head[s["engine"]],
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
                if wb is not None and bw and kvb is not None and p.input_len_tokens and mean_out:
                    kv_req = mean_context_tokens(p.input_len_tokens, mean_out) * kvb
                    floor = roofline_floor_ms(wb, p.concurrency, kv_req, bw)
                    row["roofline_floor_ms"] = floor
                    row["roofline_achievement_pct"] = achievement_pct(floor, row["p50_itl_ms"])
                if p.requested_output_len_tokens and r.completed:
                    row["requested_output_len_tokens"] = p.requested_output_len_tokens
                    row["workload_shortfall_pct"] = shortfall_pct(
                        r.total_output_tokens, r.completed, p.requested_output_len_tokens
                    )
                rows.append(row)
        # the per-engine findings below rest on each engine's first sweep (one weight format)
        frame = pd.DataFrame([r for r in rows if r["round"] == (rnd or "") and r["headline"]])

        # roofline achievement: the single-stream value as the headline, the range alongside
        for engine in ENGINES:
            key = engine_at(rnd, engine, th.weight_formats.get(engine))("roofline_achievement_pct")
            sub = frame[frame["engine"] == engine] if len(frame) else frame
            if (
                not len(sub)
                or "roofline_achievement_pct" not in sub
                or sub["roofline_achievement_pct"].isna().all()
            ):
                reason = "engine_missing" if not len(sub) else ("no_gpu_datasheet" if not bw else "no_theory")
                why = (
                    th.gpu_reason
                    or f"{th.gpu.display_name if th.gpu else 'the device'} has no datasheet bandwidth"
                    if reason == "no_gpu_datasheet"
                    else f"no {engine} sweep or no theory for it in {rnd or 'the campaign'}"
                )
                findings.append(fnd.not_available(key, "%", reason, why))
                continue
            sub = sub.dropna(subset=["roofline_achievement_pct"]).sort_values("concurrency")
            first = sub.iloc[0]
            eat = engine_at(rnd, engine, first["weight_format"])
            findings.append(
                fnd.measured(
                    eat("roofline_achievement_pct"),
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
                    detail=(
                        "floor ÷ measured p50 ITL at the lowest concurrency; table engines_points "
                        "has every point"
                    ),
                )
            )
            # marginal cost per extra request in flight: the least-squares slope of p50 ITL against
            # concurrency over every gated-in point (concurrency_depth's step_marginal_ms_per_request is the
            # chord from 1 to the highest instead: fits.chord_slope says when the two differ)
            ok = sub[sub["gate_ok"]]
            if len(ok) >= 2:
                fit = fits.least_squares(ok["concurrency"].astype(float).tolist(), ok["p50_itl_ms"].tolist())
                kv_req = None
                if th.kv_bytes_per_token_for(engine) and bw:
                    mo = float(ok["mean_output_tokens_per_request"].mean())
                    inp = float(by_engine[engine][0].input_len_tokens)
                    kv_req = mean_context_tokens(inp, mo) * th.kv_bytes_per_token_for(engine) / bw * 1000
                findings.append(
                    fnd.measured(
                        eat("itl_marginal_ms_per_request"),
                        fit.slope,
                        "ms/request",
                        ok["source"].tolist(),
                        floor_ms_per_request=kv_req,
                        r2=fit.r2,
                        n=fit.n,
                        rests_on_run=first["run"],
                        detail="least-squares slope of p50 ITL vs concurrency over gated-in sweep points "
                        "(not the 1 → highest chord: concurrency step_marginal_ms_per_request); "
                        "floor: one more request's mean KV bytes ÷ bandwidth (a lower bound, not a "
                        "prediction)",
                    )
                )
        # single-stream step ratio
        key = at("single_stream_step_ratio")
        c1 = {e: next((p for p in by_engine[e] if p.concurrency == 1), None) for e in ENGINES}
        if c1["vllm"] is None or c1["llamacpp"] is None:
            findings.append(
                fnd.not_available(
                    key,
                    "ratio",
                    "no_concurrency_1" if all(by_engine.values()) else "engine_missing",
                    f"needs both engines at concurrency 1 in {rnd or 'the campaign'}",
                )
            )
        else:
            v, ll = c1["vllm"], c1["llamacpp"]
            meas = step_ratio(v.result.itl.p50_ms, ll.result.itl.p50_ms)
            fl = (
                {
                    e: frame[(frame["engine"] == e) & (frame["concurrency"] == 1)]["roofline_floor_ms"]
                    for e in ENGINES
                }
                if "roofline_floor_ms" in frame
                else {}
            )
            pred = (
                float(fl["vllm"].iloc[0] / fl["llamacpp"].iloc[0])
                if fl and len(fl["vllm"]) and len(fl["llamacpp"])
                else None
            )
            # measured ÷ predicted ratio = llama.cpp's achievement ÷ vLLM's: the gap's one-line reason
            achieved = (
                {
                    "vllm": achievement_pct(float(fl["vllm"].iloc[0]), v.result.itl.p50_ms),
                    "llamacpp": achievement_pct(float(fl["llamacpp"].iloc[0]), ll.result.itl.p50_ms),
                }
                if pred is not None
                else None
            )
            findings.append(
                fnd.measured(
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
                    weight_bytes_ratio=(
                        th.weight_bytes_per_step("vllm") / th.weight_bytes_per_step("llamacpp")
                    )
                    if th.weight_bytes_per_step("llamacpp")
                    else None,
                )
            )
        # throughput crossover: log–log interpolation on the common concurrencies
        key = at("throughput_crossover_concurrency", topic="engines")
        common = sorted(
            {p.concurrency for p in by_engine["vllm"]} & {p.concurrency for p in by_engine["llamacpp"]}
        )
        if len(common) < 2:
            findings.append(
                fnd.not_available(
                    key,
                    "requests",
                    "engine_missing",
                    f"fewer than two common points in {rnd or 'the campaign'}",
                )
            )
        else:
            va = [
                next(p for p in by_engine["vllm"] if p.concurrency == c).result.output_throughput_tok_s
                for c in common
            ]
            lb = [
                next(p for p in by_engine["llamacpp"] if p.concurrency == c).result.output_throughput_tok_s
                for c in common
            ]
            xs = fits.loglog_crossings(common, va, lb)
            srcs = [
                p.cite("output_throughput") for e in ENGINES for p in by_engine[e] if p.concurrency in common
            ]
            if xs:
                findings.append(
                    fnd.measured(
                        key,
                        xs[0],
                        "requests",
                        srcs,
                        all_crossings=xs,
                        faster_below="llamacpp" if lb[0] > va[0] else "vllm",
                    )
                )
            else:
                findings.append(
                    fnd.not_available(
                        key,
                        "requests",
                        "no_crossing",
                        f"{'vllm' if va[0] > lb[0] else 'llamacpp'} leads at every common point",
                        srcs,
                    )
                )
        findings.append(_throughput_ratio(at, by_engine, ctx))
        # workload shortfall (ignore-eos not honoured)
        key = engine_at(rnd, "llamacpp", th.weight_formats.get("llamacpp"))("workload_shortfall_max_pct")
        sub = frame[frame["engine"] == "llamacpp"] if len(frame) else frame
        if not len(sub) or "workload_shortfall_pct" not in sub or sub["workload_shortfall_pct"].isna().all():
            findings.append(
                fnd.not_available(
                    key, "%", "engine_missing", f"no llama.cpp sweep in {rnd or 'the campaign'}"
                )
            )
        else:
            s = sub.dropna(subset=["workload_shortfall_pct"])
            i = s["workload_shortfall_pct"].idxmax()
            findings.append(
                fnd.measured(
                    key,
                    float(s.loc[i, "workload_shortfall_pct"]),
                    "%",
                    [s.loc[i, "source"]],
                    concurrency=int(s.loc[i, "concurrency"]),
                    by_concurrency={
                        str(int(c)): float(v)
                        for c, v in zip(s["concurrency"], s["workload_shortfall_pct"], strict=True)
                    },
                )
            )
    return Section(
        name="engines",
        tables={"engines_points": pd.DataFrame(rows), "engines_byte_ledger": pd.DataFrame(ledger)},
        findings=findings,
    )
