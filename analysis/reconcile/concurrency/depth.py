"""What the concurrency sweep says beyond the curve: the throughput gained from one stream to the highest
concurrency and what each slot keeps of the single stream's speed; the p99/p50 ITL ratio per point; the decode
share of end-to-end latency; the waiting queue's peak and how fast it drains (sampler gauges); where MFU
overtakes MBU; the concurrency the KV pool allows at this workload; and batching economics — how much the
measured step grows from one stream to the highest concurrency against how much the bandwidth floor grows.

Series as the roofline section builds them: a (round, engine) of an imported campaign, a run of our own.
Keys: ``<round>.concurrency.<engine>.<metric>`` and ``runs.<run>.concurrency.<metric>``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, TypedDict

import pandas as pd

from analysis.core import findings as fnd
from analysis.core import fits
from analysis.core.keys import At
from analysis.core.windows import window_indices
from analysis.loading.campaign import BenchPoint, Campaign, RunData
from analysis.reconcile import Context, Section, SectionInput, engine_at, run_at
from analysis.reconcile.concurrency.points import concurrency_of, points_value, throughput_gain
from analysis.reconcile.lengths import pool_tokens
from analysis.reconcile.roofline import SweepSeries, mean_context_tokens, roofline_floor_ms, sweep_series
from analysis.reconcile.theoryctx import TheoryCtx


def per_slot_efficiency_pct(gain_: float, concurrency: int) -> float:
    """What each of c slots keeps of the single stream's speed, %: gain ÷ c × 100 (100 = batching is free)."""
    return gain_ / concurrency * 100.0


def decode_share_pct(mean_e2e_ms: float, mean_ttft_ms: float) -> float:
    """Share of a request's end-to-end latency spent decoding after its first token, %:
    (mean E2E − mean TTFT) ÷ mean E2E × 100."""
    return (mean_e2e_ms - mean_ttft_ms) / mean_e2e_ms * 100.0


def pool_ceiling_requests(pool_tokens_: int, tokens_per_request: float, block_size: int = 1) -> int:
    """Requests the KV pool holds at their largest (prompt + output), requests:
    floor(pool ÷ (ceil(tokens per request ÷ block) × block))."""
    need = math.ceil(tokens_per_request / block_size) * block_size
    return math.floor(pool_tokens_ / need)


def drain(ts: list[float], waiting: list[float], idx: range) -> tuple[float | None, float | None, int | None]:
    """The waiting queue inside a window: (peak, seconds from the peak sample until a sample shows it empty —
    None when it never empties inside the window, row of the peak)."""
    vals = [(i, waiting[i]) for i in idx if not math.isnan(waiting[i])]
    if not vals:
        return None, None, None
    i_peak, peak = max(vals, key=lambda x: x[1])
    peak = int(peak) if float(peak).is_integer() else peak  # a gauge of requests: whole numbers
    if peak <= 0:
        return 0.0, 0.0, i_peak
    for i in range(i_peak + 1, idx.stop):
        if not math.isnan(waiting[i]) and waiting[i] == 0:
            return peak, ts[i] - ts[i_peak], i_peak
    return peak, None, i_peak


def _at(s: SweepSeries, run: RunData) -> At:
    if run.own:
        return run_at(run, s["weight_format"], topic="concurrency")
    return engine_at(s["round"] or None, s["engine"], s["weight_format"], topic="concurrency")


class DepthRow(TypedDict):
    """One sweep point (a row of the concurrency_depth table); every column on every row: a series whose
    points all lack some (no request completed) keeps them."""

    series: str
    round: str
    run: str
    engine: str
    weight_format: str | None
    concurrency: int | None
    output_throughput_tokens_per_s: float | None
    p50_itl_ms: float | None
    p99_itl_ms: float | None
    mean_ttft_ms: float | None
    mean_e2el_ms: float | None
    gate_ok: bool
    source: str
    max_waiting: float | None
    waiting_drain_s: float | None
    floor_ms: float | None
    mfu_pct: float | None
    mbu_pct: float | None
    p99_over_p50_itl: float | None
    decode_share_pct: float | None
    waiting_peak_source: str | None


