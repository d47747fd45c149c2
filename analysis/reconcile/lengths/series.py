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
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TypedDict

import pandas as pd

from analysis.core import findings as fnd
from analysis.core import fits, theory
from analysis.core.keys import At
from analysis.core.windows import PointWindowData
from analysis.loading.campaign import BenchPoint, Campaign, RunData, iter_points
from analysis.loading.rundocs import Ceilings
from analysis.reconcile import Context, Section, SectionInput, engine_at, run_at
from analysis.reconcile.capacity import flag, server_argv
from analysis.reconcile.capacity.kv import MIN_SAMPLES_FOR_PEAK
from analysis.reconcile.concurrency.points import counter_file, points_value
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


def _in_len(p: BenchPoint) -> float:
    """The prompt length of a length-sweep point, tokens (the sweep's axis: every point has one)."""
    assert p.input_len_tokens is not None, f"{p.key}: a length-sweep point has a prompt length"
    return p.input_len_tokens


def _num(x: float | None) -> float:
    """A row's value the findings below only read where it was measured."""
    assert x is not None
    return x


def iterations(p: BenchPoint, ctx: Context) -> tuple[float | None, float | None, list[str]]:
    """(mean tokens per iteration, iterations, citations) over a point: vLLM's iteration-tokens histogram,
    llama.cpp's prompt/predicted token counters over its llama_decode calls."""
    w = ctx.window(p)
    if w is None:
        return None, None, []
    src = counter_file(p)
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
    src = counter_file(p)
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
        if rel is not None and log is not None and getattr(log, "kv_cache_tokens", None):
            return log.kv_cache_tokens, r.cite(rel, log.lines.get("kv_cache_tokens"))
    return None, None


def _vllm_budget(r: RunData, rel: str, log: Any) -> tuple[int, str, str] | None:
    """vLLM's per-iteration token budget: --max-num-batched-tokens on the server's command, else in the
    non-default args it logged, else the compile range it logged (vLLM compiles for batch sizes up to
    max_num_batched_tokens)."""
    argv, asrc = server_argv(r)
    v = flag(argv, "--max-num-batched-tokens") if argv else None
    if v and asrc is not None:
        return int(v), asrc, "--max-num-batched-tokens"
    nda = getattr(log, "non_default_args", None) or {}
    if nda.get("max_num_batched_tokens"):
        return (
            int(nda["max_num_batched_tokens"]),
            r.cite(rel, log.lines.get("non_default_args")),
            "non-default args",
        )
    ec = getattr(log, "engine_config", None)
    if ec is None:
        return None
    m = re.search(r"'compile_ranges_endpoints': \[(\d+)\]", str(ec.fields.get("compilation_config")))
    return (int(m.group(1)), r.cite(rel, ec.line), "compile_ranges_endpoints") if m else None


def budget_tokens(run: RunData, campaign: Campaign) -> tuple[int | None, str | None, str | None]:
    """The most tokens one iteration may hold, as the engine ran (tokens, citation, basis): vLLM's
    --max-num-batched-tokens (the server's command, its non-default args) else the compile range it logged
    (vLLM compiles for batch sizes up to max_num_batched_tokens); llama.cpp's n_batch (its context line)."""
    runs = [run] + ([] if run.own else campaign.select(round=run.round, engine=run.engine))
    for r in runs:
        rel, log = r.server_log
        if rel is None or log is None:
            continue
        if r.engine == "llamacpp":
            v = getattr(log, "context_params", {}).get("n_batch")
            if v:
                return int(v), r.cite(rel, log.lines.get("ctx:n_batch")), "n_batch"
            continue
        found = _vllm_budget(r, rel, log)
        if found is not None:
            return found
    return None, None, None


class LengthRow(TypedDict):
    """One point of a length sweep (a row of the length_sweep table)."""

    round: str
    run: str
    engine: str
    weight_format: str | None
    point: str
    concurrency: int | None
    input_len_tokens: float | None
    output_len_tokens: int | None
    mean_context_tokens: float | None
    p50_itl_ms: float | None
    mean_ttft_ms: float | None
    gate_ok: bool
    source: str
    peak_kv_usage_fraction: float | None
    arithmetic_intensity_flop_per_byte: float | None
    floor_ms: float | None
    mean_prefill_ms: float | None
    tokens_per_iteration: float | None
    iterations: float | None
    mfu_pct: float | None
    mbu_pct: float | None


