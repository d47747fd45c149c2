"""Concurrency curve: throughput and latency against concurrency, the knee, and — where the sampler's
counters exist — achieved FLOP/s and bytes/s, MFU/MBU, tokens per iteration, and the FLOPs counter
checked against theory per output token. Also builds the master per-point table the other sections use.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from analysis.core import findings as fnd
from analysis.core import fits, metrics
from analysis.core.keys import At
from analysis.core.windows import PointWindowData
from analysis.loading.campaign import BenchPoint, Campaign, RunData, iter_points
from analysis.parse.bench_json import BenchResult
from analysis.reconcile import Context, Section, SectionInput, engine_at
from analysis.reconcile.theoryctx import TheoryCtx

METRICS = ("ttft", "tpot", "itl", "e2el")
STATS = ("mean", "p50", "p90", "p99")
SWEEP_KINDS = ("concurrency_sweep", "engine_comparison")
# vLLM's MFU counter is its own estimate of the same formula; 1 % covers prefill/decode boundaries
# that fall outside the window's enclosing samples.
FLOPS_TOLERANCE_PCT = 1.0
# throughput × duration = token totals up to the digits the client writes
CONSISTENCY_TOLERANCE_PCT = 1e-6


def achieved_rate(delta: float | None, duration_s: float) -> float | None:
    """Average rate over a point, per s: Δcounter ÷ the client's benchmark duration (work happens only
    inside the run, so the idle seconds the enclosing samples add are not divided over)."""
    if delta is None or duration_s <= 0:
        return None
    return delta / duration_s


def utilization_pct(achieved_per_s: float | None, peak_per_s: float | None) -> float | None:
    """Achieved ÷ datasheet peak × 100, %. MFU for FLOP/s, MBU for bytes/s."""
    return None if achieved_per_s is None or not peak_per_s else achieved_per_s / peak_per_s * 100.0


def tokens_from_throughput(throughput_tok_s: float, duration_s: float) -> float:
    """Tokens implied by a throughput over a duration: tokens/s × s."""
    return throughput_tok_s * duration_s


def percentile_stats(campaign: Campaign) -> tuple[str, ...]:
    """The campaign's analysis-time percentiles (``Campaign.percentiles``) by name
    (``metrics.percentile_name``: p50, p99.9), in order."""
    return tuple(metrics.percentile_name(q) for q in campaign.percentiles)


def point_row(
    p: BenchPoint, ctx: Context, th: TheoryCtx, percentiles: tuple[str, ...] = ()
) -> dict[str, Any]:
    """One point's row of the ``points`` table; its latency columns are ``STATS`` and the analysis-time
    ``percentiles`` (names as ``percentile_stats``), each ``<stat>_<metric>_ms``; a percentile the point's
    file does not hold (a bench file writes its own set) is None. The table's columns come in this order."""
    r = p.result
    row = {**_summary_columns(p, ctx, th), **_latency_columns(r, percentiles)}
    # internal consistency of the summary itself
    if r.output_throughput_tok_s is not None and r.total_output_tokens:
        row["output_tokens_from_throughput"] = tokens_from_throughput(r.output_throughput_tok_s, r.duration_s)
    w = ctx.window(p)
    if w is not None:
        row.update(_sampler_columns(w))
        row.update(_utilization_columns(w, r, th))
    if th.cfg is not None and p.input_len_tokens and p.requested_output_len_tokens and r.total_output_tokens:
        per_req = th.request_flops(round(p.input_len_tokens), p.requested_output_len_tokens)
        row["theory_gflop_per_output_token"] = per_req * r.completed / r.total_output_tokens / 1e9
    return row