def _waiting(p: BenchPoint, ctx: Context) -> tuple[float | None, float | None, str | None]:
    """The waiting queue's peak inside the point's window, the seconds it took to drain, and the peak
    sample's citation (all None without a waiting gauge)."""
    w = ctx.window(p)
    if w is None or p.run.name not in ctx.sampler_series:
        return None, None, None
    ts, cols = ctx.sampler_series[p.run.name]
    if "waiting" not in cols:
        return None, None, None
    peak, dr, i_peak = drain(ts, cols["waiting"], window_indices(ts, w.window))
    return peak, dr, ctx.sample_cite(p.run, i_peak) if i_peak is not None else None


def _floor_ms(s: SweepSeries, p: BenchPoint, th: TheoryCtx) -> float | None:
    """The point's bandwidth floor of one decode step, ms (roofline.roofline_floor_ms at its mean context)."""
    r = p.result
    mean_out = (
        r.total_output_tokens / r.completed if r.completed and r.total_output_tokens is not None else None
    )
    wb, kvb = s["weight_bytes_per_step"], s["kv_bytes_per_token"]
    bw = th.gpu.bandwidth_bytes_per_s if th.gpu else None
    if wb is None or kvb is None or not bw or not p.input_len_tokens or not mean_out or p.concurrency is None:
        return None
    return roofline_floor_ms(wb, p.concurrency, mean_context_tokens(p.input_len_tokens, mean_out) * kvb, bw)


def _row(s: SweepSeries, p: BenchPoint, ctx: Context, points: pd.DataFrame, th: TheoryCtx) -> DepthRow:
    r = p.result
    done = bool(r.completed)
    p50, p99 = (r.itl.p50_ms, r.itl.p99_ms) if done else (None, None)
    ttft, e2el = (r.mean_ttft_ms, r.e2el.mean_ms) if done else (None, None)
    peak, drain_s, peak_src = _waiting(p, ctx)
    return {
        "series": s["series"],
        "round": s["round"],
        "run": p.run.name,
        "engine": s["engine"],
        "weight_format": s["weight_format"],
        "concurrency": p.concurrency,
        "output_throughput_tokens_per_s": r.output_throughput_tok_s,
        "p50_itl_ms": p50,
        "p99_itl_ms": p99,
        "mean_ttft_ms": ttft,
        "mean_e2el_ms": e2el,
        "gate_ok": ctx.gate_ok(p),
        "source": p.cite(),
        "max_waiting": peak,
        "waiting_drain_s": drain_s,
        "floor_ms": _floor_ms(s, p, th),
        "mfu_pct": points_value(points, p, "mfu_pct"),
        "mbu_pct": points_value(points, p, "mbu_pct"),
        "p99_over_p50_itl": p99 / p50 if p50 and p99 else None,
        "decode_share_pct": decode_share_pct(e2el, ttft) if e2el and ttft is not None else None,
        "waiting_peak_source": peak_src,
    }


@dataclass(frozen=True)
class DepthView:
    """What every finding of one sweep series reads: where its findings go, its points and rows, the
    gated-in points with an output throughput (``ok``), every point's citation and the series' first run."""

    s: SweepSeries
    at: At
    points: list[BenchPoint]
    rows: list[DepthRow]
    ok: list[tuple[BenchPoint, DepthRow]]
    srcs: list[str]
    run: RunData

    @staticmethod
    def of(s: SweepSeries, rows: list[DepthRow], ctx: Context) -> DepthView:
        pts: list[BenchPoint] = s["points"]
        ok = [
            (p, r)
            for p, r in zip(pts, rows, strict=True)
            if ctx.gate_ok(p) and r["output_throughput_tokens_per_s"]
        ]
        return DepthView(s, _at(s, pts[0].run), pts, rows, ok, [p.cite() for p in pts], pts[0].run)


