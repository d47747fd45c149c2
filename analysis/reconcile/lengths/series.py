"""Length sweep: one concurrency, prompts of growing length. What the reference study drew from it:

- KV per input token at the sweep's concurrency: the slope of the peak KV usage (bytes) against the prompt
  length, against concurrency × KV bytes per token;
- a second, independent path to the KV bytes per token: the slope of the decode step (p50 ITL) against the
  mean context, times the memory bandwidth, divided by the concurrency (each step reads every cached token
  once);
- prefill cost per input token: the slope of the mean prefill time per request against the prompt length;
- tokens per iteration and the chunked-prefill budget the engine ran with (its log), with the prediction that
  follows from the budget stated before it is checked on the concurrency-1 points;
- how much longer a step gets over the sweep's range of contexts, against the bandwidth floor's ratio;
- MFU / MBU and arithmetic intensity against the prompt length, and where MFU overtakes MBU;
- the "stolen steps" split of TTFT (the iterations a request waits through while others decode vs its own
  prefill chunks): always n/a — it needs per-iteration scheduling records, and the samplers hold only sums
  (the TTFT page splits TTFT into queue, prefill and the rest from the histograms instead).

Series: a (round, engine) of an imported campaign, a run of our own. Keys:
``<round>.length.<engine>.<metric>`` and ``runs.<run>.length.<metric>``.
"""

from __future__ import annotations

import math
import re

import pandas as pd

from analysis import findings as fnd
from analysis import fits, theory
from analysis.campaign import BenchPoint, Campaign, RunData, iter_points
from analysis.keys import At
from analysis.reconcile import Context, Section, SectionInput, engine_at, run_at
from analysis.reconcile.capacity import flag, server_argv
from analysis.reconcile.capacity.kv import MIN_SAMPLES_FOR_PEAK
from analysis.reconcile.roofline import mean_context_tokens, roofline_floor_ms
from analysis.reconcile.theoryctx import TheoryCtx
from analysis.reconcile.ttft import llamacpp_prefill_ms

ENGINES = ("vllm", "llamacpp")
SWEEP_KINDS = ("concurrency_sweep", "engine_comparison")
# The ITL slope × the datasheet bandwidth assumes the extra KV is read at the datasheet rate; engines reach
# 75–90 % of it (roofline achievement), which overstates the bytes by up to ~1/0.85: 15 % covers that.
ITL_SLOPE_TOLERANCE_PCT = 15.0
# The peak-usage slope absorbs block rounding and the sampler missing the very peak (as kv.py's fit).
KV_SLOPE_TOLERANCE_PCT = 5.0
# The step's growth over the sweep against the floor's: both are ratios, the engine's fixed overheads cancel.
STEP_GROWTH_TOLERANCE_PCT = 10.0


# --- formulas ---------------------------------------------------------------------------------------------


def kv_bytes_per_token_from_itl_slope(
    slope_ms_per_token: float, bandwidth_bytes_per_s: float, concurrency: int
) -> float:
    """KV bytes per cached token implied by how fast the decode step grows with context, bytes/token:
    slope (ms per context token) ÷ 1000 × bandwidth (B/s) ÷ concurrency (each step reads every sequence's
    cache once, so one more context token per sequence adds concurrency × KV bytes to the step)."""
    return slope_ms_per_token / 1000.0 * bandwidth_bytes_per_s / concurrency


def tokens_per_iteration_llamacpp(
    prompt_tokens_delta: float | None, predicted_tokens_delta: float | None, n_decode_delta: float | None
) -> float | None:
    """llama.cpp's mean tokens per ``llama_decode`` call over a point, tokens/iteration:
    (Δprompt_tokens_total + Δtokens_predicted_total) ÷ Δn_decode_total."""
    if prompt_tokens_delta is None or predicted_tokens_delta is None or not n_decode_delta:
        return None
    return (prompt_tokens_delta + predicted_tokens_delta) / n_decode_delta


