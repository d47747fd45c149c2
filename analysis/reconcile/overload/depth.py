"""What the overload run says beyond its headline: the KV each request demands against the pool, how often the
engine preempted, the price in seconds of TTFT (p50, p99, against the gentlest point), Little's law on the
waiting queue, and the counter conflict — the iteration-token counter against the FLOPs counter while requests
are preempted and recomputed.

vLLM's FLOPs counter (``estimated_flops_per_gpu_total``) is an analytic estimate the engine computes from the
tokens it schedules, with the same formula as ``theory.request_flops``: its agreement with our theory outside
overload proves that both count the same work the same way, not that the GPU performed it (a hardware counter
would); during preemption it is the only counter that sees the recomputed prefill.

Keys as overload.points': the round's ``overload.<metric>`` describe its headline point; every other overload
point of our own runs gets ``runs.<run>.overload.<metric>``.
"""

from __future__ import annotations

import math
from typing import NamedTuple

from analysis.core import findings as fnd
from analysis.core import theory
from analysis.core.keys import At
from analysis.core.model_config import ModelConfig
from analysis.core.windows import PointWindowData, window_indices
from analysis.loading.campaign import BenchPoint, Campaign
from analysis.reconcile import Context, Section, SectionInput, run_at
from analysis.reconcile.concurrency import counter_file, run_sweep_points, sweep_points
from analysis.reconcile.concurrency.depth import pool_ceiling_requests
from analysis.reconcile.lengths import budget_tokens, pool_tokens
from analysis.reconcile.overload.points import headline, overload_points, point_cut, tokens_freed
from analysis.reconcile.theoryctx import TheoryCtx

# Little's law holds for the means; the 1 Hz gauge samples the waiting queue, the histogram times every
# request.
LITTLE_TOLERANCE_PCT = 10.0
# tokens freed per preemption come from 1 Hz KV-usage differences that other requests finishing blur
# (overload.points)
RECOMPUTE_TOLERANCE_PCT = 25.0
# a mean of the 1 Hz gauge over fewer samples than this says little about the queue (the CPU smoke points)
LITTLE_MIN_SAMPLES = 30


def littles_law_waiting(request_rate_per_s: float, mean_queue_s: float) -> float:
    """Mean number of requests waiting, requests: L = λ × W (λ = completed requests per s, W = mean queue
    time, s)."""
    return request_rate_per_s * mean_queue_s


def excess_pct(measured: float, expected: float) -> float:
    """How much a counter exceeds the work without recompute, %: (measured − expected) ÷ expected × 100."""
    return (measured - expected) / expected * 100.0


def chunked_attention_flops(cfg: ModelConfig, prompt_tokens: int, chunk_tokens: int | None) -> int:
    """Attention FLOPs vLLM's counter books for a prompt prefilled in chunks, FLOPs: 4·L·H·d × Σ_k c_k × T_k
    (chunk k schedules c_k = min(C, what is left) tokens against T_k = the tokens computed so far including
    it — "scheduled tokens × context" per chunk). One chunk (C ≥ S, or C None) is the full square S × S of
    ``theory.attention_flops_prefill``; three chunks of 2,048 for 6,144 tokens book 2/3 of it."""
    s = prompt_tokens
    c = chunk_tokens if chunk_tokens and chunk_tokens < s else s
    done = booked = 0
    while done < s:
        step = min(c, s - done)
        done += step
        booked += step * done
    return 4 * booked * cfg.num_hidden_layers * cfg.num_attention_heads * cfg.head_dim


def chunked_prefill_flops(cfg: ModelConfig, prompt_tokens: int, chunk_tokens: int | None) -> float:
    """Prefill FLOPs as the counter books a chunked prefill, FLOPs: ``theory.flops_prefill`` with its full
    square attention replaced by ``chunked_attention_flops``."""
    return float(
        theory.flops_prefill(cfg, prompt_tokens)
        - theory.attention_flops_prefill(cfg, prompt_tokens)
        + chunked_attention_flops(cfg, prompt_tokens, chunk_tokens)
    )


def chunked_request_flops(
    cfg: ModelConfig, input_tokens: int, output_tokens: int, chunk_tokens: int | None
) -> float:
    """One request's FLOPs without recompute as the counter books it, FLOPs: ``theory.request_flops`` with
    the prompt prefilled in chunks of ``chunk_tokens`` (the iteration token budget)."""
    return float(
        theory.request_flops(cfg, input_tokens, output_tokens)
        - theory.attention_flops_prefill(cfg, input_tokens)
        + chunked_attention_flops(cfg, input_tokens, chunk_tokens)
    )