def series_findings(v: DepthView, campaign: Campaign, th: TheoryCtx) -> list[fnd.Finding]:
    """Everything one sweep series says beyond the curve, one finding family each (the module's docstring)."""
    return [
        _per_slot_finding(v),
        *_itl_ratio_findings(v),
        *_decode_share_findings(v),
        _waiting_finding(v),
        _crossover_finding(v, th),
        # the concurrency the KV pool allows at this workload
        _ceiling(v.at, v.s, v.points, campaign),
        _step_marginal_finding(v, th),
    ]


def _per_slot_finding(v: DepthView) -> fnd.Finding:
    """Per-slot efficiency (the throughput gain itself is concurrency.throughput_gain_single_to_max)."""
    rated = [(p, r, t) for p, r in v.ok if (t := r["output_throughput_tokens_per_s"])]
    single = next(((p, t) for p, _, t in rated if p.concurrency == 1), None)
    top = max(rated, key=lambda x: concurrency_of(x[0])) if rated else None
    if single is None or top is None or top[0].concurrency == 1:
        return fnd.not_available(
            v.at("per_slot_efficiency_pct"),
            "%",
            "no_concurrency_1",
            "needs concurrency 1 and a higher gated-in point",
            v.srcs,
        )
    top_p, _, top_t = top
    g = throughput_gain(single[1], top_t)
    return fnd.measured(
        v.at("per_slot_efficiency_pct"),
        per_slot_efficiency_pct(g, concurrency_of(top_p)),
        "%",
        [top_p.cite("output_throughput"), single[0].cite("output_throughput")],
        max_concurrency=top_p.concurrency,
        throughput_gain=g,
        detail="output tokens/s at the highest gated-in concurrency ÷ at 1, ÷ that concurrency: "
        "what each slot keeps of the single stream's speed",
    )


def _itl_ratio_findings(v: DepthView) -> list[fnd.Finding]:
    """The largest p99 ÷ p50 ITL over the gated-in points (none without a ratio)."""
    rr = [(p, x) for p, r in v.ok if (x := r["p99_over_p50_itl"])]
    if not rr:
        return []
    p, ratio = max(rr, key=lambda x: x[1])
    return [
        fnd.measured(
            v.at("itl_p99_over_p50_max"),
            ratio,
            "ratio",
            [p.cite("p99_itl_ms"), p.cite("p50_itl_ms")],
            concurrency=p.concurrency,
            by_concurrency={str(q.concurrency): x for q, x in rr},
        )
    ]


def _decode_share_findings(v: DepthView) -> list[fnd.Finding]:
    """The decode share of E2E at the highest concurrency (none without a share)."""
    dd = [(p, x) for p, r in v.ok if (x := r["decode_share_pct"]) is not None]
    if not dd:
        return []
    p, share = max(dd, key=lambda x: concurrency_of(x[0]))
    return [
        fnd.measured(
            v.at("decode_share_of_e2e_pct"),
            share,
            "%",
            [p.cite("mean_e2el_ms"), p.cite("mean_ttft_ms")],
            concurrency=p.concurrency,
            by_concurrency={str(q.concurrency): x for q, x in dd},
            detail="(mean E2E − mean TTFT) ÷ mean E2E at the highest concurrency",
        )
    ]


def _waiting_finding(v: DepthView) -> fnd.Finding:
    """The waiting queue's peak over the sweep and how fast it drained."""
    ww = [(p, r, x) for p, r in zip(v.points, v.rows, strict=True) if (x := r["max_waiting"]) is not None]
    counter = v.run.counter_source
    if not ww or counter is None:
        return fnd.not_available(
            v.at("waiting_queue_peak"),
            "requests",
            "no_sampler_csv",
            f"{v.run.cite_root} kept no sampler CSV / scrapes with a waiting gauge",
            v.srcs,
        )
    p, r, peak = max(ww, key=lambda x: (x[2], concurrency_of(x[0])))
    return fnd.measured(
        v.at("waiting_queue_peak"),
        peak,
        "requests",
        [r["waiting_peak_source"] or v.run.cite(counter, "waiting")],
        concurrency=p.concurrency,
        drain_s=r["waiting_drain_s"],
        by_concurrency={str(q.concurrency): x for q, _, x in ww},
        detail="the waiting gauge's highest sample in any sweep window; drain: seconds from that "
        "sample to the first later sample showing the queue empty (None: not empty before "
        "the window ended)",
    )