def _summary_columns(p: BenchPoint, ctx: Context, th: TheoryCtx) -> dict[str, Any]:
    """Which point this is, its gates, its protocol and its result file's totals and throughputs."""
    r = p.result
    return {
        "round": p.run.round or "",
        "engine": p.run.engine,
        "weight_format": th.weight_format_for(p.run),
        "test": p.run.test,
        "test_kind": p.test_kind,
        "point": p.label,
        "key": p.key,
        "file": p.cite(),
        "metric_definition": p.metric_definition,  # canonical | vllm-bench-compatible | aiperf | guidellm
        "order": p.order,
        "warmup": p.warmup,
        "gate_ok": ctx.gate_ok(p),
        "gate_failures": ";".join(ctx.gate_failures(p)),
        "gate_flags": ";".join(ctx.gate_flags(p)),
        "concurrency": p.concurrency,
        "input_len_tokens": p.input_len_tokens,
        "requested_output_len_tokens": p.requested_output_len_tokens,
        "protocol_borrowed": p.protocol_borrowed,
        "num_prompts": r.num_prompts,
        "completed": r.completed,
        "failed": r.failed,
        "duration_s": r.duration_s,
        "total_input_tokens": r.total_input_tokens,
        "total_output_tokens": r.total_output_tokens,
        "mean_output_tokens_per_request": (
            r.total_output_tokens / r.completed if r.completed and r.total_output_tokens is not None else None
        ),
        "request_throughput_req_per_s": r.request_throughput_req_s,
        "output_throughput_tokens_per_s": r.output_throughput_tok_s,
        "total_throughput_tokens_per_s": r.total_token_throughput_tok_s,
        "max_concurrent_requests": r.max_concurrent_requests,
    }


def _latency_columns(r: BenchResult, percentiles: tuple[str, ...]) -> dict[str, float | None]:
    """``<stat>_<metric>_ms`` for every metric and statistic (None without a completed request: the
    summary's zeros are not latencies — a point cut short, e.g. by a deadline)."""
    stats = (*STATS, *(q for q in percentiles if q not in STATS))
    return {f"{s}_{m}_ms": r.stat_ms(s, m) if r.completed else None for m in METRICS for s in stats}


def _sampler_columns(w: PointWindowData) -> dict[str, Any]:
    """The point's window on the sampler's clock and what the server's counters and gauges say inside it."""
    return {
        "window_start_s": w.window.start_s,
        "window_end_s": w.window.end_s,
        "sampler_first_row": w.first_row,
        "sampler_last_row": w.last_row,
        "activity_end_lag_s": w.end_lag_s,
        "preemptions": w.delta("preemptions"),
        "mean_queue_ms": _ms(w.mean_of("queue_sum", "queue_cnt")),
        "mean_prefill_ms": _ms(w.mean_of("prefill_sum", "prefill_cnt")),
        "mean_decode_ms": _ms(w.mean_of("decode_sum", "decode_cnt")),
        "requests_counted": w.delta("queue_cnt"),
        "tokens_per_iteration": w.mean_of("iter_tok_sum", "iter_tok_cnt"),
        "iterations": w.delta("iter_tok_cnt"),
        "flops_delta": w.delta("flops"),
        "read_bytes_delta": w.delta("read_bytes"),
        "mean_running": _g(w, "running", "mean"),
        "max_running": _g(w, "running", "max"),
        "mean_waiting": _g(w, "waiting", "mean"),
        "max_waiting": _g(w, "waiting", "max"),
        "peak_kv_usage_fraction": _g(w, "kv_usage", "max"),
    }


def _utilization_columns(w: PointWindowData, r: BenchResult, th: TheoryCtx) -> dict[str, Any]:
    """Achieved FLOP/s and bytes/s over the point, MFU/MBU against the datasheet, FLOPs per output token."""
    flops_s = achieved_rate(w.delta("flops"), r.duration_s)
    bytes_s = achieved_rate(w.delta("read_bytes"), r.duration_s)
    out: dict[str, Any] = {
        "achieved_tflops_per_s": None if flops_s is None else flops_s / 1e12,
        "achieved_gb_per_s": None if bytes_s is None else bytes_s / 1e9,
    }
    if th.gpu is not None:
        out["mfu_pct"] = utilization_pct(flops_s, th.gpu.bf16_flops_per_s)
        out["mbu_pct"] = utilization_pct(bytes_s, th.gpu.bandwidth_bytes_per_s)
    flops = w.delta("flops")
    if flops is not None and r.total_output_tokens:
        out["measured_gflop_per_output_token"] = flops / r.total_output_tokens / 1e9
    return out


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else seconds * 1000.0


def _g(w: PointWindowData, name: str, stat: str) -> float | None:
    g = w.gauges.get(name)
    return None if g is None else getattr(g, stat)