def recompute_tokens_from_flops(
    extra_flops: float, cfg: ModelConfig, tokens_per_recompute: int, chunk_tokens: int | None = None
) -> float:
    """Tokens re-prefilled that the FLOPs counter's excess implies, tokens: extra FLOPs ÷ the prefill FLOPs
    per token of a recompute of ``tokens_per_recompute`` tokens, chunked as the budget chunks it
    (``chunked_prefill_flops(n, C) ÷ n``; C None: one chunk, the full square)."""
    per_token = chunked_prefill_flops(cfg, tokens_per_recompute, chunk_tokens) / tokens_per_recompute
    return extra_flops / per_token


def _gentlest(p: BenchPoint, campaign: Campaign, rnd: str | None) -> BenchPoint | None:
    """The sweep point with the least load of the overload point's engine (our runs: the same run)."""
    pts = run_sweep_points(p.run) if p.run.own else sweep_points(campaign, rnd, p.run.engine)
    done = [q for q in pts if q.result.completed]
    return min(done, key=lambda q: q.concurrency or 0) if done else None  # sweep points all have one


def _twin(p: BenchPoint, campaign: Campaign, rnd: str | None) -> BenchPoint | None:
    pts = run_sweep_points(p.run) if p.run.own else sweep_points(campaign, rnd, p.run.engine)
    return next((q for q in pts if q.concurrency == p.concurrency and q.result.completed), None)


def point_findings(
    pre: At, p: BenchPoint, campaign: Campaign, ctx: Context, th: TheoryCtx, rnd: str | None
) -> list[fnd.Finding]:
    """Everything one overload point says beyond its headline, one finding family each."""
    cut = point_cut(p) or not p.result.completed
    w = ctx.window(p)
    cols = ctx.sampler_series[p.run.name][1] if w is not None and p.run.name in ctx.sampler_series else {}
    if w is None or p.run.engine == "llamacpp" or "preemptions" not in cols:
        cadence: list[fnd.Finding] = [_no_cadence_finding(pre, p)]
        events: list[Preemption] = []
    else:
        events = _preemptions(p, ctx, w)
        cadence = [_cadence_finding(pre, p, w, events)]
    return [
        # 1. KV demand per request against the pool
        _kv_demand_finding(pre, p, campaign, th),
        # 2. the price in seconds: p50 / p99 TTFT, against the same concurrency without overload and the
        # gentlest point
        *_ttft_findings(pre, p, campaign, rnd, cut),
        # 3. preemption cadence
        *cadence,
        # 4. Little's law on the waiting queue
        _littles_law_finding(pre, p, w, cut),
        # 5. the counter conflict: iteration tokens vs the FLOPs counter while requests are recomputed
        *_counter_conflict(pre, p, w, ctx, th, events, campaign, cut),
    ]


def _kv_capacity(p: BenchPoint, campaign: Campaign, need: float) -> tuple[int | None, str | None, int | None]:
    """What holds one request's KV and how many such requests fit: llama.cpp's slot context (n_ctx_slot) and
    its slots when a slot holds the request; vLLM's pool by whole 16-token blocks. (tokens, citation,
    requests that fit)."""
    if p.run.engine != "llamacpp":
        pool, psrc = pool_tokens(p.run, campaign)
        return pool, psrc, pool_ceiling_requests(pool, need, 16) if pool else None
    rel, log = p.run.server_log
    if rel is None or not log:
        return None, None, None
    n_slots, n_ctx = getattr(log, "n_slots", None), getattr(log, "n_ctx_slot", None)
    fit = (n_slots if n_ctx and n_ctx >= need else 0) if n_slots else None
    if not n_ctx:
        return None, None, fit
    return n_ctx, p.run.cite(rel, log.lines.get("n_ctx_slot")), fit


