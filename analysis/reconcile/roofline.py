"""Roofline per series, against the datasheet AND the card's measured ceilings, side by side; knee,
single stream and peak per own run; the quantization speed-up between two weight formats of one engine.

A series is one concurrency sweep of one engine with one weight format: a (round, engine) of an imported
campaign, or one run of our own collector. The table `roofline_points` has every sweep point of every
series in one shape, so the cross-campaign comparison reads the same columns from every campaign.

Floors (``roofline_floor_ms``): (weight bytes read per step + concurrency × mean KV bytes per
request) ÷ bandwidth, with bandwidth = the datasheet's, or the measured device-to-device copy rate
(``collector.ceilings``: bytes read + written per s — what the memory system really sustains).
llama.cpp's own per-token time, Δtokens_predicted_seconds_total ÷ Δtokens_predicted_total between the
point's boundary scrapes, is kept beside the client's p50 ITL.
"""

from __future__ import annotations

import pandas as pd

from analysis import findings as fnd
from analysis import theory
from analysis.campaign import BenchPoint, Campaign
from analysis.reconcile import Context, Section, SectionInput, engine_at, run_at
from analysis.reconcile.concurrency import (
    knee_finding,
    peak_throughput_finding,
    run_sweep_points,
    sweep_points,
    throughput_gain_finding,
)
from analysis.reconcile.theoryctx import TheoryCtx

ENGINES = ("vllm", "llamacpp")
# The byte ledger predicts a step ratio only if both formats reach the same share of their roofline.
QUANT_RATIO_TOLERANCE_PCT = 10.0


def mean_context_tokens(input_len: float, output_len: float) -> float:
    """Average cached context of a request while it decodes, tokens: input + output ÷ 2."""
    return input_len + output_len / 2


def roofline_floor_ms(
    weight_bytes_per_step: float, concurrency: int, kv_bytes_per_request: float, bandwidth_bytes_per_s: float
) -> float:
    """Memory-bound floor of one decode step, ms:
    (weight bytes read per step + concurrency × mean KV bytes per request) ÷ bandwidth × 1000."""
    kv = theory.kv_bytes_read_per_step(kv_bytes_per_request, concurrency, 1)
    return theory.decode_step_floor_s(weight_bytes_per_step, kv, bandwidth_bytes_per_s) * 1000.0


def kv_bytes_per_request(s: dict, p) -> float | None:
    """One request's mean KV bytes over its decode at a point, bytes: mean context (prompt + half the mean
    output) × the series' KV bytes per token; None without the lengths or the KV size."""
    r = p.result
    mean_out = r.total_output_tokens / r.completed if r.completed and r.total_output_tokens else None
    kvb = s["kv_bytes_per_token"]
    if kvb is None or not p.input_len_tokens or not mean_out:
        return None
    return mean_context_tokens(p.input_len_tokens, mean_out) * kvb


def step_bytes(s: dict, p) -> float | None:
    """The bytes one decode step reads at a point, bytes: the series' weight bytes per step + concurrency ×
    kv_bytes_per_request — the roofline floor's numerator, and the one byte count every page's "bytes per
    step" ratio divides."""
    kv = kv_bytes_per_request(s, p)
    wb = s["weight_bytes_per_step"]
    return None if kv is None or wb is None else wb + p.concurrency * kv


def achievement_pct(floor_ms: float, measured_ms: float) -> float:
    """How close a measured step is to its floor, %: floor ÷ measured × 100 (100 = at the roofline)."""
    return floor_ms / measured_ms * 100.0


def server_token_ms(predicted_s_delta: float | None, predicted_tokens_delta: float | None) -> float | None:
    """llama.cpp's own mean time per generated token over a point, ms:
    Δtokens_predicted_seconds_total ÷ Δtokens_predicted_total × 1000 (each slot's generation wall time, so
    at concurrency c it approximates one decode step, not step ÷ c)."""
    if predicted_s_delta is None or not predicted_tokens_delta:
        return None
    return predicted_s_delta / predicted_tokens_delta * 1000.0


def step_ratio(heavy_ms: float, light_ms: float) -> float:
    """How many times faster the second series decodes, dimensionless: the first's step time (p50 ITL, ms) ÷
    the second's. The one step ratio: a lighter weight format's speed-up (heavy ÷ light), vLLM ÷ llama.cpp at
    one stream (engines), the faster series' single-stream advantage (selection)."""
    return heavy_ms / light_ms