def _peak_kv_usage_fraction(w: PointWindowData | None) -> float | None:
    """The KV usage gauge's highest sample over the window, fraction (None: too few samples to trust)."""
    g = w.gauges.get("kv_usage") if w is not None else None
    return g.max if g is not None and g.n >= MIN_SAMPLES_FOR_PEAK else None


def point_row(
    p: BenchPoint, ctx: Context, th: TheoryCtx, points: pd.DataFrame, kvb: float | None, wb: float | None
) -> LengthRow:
    r = p.result
    mean_out = (
        r.total_output_tokens / r.completed if r.completed and r.total_output_tokens is not None else None
    )
    context = (
        mean_context_tokens(p.input_len_tokens, mean_out)
        if mean_out and p.input_len_tokens is not None
        else None
    )
    w = ctx.window(p)
    bw = th.gpu.bandwidth_bytes_per_s if th.gpu else None
    floor = (
        roofline_floor_ms(wb, p.concurrency, context * kvb, bw)
        if wb is not None and kvb is not None and bw and context and p.concurrency is not None
        else None
    )
    tokens_per_iteration, iters, _ = iterations(p, ctx)
    return {
        "round": p.run.round or "",
        "run": p.run.name,
        "engine": p.run.engine,
        "weight_format": th.weight_format_for(p.run),
        "point": p.label,
        "concurrency": p.concurrency,
        "input_len_tokens": p.input_len_tokens,
        "output_len_tokens": p.requested_output_len_tokens,
        "mean_context_tokens": context,
        "p50_itl_ms": r.itl.p50_ms if r.completed else None,
        "mean_ttft_ms": r.mean_ttft_ms if r.completed else None,
        "gate_ok": ctx.gate_ok(p),
        "source": p.cite("p50_itl_ms"),
        "peak_kv_usage_fraction": _peak_kv_usage_fraction(w),
        "arithmetic_intensity_flop_per_byte": (
            arithmetic_intensity(w.delta("flops"), w.delta("read_bytes")) if w is not None else None
        ),
        "floor_ms": floor,
        "mean_prefill_ms": prefill_ms(p, ctx)[0],
        "tokens_per_iteration": tokens_per_iteration,
        "iterations": iters,
        "mfu_pct": points_value(points, p, "mfu_pct"),
        "mbu_pct": points_value(points, p, "mbu_pct"),
    }


# --- per series -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LengthSeries:
    """One length sweep: a run of our own, else a (round, engine) of an imported campaign; its points, the
    runs it comes from, and theory's KV bytes per token and weight bytes per step for its engine."""

    at: At
    runs: list[RunData]
    engine: str
    points: list[BenchPoint]
    kvb: float | None
    wb: float | None


def series(campaign: Campaign, th: TheoryCtx) -> list[LengthSeries]:
    """Every length sweep: per run of our own, per (round, engine) else."""
    out = []
    if campaign.own:
        for run in campaign.runs:
            pts = [p for p in run.points if p.test_kind == "length_sweep" and not p.warmup]
            if pts:
                out.append(
                    LengthSeries(
                        at=run_at(run, th.weight_format_for(run), topic="length"),
                        runs=[run],
                        engine=run.engine,
                        points=pts,
                        kvb=th.kv_bytes_per_token_for_run(run.name),
                        wb=th.weight_bytes_per_step_for_run(run.name),
                    )
                )
        return out
    for rnd in campaign.rounds:
        for engine in ENGINES:
            pts = list(iter_points(campaign, round=rnd, engine=engine, test_kind="length_sweep"))
            if pts:
                out.append(
                    LengthSeries(
                        at=engine_at(rnd, engine, th.weight_formats.get(engine), topic="length"),
                        runs=campaign.select(round=rnd, engine=engine),
                        engine=engine,
                        points=pts,
                        kvb=th.kv_bytes_per_token_for(engine),
                        wb=th.weight_bytes_per_step(engine),
                    )
                )
    return out