def predicted_iterations_single_stream(
    completed: int, output_tokens: int, prompt_tokens: int, budget: int
) -> int:
    """Iterations a concurrency-1 point needs when a step holds at most ``budget`` tokens, iterations:
    completed × (ceil(prompt ÷ budget) prefill steps, the last of which emits the first token, + output − 1
    decode steps)."""
    return completed * (math.ceil(prompt_tokens / budget) + output_tokens - 1)


def arithmetic_intensity(flops_delta: float | None, read_bytes_delta: float | None) -> float | None:
    """FLOPs per byte read over a point, FLOP/byte: Δestimated_flops ÷ Δestimated_read_bytes."""
    if flops_delta is None or not read_bytes_delta:
        return None
    return flops_delta / read_bytes_delta


# --- per point --------------------------------------------------------------------------------------------


def iterations(p: BenchPoint, ctx: Context) -> tuple[float | None, float | None, list[str]]:
    """(mean tokens per iteration, iterations, citations) over a point: vLLM's iteration-tokens histogram,
    llama.cpp's prompt/predicted token counters over its llama_decode calls."""
    w = ctx.window(p)
    if w is None:
        return None, None, []
    src = p.run.counter_source
    if w.delta("iter_tok_cnt") is not None:
        return (
            w.mean_of("iter_tok_sum", "iter_tok_cnt"),
            w.delta("iter_tok_cnt"),
            [p.run.cite(src, "iter_tok_sum"), p.run.cite(src, "iter_tok_cnt")],
        )
    if w.delta("n_decode") is not None:
        return (
            tokens_per_iteration_llamacpp(
                w.delta("prompt_tokens"), w.delta("predicted_tokens"), w.delta("n_decode")
            ),
            w.delta("n_decode"),
            [
                p.run.cite(src, "n_decode"),
                p.run.cite(src, "prompt_tokens"),
                p.run.cite(src, "predicted_tokens"),
            ],
        )
    return None, None, []


def prefill_ms(p: BenchPoint, ctx: Context) -> tuple[float | None, str | None]:
    """Mean prefill time per request over a point, ms, and its citation: vLLM's prefill histogram, llama.cpp's
    prompt seconds ÷ completed requests."""
    w = ctx.window(p)
    if w is None:
        return None, None
    src = p.run.counter_source
    v = w.mean_of("prefill_sum", "prefill_cnt")
    if v is not None:
        return v * 1000.0, p.run.cite(src, "prefill_sum")
    lp = llamacpp_prefill_ms(w.delta("prompt_s"), p.result.completed)
    return lp, (p.run.cite(src, "prompt_s") if lp is not None else None)


def pool_tokens(run: RunData, campaign: Campaign) -> tuple[int | None, str | None]:
    """The vLLM pool (tokens) the run's server logged, else (an imported campaign) the round's first vLLM
    log."""
    for r in [run] + ([] if run.own else campaign.select(round=run.round, engine="vllm")):
        rel, log = r.server_log
        if log is not None and getattr(log, "kv_cache_tokens", None):
            return log.kv_cache_tokens, r.cite(rel, log.lines.get("kv_cache_tokens"))
    return None, None


def budget_tokens(run: RunData, campaign: Campaign) -> tuple[int | None, str | None, str | None]:
    """The most tokens one iteration may hold, as the engine ran (tokens, citation, basis): vLLM's
    --max-num-batched-tokens (the server's command, its non-default args) else the compile range it logged
    (vLLM compiles for batch sizes up to max_num_batched_tokens); llama.cpp's n_batch (its context line)."""
    runs = [run] + ([] if run.own else campaign.select(round=run.round, engine=run.engine))
    for r in runs:
        rel, log = r.server_log
        if log is None:
            continue
        if r.engine == "llamacpp":
            v = getattr(log, "context_params", {}).get("n_batch")
            if v:
                return int(v), r.cite(rel, log.lines.get("ctx:n_batch")), "n_batch"
            continue
        argv, asrc = server_argv(r)
        v = flag(argv, "--max-num-batched-tokens") if argv else None
        if v:
            return int(v), asrc, "--max-num-batched-tokens"
        nda = getattr(log, "non_default_args", None) or {}
        if nda.get("max_num_batched_tokens"):
            return (
                int(nda["max_num_batched_tokens"]),
                r.cite(rel, log.lines.get("non_default_args")),
                "non-default args",
            )
        ec = getattr(log, "engine_config", None)
        m = (
            re.search(r"'compile_ranges_endpoints': \[(\d+)\]", str(ec.fields.get("compilation_config")))
            if ec
            else None
        )
        if m:
            return int(m.group(1)), r.cite(rel, ec.line), "compile_ranges_endpoints"
    return None, None, None