def throughput_ratio(a_tokens_per_s: float, b_tokens_per_s: float) -> float:
    """How many times more output the first series delivers, dimensionless: a's output tokens/s ÷ b's. The one
    throughput ratio: vLLM ÷ llama.cpp at the highest common concurrency (engines, the home page), one format
    over another per concurrency (quantization), the peak-throughput advantage (selection)."""
    return a_tokens_per_s / b_tokens_per_s


def sweep_series(campaign: Campaign, th: TheoryCtx) -> list[dict]:
    """Every concurrency sweep as a series (engine × weight format; one per run of our own, one per round and
    engine of an imported campaign):
    [{series, round, run, engine, weight_format, kv_bytes_per_token, weight_bytes_per_step, points}]"""
    out = []
    if any(r.own for r in campaign.runs):
        for run in campaign.runs:
            pts = run_sweep_points(run) if run.own else []
            if not pts:
                continue
            fmt = th.run_formats.get(run.name)
            out.append(
                {
                    "series": run.name,
                    "round": "",
                    "run": run.name,
                    "engine": run.engine,
                    "weight_format": fmt[0] if fmt else None,
                    "kv_dtype": fmt[1] if fmt else None,
                    "kv_bytes_per_token": th.kv_bytes_per_token_for_run(run.name),
                    "weight_bytes_per_step": th.weight_bytes_per_step_for_run(run.name),
                    "format_source": fmt[2] if fmt else "",
                    "points": pts,
                }
            )
        return out
    for rnd in campaign.rounds:
        for engine in ENGINES:
            pts = sweep_points(campaign, rnd, engine)
            if not pts:
                continue
            out.append(
                {
                    "series": f"{rnd}/{engine}" if rnd else engine,
                    "round": rnd or "",
                    "run": pts[0].run.name,
                    "engine": engine,
                    "weight_format": th.weight_formats.get(engine),
                    "kv_dtype": th.kv_dtypes.get(engine),
                    "kv_bytes_per_token": th.kv_bytes_per_token_for(engine),
                    "weight_bytes_per_step": th.weight_bytes_per_step(engine),
                    "format_source": th.weight_format_source.get(engine, ""),
                    "points": pts,
                }
            )
    return out


def _point_row(s: dict, p: BenchPoint, ctx: Context, th: TheoryCtx) -> dict:
    r = p.result
    mean_out = r.total_output_tokens / r.completed if r.completed else None
    row = {
        "series": s["series"],
        "round": s["round"],
        "run": s["run"],
        "engine": s["engine"],
        "weight_format": s["weight_format"],
        "test_kind": p.test_kind,
        "concurrency": p.concurrency,
        "gate_ok": ctx.gate_ok(p),
        "input_len_tokens": p.input_len_tokens,
        "mean_output_tokens_per_request": mean_out,
        "p50_itl_ms": r.itl.p50_ms,
        "p99_itl_ms": r.itl.p99_ms,
        "mean_tpot_ms": r.tpot.mean_ms,
        "output_throughput_tokens_per_s": r.output_throughput_tok_s,
        "source": p.cite("p50_itl_ms"),
    }
    wb = s["weight_bytes_per_step"]
    kv_req = kv_bytes_per_request(s, p)
    if wb is not None and kv_req is not None:
        row["bytes_per_step"] = step_bytes(s, p)
        for tag, bw in (
            ("datasheet", th.gpu.bandwidth_bytes_per_s if th.gpu else None),
            ("measured", th.ceilings.copy_bytes_per_s if th.ceilings else None),
        ):
            if bw and row["p50_itl_ms"]:
                floor = roofline_floor_ms(wb, p.concurrency, kv_req, bw)
                row[f"floor_{tag}_ms"] = floor
                row[f"achievement_{tag}_pct"] = achievement_pct(floor, row["p50_itl_ms"])
                row[f"bandwidth_{tag}_bytes_per_s"] = bw
    w = ctx.window(p)
    if w is not None:
        tok = server_token_ms(w.delta("predicted_s"), w.delta("predicted_tokens"))
        if tok is not None:
            row["server_token_ms"] = tok
    return row