def _crossover_finding(v: DepthView, th: TheoryCtx) -> fnd.Finding:
    """The concurrency at which MFU overtakes MBU (log–log interpolation between measured concurrencies)."""
    um = sorted(
        (
            (p, mfu, mbu)
            for p, r in v.ok
            if (mfu := r["mfu_pct"]) is not None and (mbu := r["mbu_pct"]) is not None
        ),
        key=lambda x: concurrency_of(x[0]),
    )
    counter = v.run.counter_source
    if len(um) < 2 or counter is None:
        return fnd.not_available(
            v.at("mfu_mbu_crossover_concurrency"),
            "requests",
            # a vLLM run without any sampler has no counter at all (llama.cpp has no FLOPs counter anyway)
            "no_sampler_csv"
            if counter is None and v.run.engine == "vllm"
            else "no_flops_counter"
            if th.gpu
            else "no_gpu_datasheet",
            f"{v.run.cite_root}: no FLOPs / read-bytes counters, or no datasheet",
            v.srcs,
        )
    cross = fits.loglog_crossings(
        [concurrency_of(p) for p, _, _ in um], [x for _, x, _ in um], [x for _, _, x in um]
    )
    msrc = [v.run.cite(counter, "flops"), v.run.cite(counter, "read_bytes")]
    if not cross:
        lead = "MBU" if um[0][2] > um[0][1] else "MFU"
        return fnd.not_available(
            v.at("mfu_mbu_crossover_concurrency"),
            "requests",
            "no_crossing",
            f"{lead} leads at every concurrency",
            msrc,
        )
    return fnd.measured(
        v.at("mfu_mbu_crossover_concurrency"),
        cross[0],
        "requests",
        msrc + [p.cite() for p, _, _ in um],
        all_crossings=cross,
        detail="log–log interpolation of MFU and MBU between measured concurrencies",
    )


def _step_marginal_finding(v: DepthView, th: TheoryCtx) -> fnd.Finding:
    """Batching economics: the measured step's growth against the floor's, concurrency 1 to the highest."""
    fl = [(p, itl, f) for p, r in v.ok if (f := r["floor_ms"]) and (itl := r["p50_itl_ms"])]
    lo = next(((p, itl, f) for p, itl, f in fl if p.concurrency == 1), None)
    hi = max(fl, key=lambda x: concurrency_of(x[0])) if fl else None
    if lo is None or hi is None or hi[0].concurrency == 1:
        return fnd.not_available(
            v.at("step_marginal_ms_per_request"),
            "ms/request",
            "no_gpu_datasheet" if not th.gpu or not th.gpu.bandwidth_bytes_per_s else "no_concurrency_1",
            th.gpu_reason or "needs concurrency 1, a higher point and a bandwidth floor",
            v.srcs,
        )
    (pl, itl_l, floor_l), (ph, itl_h, floor_h) = lo, hi
    # the chord from concurrency 1 to the highest (fits.chord_slope), of the measured step and of the
    # floor: step growth against floor growth over the same two ends; engines'
    # itl_marginal_ms_per_request is the least-squares slope over every point instead
    meas = fits.chord_slope(concurrency_of(pl), itl_l, concurrency_of(ph), itl_h)
    floor = fits.chord_slope(concurrency_of(pl), floor_l, concurrency_of(ph), floor_h)
    return fnd.measured(
        v.at("step_marginal_ms_per_request"),
        meas,
        "ms/request",
        [ph.cite("p50_itl_ms"), pl.cite("p50_itl_ms"), *th.gpu_source],
        floor_ms_per_request=floor,
        step_growth=itl_h / itl_l,
        floor_growth=floor_h / floor_l,
        over_floor=meas / floor if floor else None,
        concurrency=[pl.concurrency, ph.concurrency],
        detail="chord slope: (p50 ITL at the highest concurrency − at 1) ÷ (c − 1), against the "
        "same for the bandwidth floor (one more request's mean KV bytes ÷ bandwidth); not the "
        "least-squares slope over every point (engines' itl_marginal_ms_per_request)",
    )