# The columns every point row has: a campaign whose runs measured no point (stopped during start-up) still
# gets a table with them, so the sections select from it instead of failing on a missing column.
POINT_COLUMNS = (
    "round",
    "engine",
    "weight_format",
    "test",
    "test_kind",
    "point",
    "key",
    "file",
    "order",
    "warmup",
    "gate_ok",
    "concurrency",
    "input_len_tokens",
    "requested_output_len_tokens",
)


def points_frame(campaign: Campaign, ctx: Context, th: TheoryCtx) -> pd.DataFrame:
    qs = percentile_stats(campaign)
    rows = [point_row(p, ctx, th, qs) for p in iter_points(campaign, include_warmup=True)]
    return pd.DataFrame(rows) if rows else pd.DataFrame(columns=list(POINT_COLUMNS))


def concurrency_of(p: BenchPoint) -> int:
    """A sweep point's concurrency (run_sweep_points keeps only points that have one)."""
    assert p.concurrency is not None, f"{p.key}: a sweep point has a concurrency"
    return p.concurrency


def counter_file(p: BenchPoint) -> str:
    """The run-relative counter file of a point the sampler saw (a window implies one)."""
    src = p.run.counter_source
    assert src is not None, f"{p.key}: a point with a sampler window has a counter file"
    return src


def points_value(points: pd.DataFrame, p: BenchPoint, column: str) -> float | None:
    """A column of the master points table (points_frame) at this point; None where missing or NaN."""
    pr = points[points["key"] == p.key]
    return float(pr[column].iloc[0]) if column in pr and len(pr) and not pd.isna(pr[column].iloc[0]) else None


def sweep_points(campaign: Campaign, rnd: str | None, engine: str) -> list[BenchPoint]:
    """The concurrency-sweep points of one engine in one round: the first sweep run by name (a second
    sweep of the same round is a repeat, used by the reproducibility section)."""
    runs = [
        r
        for r in campaign.select(round=rnd, engine=engine)
        if any(p.test_kind in SWEEP_KINDS for p in r.points)
    ]
    if not runs:
        return []
    return run_sweep_points(runs[0])


def run_sweep_points(run: RunData) -> list[BenchPoint]:
    """One run's concurrency-sweep points (warm-up and other phases left out), in run order."""
    return [
        p for p in run.points if not p.warmup and p.concurrency is not None and p.test_kind in SWEEP_KINDS
    ]


POINT_ID_COLUMNS = ("round", "engine", "weight_format", "test", "test_kind", "concurrency")


def _point_ids(p: BenchPoint, th: TheoryCtx) -> dict[str, object]:
    """The columns that say which sweep point a table row belongs to (POINT_ID_COLUMNS)."""
    return {
        "round": p.run.round or "",
        "engine": p.run.engine,
        "weight_format": th.weight_format_for(p.run),
        "test": p.run.test,
        "test_kind": p.test_kind,
        "concurrency": p.concurrency,
    }


def _sweep_kind_points(campaign: Campaign) -> list[BenchPoint]:
    """Every measured point of a concurrency sweep or engine comparison, in campaign order."""
    return [p for p in iter_points(campaign) if p.test_kind in SWEEP_KINDS]


def _latency_table(campaign: Campaign, ctx: Context, th: TheoryCtx) -> pd.DataFrame:
    """The concurrency_latency table: one row per sweep point, metric and statistic the point's file holds."""
    rows = [
        {**_point_ids(p, th), "metric": m, "stat": s, "value_ms": v, "gate_ok": ctx.gate_ok(p)}
        for p in _sweep_kind_points(campaign)
        for m in METRICS
        for s in STATS
        if (v := p.result.stat_ms(s, m)) is not None
    ]
    return pd.DataFrame(rows, columns=[*POINT_ID_COLUMNS, "metric", "stat", "value_ms", "gate_ok"])


def _throughput_table(campaign: Campaign, ctx: Context, th: TheoryCtx) -> pd.DataFrame:
    """The concurrency_throughput table: output and total tokens/s per sweep point."""
    rows = [
        {**_point_ids(p, th), "series": series, "tokens_per_s": v, "gate_ok": ctx.gate_ok(p)}
        for p in _sweep_kind_points(campaign)
        for series, v in (
            ("output", p.result.output_throughput_tok_s),
            ("total", p.result.total_token_throughput_tok_s),
        )
    ]
    return pd.DataFrame(rows, columns=[*POINT_ID_COLUMNS, "series", "tokens_per_s", "gate_ok"])