def _kv_demand_finding(pre: At, p: BenchPoint, campaign: Campaign, th: TheoryCtx) -> fnd.Finding:
    """KV demand per request against the pool (vLLM) or the slot (llama.cpp)."""
    inp, outp = p.input_len_tokens, p.requested_output_len_tokens
    if not inp or not outp or p.concurrency is None:
        return fnd.not_available(
            pre("kv_demand_per_request_tokens"), "tokens", "no_sweep_log", "lengths unknown", [p.cite()]
        )
    kvb = th.kv_bytes_per_token_for_run(p.run.name) if p.run.own else th.kv_bytes_per_token_for(p.run.engine)
    need = inp + outp
    pool, psrc, fit = _kv_capacity(p, campaign, need)
    return fnd.measured(
        pre("kv_demand_per_request_tokens"),
        need,
        "tokens",
        [p.protocol_source or p.cite("total_input_tokens"), *([psrc] if psrc else [])],
        demand_bytes=need * kvb if kvb else None,
        total_demand_tokens=p.concurrency * need,
        pool_tokens=pool,
        pool_basis="slot" if p.run.engine == "llamacpp" else "pool",
        requests_that_fit=fit,
        concurrency=p.concurrency,
        detail="prompt + output tokens one request holds at its last token; what fits: whole "
        "16-token blocks of the pool (vLLM) or slots whose context holds the request "
        "(llama.cpp)",
    )


def _ttft_findings(
    pre: At, p: BenchPoint, campaign: Campaign, rnd: str | None, cut: bool
) -> list[fnd.Finding]:
    """The price of overload in seconds: p50 and p99 TTFT (beside the sweep's at the same concurrency), and
    p50 TTFT against the sweep's gentlest point."""
    if cut:
        return [
            fnd.not_available(
                pre(k), "s" if k.endswith("_s") else "ratio", "point_cut", "the point was cut", [p.cite()]
            )
            for k in ("p50_ttft_s", "p99_ttft_s", "ttft_spread_vs_gentlest")
        ]
    r = p.result
    twin, gentle = _twin(p, campaign, rnd), _gentlest(p, campaign, rnd)
    out = []
    tw = twin.result.ttft if twin else None
    for stat, v, tv in (
        ("p50", r.ttft.p50_ms, tw.p50_ms if tw else None),
        ("p99", r.ttft.p99_ms, tw.p99_ms if tw else None),
    ):
        assert v is not None, "a complete point has its TTFT percentiles"
        out.append(
            fnd.measured(
                pre(f"{stat}_ttft_s"),
                v / 1000.0,
                "s",
                [p.cite(f"{stat}_ttft_ms")] + ([twin.cite(f"{stat}_ttft_ms")] if twin else []),
                sweep_same_concurrency_s=tv / 1000.0 if tv is not None else None,
                concurrency=p.concurrency,
            )
        )
    g = gentle.result.ttft.p50_ms if gentle is not None else None
    if gentle is None or not g or r.ttft.p50_ms is None:
        out.append(
            fnd.not_available(
                pre("ttft_spread_vs_gentlest"), "ratio", "no_such_test", "no sweep point", [p.cite()]
            )
        )
        return out
    out.append(
        fnd.measured(
            pre("ttft_spread_vs_gentlest"),
            r.ttft.p50_ms / g,
            "ratio",
            [p.cite("p50_ttft_ms"), gentle.cite("p50_ttft_ms")],
            gentlest_concurrency=gentle.concurrency,
            gentlest_p50_ttft_ms=g,
            detail=("p50 TTFT of the overload point ÷ of the sweep's gentlest point (lowest concurrency)"),
        )
    )
    return out


class Preemption(NamedTuple):
    """A sampler step in which the preemption counter rose: its time (s, sampler clock), by how much, and
    the sample's row."""

    t_s: float
    preemptions: float
    row: int


def _preemptions(p: BenchPoint, ctx: Context, w: PointWindowData) -> list[Preemption]:
    """The samples inside the window (and the one closing it) in which the preemption counter rose."""
    ts, cols = ctx.sampler_series[p.run.name]
    idx = window_indices(ts, w.window)
    stop = idx.stop + 1 if idx.stop < len(ts) else idx.stop
    pre_col = cols["preemptions"]
    return [
        Preemption(ts[i], pre_col[i] - pre_col[i - 1], i)
        for i in range(max(idx.start, 1), stop)
        if not math.isnan(pre_col[i] - pre_col[i - 1]) and pre_col[i] - pre_col[i - 1] > 0
    ]


def _no_cadence_finding(pre: At, p: BenchPoint) -> fnd.Finding:
    llama = p.run.engine == "llamacpp"
    return fnd.not_available(
        pre("preemptions_per_minute"),
        "",
        "no_preemption_counter" if llama else "no_sampler_csv",
        f"{p.run.engine} does not preempt (slots are fixed)"
        if llama
        else f"{p.run.cite_root} kept no sampler CSV / scrapes with the preemption counter",
        [p.cite()],
    )