def _fit_or_na(
    at: At,
    metric: str,
    unit: str,
    xs: Sequence[float | None],
    ys: Sequence[float | None],
    srcs: list[str],
    what: str,
) -> fits.LinearFit | fnd.Finding:
    """The least-squares line through the points that have both values, else the n/a finding saying why."""
    ok = [(x, y) for x, y in zip(xs, ys, strict=True) if x is not None and y is not None]
    if not ok and xs:  # no point has the counter: the run kept none
        return fnd.not_available(at(metric), unit, "no_sampler_csv", f"no point has {what}", srcs)
    if len(ok) < 2 or len({x for x, _ in ok}) < 2:
        return fnd.not_available(
            at(metric), unit, "too_few_points", f"fewer than two points with {what}", srcs
        )
    return fits.least_squares([x for x, _ in ok], [y for _, y in ok])


@dataclass(frozen=True)
class SeriesView:
    """What every finding of one length sweep reads: the series, its rows, the gated-in points with a p50
    ITL (``use``) and their citations, the sweep's concurrency, its first run and that run's counter file."""

    s: LengthSeries
    rows: list[LengthRow]
    use: list[tuple[BenchPoint, LengthRow]]
    srcs: list[str]
    concurrency: int
    run: RunData
    counter: str | None

    @staticmethod
    def of(s: LengthSeries, ctx: Context, rows: list[LengthRow]) -> SeriesView:
        use = [
            (p, r)
            for p, r in zip(s.points, rows, strict=True)
            if ctx.gate_ok(p) and r["p50_itl_ms"] is not None
        ]
        concurrencies = [p.concurrency for p in s.points if p.concurrency is not None]
        assert len(concurrencies) == len(s.points), "every length-sweep point has a concurrency"
        return SeriesView(
            s=s,
            rows=rows,
            use=use,
            srcs=[p.cite() for p, _ in use] or [p.cite() for p in s.points],
            concurrency=min(concurrencies),
            run=s.points[0].run,
            counter=s.points[0].run.counter_source,
        )


def series_findings(v: SeriesView, campaign: Campaign, ctx: Context, th: TheoryCtx) -> list[fnd.Finding]:
    """Everything one length sweep says, one finding family each (see the module's docstring)."""
    return [
        _kv_slope_finding(v, campaign),
        _itl_slope_finding(v, th),
        _prefill_slope_finding(v, ctx, th),
        _step_growth_finding(v),
        _tokens_per_iteration_finding(v, ctx),
        *_mfu_mbu_findings(v, th),
        _stolen_steps_finding(v),
    ]


def _kv_slope_finding(v: SeriesView, campaign: Campaign) -> fnd.Finding:
    """KV per input token: the peak KV usage (bytes) against the prompt length, against concurrency × theory's
    KV bytes per token."""
    at, run, kvb, c = v.s.at, v.run, v.s.kvb, v.concurrency
    vllm = v.s.engine == "vllm"
    pool, pool_src = pool_tokens(run, campaign) if vllm else (None, None)
    peaks = [r["peak_kv_usage_fraction"] for _, r in v.use]
    if not vllm or v.counter is None or all(x is None for x in peaks):
        return fnd.not_available(
            at("kv_bytes_per_input_token"),
            "bytes/token",
            "no_kv_usage_gauge" if not vllm else "no_sampler_csv",
            f"{run.cite_root}: no KV usage gauge with ≥ {MIN_SAMPLES_FOR_PEAK} samples per point",
            v.srcs,
        )
    if pool is None or pool_src is None or kvb is None:
        return fnd.not_available(
            at("kv_bytes_per_input_token"), "bytes/token", "no_kv_pool_line", "pool size unknown", v.srcs
        )
    xs = [p.input_len_tokens for p, _ in v.use]
    ys = [None if x is None else x * pool * kvb for x in peaks]
    fit = _fit_or_na(at, "kv_bytes_per_input_token", "bytes/token", xs, ys, v.srcs, "a peak KV usage")
    if isinstance(fit, fnd.Finding):
        return fit
    return fnd.measured(
        at("kv_bytes_per_input_token"),
        fit.slope,
        "bytes/token",
        [run.cite(v.counter, "kv_usage"), pool_src, *v.srcs],
        theory=c * kvb,
        tolerance_pct=KV_SLOPE_TOLERANCE_PCT,
        concurrency=c,
        r2=fit.r2,
        n=fit.n,
        tokens_per_input_token=fit.slope / kvb,
        detail="least-squares slope of the peak KV usage (fraction × pool tokens × KV "
        "bytes/token) vs the prompt length; theory: concurrency × KV bytes per token",
    )