UTILIZATION_COLUMNS = (
    "round",
    "engine",
    "weight_format",
    "test",
    "test_kind",
    "point",
    "concurrency",
    "input_len_tokens",
    "gate_ok",
    "achieved_tflops_per_s",
    "achieved_gb_per_s",
    "mfu_pct",
    "mbu_pct",
    "tokens_per_iteration",
    "measured_gflop_per_output_token",
    "theory_gflop_per_output_token",
)


def _utilization_table(points: pd.DataFrame) -> pd.DataFrame:
    """The concurrency_utilization table: the measured points with an MFU, their utilization columns."""
    if "mfu_pct" not in points.columns:
        return pd.DataFrame(columns=list(UTILIZATION_COLUMNS))
    return points[points["mfu_pct"].notna() & ~points["warmup"]].reindex(columns=list(UTILIZATION_COLUMNS))


def _sweep_findings(
    rnd: str | None, engine: str, campaign: Campaign, ctx: Context, th: TheoryCtx, points: pd.DataFrame
) -> list[fnd.Finding]:
    """One engine's sweep in one round: knee, peak and single-stream throughput, the gain, the counters."""
    pts = sweep_points(campaign, rnd, engine)
    if not pts:
        return [
            fnd.not_available(
                engine_at(rnd, engine, th.weight_formats.get(engine))("knee_concurrency"),
                "requests",
                "no_such_test",
                f"no {engine} sweep in {rnd or 'the campaign'}",
            )
        ]
    # a campaign of our own may run one engine with several formats: these findings rest on its first run
    at = engine_at(rnd, engine, th.weight_format_for(pts[0].run))
    which: dict[str, Any] = {"rests_on_run": pts[0].run.name}
    out = [
        knee_finding(at, pts, ctx, rests_on=[p.key for p in pts], **which),
        peak_throughput_finding(at, pts, ctx, **which),
    ]
    c1 = next((p for p in pts if p.concurrency == 1), None)
    if c1 is not None:
        out.append(
            fnd.measured(
                at("single_stream_output_throughput_tokens_per_s"),
                c1.result.output_throughput_tok_s,
                "tokens/s",
                [c1.cite("output_throughput")],
                **which,
            )
        )
    out.append(throughput_gain_finding(at, c1, [p for p in pts if ctx.gate_ok(p)], which))
    out.extend(_counter_findings(at, engine, pts, points))
    return out


def _consistency_finding(rnd: str | None, points: pd.DataFrame) -> fnd.Finding | None:
    """The summaries' own consistency in one round: throughput × duration against the token totals, the
    worst point's error; None when no point has both."""
    sub = points[(points["round"] == (rnd or ""))]
    errs = [
        abs(fits.error_pct(row["output_tokens_from_throughput"], row["total_output_tokens"]))
        for _, row in sub.iterrows()
        if row.get("output_tokens_from_throughput") is not None and row["total_output_tokens"]
    ]
    if not errs:
        return None
    worst = max(errs)
    return fnd.Finding(
        at=At(round=rnd, topic="consistency", metric="max_throughput_duration_error_pct"),
        value=worst,
        unit="%",
        sources=tuple(sub["file"].tolist()[:1]),
        tolerance_pct=CONSISTENCY_TOLERANCE_PCT,
        status="ok" if worst <= CONSISTENCY_TOLERANCE_PCT else "mismatch",
        detail=(
            "max over points of |output_throughput × duration − total_output_tokens| ÷ total_output_tokens"
        ),
    )


def run(s: SectionInput) -> Section:
    campaign, ctx, th, points = s.campaign, s.ctx, s.th, s.points
    findings: list[fnd.Finding] = []
    for rnd in campaign.rounds:
        for engine in ("vllm", "llamacpp"):
            findings += _sweep_findings(rnd, engine, campaign, ctx, th, points)
        consistency = _consistency_finding(rnd, points)
        if consistency is not None:
            findings.append(consistency)
    return Section(
        name="concurrency",
        tables={
            "concurrency_latency": _latency_table(campaign, ctx, th),
            "concurrency_throughput": _throughput_table(campaign, ctx, th),
            "concurrency_utilization": _utilization_table(points),
            "latency_percentiles": percentile_table(campaign, ctx, th),
        },
        findings=findings,
    )