def point_row(
    p: BenchPoint, ctx: Context, th: TheoryCtx, points: pd.DataFrame, kvb: float | None, wb: float | None
) -> dict:
    r = p.result
    mean_out = r.total_output_tokens / r.completed if r.completed else None
    row: dict = {
        "round": p.run.round or "",
        "run": p.run.name,
        "engine": p.run.engine,
        "weight_format": th.weight_format_for(p.run),
        "point": p.label,
        "concurrency": p.concurrency,
        "input_len_tokens": p.input_len_tokens,
        "output_len_tokens": p.requested_output_len_tokens,
        "mean_context_tokens": mean_context_tokens(p.input_len_tokens, mean_out) if mean_out else None,
        "p50_itl_ms": r.itl.p50_ms if r.completed else None,
        "mean_ttft_ms": r.mean_ttft_ms if r.completed else None,
        "gate_ok": ctx.gate_ok(p),
        "source": p.cite("p50_itl_ms"),
        "peak_kv_usage_fraction": None,
        "arithmetic_intensity_flop_per_byte": None,
        "floor_ms": None,
    }
    row["mean_prefill_ms"], _ = prefill_ms(p, ctx)
    row["tokens_per_iteration"], row["iterations"], _ = iterations(p, ctx)
    w = ctx.window(p)
    if w is not None:
        g = w.gauges.get("kv_usage")
        row["peak_kv_usage_fraction"] = g.max if g is not None and g.n >= MIN_SAMPLES_FOR_PEAK else None
        row["arithmetic_intensity_flop_per_byte"] = arithmetic_intensity(
            w.delta("flops"), w.delta("read_bytes")
        )
    pr = points[points["key"] == p.key]
    for c in ("mfu_pct", "mbu_pct"):
        row[c] = float(pr[c].iloc[0]) if c in pr and len(pr) and not pd.isna(pr[c].iloc[0]) else None
    bw = th.gpu.bandwidth_bytes_per_s if th.gpu else None
    if wb is not None and kvb is not None and bw and row["mean_context_tokens"]:
        row["floor_ms"] = roofline_floor_ms(wb, p.concurrency, row["mean_context_tokens"] * kvb, bw)
    return row


# --- per series -------------------------------------------------------------------------------------------


def series(campaign: Campaign, th: TheoryCtx) -> list[dict]:
    """Every length sweep: [{at, run, engine, points, kvb, wb}] — per run of our own, per (round, engine)
    else."""
    out = []
    if campaign.own:
        for run in campaign.runs:
            pts = [p for p in run.points if p.test_kind == "length_sweep" and not p.warmup]
            if pts:
                fmt = th.weight_format_for(run)
                out.append(
                    {
                        "at": run_at(run, fmt, topic="length"),
                        "runs": [run],
                        "engine": run.engine,
                        "points": pts,
                        "kvb": th.kv_bytes_per_token_for_run(run.name),
                        "wb": th.weight_bytes_per_step_for_run(run.name),
                    }
                )
        return out
    for rnd in campaign.rounds:
        for engine in ENGINES:
            pts = list(iter_points(campaign, round=rnd, engine=engine, test_kind="length_sweep"))
            if pts:
                out.append(
                    {
                        "at": engine_at(rnd, engine, th.weight_formats.get(engine), topic="length"),
                        "runs": campaign.select(round=rnd, engine=engine),
                        "engine": engine,
                        "points": pts,
                        "kvb": th.kv_bytes_per_token_for(engine),
                        "wb": th.weight_bytes_per_step(engine),
                    }
                )
    return out