def _roofline_achievement_pct(v: SeriesView) -> float | None:
    """The ITL-slope method's premise, %: the lowest bandwidth floor ÷ measured p50 ITL over the sweep
    (near 100 %: a bandwidth-bound step)."""
    return min(
        (f / itl * 100 for _, r in v.use if (f := r["floor_ms"]) and (itl := r["p50_itl_ms"])),
        default=None,
    )


def _itl_slope_finding(v: SeriesView, th: TheoryCtx) -> fnd.Finding:
    """The ITL slope against the mean context: a second path to the KV bytes per token."""
    at, c, kvb = v.s.at, v.concurrency, v.s.kvb
    xs = [r["mean_context_tokens"] for _, r in v.use]
    ys = [r["p50_itl_ms"] for _, r in v.use]
    fit = _fit_or_na(at, "kv_bytes_per_token_from_itl_slope", "bytes/token", xs, ys, v.srcs, "a p50 ITL")
    if isinstance(fit, fnd.Finding):
        return fit
    bw = th.gpu.bandwidth_bytes_per_s if th.gpu else None
    if not bw:
        return fnd.not_available(
            at("kv_bytes_per_token_from_itl_slope"),
            "bytes/token",
            "no_gpu_datasheet",
            th.gpu_reason or "no datasheet bandwidth to turn the slope into bytes",
            v.srcs,
            itl_slope_ms_per_token=fit.slope,
            r2=fit.r2,
        )
    kw: dict[str, Any] = {"theory": kvb, "tolerance_pct": ITL_SLOPE_TOLERANCE_PCT} if kvb else {}
    measured_bw = th.ceilings.copy_bytes_per_s if isinstance(th.ceilings, Ceilings) else None
    return fnd.measured(
        at("kv_bytes_per_token_from_itl_slope"),
        kv_bytes_per_token_from_itl_slope(fit.slope, bw, c),
        "bytes/token",
        [p.cite("p50_itl_ms") for p, _ in v.use] + list(th.gpu_source),
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
        roofline_achievement_pct=_roofline_achievement_pct(v),
        detail="least-squares slope of p50 ITL vs mean context (prompt + output ÷ 2) × datasheet "
        "bandwidth ÷ concurrency; theory: 2·L·K·d·b",
    )


def _prefill_floor_ms_per_token(th: TheoryCtx) -> float | None:
    """A request's own prefill work per token at the datasheet's peak, ms/token: the layer weights' FLOPs per
    token ÷ the bf16 FLOP/s × 1000."""
    if th.cfg is None or not th.gpu or not th.gpu.bf16_flops_per_s:
        return None
    return theory.flops_per_token_matmul(th.cfg) / th.gpu.bf16_flops_per_s * 1000.0


def _prefill_slope_finding(v: SeriesView, ctx: Context, th: TheoryCtx) -> fnd.Finding:
    """Prefill cost per input token: the slope of the mean prefill time per request against the prompt."""
    xs = [p.input_len_tokens for p, _ in v.use]
    ys = [r["mean_prefill_ms"] for _, r in v.use]
    fit = _fit_or_na(v.s.at, "prefill_ms_per_input_token", "ms/token", xs, ys, v.srcs, "a prefill time")
    if isinstance(fit, fnd.Finding):
        return fit
    _, psrc = prefill_ms(v.use[0][0], ctx)
    return fnd.measured(
        v.s.at("prefill_ms_per_input_token"),
        fit.slope,
        "ms/token",
        [*([psrc] if psrc is not None else []), *v.srcs],
        r2=fit.r2,
        n=fit.n,
        intercept_ms=fit.intercept,
        concurrency=v.concurrency,
        compute_floor_ms_per_token=_prefill_floor_ms_per_token(th),
        detail="least-squares slope of the mean prefill time per request vs the prompt length; "
        "floor: the layer weights' FLOPs per token ÷ the datasheet bf16 peak (a request's "
        "own work, at concurrency 1)",
    )


