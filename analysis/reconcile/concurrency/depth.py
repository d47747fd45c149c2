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

import pandas as pd

from analysis import findings as fnd
from analysis import fits
from analysis.campaign import BenchPoint, Campaign, RunData
from analysis.keys import At
from analysis.reconcile import Context, Section, SectionInput, engine_at, run_at
from analysis.reconcile.concurrency.points import throughput_gain
from analysis.reconcile.lengths import pool_tokens
from analysis.reconcile.roofline import mean_context_tokens, roofline_floor_ms, sweep_series
from analysis.reconcile.theoryctx import TheoryCtx
from analysis.windows import window_indices


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


def _at(s: dict, run: RunData) -> At:
    if run.own:
        return run_at(run, s["weight_format"], topic="concurrency")
    return engine_at(s["round"] or None, s["engine"], s["weight_format"], topic="concurrency")


def _row(s: dict, p: BenchPoint, ctx: Context, points: pd.DataFrame, th: TheoryCtx) -> dict:
    r = p.result
    mean_out = r.total_output_tokens / r.completed if r.completed else None
    row: dict = {
        "series": s["series"],
        "round": s["round"],
        "run": p.run.name,
        "engine": s["engine"],
        "weight_format": s["weight_format"],
        "concurrency": p.concurrency,
        "output_throughput_tokens_per_s": r.output_throughput_tok_s,
        "p50_itl_ms": r.itl.p50_ms if r.completed else None,
        "p99_itl_ms": r.itl.p99_ms if r.completed else None,
        "mean_ttft_ms": r.mean_ttft_ms if r.completed else None,
        "mean_e2el_ms": r.e2el.mean_ms if r.completed else None,
        "gate_ok": ctx.gate_ok(p),
        "source": p.cite(),
        "max_waiting": None,
        "waiting_drain_s": None,
        "floor_ms": None,
        "mfu_pct": None,
        "mbu_pct": None,
        # every column on every row: a series whose points all lack them (no request completed) keeps them
        "p99_over_p50_itl": None,
        "decode_share_pct": None,
        "waiting_peak_source": None,
    }
    if row["p50_itl_ms"] and row["p99_itl_ms"]:
        row["p99_over_p50_itl"] = row["p99_itl_ms"] / row["p50_itl_ms"]
    if row["mean_e2el_ms"] and row["mean_ttft_ms"] is not None:
        row["decode_share_pct"] = decode_share_pct(row["mean_e2el_ms"], row["mean_ttft_ms"])
    w = ctx.window(p)
    if w is not None and p.run.name in ctx.sampler_series:
        ts, cols = ctx.sampler_series[p.run.name]
        if "waiting" in cols:
            peak, dr, i_peak = drain(ts, cols["waiting"], window_indices(ts, w.window))
            row["max_waiting"], row["waiting_drain_s"] = peak, dr
            row["waiting_peak_source"] = ctx.sample_cite(p.run, i_peak) if i_peak is not None else None
    pr = points[points["key"] == p.key]
    for c in ("mfu_pct", "mbu_pct"):
        if c in pr and len(pr) and not pd.isna(pr[c].iloc[0]):
            row[c] = float(pr[c].iloc[0])
    wb, kvb = s["weight_bytes_per_step"], s["kv_bytes_per_token"]
    bw = th.gpu.bandwidth_bytes_per_s if th.gpu else None
    if wb is not None and kvb is not None and bw and p.input_len_tokens and mean_out:
        row["floor_ms"] = roofline_floor_ms(
            wb, p.concurrency, mean_context_tokens(p.input_len_tokens, mean_out) * kvb, bw
        )
    return row