def _fit_or_na(at: At, metric: str, unit: str, xs: list, ys: list, srcs: list[str], what: str):
    ok = [(x, y) for x, y in zip(xs, ys, strict=True) if x is not None and y is not None]
    if not ok and xs:  # no point has the counter: the run kept none
        return None, fnd.not_available(at(metric), unit, "no_sampler_csv", f"no point has {what}", srcs)
    if len(ok) < 2 or len({x for x, _ in ok}) < 2:
        return None, fnd.not_available(
            at(metric), unit, "too_few_points", f"fewer than two points with {what}", srcs
        )
    return fits.least_squares([x for x, _ in ok], [y for _, y in ok]), None


def series_findings(
    s: dict, campaign: Campaign, ctx: Context, th: TheoryCtx, rows: list[dict]
) -> list[fnd.Finding]:
    at: At = s["at"]
    pts: list[BenchPoint] = s["points"]
    kvb = s["kvb"]
    out: list[fnd.Finding] = []
    use = [(p, r) for p, r in zip(pts, rows, strict=True) if ctx.gate_ok(p) and r["p50_itl_ms"] is not None]
    srcs = [p.cite() for p, _ in use] or [p.cite() for p in pts]
    conc = sorted({p.concurrency for p in pts})
    c = conc[0]
    bw = th.gpu.bandwidth_bytes_per_s if th.gpu else None
    run = pts[0].run
    counter = run.counter_source

    # 1. KV per input token: the peak KV usage (bytes) against the prompt length
    pool, pool_src = pool_tokens(run, campaign) if s["engine"] == "vllm" else (None, None)
    peaks = [r.get("peak_kv_usage_fraction") for _, r in use]
    if s["engine"] != "vllm" or counter is None or all(v is None for v in peaks):
        out.append(
            fnd.not_available(
                at("kv_bytes_per_input_token"),
                "bytes/token",
                "no_kv_usage_gauge" if s["engine"] != "vllm" else "no_sampler_csv",
                f"{run.cite_root}: no KV usage gauge with ≥ {MIN_SAMPLES_FOR_PEAK} samples per point",
                srcs,
            )
        )
    elif pool is None or kvb is None:
        out.append(
            fnd.not_available(
                at("kv_bytes_per_input_token"), "bytes/token", "no_kv_pool_line", "pool size unknown", srcs
            )
        )
    else:
        xs = [p.input_len_tokens for p, _ in use]
        ys = [None if v is None else v * pool * kvb for v in peaks]
        fit, na = _fit_or_na(at, "kv_bytes_per_input_token", "bytes/token", xs, ys, srcs, "a peak KV usage")
        if na:
            out.append(na)
        else:
            out.append(
                fnd.measured(
                    at("kv_bytes_per_input_token"),
                    fit.slope,
                    "bytes/token",
                    [run.cite(counter, "kv_usage"), pool_src, *srcs],
                    theory=c * kvb,
                    tolerance_pct=KV_SLOPE_TOLERANCE_PCT,
                    concurrency=c,
                    r2=fit.r2,
                    n=fit.n,
                    tokens_per_input_token=fit.slope / kvb,
                    detail="least-squares slope of the peak KV usage (fraction × pool tokens × KV "
                    "bytes/token) vs the prompt length; theory: concurrency × KV bytes per token",
                )
            )

    # 2. the ITL slope against the mean context: a second path to the KV bytes per token
    xs = [r["mean_context_tokens"] for _, r in use]
    ys = [r["p50_itl_ms"] for _, r in use]
    fit, na = _fit_or_na(at, "kv_bytes_per_token_from_itl_slope", "bytes/token", xs, ys, srcs, "a p50 ITL")
    if na:
        out.append(na)
    elif not bw:
        out.append(
            fnd.not_available(
                at("kv_bytes_per_token_from_itl_slope"),
                "bytes/token",
                "no_gpu_datasheet",
                th.gpu_reason or "no datasheet bandwidth to turn the slope into bytes",
                srcs,
                itl_slope_ms_per_token=fit.slope,
                r2=fit.r2,
            )
        )
    else:
        est = kv_bytes_per_token_from_itl_slope(fit.slope, bw, c)
        kw = {"theory": kvb, "tolerance_pct": ITL_SLOPE_TOLERANCE_PCT} if kvb else {}
        measured_bw = th.ceilings.copy_bytes_per_s if th.ceilings else None
        out.append(
            fnd.measured(
                at("kv_bytes_per_token_from_itl_slope"),
                est,
                "bytes/token",
                [p.cite("p50_itl_ms") for p, _ in use] + list(th.gpu_source),
                **kw,
                itl_slope_ms_per_token=fit.slope,
                r2=fit.r2,
                n=fit.n,
                concurrency=c,
                bandwidth_bytes_per_s=bw,
                with_measured_ceiling=kv_bytes_per_token_from_itl_slope(fit.slope, measured_bw, c)
                if measured_bw
                else None,
                # the method's premise: a bandwidth-bound step (floor ÷ measured near 100 %)
                roofline_achievement_pct=min(
                    (r["floor_ms"] / r["p50_itl_ms"] * 100 for _, r in use if r.get("floor_ms")), default=None
                ),
                detail="least-squares slope of p50 ITL vs mean context (prompt + output ÷ 2) × datasheet "
                "bandwidth ÷ concurrency; theory: 2·L·K·d·b",
            )
        )

    # 3. prefill cost per input token
    xs = [p.input_len_tokens for p, _ in use]
    ys = [r["mean_prefill_ms"] for _, r in use]
    fit, na = _fit_or_na(at, "prefill_ms_per_input_token", "ms/token", xs, ys, srcs, "a prefill time")
    if na:
        out.append(na)
    else:
        floor = (
            (theory.flops_per_token_matmul(th.cfg) / th.gpu.bf16_flops_per_s * 1000.0)
            if th.cfg is not None and th.gpu and th.gpu.bf16_flops_per_s
            else None
        )
        _, psrc = prefill_ms(use[0][0], ctx)
        out.append(
            fnd.measured(
                at("prefill_ms_per_input_token"),
                fit.slope,
                "ms/token",
                [psrc, *srcs],
                r2=fit.r2,
                n=fit.n,
                intercept_ms=fit.intercept,
                concurrency=c,
                compute_floor_ms_per_token=floor,
                detail="least-squares slope of the mean prefill time per request vs the prompt length; "
                "floor: the layer weights' FLOPs per token ÷ the datasheet bf16 peak (a request's "
                "own work, at concurrency 1)",
            )
        )

    # 4. how much longer a step gets over the sweep's range of contexts
    ends = [(p, r) for p, r in use if r["p50_itl_ms"]]
    if len(ends) < 2:
        out.append(
            fnd.not_available(
                at("step_growth_ratio"), "ratio", "too_few_points", "fewer than two points", srcs
            )
        )
    else:
        lo = min(ends, key=lambda x: x[0].input_len_tokens)
        hi = max(ends, key=lambda x: x[0].input_len_tokens)
        ratio = hi[1]["p50_itl_ms"] / lo[1]["p50_itl_ms"]
        floor_ratio = (
            hi[1]["floor_ms"] / lo[1]["floor_ms"] if hi[1].get("floor_ms") and lo[1].get("floor_ms") else None
        )
        kw = {"theory": floor_ratio, "tolerance_pct": STEP_GROWTH_TOLERANCE_PCT} if floor_ratio else {}
        out.append(
            fnd.measured(
                at("step_growth_ratio"),
                ratio,
                "ratio",
                [hi[0].cite("p50_itl_ms"), lo[0].cite("p50_itl_ms")],
                **kw,
                input_ratio=hi[0].input_len_tokens / lo[0].input_len_tokens,
                context_ratio=hi[1]["mean_context_tokens"] / lo[1]["mean_context_tokens"],
                input_tokens=[lo[0].input_len_tokens, hi[0].input_len_tokens],
                p50_itl_ms=[lo[1]["p50_itl_ms"], hi[1]["p50_itl_ms"]],
                detail="p50 ITL at the longest prompt ÷ at the shortest; theory: the bandwidth floors' ratio "
                "(weights + concurrency × mean context × KV bytes) ÷ bandwidth",
            )
        )

    # 5. tokens per iteration at the longest prompt
    tp = [(p, r) for p, r in zip(pts, rows, strict=True) if r["tokens_per_iteration"] is not None]
    if not tp:
        out.append(
            fnd.not_available(
                at("tokens_per_iteration_at_longest_input"),
                "tokens/iteration",
                "no_sampler_csv",
                f"{run.cite_root}: no iteration counter (vLLM iteration_tokens, llama.cpp n_decode)",
                srcs,
            )
        )
    else:
        p, r = max(tp, key=lambda x: x[0].input_len_tokens)
        _, _, isrc = iterations(p, ctx)
        out.append(
            fnd.measured(
                at("tokens_per_iteration_at_longest_input"),
                r["tokens_per_iteration"],
                "tokens/iteration",
                isrc,
                input_tokens=p.input_len_tokens,
                iterations=r["iterations"],
                by_input={str(round(q.input_len_tokens)): x["tokens_per_iteration"] for q, x in tp},
            )
        )

    # 6. MFU / MBU and arithmetic intensity against the prompt length
    um = [(p, r) for p, r in use if r["mfu_pct"] is not None and r["mbu_pct"] is not None]
    if len(um) < 2:
        for k, u in (
            ("mfu_mbu_crossover_input_tokens", "tokens"),
            ("arithmetic_intensity_at_longest_input", "FLOP/byte"),
        ):
            out.append(
                fnd.not_available(
                    at(k),
                    u,
                    # a vLLM run without a sampler has no counter at all (llama.cpp: no FLOPs counter anyway)
                    "no_sampler_csv"
                    if counter is None and s["engine"] == "vllm"
                    else "no_flops_counter"
                    if th.gpu
                    else "no_gpu_datasheet",
                    (
                        f"{run.cite_root}: no FLOPs / read-bytes counters (vLLM --enable-mfu-metrics) or no "
                        "datasheet"
                    ),
                    srcs,
                )
            )
    else:
        um.sort(key=lambda x: x[0].input_len_tokens)
        xs = [p.input_len_tokens for p, _ in um]
        cross = fits.loglog_crossings(xs, [r["mfu_pct"] for _, r in um], [r["mbu_pct"] for _, r in um])
        msrc = [run.cite(counter, "flops"), run.cite(counter, "read_bytes")]
        if cross:
            out.append(
                fnd.measured(
                    at("mfu_mbu_crossover_input_tokens"),
                    cross[0],
                    "tokens",
                    msrc + [p.cite() for p, _ in um],
                    all_crossings=cross,
                    concurrency=c,
                    detail="log–log interpolation of MFU and MBU between measured prompt lengths",
                )
            )
        else:
            out.append(
                fnd.not_available(
                    at("mfu_mbu_crossover_input_tokens"),
                    "tokens",
                    "no_crossing",
                    (
                        f"{'MBU' if um[0][1]['mbu_pct'] > um[0][1]['mfu_pct'] else 'MFU'} leads at every "
                        "prompt length"
                    ),
                    msrc,
                )
            )
        p, r = um[-1]
        ridge = th.gpu.bf16_flops_per_s / th.gpu.bandwidth_bytes_per_s if th.gpu else None
        out.append(
            fnd.measured(
                at("arithmetic_intensity_at_longest_input"),
                r["arithmetic_intensity_flop_per_byte"],
                "FLOP/byte",
                msrc + [p.cite()],
                input_tokens=p.input_len_tokens,
                ridge_flop_per_byte=ridge,
                by_input={
                    str(round(q.input_len_tokens)): x["arithmetic_intensity_flop_per_byte"] for q, x in um
                },
                detail=(
                    "ΔFLOPs ÷ Δread bytes of the engine's counters; the ridge is the datasheet's FLOP/s ÷ B/s"
                ),
            )
        )

    # 7. TTFT's "stolen steps": which iterations a request spent waiting while others decoded, which on its
    # own prefill chunks. Needs one scheduling record per iteration; the samplers keep running sums only.
    out.append(
        fnd.not_available(
            at("ttft_stolen_steps_split"),
            "ms",
            "no_per_iteration_records",
            f"{run.cite_root}: needs per-iteration scheduling records (which requests each engine step "
            "ran, prefill or decode); the sampler holds only sums per second (queue/prefill histograms, "
            "iteration-token totals)",
            srcs,
        )
    )
    return out