def _step_growth_finding(v: SeriesView) -> fnd.Finding:
    """How much longer a step gets over the sweep's range of contexts, against the bandwidth floor's ratio."""
    at = v.s.at
    ends = [(p, r, itl) for p, r in v.use if (itl := r["p50_itl_ms"])]
    if len(ends) < 2:
        return fnd.not_available(
            at("step_growth_ratio"), "ratio", "too_few_points", "fewer than two points", v.srcs
        )
    lo_p, lo, lo_itl = min(ends, key=lambda x: _in_len(x[0]))
    hi_p, hi, hi_itl = max(ends, key=lambda x: _in_len(x[0]))
    lo_floor, hi_floor = lo["floor_ms"], hi["floor_ms"]
    floor_ratio = hi_floor / lo_floor if hi_floor and lo_floor else None
    kw: dict[str, Any] = (
        {"theory": floor_ratio, "tolerance_pct": STEP_GROWTH_TOLERANCE_PCT} if floor_ratio else {}
    )
    return fnd.measured(
        at("step_growth_ratio"),
        hi_itl / lo_itl,
        "ratio",
        [hi_p.cite("p50_itl_ms"), lo_p.cite("p50_itl_ms")],
        **kw,
        input_ratio=_in_len(hi_p) / _in_len(lo_p),
        context_ratio=_num(hi["mean_context_tokens"]) / _num(lo["mean_context_tokens"]),
        input_tokens=[lo_p.input_len_tokens, hi_p.input_len_tokens],
        p50_itl_ms=[lo_itl, hi_itl],
        detail="p50 ITL at the longest prompt ÷ at the shortest; theory: the bandwidth floors' ratio "
        "(weights + concurrency × mean context × KV bytes) ÷ bandwidth",
    )


def _tokens_per_iteration_finding(v: SeriesView, ctx: Context) -> fnd.Finding:
    """Tokens per iteration at the longest prompt (every point's beside it)."""
    tp = [
        (p, r, t)
        for p, r in zip(v.s.points, v.rows, strict=True)
        if (t := r["tokens_per_iteration"]) is not None
    ]
    if not tp:
        return fnd.not_available(
            v.s.at("tokens_per_iteration_at_longest_input"),
            "tokens/iteration",
            "no_sampler_csv",
            f"{v.run.cite_root}: no iteration counter (vLLM iteration_tokens, llama.cpp n_decode)",
            v.srcs,
        )
    p, r, t = max(tp, key=lambda x: _in_len(x[0]))
    _, _, isrc = iterations(p, ctx)
    return fnd.measured(
        v.s.at("tokens_per_iteration_at_longest_input"),
        t,
        "tokens/iteration",
        isrc,
        input_tokens=p.input_len_tokens,
        iterations=r["iterations"],
        by_input={str(round(_in_len(q))): x for q, _, x in tp},
    )


def _mfu_mbu_findings(v: SeriesView, th: TheoryCtx) -> list[fnd.Finding]:
    """Where MFU overtakes MBU along the prompt length, and the arithmetic intensity at the longest prompt."""
    um = [(p, r) for p, r in v.use if r["mfu_pct"] is not None and r["mbu_pct"] is not None]
    if len(um) < 2 or v.counter is None:
        # a vLLM run without a sampler has no counter at all (llama.cpp: no FLOPs counter anyway)
        reason = (
            "no_sampler_csv"
            if v.counter is None and v.s.engine == "vllm"
            else "no_flops_counter"
            if th.gpu
            else "no_gpu_datasheet"
        )
        why = f"{v.run.cite_root}: no FLOPs / read-bytes counters (vLLM --enable-mfu-metrics) or no datasheet"
        return [
            fnd.not_available(v.s.at(k), u, reason, why, v.srcs)
            for k, u in (
                ("mfu_mbu_crossover_input_tokens", "tokens"),
                ("arithmetic_intensity_at_longest_input", "FLOP/byte"),
            )
        ]
    um.sort(key=lambda x: _in_len(x[0]))
    msrc = [v.run.cite(v.counter, "flops"), v.run.cite(v.counter, "read_bytes")]
    return [_crossover_finding(v, um, msrc), _intensity_finding(v, th, um, msrc)]