def series_findings(
    s: dict, rows: list[dict], campaign: Campaign, ctx: Context, th: TheoryCtx
) -> list[fnd.Finding]:
    pts: list[BenchPoint] = s["points"]
    run = pts[0].run
    at = _at(s, run)
    out: list[fnd.Finding] = []
    ok = [
        (p, r)
        for p, r in zip(pts, rows, strict=True)
        if ctx.gate_ok(p) and r["output_throughput_tokens_per_s"]
    ]
    srcs = [p.cite() for p in pts]
    single = next(((p, r) for p, r in ok if p.concurrency == 1), None)
    top = max(ok, key=lambda x: x[0].concurrency) if ok else None
    # 1. per-slot efficiency (the throughput gain itself is concurrency.throughput_gain_single_to_max)
    if single is None or top is None or top[0].concurrency == 1:
        out.append(
            fnd.not_available(
                at("per_slot_efficiency_pct"),
                "%",
                "no_concurrency_1",
                "needs concurrency 1 and a higher gated-in point",
                srcs,
            )
        )
    else:
        g = throughput_gain(
            single[1]["output_throughput_tokens_per_s"], top[1]["output_throughput_tokens_per_s"]
        )
        out.append(
            fnd.measured(
                at("per_slot_efficiency_pct"),
                per_slot_efficiency_pct(g, top[0].concurrency),
                "%",
                [top[0].cite("output_throughput"), single[0].cite("output_throughput")],
                max_concurrency=top[0].concurrency,
                throughput_gain=g,
                detail="output tokens/s at the highest gated-in concurrency ÷ at 1, ÷ that concurrency: "
                "what each slot keeps of the single stream's speed",
            )
        )
    # 2. p99 / p50 ITL
    rr = [(p, r) for p, r in ok if r.get("p99_over_p50_itl")]
    if rr:
        p, r = max(rr, key=lambda x: x[1]["p99_over_p50_itl"])
        out.append(
            fnd.measured(
                at("itl_p99_over_p50_max"),
                r["p99_over_p50_itl"],
                "ratio",
                [p.cite("p99_itl_ms"), p.cite("p50_itl_ms")],
                concurrency=p.concurrency,
                by_concurrency={str(q.concurrency): x["p99_over_p50_itl"] for q, x in rr},
            )
        )
    # 3. decode share of E2E at the highest concurrency
    dd = [(p, r) for p, r in ok if r.get("decode_share_pct") is not None]
    if dd:
        p, r = max(dd, key=lambda x: x[0].concurrency)
        out.append(
            fnd.measured(
                at("decode_share_of_e2e_pct"),
                r["decode_share_pct"],
                "%",
                [p.cite("mean_e2el_ms"), p.cite("mean_ttft_ms")],
                concurrency=p.concurrency,
                by_concurrency={str(q.concurrency): x["decode_share_pct"] for q, x in dd},
                detail="(mean E2E − mean TTFT) ÷ mean E2E at the highest concurrency",
            )
        )
    # 4. the waiting queue's peak and drain
    ww = [(p, r) for p, r in zip(pts, rows, strict=True) if r["max_waiting"] is not None]
    if not ww:
        out.append(
            fnd.not_available(
                at("waiting_queue_peak"),
                "requests",
                "no_sampler_csv",
                f"{run.cite_root} kept no sampler CSV / scrapes with a waiting gauge",
                srcs,
            )
        )
    else:
        p, r = max(ww, key=lambda x: (x[1]["max_waiting"], x[0].concurrency))
        out.append(
            fnd.measured(
                at("waiting_queue_peak"),
                r["max_waiting"],
                "requests",
                [r.get("waiting_peak_source") or run.cite(run.counter_source, "waiting")],
                concurrency=p.concurrency,
                drain_s=r["waiting_drain_s"],
                by_concurrency={str(q.concurrency): x["max_waiting"] for q, x in ww},
                detail="the waiting gauge's highest sample in any sweep window; drain: seconds from that "
                "sample to the first later sample showing the queue empty (None: not empty before "
                "the window ended)",
            )
        )
    # 5. MFU overtakes MBU (interpolated)
    um = sorted(
        ((p, r) for p, r in ok if r["mfu_pct"] is not None and r["mbu_pct"] is not None),
        key=lambda x: x[0].concurrency,
    )
    if len(um) < 2:
        out.append(
            fnd.not_available(
                at("mfu_mbu_crossover_concurrency"),
                "requests",
                # a vLLM run without any sampler has no counter at all (llama.cpp has no FLOPs counter anyway)
                "no_sampler_csv"
                if run.counter_source is None and run.engine == "vllm"
                else "no_flops_counter"
                if th.gpu
                else "no_gpu_datasheet",
                f"{run.cite_root}: no FLOPs / read-bytes counters, or no datasheet",
                srcs,
            )
        )
    else:
        xs = [p.concurrency for p, _ in um]
        cross = fits.loglog_crossings(xs, [r["mfu_pct"] for _, r in um], [r["mbu_pct"] for _, r in um])
        msrc = [run.cite(run.counter_source, "flops"), run.cite(run.counter_source, "read_bytes")]
        if cross:
            out.append(
                fnd.measured(
                    at("mfu_mbu_crossover_concurrency"),
                    cross[0],
                    "requests",
                    msrc + [p.cite() for p, _ in um],
                    all_crossings=cross,
                    detail="log–log interpolation of MFU and MBU between measured concurrencies",
                )
            )
        else:
            lead = "MBU" if um[0][1]["mbu_pct"] > um[0][1]["mfu_pct"] else "MFU"
            out.append(
                fnd.not_available(
                    at("mfu_mbu_crossover_concurrency"),
                    "requests",
                    "no_crossing",
                    f"{lead} leads at every concurrency",
                    msrc,
                )
            )
    # 6. the concurrency the KV pool allows at this workload
    out.append(_ceiling(at, s, pts, campaign))
    # 7. batching economics: the measured step's growth against the floor's, 1 → max
    fl = [(p, r) for p, r in ok if r["floor_ms"] and r["p50_itl_ms"]]
    lo = next(((p, r) for p, r in fl if p.concurrency == 1), None)
    hi = max(fl, key=lambda x: x[0].concurrency) if fl else None
    if lo is None or hi is None or hi[0].concurrency == 1:
        out.append(
            fnd.not_available(
                at("step_marginal_ms_per_request"),
                "ms/request",
                "no_gpu_datasheet" if not th.gpu or not th.gpu.bandwidth_bytes_per_s else "no_concurrency_1",
                th.gpu_reason or "needs concurrency 1, a higher point and a bandwidth floor",
                srcs,
            )
        )
    else:
        (pl, rl), (ph, rh) = lo, hi
        # the chord from concurrency 1 to the highest (fits.chord_slope), of the measured step and of the
        # floor: step growth against floor growth over the same two ends; engines'
        # itl_marginal_ms_per_request is the least-squares slope over every point instead
        meas = fits.chord_slope(pl.concurrency, rl["p50_itl_ms"], ph.concurrency, rh["p50_itl_ms"])
        floor = fits.chord_slope(pl.concurrency, rl["floor_ms"], ph.concurrency, rh["floor_ms"])
        out.append(
            fnd.measured(
                at("step_marginal_ms_per_request"),
                meas,
                "ms/request",
                [ph.cite("p50_itl_ms"), pl.cite("p50_itl_ms"), *th.gpu_source],
                floor_ms_per_request=floor,
                step_growth=rh["p50_itl_ms"] / rl["p50_itl_ms"],
                floor_growth=rh["floor_ms"] / rl["floor_ms"],
                over_floor=meas / floor if floor else None,
                concurrency=[pl.concurrency, ph.concurrency],
                detail="chord slope: (p50 ITL at the highest concurrency − at 1) ÷ (c − 1), against the "
                "same for the bandwidth floor (one more request's mean KV bytes ÷ bandwidth); not the "
                "least-squares slope over every point (engines' itl_marginal_ms_per_request)",
            )
        )
    return out


def _ceiling(at: At, s: dict, pts: list[BenchPoint], campaign: Campaign) -> fnd.Finding:
    """Requests that fit at once at the sweep's request shape: the pool (vLLM, by whole blocks) or the slots
    whose context holds a request (llama.cpp), capped by the server's own sequence limit where it logged
    one."""
    p = pts[0]
    need = (p.input_len_tokens or 0) + (p.requested_output_len_tokens or 0)
    rel, log = p.run.server_log
    if not need or log is None:
        return fnd.not_available(
            at("concurrency_ceiling_at_workload"),
            "requests",
            "no_server_log",
            "pool or request shape unknown",
            [p.cite()],
        )
    if s["engine"] == "llamacpp":
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
    pool, pool_src = pool_tokens(p.run, campaign)
    if pool is None:
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
    rows: list[dict] = []
    for s in sweep_series(campaign, th):
        s_rows = [_row(s, p, ctx, points, th) for p in s["points"]]
        rows += s_rows
        findings += series_findings(s, s_rows, campaign, ctx, th)
    return Section(
        name="concurrency_depth", tables={"concurrency_depth": pd.DataFrame(rows)}, findings=findings
    )