def budget_findings(at: At, runs: list[RunData], campaign: Campaign, ctx: Context) -> list[fnd.Finding]:
    """The per-iteration token budget the engine ran with, and the prediction that follows from it checked on
    every concurrency-1 point of the same engine: a prompt of S tokens is prefilled in ceil(S ÷ budget) steps,
    the last emitting the first token, then one step per further output token."""
    out: list[fnd.Finding] = []
    budget, bsrc, basis = budget_tokens(runs[0], campaign)
    if budget is None:
        return [
            fnd.not_available(
                at("chunked_prefill_budget_tokens"),
                "tokens",
                "no_server_log",
                "no --max-num-batched-tokens, compile range or n_batch in the server's log or command",
            )
        ]
    out.append(fnd.measured(at("chunked_prefill_budget_tokens"), budget, "tokens", [bsrc], basis=basis))
    single = [
        p
        for r in runs
        for p in r.points
        if not p.warmup and p.concurrency == 1 and p.test_kind in SWEEP_KINDS
    ]
    checks = []
    for p in single:
        _, iters, isrc = iterations(p, ctx)
        if (
            iters is None
            or not p.requested_output_len_tokens
            or not p.input_len_tokens
            or not p.result.completed
        ):
            continue
        pred = predicted_iterations_single_stream(
            p.result.completed, p.requested_output_len_tokens, round(p.input_len_tokens), budget
        )
        checks.append((p, pred, iters, isrc))
    if not checks:
        out.append(
            fnd.not_available(
                at("budget_prediction_single_stream"),
                "bool",
                "no_concurrency_1",
                "no concurrency-1 point with an iteration counter to check the prediction on",
                [bsrc],
            )
        )
        return out
    ok = all(pred == obs for _, pred, obs, _ in checks)
    out.append(
        fnd.checked(
            at("budget_prediction_single_stream"),
            ok,
            [bsrc]
            + [s for _, _, _, isrc in checks for s in isrc[:1]]
            + [p.cite("completed") for p, _, _, _ in checks],
            detail="prediction stated before the check: with at most `budget` tokens per step, a "
            "concurrency-1 point takes completed × (ceil(prompt ÷ budget) + output − 1) iterations",
            points={p.key: {"predicted": pred, "observed": obs} for p, pred, obs, _ in checks},
            budget_tokens=budget,
            prompt_over_budget=any(p.input_len_tokens > budget for p, _, _, _ in checks),
        )
    )
    return out