def _crossover_finding(v: SeriesView, um: list[tuple[BenchPoint, LengthRow]], msrc: list[str]) -> fnd.Finding:
    """The prompt length at which MFU overtakes MBU (log–log interpolation between measured lengths)."""
    mfu, mbu = [_num(r["mfu_pct"]) for _, r in um], [_num(r["mbu_pct"]) for _, r in um]
    cross = fits.loglog_crossings([_in_len(p) for p, _ in um], mfu, mbu)
    if not cross:
        return fnd.not_available(
            v.s.at("mfu_mbu_crossover_input_tokens"),
            "tokens",
            "no_crossing",
            f"{'MBU' if mbu[0] > mfu[0] else 'MFU'} leads at every prompt length",
            msrc,
        )
    return fnd.measured(
        v.s.at("mfu_mbu_crossover_input_tokens"),
        cross[0],
        "tokens",
        msrc + [p.cite() for p, _ in um],
        all_crossings=cross,
        concurrency=v.concurrency,
        detail="log–log interpolation of MFU and MBU between measured prompt lengths",
    )


def _ridge_flop_per_byte(th: TheoryCtx) -> float | None:
    """The roofline's ridge, FLOP/byte: the datasheet's bf16 FLOP/s ÷ its bandwidth (B/s); None without."""
    g = th.gpu
    if g is None or g.bf16_flops_per_s is None or g.bandwidth_bytes_per_s is None:
        return None
    return g.bf16_flops_per_s / g.bandwidth_bytes_per_s


def _intensity_finding(
    v: SeriesView, th: TheoryCtx, um: list[tuple[BenchPoint, LengthRow]], msrc: list[str]
) -> fnd.Finding:
    """The arithmetic intensity at the longest prompt against the datasheet's ridge."""
    p, r = um[-1]
    return fnd.measured(
        v.s.at("arithmetic_intensity_at_longest_input"),
        r["arithmetic_intensity_flop_per_byte"],
        "FLOP/byte",
        msrc + [p.cite()],
        input_tokens=p.input_len_tokens,
        ridge_flop_per_byte=_ridge_flop_per_byte(th),
        by_input={str(round(_in_len(q))): x["arithmetic_intensity_flop_per_byte"] for q, x in um},
        detail=("ΔFLOPs ÷ Δread bytes of the engine's counters; the ridge is the datasheet's FLOP/s ÷ B/s"),
    )


def _stolen_steps_finding(v: SeriesView) -> fnd.Finding:
    """TTFT's "stolen steps": which iterations a request spent waiting while others decoded, which on its own
    prefill chunks. Needs one scheduling record per iteration; the samplers keep running sums only."""
    return fnd.not_available(
        v.s.at("ttft_stolen_steps_split"),
        "ms",
        "no_per_iteration_records",
        f"{v.run.cite_root}: needs per-iteration scheduling records (which requests each engine step "
        "ran, prefill or decode); the sampler holds only sums per second (queue/prefill histograms, "
        "iteration-token totals)",
        v.srcs,
    )


def budget_findings(at: At, runs: list[RunData], campaign: Campaign, ctx: Context) -> list[fnd.Finding]:
    """The per-iteration token budget the engine ran with, and the prediction that follows from it checked on
    every concurrency-1 point of the same engine: a prompt of S tokens is prefilled in ceil(S ÷ budget) steps,
    the last emitting the first token, then one step per further output token."""
    budget, bsrc, basis = budget_tokens(runs[0], campaign)
    if budget is None or bsrc is None:
        return [
            fnd.not_available(
                at("chunked_prefill_budget_tokens"),
                "tokens",
                "no_server_log",
                "no --max-num-batched-tokens, compile range or n_batch in the server's log or command",
            )
        ]
    out = [fnd.measured(at("chunked_prefill_budget_tokens"), budget, "tokens", [bsrc], basis=basis)]
    checks = _single_stream_checks(runs, ctx, budget)
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
            prompt_over_budget=any(_in_len(p) > budget for p, _, _, _ in checks),
        )
    )
    return out


def _single_stream_checks(
    runs: list[RunData], ctx: Context, budget: int
) -> list[tuple[BenchPoint, int, float, list[str]]]:
    """Every concurrency-1 sweep point with an iteration counter: (point, predicted iterations, observed
    iterations, the counter's citations)."""
    single = [
        p
        for r in runs
        for p in r.points
        if not p.warmup and p.concurrency == 1 and p.test_kind in SWEEP_KINDS
    ]
    checks = []
    for p in single:
        _, iters, isrc = iterations(p, ctx)
        out_len, in_len = p.requested_output_len_tokens, p.input_len_tokens
        if iters is None or not out_len or not in_len or not p.result.completed:
            continue
        pred = predicted_iterations_single_stream(p.result.completed, out_len, round(in_len), budget)
        checks.append((p, pred, iters, isrc))
    return checks