def _cadence_finding(pre: At, p: BenchPoint, w: PointWindowData, events: list[Preemption]) -> fnd.Finding:
    """Preemptions per minute over the window, and when the first and the last fell."""
    srel = counter_file(p)
    n = sum(e.preemptions for e in events)
    span_s = w.window.length_s
    first, last = (events[0].t_s, events[-1].t_s) if events else (None, None)
    return fnd.measured(
        pre("preemptions_per_minute"),
        n / span_s * 60.0,
        "",
        [p.run.cite(srel, "preemptions")],
        preemptions=n,
        window_s=span_s,
        sampler_seconds_with_preemption=len(events),
        first_at_s=first - w.window.start_s if first is not None else None,
        last_at_s=last - w.window.start_s if last is not None else None,
        mean_interval_s=(last - first) / (len(events) - 1)
        if last is not None and first is not None and len(events) > 1
        else None,
        detail=(
            "preemptions ÷ the point's window × 60; the intervals are between sampler seconds that saw one"
        ),
    )


def _littles_law_finding(pre: At, p: BenchPoint, w: PointWindowData | None, cut: bool) -> fnd.Finding:
    """Little's law on the waiting queue: the waiting gauge's mean against completed ÷ duration × mean queue
    time."""
    r = p.result
    q = w.mean_of("queue_sum", "queue_cnt") if w is not None else None
    wg = w.gauges.get("waiting") if w is not None else None
    if q is None or wg is None or wg.mean is None or wg.n < LITTLE_MIN_SAMPLES or cut or not r.duration_s:
        return fnd.not_available(
            pre("littles_law_waiting"),
            "requests",
            "no_sampler_csv" if p.run.engine != "llamacpp" else "no_preemption_counter",
            f"needs the queue-time histogram and ≥ {LITTLE_MIN_SAMPLES} samples of the waiting "
            "gauge (vLLM's /metrics)",
            [p.cite()],
        )
    srel = counter_file(p)
    lam = r.completed / r.duration_s
    return fnd.measured(
        pre("littles_law_waiting"),
        wg.mean,
        "requests",
        [
            p.run.cite(srel, "waiting"),
            p.run.cite(srel, "queue_sum"),
            p.run.cite(srel, "queue_cnt"),
            p.cite("completed"),
            p.cite("duration"),
        ],
        theory=littles_law_waiting(lam, q),
        tolerance_pct=LITTLE_TOLERANCE_PCT,
        request_rate_per_s=lam,
        mean_queue_s=q,
        detail=(
            "mean of the waiting gauge over the window vs L = λ·W: completed ÷ duration × mean queue time"
        ),
    )


CONFLICT_KEYS = (
    ("iteration_tokens_excess_pct", "%"),
    ("flops_counter_excess_pct", "%"),
    ("recompute_tokens_implied_by_flops", "tokens"),
)


def _no_conflict_reason(p: BenchPoint, w: PointWindowData | None, cut: bool) -> str:
    if cut:
        return "point_cut"
    if p.run.engine == "llamacpp":
        return "no_preemption_counter"
    return "no_flops_counter" if w is not None and w.delta("iter_tok_sum") is not None else "no_sampler_csv"


def _counter_conflict(
    pre: At,
    p: BenchPoint,
    w: PointWindowData | None,
    ctx: Context,
    th: TheoryCtx,
    events: list[Preemption],
    campaign: Campaign,
    cut: bool,
) -> list[fnd.Finding]:
    """The iteration-token counter and the FLOPs counter against the work without recompute, and the
    recompute the FLOPs counter's excess implies against the preemptions seen."""
    it = w.delta("iter_tok_sum") if w is not None else None
    flops = w.delta("flops") if w is not None else None
    inp, outp = p.input_len_tokens, p.requested_output_len_tokens
    # a FLOPs counter that never moved (vLLM on CPU) counts nothing
    if w is None or it is None or not flops or th.cfg is None or not inp or not outp or cut:
        reason = _no_conflict_reason(p, w, cut)
        why = "needs the iteration-token and FLOPs counters over a complete point"
        return [fnd.not_available(pre(k), u, reason, why, [p.cite()]) for k, u in CONFLICT_KEYS]
    srel, r = counter_file(p), p.result
    expected_tokens = r.completed * (round(inp) + outp)  # each request's prompt and output once (c=1: exact)
    # the prompt is prefilled in chunks of the iteration budget, and the counter books each chunk's tokens ×
    # its context: less attention than one full square
    chunk, chunk_src, _ = budget_tokens(p.run, campaign)
    theo = chunked_request_flops(th.cfg, round(inp), outp, chunk) * r.completed
    return [
        fnd.measured(
            pre("iteration_tokens_excess_pct"),
            excess_pct(it, expected_tokens),
            "%",
            [p.run.cite(srel, "iter_tok_sum"), p.cite("completed")],
            observed_tokens=it,
            expected_tokens=expected_tokens,
            detail="Δiteration_tokens_total_sum vs completed × (prompt + output): the work without recompute",
        ),
        fnd.measured(
            pre("flops_counter_excess_pct"),
            excess_pct(flops, theo),
            "%",
            [p.run.cite(srel, "flops"), p.cite("completed")] + ([chunk_src] if chunk_src else []),
            observed_flops=flops,
            expected_flops=theo,
            chunk_tokens=chunk,
            detail=(
                "Δestimated_flops_per_gpu_total vs chunked_request_flops × completed: the work without "
                "recompute, the prompt prefilled in chunks of the iteration budget (chunk_tokens; none: one "
                "chunk)"
            ),
        ),
        _recompute_finding(pre, p, ctx, th.cfg, events, campaign, flops - theo, chunk),
    ]