# the counter each utilisation divides (MFU: FLOPs, MBU: bytes read) -> the finding's metric
ONE_AXIS = {"flops": "mfu_one_axis_max_deviation_pct", "read_bytes": "mbu_one_axis_max_deviation_pct"}
_RATE = {"flops": ("FLOP/s", "FLOPs"), "read_bytes": ("bytes/s", "read-bytes")}  # words of the details


def one_axis_finding(s: dict, rows: list[dict], ctx: Context, counter: str = "flops") -> fnd.Finding:
    """Tokens per iteration as the one axis of both sweeps: the length sweep's MFU (``counter`` "flops") or
    MBU ("read_bytes") against the concurrency sweep's at the same tokens per iteration (log–log
    interpolation on the concurrency sweep), worst deviation in %. Small: how busy the GPU is depends on how
    many tokens an iteration carries, not on how they got there."""
    at: At = s["at"]
    metric = ONE_AXIS[counter]
    sweep = [
        p
        for r in s["runs"]
        for p in r.points
        if not p.warmup and p.test_kind in SWEEP_KINDS and ctx.gate_ok(p) and p.run.engine == s["engine"]
    ]
    curve = []
    for p in sweep:
        tpi, _, _ = iterations(p, ctx)
        w = ctx.window(p)
        rate = None
        if w is not None and w.delta(counter) and p.result.duration_s:
            rate = w.delta(counter) / p.result.duration_s
        if tpi and rate:
            curve.append((tpi, rate, p))
    curve.sort(key=lambda x: x[0])
    lens = [
        (r["tokens_per_iteration"], ctx.window(p).delta(counter) / p.result.duration_s, p)
        for p, r in zip(s["points"], rows, strict=True)
        if r["tokens_per_iteration"] and ctx.window(p) is not None and ctx.window(p).delta(counter)
    ]
    inside = [x for x in lens if curve and curve[0][0] <= x[0] <= curve[-1][0]]
    if len(curve) < 2 or not inside or len({c[0] for c in curve}) < len(curve):
        return fnd.not_available(
            at(metric),
            "%",
            "no_sampler_csv"
            if s["points"][0].run.counter_source is None
            else "no_flops_counter"
            if not curve or not lens
            else "too_few_points",
            f"needs the {_RATE[counter][1]} and iteration counters on both sweeps, with length points inside "
            "the concurrency sweep's range of tokens per iteration",
            [p.cite() for p in s["points"]],
        )
    xs, ys = [c[0] for c in curve], [c[1] for c in curve]
    devs = {p.label: (flops_s / fits.loglog_interp(tpi, xs, ys) - 1) * 100 for tpi, flops_s, p in inside}
    worst = max(devs, key=lambda k: abs(devs[k]))
    src = s["points"][0].run
    return fnd.measured(
        at(metric),
        devs[worst],
        "%",
        [src.cite(src.counter_source, counter), src.cite(src.counter_source, "iter_tok_cnt")]
        + [p.cite() for _, _, p in inside],
        worst_point=worst,
        by_point=devs,
        concurrency_sweep_tokens_per_iteration=xs,
        detail=f"achieved {_RATE[counter][0]} of each length point ÷ the concurrency sweep's at the same "
        "tokens per iteration (log–log interpolation) − 1, the largest in magnitude",
    )


def run(s: SectionInput) -> Section:
    campaign, ctx, th, points = s.campaign, s.ctx, s.th, s.points
    findings: list[fnd.Finding] = []
    rows: list[dict] = []
    for s in series(campaign, th):
        s_rows = [point_row(p, ctx, th, points, s["kvb"], s["wb"]) for p in s["points"]]
        rows += s_rows
        findings += series_findings(s, campaign, ctx, th, s_rows)
        findings += budget_findings(s["at"], s["runs"], campaign, ctx)
        findings += [one_axis_finding(s, s_rows, ctx, counter) for counter in ONE_AXIS]
    if not rows:
        for rnd in campaign.rounds:
            findings.append(
                fnd.not_available(
                    At(round=rnd, topic="length")("kv_bytes_per_token_from_itl_slope"),
                    "bytes/token",
                    "no_such_test",
                    f"no length sweep in {rnd or 'the campaign'}",
                )
            )
    return Section(name="lengths", tables={"length_sweep": pd.DataFrame(rows)}, findings=findings)