def _achieved_rate_per_s(p: BenchPoint, ctx: Context, counter: str) -> float | None:
    """An engine counter over the point ÷ its duration, per s (FLOP/s for ``flops``, bytes/s for
    ``read_bytes``); None without the counter."""
    w = ctx.window(p)
    delta = w.delta(counter) if w is not None else None
    duration_s = p.result.duration_s
    return delta / duration_s if delta and duration_s else None


# the counter each utilisation divides (MFU: FLOPs, MBU: bytes read) -> the finding's metric
ONE_AXIS = {"flops": "mfu_one_axis_max_deviation_pct", "read_bytes": "mbu_one_axis_max_deviation_pct"}
_RATE = {"flops": ("FLOP/s", "FLOPs"), "read_bytes": ("bytes/s", "read-bytes")}  # words of the details


def one_axis_finding(
    s: LengthSeries, rows: list[LengthRow], ctx: Context, counter: str = "flops"
) -> fnd.Finding:
    """Tokens per iteration as the one axis of both sweeps: the length sweep's MFU (``counter`` "flops") or
    MBU ("read_bytes") against the concurrency sweep's at the same tokens per iteration (log–log
    interpolation on the concurrency sweep), worst deviation in %. Small: how busy the GPU is depends on how
    many tokens an iteration carries, not on how they got there."""
    metric = ONE_AXIS[counter]
    sweep = [
        p
        for r in s.runs
        for p in r.points
        if not p.warmup and p.test_kind in SWEEP_KINDS and ctx.gate_ok(p) and p.run.engine == s.engine
    ]
    curve = []
    for p in sweep:
        tpi, _, _ = iterations(p, ctx)
        rate = _achieved_rate_per_s(p, ctx, counter)
        if tpi and rate:
            curve.append((tpi, rate, p))
    curve.sort(key=lambda x: x[0])
    lens = [
        (tpi, rate_s, p)
        for p, r in zip(s.points, rows, strict=True)
        if (tpi := r["tokens_per_iteration"]) and (rate_s := _achieved_rate_per_s(p, ctx, counter))
    ]
    inside = [x for x in lens if curve and curve[0][0] <= x[0] <= curve[-1][0]]
    src = s.points[0].run.counter_source
    if len(curve) < 2 or not inside or len({c[0] for c in curve}) < len(curve) or src is None:
        return fnd.not_available(
            s.at(metric),
            "%",
            "no_sampler_csv"
            if src is None
            else "no_flops_counter"
            if not curve or not lens
            else "too_few_points",
            f"needs the {_RATE[counter][1]} and iteration counters on both sweeps, with length points inside "
            "the concurrency sweep's range of tokens per iteration",
            [p.cite() for p in s.points],
        )
    xs, ys = [c[0] for c in curve], [c[1] for c in curve]
    devs = {p.label: (rate_s / fits.loglog_interp(tpi, xs, ys) - 1) * 100 for tpi, rate_s, p in inside}
    worst = max(devs, key=lambda k: abs(devs[k]))
    run = s.points[0].run
    return fnd.measured(
        s.at(metric),
        devs[worst],
        "%",
        [run.cite(src, counter), run.cite(src, "iter_tok_cnt")] + [p.cite() for _, _, p in inside],
        worst_point=worst,
        by_point=devs,
        concurrency_sweep_tokens_per_iteration=xs,
        detail=f"achieved {_RATE[counter][0]} of each length point ÷ the concurrency sweep's at the same "
        "tokens per iteration (log–log interpolation) − 1, the largest in magnitude",
    )


def run(s: SectionInput) -> Section:
    campaign, ctx, th, points = s.campaign, s.ctx, s.th, s.points
    findings: list[fnd.Finding] = []
    rows: list[LengthRow] = []
    for ls in series(campaign, th):
        s_rows = [point_row(p, ctx, th, points, ls.kvb, ls.wb) for p in ls.points]
        rows += s_rows
        findings += series_findings(SeriesView.of(ls, ctx, s_rows), campaign, ctx, th)
        findings += budget_findings(ls.at, ls.runs, campaign, ctx)
        findings += [one_axis_finding(ls, s_rows, ctx, counter) for counter in ONE_AXIS]
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