def _ceiling(at: At, s: SweepSeries, pts: list[BenchPoint], campaign: Campaign) -> fnd.Finding:
    """Requests that fit at once at the sweep's request shape: the pool (vLLM, by whole blocks) or the slots
    whose context holds a request (llama.cpp), capped by the server's own sequence limit where it logged
    one."""
    p = pts[0]
    need = (p.input_len_tokens or 0) + (p.requested_output_len_tokens or 0)
    rel, log = p.run.server_log
    if not need or rel is None or log is None:
        return fnd.not_available(
            at("concurrency_ceiling_at_workload"),
            "requests",
            "no_server_log",
            "pool or request shape unknown",
            [p.cite()],
        )
    if s["engine"] == "llamacpp":
        return _slot_ceiling(at, p, need, rel, log)
    return _pool_ceiling(at, p, need, rel, log, campaign)


def _slot_ceiling(at: At, p: BenchPoint, need: float, rel: str, log: Any) -> fnd.Finding:
    """llama.cpp: every slot whose context (n_ctx_slot) holds prompt + output runs one request."""
    n_slots, n_ctx = getattr(log, "n_slots", None), getattr(log, "n_ctx_slot", None)
    if not n_slots or not n_ctx:
        return fnd.not_available(
            at("concurrency_ceiling_at_workload"),
            "requests",
            "no_kv_pool_line",
            "no slot line in the log",
            [p.cite()],
        )
    return fnd.measured(
        at("concurrency_ceiling_at_workload"),
        n_slots if n_ctx >= need else 0,
        "requests",
        [p.run.cite(rel, log.lines.get("n_slots")), p.protocol_source or p.cite()],
        tokens_per_request=need,
        n_ctx_slot=n_ctx,
        basis="slots",
        detail="llama.cpp: every slot whose context (n_ctx_slot) holds prompt + output runs one request",
    )


def _pool_ceiling(at: At, p: BenchPoint, need: float, rel: str, log: Any, campaign: Campaign) -> fnd.Finding:
    """vLLM: the pool in whole 16-token blocks, capped by --max-num-seqs when set."""
    pool, pool_src = pool_tokens(p.run, campaign)
    if pool is None or pool_src is None:
        return fnd.not_available(
            at("concurrency_ceiling_at_workload"),
            "requests",
            "no_kv_pool_line",
            "pool size unknown",
            [p.cite()],
        )
    nda = getattr(log, "non_default_args", None) or {}
    max_seqs = nda.get("max_num_seqs")
    by_pool = pool_ceiling_requests(pool, need, 16)
    ceiling = min(by_pool, int(max_seqs)) if max_seqs else by_pool
    return fnd.measured(
        at("concurrency_ceiling_at_workload"),
        ceiling,
        "requests",
        [pool_src, p.protocol_source or p.cite()]
        + ([p.run.cite(rel, log.lines.get("non_default_args"))] if max_seqs else []),
        tokens_per_request=need,
        by_pool=by_pool,
        max_num_seqs=max_seqs,
        basis="pool" if not max_seqs or by_pool <= int(max_seqs) else "max_num_seqs",
        detail=(
            "floor(pool ÷ (prompt + output rounded up to 16-token blocks)), capped by --max-num-seqs when set"
        ),
    )


def run(s: SectionInput) -> Section:
    campaign, ctx, th, points = s.campaign, s.ctx, s.th, s.points
    findings: list[fnd.Finding] = []
    rows: list[DepthRow] = []
    for series in sweep_series(campaign, th):
        s_rows = [_row(series, p, ctx, points, th) for p in series["points"]]
        rows += s_rows
        findings += series_findings(DepthView.of(series, s_rows, ctx), campaign, th)
    return Section(
        name="concurrency_depth", tables={"concurrency_depth": pd.DataFrame(rows)}, findings=findings
    )