def percentile_table(campaign: Campaign, ctx: Context, th: TheoryCtx) -> pd.DataFrame:
    """The evidence table of the analysis-time percentiles (issue #14 item 5): per sweep point and latency
    metric, one column ``<name>_ms`` per percentile of ``Campaign.percentiles`` (``metrics.stats`` over the
    point's requests for our runs; the bench file's own keys for an imported point: None where the file does
    not hold that percentile), with the point's file and metric definition."""
    qs = percentile_stats(campaign)
    rows = []
    for p in iter_points(campaign):
        if p.test_kind not in SWEEP_KINDS:
            continue
        for m in METRICS:
            rows.append(
                {
                    **_point_ids(p, th),
                    "metric": m,
                    **{f"{q}_ms": p.result.stat_ms(q, m) if p.result.completed else None for q in qs},
                    "metric_definition": p.metric_definition,
                    "gate_ok": ctx.gate_ok(p),
                    "file": p.cite(),
                }
            )
    cols = [*POINT_ID_COLUMNS, "metric", *(f"{q}_ms" for q in qs), "metric_definition", "gate_ok", "file"]
    return pd.DataFrame(rows, columns=cols)


# How the knee reads (the codes labels_zh.PHRASES words; decided here, not on the page):
P50_FLAT_PCT = 10.0  # p50 "barely moved" across the knee: within ±10 % of the point below
TAIL_FACTOR = 2.0  # an interval "stretched": over 2 × p50 (the knee's own definition)


def p50_shape(below_p50_ms: float | None, p50_ms: float) -> str | None:
    """``flat`` when p50 ITL at the knee is within ±P50_FLAT_PCT % of the point below, ``up`` above it,
    ``down`` below; None without a point below."""
    if below_p50_ms is None or not below_p50_ms:
        return None
    change = (p50_ms / below_p50_ms - 1.0) * 100.0
    return "flat" if abs(change) <= P50_FLAT_PCT else ("up" if change > 0 else "down")


def tail_share(p50_ms: float, p90_ms: float | None) -> str | None:
    """How many intervals are stretched past TAIL_FACTOR × p50 at the knee (where p99 already is): ``few``
    when p90 is still under it (between 1 in 100 and 1 in 10), ``many`` when p90 is past it too (at least
    1 in 10); None without a p90."""
    if p90_ms is None:
        return None
    return "few" if p90_ms <= TAIL_FACTOR * p50_ms else "many"


def knee_cause(p: BenchPoint, bimodal: bool) -> tuple[str, str | None]:
    """Why some decode steps are long, from the run's own log: ``chunked_prefill`` (vLLM with
    enable_chunked_prefill=True: new prompts are cut into chunks that share iterations with the decoding
    requests), ``prefill_steps`` (vLLM, the setting not logged), ``llamacpp_bimodal`` / ``llamacpp_batch``
    (llama.cpp puts a new prompt, up to n_batch tokens a step, into the same batch as the other slots' decode
    tokens; bimodal when p99 > TAIL_FACTOR × p90: the slow steps are a group of their own); and the citation
    of the log line that says so."""
    rel, log = p.run.server_log
    if p.run.engine == "llamacpp":
        line = log.lines.get("ctx:n_batch") if log is not None else None
        return ("llamacpp_bimodal" if bimodal else "llamacpp_batch"), (
            p.run.cite(rel, line) if line and rel is not None else None
        )
    ec = getattr(log, "engine_config", None)
    if rel is not None and ec is not None and ec.enable_chunked_prefill:
        return "chunked_prefill", p.run.cite(rel, ec.line)
    return "prefill_steps", None


def _n_batch(p: BenchPoint) -> int | None:
    """llama.cpp's logged n_batch (the most prompt tokens one step takes); None for vLLM or unlogged."""
    _, log = p.run.server_log
    v = (getattr(log, "context_params", None) or {}).get("n_batch")
    return int(v) if v is not None and str(v).isdigit() else None


def change_direction(before: float, after: float) -> str:
    """``up`` when after > before, ``down`` when after < before, ``same`` when equal."""
    return "up" if after > before else "down" if after < before else "same"