def _tokens_freed_per_preemption(
    p: BenchPoint, ctx: Context, events: list[Preemption], campaign: Campaign
) -> float | None:
    """The mean KV tokens each preemption freed (overload.points): Δkv_usage × pool ÷ Δpreemptions per
    sample; None without preemptions, pool or KV usage gauge."""
    pool, _ = pool_tokens(p.run, campaign)
    cols = ctx.sampler_series[p.run.name][1] if p.run.name in ctx.sampler_series else {}
    if not events or not pool or "kv_usage" not in cols:
        return None
    vals = [
        tokens_freed(cols["kv_usage"][e.row - 1], cols["kv_usage"][e.row], pool, e.preemptions)
        for e in events
    ]
    return sum(vals) / len(vals)


def _recompute_finding(
    pre: At,
    p: BenchPoint,
    ctx: Context,
    cfg: ModelConfig,
    events: list[Preemption],
    campaign: Campaign,
    extra: float,
    chunk: int | None,
) -> fnd.Finding:
    """The tokens re-prefilled that the FLOPs counter's excess implies, against preemptions × tokens freed."""
    srel = counter_file(p)
    n_pre = sum(e.preemptions for e in events)
    per = _tokens_freed_per_preemption(p, ctx, events, campaign)
    if not n_pre or per is None or per <= 0:
        return fnd.not_available(
            pre("recompute_tokens_implied_by_flops"),
            "tokens",
            "unknown",
            "no preemption inside the window (nothing was recomputed)" if not n_pre else "pool size unknown",
            [p.run.cite(srel, "flops")],
            extra_flops=extra,
        )
    return fnd.measured(
        pre("recompute_tokens_implied_by_flops"),
        recompute_tokens_from_flops(extra, cfg, round(per), chunk),
        "tokens",
        [p.run.cite(srel, "flops"), p.run.cite(srel, "preemptions"), p.run.cite(srel, "kv_usage")],
        theory=n_pre * per,
        tolerance_pct=RECOMPUTE_TOLERANCE_PCT,
        preemptions=n_pre,
        tokens_freed_per_preemption=per,
        extra_flops=extra,
        chunk_tokens=chunk,
        detail="the FLOPs counter's excess over the chunked no-recompute model ÷ the prefill FLOPs per "
        "token of a recompute of the mean tokens freed, chunked the same way; theory: preemptions × mean "
        "tokens freed per preemption",
    )


def run(s: SectionInput) -> Section:
    campaign, ctx, th = s.campaign, s.ctx, s.th
    findings: list[fnd.Finding] = []
    for rnd in campaign.rounds:
        ov = overload_points(campaign, rnd)
        if not ov:
            continue
        head = headline(ov, ctx)
        head_at = At(
            round=rnd,
            topic="overload",
            run=head.run.name,
            engine=head.run.engine,
            weight_format=th.weight_format_for(head.run),
        )
        findings += point_findings(head_at, head, campaign, ctx, th, rnd)
        for p in ov:
            if p is not head:
                findings += point_findings(
                    run_at(p.run, th.weight_format_for(p.run), topic="overload"), p, campaign, ctx, th, rnd
                )
    return Section(name="overload_depth", tables={}, findings=findings)