def run(s: SectionInput) -> Section:
    campaign, ctx, th = s.campaign, s.ctx, s.th
    findings: list[fnd.Finding] = []
    rows: list[dict] = []
    series = sweep_series(campaign, th)
    for s in series:
        s_rows = [_point_row(s, p, ctx, th) for p in s["points"]]
        rows += s_rows
        run = s["points"][0].run
        if not run.own:
            continue  # imported campaigns state these under their legacy keys (concurrency, engines)
        findings += _own_series_findings(run, s, s_rows, ctx, th)
    if any(r.own for r in campaign.runs):
        findings += _quantization(series, rows, th)
    cols = [
        "series",
        "round",
        "run",
        "engine",
        "weight_format",
        "concurrency",
        "gate_ok",
        "p50_itl_ms",
        "output_throughput_tokens_per_s",
    ]
    return Section(
        name="roofline",
        tables={"roofline_points": pd.DataFrame(rows, columns=None if rows else cols)},
        findings=findings,
    )


def _own_series_findings(run, s: dict, s_rows: list[dict], ctx: Context, th: TheoryCtx) -> list[fnd.Finding]:
    pre = run_at(run, s["weight_format"])
    pts: list[BenchPoint] = s["points"]
    out: list[fnd.Finding] = []
    out.append(knee_finding(pre, pts, ctx))
    out.append(peak_throughput_finding(pre, pts, ctx))
    c1 = next((p for p in pts if p.concurrency == 1), None)
    out.append(throughput_gain_finding(pre, c1, [p for p in pts if ctx.gate_ok(p)], {}))
    first = min(s_rows, key=lambda r: r["concurrency"])
    out.append(_single_stream_finding(pre, s_rows))
    for tag, reason, why in (
        ("datasheet", "no_gpu_datasheet", th.gpu_reason or "no GPU datasheet for this campaign"),
        ("measured", "no_measured_ceiling", "no ceilings.json in the campaign"),
    ):
        key = pre(
            "roofline_achievement_pct" if tag == "datasheet" else "roofline_achievement_measured_ceiling_pct"
        )
        have = [r for r in s_rows if r.get(f"achievement_{tag}_pct") is not None]
        if s["weight_bytes_per_step"] is None:
            out.append(
                fnd.not_available(
                    key, "%", "no_theory", th.model_reason or "no model config or weight format"
                )
            )
        elif not have:
            out.append(fnd.not_available(key, "%", reason, why, [first["source"]]))
        else:
            h0 = min(have, key=lambda r: r["concurrency"])
            bw_src = th.gpu_source if tag == "datasheet" else th.ceilings_source
            out.append(
                fnd.measured(
                    key,
                    h0[f"achievement_{tag}_pct"],
                    "%",
                    [h0["source"], s["format_source"], *bw_src, *th.model_source],
                    concurrency=h0["concurrency"],
                    floor_ms=h0[f"floor_{tag}_ms"],
                    p50_itl_ms=h0["p50_itl_ms"],
                    bandwidth_bytes_per_s=h0[f"bandwidth_{tag}_bytes_per_s"],
                    by_concurrency={str(int(r["concurrency"])): r[f"achievement_{tag}_pct"] for r in have},
                    detail=f"floor ({tag} bandwidth) ÷ measured p50 ITL at the lowest concurrency; table "
                    "roofline_points has every point",
                )
            )
    return out


def _single_stream_finding(pre, s_rows: list[dict]) -> fnd.Finding:
    """p50 ITL at the series' lowest concurrency with one; n/a when no point completed a request with an ITL
    (the server died, the run was stopped)."""
    timed = [r for r in s_rows if r["p50_itl_ms"] is not None]
    if not timed:
        first = min(s_rows, key=lambda r: r["concurrency"])
        why = "no point completed a request with a second token: no ITL"
        return fnd.not_available(pre("single_stream_p50_itl_ms"), "ms", "point_cut", why, [first["source"]])
    first = min(timed, key=lambda r: r["concurrency"])
    return fnd.measured(
        pre("single_stream_p50_itl_ms"),
        first["p50_itl_ms"],
        "ms",
        [first["source"]],
        concurrency=first["concurrency"],
        floor_datasheet_ms=first.get("floor_datasheet_ms"),
        floor_measured_ms=first.get("floor_measured_ms"),
        server_token_ms=first.get("server_token_ms"),
        output_throughput_tokens_per_s=first["output_throughput_tokens_per_s"],
    )