def knee_finding(at: At, pts: list[BenchPoint], ctx: Context, **extra: Any) -> fnd.Finding:
    """The sweep's knee (fits.knee: the first concurrency whose p99 ITL exceeds 2 × its p50) with p50, p90
    and p99 there and just below it, how p50 moved (p50_shape), how many intervals stretched (tail_share)
    and why (knee_cause); n/a when no point breaks. ``extra`` fields ride along (which run, which points)."""
    xs = [concurrency_of(p) for p in pts]
    p50 = [v for p in pts if (v := p.result.itl.p50_ms) is not None]
    p99 = [v for p in pts if (v := p.result.itl.p99_ms) is not None]
    srcs = [p.cite("p50_itl_ms") for p in pts] + [p.cite("p99_itl_ms") for p in pts]
    k = fits.knee(xs, p50, p99) if len(p50) == len(pts) and len(p99) == len(pts) else None
    if k is None:
        return fnd.not_available(
            at("knee_concurrency"), "requests", "no_knee", "no sweep point has p99 ITL > 2 × p50 ITL", srcs
        )
    kp = next(p for p in pts if p.concurrency == k)
    # the sweep point just below the knee: what the tail looked like before it broke
    below = max((p for p in pts if concurrency_of(p) < k), key=concurrency_of, default=None)
    k50, k90, k99 = kp.result.itl.p50_ms, kp.result.itl.p90_ms, kp.result.itl.p99_ms
    assert k50 is not None and k99 is not None, "the knee is found only where every point has both"
    b50 = below.result.itl.p50_ms if below else None
    cause, cause_src = knee_cause(kp, k90 is not None and k99 > TAIL_FACTOR * k90)
    return fnd.measured(
        at("knee_concurrency"),
        int(k),
        "requests",
        [kp.cite("p50_itl_ms"), kp.cite("p90_itl_ms"), kp.cite("p99_itl_ms")]
        + ([cause_src] if cause_src else []),
        p50_itl_ms=k50,
        p90_itl_ms=k90,
        p99_itl_ms=k99,
        p90_over_p50=k90 / k50 if k90 is not None and k50 else None,
        p99_over_p50=k99 / k50 if k50 else None,
        below_concurrency=below.concurrency if below else None,
        below_p50_itl_ms=b50,
        below_p90_itl_ms=below.result.itl.p90_ms if below else None,
        below_p99_itl_ms=below.result.itl.p99_ms if below else None,
        p50_change_pct=(k50 / b50 - 1.0) * 100.0 if b50 else None,
        p50_shape=p50_shape(b50, k50),
        tail_share=tail_share(k50, k90),
        cause=cause,
        n_batch=_n_batch(kp),
        gated_out=[p.key for p in pts if not ctx.gate_ok(p)],
        **extra,
    )


def peak_throughput_finding(at: At, pts: list[BenchPoint], ctx: Context, **extra: Any) -> fnd.Finding:
    """The sweep's highest output tokens/s and where it was reached; n/a when no point completed a request."""
    rated = [(p, v) for p in pts if (v := p.result.output_throughput_tok_s) is not None]
    if not rated:
        return fnd.not_available(
            at("peak_output_throughput_tokens_per_s"),
            "tokens/s",
            "point_cut",
            "no sweep point completed a request: no output throughput",
            [p.cite("p50_itl_ms") for p in pts],
        )
    best, tokens_per_s = max(rated, key=lambda x: x[1])
    return fnd.measured(
        at("peak_output_throughput_tokens_per_s"),
        tokens_per_s,
        "tokens/s",
        [best.cite("output_throughput")],
        concurrency=best.concurrency,
        gate_ok=ctx.gate_ok(best),
        **extra,
    )


def throughput_gain(single_tokens_per_s: float, top_tokens_per_s: float) -> float:
    """How many times more output a full sweep gets than one stream, ratio: tokens/s at the highest
    concurrency ÷ tokens/s at concurrency 1 (the spread only a full protocol shows)."""
    return top_tokens_per_s / single_tokens_per_s


def throughput_gain_finding(
    at: At, c1: BenchPoint | None, gated_in: list[BenchPoint], which: dict[str, Any]
) -> fnd.Finding:
    """The throughput gain of one sweep (findings under ``at``, topic concurrency)."""
    key = at("throughput_gain_single_to_max", topic="concurrency")
    single = c1.result.output_throughput_tok_s if c1 is not None else None
    if c1 is None or not single:
        return fnd.not_available(key, "ratio", "no_concurrency_1", "no sweep point at concurrency 1", **which)
    rated = [(p, v) for p in gated_in if (v := p.result.output_throughput_tok_s)]
    top, top_tokens_per_s = max(rated, key=lambda x: concurrency_of(x[0]), default=(None, 0.0))
    if top is None or top.concurrency == 1:
        return fnd.not_available(
            key, "ratio", "too_few_points", "no gated-in point above concurrency 1", **which
        )
    return fnd.measured(
        key,
        throughput_gain(single, top_tokens_per_s),
        "ratio",
        [c1.cite("output_throughput"), top.cite("output_throughput")],
        single_tokens_per_s=single,
        top_tokens_per_s=top_tokens_per_s,
        top_concurrency=top.concurrency,
        # the word the page uses: more, less or the same output tokens/s at the top than at one stream
        direction=change_direction(single, top_tokens_per_s),
        detail="output tokens/s at the highest gated-in sweep concurrency ÷ at concurrency 1",
        **which,
    )


COUNTER_KEYS = (
    "max_mfu_pct",
    "max_mbu_pct",
    "flops_per_output_token_gflop",
    "tokens_per_iteration_at_max_concurrency",
)


def _counter_findings(at: At, engine: str, pts: list[BenchPoint], points: pd.DataFrame) -> list[fnd.Finding]:
    """MFU/MBU, tokens per iteration and the FLOPs counter against theory, where the sampler has them."""
    if engine != "vllm":
        return []
    rows = points[points["key"].isin({p.key for p in pts})]
    run = pts[0].run
    srel = run.counter_source
    if "mfu_pct" not in rows.columns or not rows["mfu_pct"].notna().any() or srel is None:
        return [
            fnd.not_available(
                at(n),
                "%" if n.endswith("pct") else "",
                "no_sampler_csv",
                f"{run.cite_root} kept no sampler CSV with the MFU counters",
            )
            for n in COUNTER_KEYS
        ]
    r = rows.dropna(subset=["mfu_pct"])
    top = r.loc[r["concurrency"].idxmax()]
    return [
        _max_finding(at, r, "mfu_pct", run.cite(srel, "flops")),
        _max_finding(at, r, "mbu_pct", run.cite(srel, "read_bytes")),
        *_flops_per_token_finding(at, r, run.cite(srel, "flops")),
        fnd.measured(
            at("tokens_per_iteration_at_max_concurrency"),
            float(top["tokens_per_iteration"]),
            "tokens/iteration",
            [run.cite(srel, "iter_tok_sum"), run.cite(srel, "iter_tok_cnt")],
            concurrency=int(top["concurrency"]),
        ),
    ]


def _max_finding(at: At, r: pd.DataFrame, column: str, counter_cite: str) -> fnd.Finding:
    """The highest value of a utilization column over the sweep (key ``max_<column>``) and where."""
    i = r[column].idxmax()
    return fnd.measured(
        at(f"max_{column}"),
        float(r.loc[i, column]),
        "%",
        [counter_cite, r.loc[i, "file"]],
        concurrency=int(r.loc[i, "concurrency"]),
    )


def _output_weighted_mean(rows: pd.DataFrame, column: str) -> float:
    """A per-output-token column over several points, weighted by each point's output tokens."""
    return float((rows[column] * rows["total_output_tokens"]).sum() / rows["total_output_tokens"].sum())


def _flops_per_token_finding(at: At, r: pd.DataFrame, src: str) -> list[fnd.Finding]:
    """The FLOPs counter against theory: the total over the sweep, per output token (none without theory)."""
    rr = r.dropna(subset=["theory_gflop_per_output_token", "measured_gflop_per_output_token"])
    if not len(rr):
        return []
    return [
        fnd.measured(
            at("flops_per_output_token_gflop"),
            _output_weighted_mean(rr, "measured_gflop_per_output_token"),
            "GFLOP/token",
            [src],
            theory=_output_weighted_mean(rr, "theory_gflop_per_output_token"),
            tolerance_pct=FLOPS_TOLERANCE_PCT,
            detail="Δestimated_flops_per_gpu_total over the sweep ÷ output tokens; theory: "
            "prefill(S) + Σ decode(S+k), k=1..O−1, per request",
        )
    ]