def _quantization(series: list[dict], rows: list[dict], th: TheoryCtx) -> list[fnd.Finding]:
    """Per engine with two or more weight formats: the single-stream step ratio of each heavier format over
    the lightest, measured vs the byte ledger (ratio of the floors: the bytes each step reads)."""
    out: list[fnd.Finding] = []
    by_engine: dict[str, list[dict]] = {}
    for s in series:
        if s["weight_format"] and s["weight_bytes_per_step"]:
            by_engine.setdefault(s["engine"], []).append(s)
    for engine in sorted({s["engine"] for s in series}):
        group = by_engine.get(engine, [])
        fmts = sorted({s["weight_format"] for s in group})
        if len(fmts) < 2:
            out.append(
                fnd.not_available(
                    engine_at(None, engine, topic="quantization")("step_ratio"),
                    "ratio",
                    "no_second_format",
                    f"{engine}: one weight format only ({', '.join(fmts) or 'unknown'})",
                )
            )
            continue
        lightest = min(group, key=lambda s: s["weight_bytes_per_step"])
        # one ratio per format: a campaign may hold several runs of one (repeats, an experiment's arms)
        done: set[str] = set()
        for heavy in sorted(group, key=lambda s: (-s["weight_bytes_per_step"], s["series"])):
            if heavy is lightest or heavy["weight_format"] in done | {lightest["weight_format"]}:
                continue
            done.add(heavy["weight_format"])
            key = engine_at(None, engine, topic="quantization")(
                "step_ratio", formats=(heavy["weight_format"], lightest["weight_format"])
            )
            hr = {r["concurrency"]: r for r in rows if r["series"] == heavy["series"]}
            lr = {r["concurrency"]: r for r in rows if r["series"] == lightest["series"]}
            common = sorted(set(hr) & set(lr))
            if not common:
                out.append(
                    fnd.not_available(
                        key, "ratio", "no_concurrency_1", "no concurrency measured in both runs"
                    )
                )
                continue
            c = common[0]
            h, lo = hr[c], lr[c]
            meas = step_ratio(h["p50_itl_ms"], lo["p50_itl_ms"])
            theo = (
                h["bytes_per_step"] / lo["bytes_per_step"]
                if h.get("bytes_per_step") and lo.get("bytes_per_step")
                else None
            )
            out.append(
                fnd.measured(
                    key,
                    meas,
                    "ratio",
                    [
                        h["source"],
                        lo["source"],
                        heavy["format_source"],
                        lightest["format_source"],
                        *th.model_source,
                    ],
                    theory=theo,
                    tolerance_pct=QUANT_RATIO_TOLERANCE_PCT if theo is not None else None,
                    concurrency=c,
                    weight_bytes_ratio=heavy["weight_bytes_per_step"] / lightest["weight_bytes_per_step"],
                    throughput_ratio_by_concurrency={
                        str(int(x)): throughput_ratio(
                            lr[x]["output_throughput_tokens_per_s"], hr[x]["output_throughput_tokens_per_s"]
                        )
                        for x in common
                        if hr[x]["output_throughput_tokens_per_s"]
                    },
                    gap_direction=None if theo is None else ("below" if meas < theo else "above"),
                    # measured ÷ predicted ratio = the lighter format's achievement ÷ the heavier's
                    achievement_pct={
                        heavy["weight_format"]: h.get("achievement_datasheet_pct"),
                        lightest["weight_format"]: lo.get("achievement_datasheet_pct"),
                    },
                    itl_ratio_by_concurrency={
                        str(int(x)): step_ratio(hr[x]["p50_itl_ms"], lr[x]["p50_itl_ms"]) for x in common
                    },
                    detail=f"p50 ITL {heavy['weight_format']} ÷ p50 ITL {lightest['weight_format']} at "
                    f"concurrency {c}; theory: ratio of the bytes each step reads (weights + KV), "
                    "i.e. of the roofline floors",
                )
            )
    return out
