"""Overload cliff: KV demand against the pool, what each engine does when it runs out, failures, whether every
request got its requested output, mean running requests vs the server's limit.

vLLM preempts: preemptions (count, timeline, KV usage when each fired, tokens freed) and the share of
inter-token intervals a preemption can touch. llama.cpp has no preemption (and no counter for it): a slot's
context is fixed (-c ÷ -np), so a request whose prompt + output outgrows its slot is *truncated*
(finish_reason `length`, fewer tokens than asked) — reconciled against n_ctx_slot − prompt; slots against the
concurrency say whether any request waited for a slot; the preemption findings are n/a with that reason.

A campaign of our own can hold several overload points in one round (one per run): the round's `overload.*`
keys describe the first point whose requests all came back (a point cut short, e.g. by a device deadline,
cannot carry conclusions), and every other overload point gets the same findings under
`runs.<run>.overload.*`, the cut one saying that it was cut and how far its requests had got.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TypedDict

import pandas as pd

from analysis.core import findings as fnd
from analysis.core import metrics
from analysis.core.keys import At
from analysis.core.windows import PointWindowData, window_indices
from analysis.loading.campaign import BenchPoint, Campaign, RunData, iter_points
from analysis.reconcile import Context, Section, SectionInput, run_at
from analysis.reconcile.concurrency import counter_file, run_sweep_points, sweep_points
from collector.raw.records import RequestRecord


def oversubscription(concurrency: int, input_len: float, output_len: float, pool_tokens: int) -> float:
    """KV demand ÷ pool, ratio: concurrency × (input + output) ÷ pool tokens (> 1: cannot all fit)."""
    return concurrency * (input_len + output_len) / pool_tokens


def slot_oversubscription(input_len: float, output_len: float, n_ctx_slot: int) -> float:
    """One request's context ÷ its llama.cpp slot, ratio: (input + output) ÷ n_ctx_slot (> 1: it cannot
    finish; slots do not share cells, so the pool as a whole does not matter)."""
    return (input_len + output_len) / n_ctx_slot


def slot_output_limit_tokens(requested_output: int, input_len: int, n_ctx_slot: int) -> int:
    """Output tokens a llama.cpp slot lets a request generate (context shift off), tokens:
    min(requested, n_ctx_slot − input)."""
    return max(0, min(requested_output, n_ctx_slot - input_len))


def itl_share_touched_pct(preemptions: float, completed: int, output_len: int) -> float:
    """Upper bound on the share of inter-token intervals a preemption can lengthen, %:
    preemptions ÷ (completed × (output − 1)) × 100 (each preemption stalls one interval of one request).
    Below 1 %, p99 ITL cannot see preemptions at all."""
    return preemptions / (completed * (output_len - 1)) * 100.0


def tokens_freed(kv_before: float, kv_after: float, pool_tokens: int, n: float) -> float:
    """KV tokens released per preemption between two samples, tokens: (usage before − after) × pool ÷ n."""
    return (kv_before - kv_after) * pool_tokens / n


RESIDENT_KEYS = (("max_running_requests", "requests"), ("resident_share_of_log_max_pct", "%"))
VERSUS_SWEEP_KEYS = (("ttft_ratio_over_sweep", "ratio"), ("throughput_change_vs_sweep_pct", "%"))
PREEMPTION_KEYS = (
    ("preemptions", "count"),
    ("itl_share_touched_by_preemptions_pct", "%"),
    ("tokens_freed_per_preemption", "tokens"),
    ("kv_usage_at_preemption_pct", "%"),
)


def resident_share_pct(mean_running: float, limit: float) -> float:
    """The server's stated capacity that overload really used, %: mean running requests ÷ the limit the
    start-up log states (vLLM's maximum concurrency for full-length requests; llama.cpp's slots) × 100."""
    return mean_running / limit * 100.0


def change_pct(value: float, base: float) -> float:
    """(value − base) ÷ base × 100, %: negative when the value fell."""
    return (value - base) / base * 100.0


# decoding "got slower" under overload: its p50 ITL more than twice the same-concurrency sweep's
DECODE_SLOWER_FACTOR = 2.0


def decode_verdict(overload_p50_itl_ms: float | None, sweep_p50_itl_ms: float | None) -> str | None:
    """``unchanged`` when the overload point's p50 ITL stays under DECODE_SLOWER_FACTOR × the sweep's at the
    same concurrency (a longer TTFT is then waiting, not decoding), ``slower`` otherwise; None without
    both."""
    if overload_p50_itl_ms is None or sweep_p50_itl_ms is None:
        return None
    return "unchanged" if overload_p50_itl_ms < DECODE_SLOWER_FACTOR * sweep_p50_itl_ms else "slower"


def point_cut(p: BenchPoint) -> bool:
    """The point did not get all its requests back (aborted, failed): it cannot carry conclusions."""
    r = p.result
    return bool(r.failed) or (r.num_prompts is not None and r.completed < r.num_prompts)


def headline(points: list[BenchPoint], ctx: Context) -> BenchPoint:
    """The overload point a round's `overload.*` keys describe: the first whose requests all came back and
    that passed every exclude gate, else the first."""
    return next((p for p in points if not point_cut(p) and ctx.gate_ok(p)), points[0])


def overload_points(campaign: Campaign, rnd: str | None) -> list[BenchPoint]:
    return list(iter_points(campaign, round=rnd, test_kind="overload"))


def _pool_tokens(run: RunData, campaign: Campaign) -> tuple[int, str] | None:
    """The KV pool (tokens) the server's start-up log states, and its citation: the run's own log, else
    (an imported vLLM run without one) another vLLM run's of the same round; None when no log states it."""
    rel, log = run.server_log
    if rel is not None and log is not None and getattr(log, "kv_cache_tokens", None):
        return log.kv_cache_tokens, run.cite(rel, log.lines.get("kv_cache_tokens"))
    if run.engine == "llamacpp" or run.own:
        return None  # a collector run's pool is its own server's, never another run's
    for r in campaign.select(round=run.round, engine="vllm"):
        rel, log = r.server_log
        if rel is not None and log is not None and getattr(log, "kv_cache_tokens", None):
            return log.kv_cache_tokens, r.cite(rel, log.lines.get("kv_cache_tokens"))
    return None


def _abort_reason(p: BenchPoint) -> tuple[str | None, str | None]:
    """Why the collector stopped the point (events.jsonl `point_end.aborted`), and its citation."""
    rel, log = p.run.events
    if rel is None or log is None:
        return None, None
    for i, e in enumerate(log.records, 1):
        if e.kind == "point_end" and e.get("point") == p.label and e.get("aborted"):
            return str(e.get("aborted")), p.run.cite(rel, i)
    return None, None


def _requests(p: BenchPoint) -> tuple[str, list[RequestRecord]] | None:
    """The point's request records and the file they come from; None for a run without requests.jsonl."""
    rel, log = p.run.requests
    return None if rel is None or log is None else (rel, log.point_records(p.label))


def _input_len(p: BenchPoint) -> float | None:
    """The prompt length of the point, tokens: as the server counted it, else (a point with no completed
    request) as the collector sent it."""
    if p.input_len_tokens:
        return p.input_len_tokens
    found = _requests(p)
    return float(found[1][0].input_len) if found and found[1] else None


SLOT_KEYS = (("concurrency_over_slots", "ratio"), ("output_tokens_per_request", "tokens"))


@dataclass(frozen=True)
class Slots:
    """A llama.cpp server's slots as its start-up log states them: how many (-np), the context of each
    (n_ctx_slot, tokens) and the citation of the slot count."""

    n_slots: int
    n_ctx_slot: int
    source: str


def _slots(p: BenchPoint) -> Slots | None:
    rel, log = p.run.server_log
    if rel is None or log is None:
        return None
    n_slots, n_ctx = getattr(log, "n_slots", None), getattr(log, "n_ctx_slot", None)
    if n_slots is None or n_ctx is None:
        return None
    return Slots(n_slots, n_ctx, p.run.cite(rel, log.lines.get("n_slots")))


def _llamacpp_findings(pre: At, p: BenchPoint, cut: bool) -> list[fnd.Finding]:
    """Slots vs concurrency and truncation at the slot context (llama.cpp's answer to too little KV)."""
    slots = _slots(p)
    if slots is None:
        return [
            fnd.not_available(
                pre(k), u, "no_kv_pool_line", "no n_slots / n_ctx_slot line in the log", [p.cite()]
            )
            for k, u in SLOT_KEYS
        ]
    assert p.concurrency is not None, "an overload point has a concurrency"
    out = [
        fnd.measured(
            pre("concurrency_over_slots"),
            p.concurrency / slots.n_slots,
            "ratio",
            [slots.source, p.cite("max_concurrency")],
            concurrency=p.concurrency,
            slots=slots.n_slots,
            detail="concurrency ÷ slots (-np): at most 1, every request gets a slot at once and none "
            "waits in the server's deferred queue",
        )
    ]
    in_len = _input_len(p)
    if p.requested_output_len_tokens is None or not in_len:
        out.append(
            fnd.not_available(
                pre("output_tokens_per_request"),
                "tokens",
                "no_sweep_log",
                "requested lengths unknown",
                [p.cite()],
            )
        )
        return out
    limit = slot_output_limit_tokens(p.requested_output_len_tokens, round(in_len), slots.n_ctx_slot)
    found = _requests(p)
    if found is None or not found[1]:
        return out + _slot_output_from_result(pre, p, slots, limit)
    rel, recs = found
    done = metrics.completed(recs)
    if cut or not done:
        return [*out, _slot_output_cut(pre, p, rel, recs, slots, limit)]
    return out + _slot_output_findings(pre, p, rel, done, slots, limit, round(in_len))


def _slot_output_from_result(pre: At, p: BenchPoint, slots: Slots, limit: int) -> list[fnd.Finding]:
    """A run without per-request records: the mean output per request from the result's totals."""
    r = p.result
    if not r.completed or r.total_output_tokens is None:
        return []
    return [
        fnd.measured(
            pre("output_tokens_per_request"),
            r.total_output_tokens / r.completed,
            "tokens",
            [p.cite("total_output_tokens"), p.cite("completed"), slots.source],
            theory=float(limit),
            tolerance_pct=0.0,
            requested_output_tokens=p.requested_output_len_tokens,
            n_ctx_slot=slots.n_ctx_slot,
            detail="mean output per request vs min(requested, n_ctx_slot − prompt)",
        )
    ]


def _slot_output_cut(
    pre: At, p: BenchPoint, rel: str, recs: list[RequestRecord], slots: Slots, limit: int
) -> fnd.Finding:
    """A point cut before its requests finished: how far each request had got, nothing concluded."""
    streamed = [sum(r.chunk_tokens) for r in recs]
    return fnd.not_available(
        pre("output_tokens_per_request"),
        "tokens",
        "point_cut",
        "the point was cut before its requests finished: how far each had got is kept, nothing is concluded",
        [p.run.cite(rel, "chunk_tokens"), slots.source],
        slot_limit_tokens=limit,
        streamed_tokens_min=min(streamed) if streamed else None,
        streamed_tokens_max=max(streamed) if streamed else None,
        requests=len(recs),
    )


def _slot_output_findings(
    pre: At, p: BenchPoint, rel: str, done: list[RequestRecord], slots: Slots, limit: int, in_len: int
) -> list[fnd.Finding]:
    """The completed requests truncated at the slot context, and their mean output against the slot's
    limit."""
    toks = [metrics.output_tokens(r) for r in done]
    truncated = [r for r, n in zip(done, toks, strict=True) if n < r.max_tokens]
    reasons: dict[str, int] = {}
    for r in done:
        reasons[str(r.finish_reason)] = reasons.get(str(r.finish_reason), 0) + 1
    return [
        fnd.measured(
            pre("truncated_requests"),
            len(truncated),
            "requests",
            [p.run.cite(rel, "usage.completion_tokens"), p.run.cite(rel, "finish_reason")],
            completed=len(done),
            finish_reasons=reasons,
            detail="completed requests that got fewer tokens than max_tokens",
        ),
        fnd.measured(
            pre("output_tokens_per_request"),
            sum(toks) / len(toks),
            "tokens",
            [p.run.cite(rel, "usage.completion_tokens"), slots.source, p.protocol_source or p.cite()],
            theory=float(limit),
            tolerance_pct=0.0,
            min_tokens=min(toks),
            max_tokens=max(toks),
            requested_output_tokens=p.requested_output_len_tokens,
            input_tokens=in_len,
            n_ctx_slot=slots.n_ctx_slot,
            detail="mean output per completed request vs min(requested, n_ctx_slot − prompt): a slot's "
            "context is fixed and context shift is off, so generation stops when the slot is full",
        ),
    ]


class PreemptionEvent(TypedDict):
    """One sampler step in which the preemption counter rose (a row of the overload_preemptions table)."""

    round: str
    run: str
    t_s: float
    row: int
    preemptions: float
    kv_usage_before_pct: float
    kv_usage_after_pct: float
    tokens_freed_per_preemption: float | None
    source: str


def _completion_finding(pre: At, p: BenchPoint, cut: bool) -> fnd.Finding:
    """Did every request the point sent come back complete (else why the collector cut it)."""
    r = p.result
    why, why_src = _abort_reason(p)
    return fnd.checked(
        pre("all_requests_completed"),
        not cut,
        [p.cite("completed"), p.cite("failed"), *([why_src] if why_src else [])],
        detail=(
            "every request sent came back complete"
            if not cut
            else f"cut: {why}"
            if why
            else "some requests failed or never came back"
        ),
        completed=r.completed,
        num_prompts=r.num_prompts,
        failed=r.failed,
        aborted=why,
    )


def _borrowed(p: BenchPoint) -> dict[str, Any]:
    """The extra fields of a finding whose requested lengths come from another run's log."""
    return {"protocol_borrowed": True, "protocol_source": p.protocol_source} if p.protocol_borrowed else {}


def _slot_oversubscription_finding(pre: At, p: BenchPoint) -> fnd.Finding:
    """llama.cpp: one request's context against its slot (slots do not share KV cells)."""
    log_rel, log = p.run.server_log
    n_ctx = getattr(log, "n_ctx_slot", None) if log is not None else None
    out_len, in_len = p.requested_output_len_tokens, _input_len(p)
    if log_rel is None or log is None or n_ctx is None or out_len is None or not in_len:
        return fnd.not_available(
            pre("oversubscription"),
            "ratio",
            "no_server_log",
            "slot context or requested lengths unknown",
            [p.cite()],
        )
    return fnd.measured(
        pre("oversubscription"),
        slot_oversubscription(in_len, out_len, n_ctx),
        "ratio",
        [
            p.run.cite(log_rel, log.lines.get("n_ctx_slot")),
            p.protocol_source or p.cite("total_input_tokens"),
        ],
        demand_tokens=in_len + out_len,
        pool_tokens=n_ctx,
        basis="per_slot",
        detail=("one request's context ÷ its slot (n_ctx_slot): llama.cpp slots do not share KV cells"),
    )


def _pool_oversubscription_finding(pre: At, p: BenchPoint, campaign: Campaign) -> fnd.Finding:
    """vLLM: the KV all concurrent requests demand against the pool the start-up log states."""
    pool = _pool_tokens(p.run, campaign)
    out_len = p.requested_output_len_tokens
    if pool is None or out_len is None or not p.input_len_tokens or p.concurrency is None:
        return fnd.not_available(
            pre("oversubscription"),
            "ratio",
            "no_server_log",
            "pool or requested lengths unknown",
            [p.cite()],
        )
    pool_tokens, pool_src = pool
    return fnd.measured(
        pre("oversubscription"),
        oversubscription(p.concurrency, p.input_len_tokens, out_len, pool_tokens),
        "ratio",
        [
            pool_src,
            p.cite("max_concurrency"),
            p.cite("total_input_tokens"),
            *([p.protocol_source] if p.protocol_source else []),
        ],
        demand_tokens=p.concurrency * (p.input_len_tokens + out_len),
        pool_tokens=pool_tokens,
        basis="pool",
        **_borrowed(p),
    )


def _request_count_findings(pre: At, p: BenchPoint) -> list[fnd.Finding]:
    """How many requests failed and how many completed."""
    r = p.result
    if r.failed is None:
        failed = fnd.not_available(
            pre("failed_requests"),
            "requests",
            "unknown",
            "the result records no failed count",
            [p.cite()],
        )
    else:
        failed = fnd.measured(pre("failed_requests"), r.failed, "requests", [p.cite("failed")])
    completed = fnd.measured(
        pre("completed_requests"),
        r.completed,
        "requests",
        [p.cite("completed")],
        num_prompts=r.num_prompts,
    )
    return [failed, completed]


def _output_complete_finding(pre: At, p: BenchPoint, cut: bool) -> fnd.Finding:
    """Did the completed requests get every output token they asked for."""
    r = p.result
    out_len = p.requested_output_len_tokens
    if out_len is None:
        return fnd.not_available(
            pre("output_tokens_complete"),
            "bool",
            "no_sweep_log",
            "requested output length unknown",
            [p.cite("total_output_tokens")],
        )
    if cut or not r.completed:
        return fnd.not_available(
            pre("output_tokens_complete"),
            "bool",
            "point_cut",
            "no request of the point completed: nothing to count",
            [p.cite("completed")],
        )
    ok = r.total_output_tokens == r.completed * out_len
    return fnd.checked(
        pre("output_tokens_complete"),
        ok,
        [
            p.cite("total_output_tokens"),
            p.cite("completed"),
            *([p.protocol_source] if p.protocol_source else []),
        ],
        detail=None
        if ok or p.run.engine != "llamacpp"
        else "llama.cpp truncates at the slot context: see output_tokens_per_request",
        total_output_tokens=r.total_output_tokens,
        expected_tokens=r.completed * out_len,
        **_borrowed(p),
    )


def _request_findings(pre: At, p: BenchPoint, campaign: Campaign, cut: bool) -> list[fnd.Finding]:
    """What the client saw of the point: completion, KV demand, request counts, output tokens."""
    llama = p.run.engine == "llamacpp"
    return [
        _completion_finding(pre, p, cut),
        _slot_oversubscription_finding(pre, p) if llama else _pool_oversubscription_finding(pre, p, campaign),
        *_request_count_findings(pre, p),
        _output_complete_finding(pre, p, cut),
    ]


def _point_findings(
    pre: At,
    p: BenchPoint,
    campaign: Campaign,
    ctx: Context,
    rnd: str | None,
    timeline_rows: list[dict[str, Any]],
    event_rows: list[PreemptionEvent],
) -> list[fnd.Finding]:
    """Every overload finding of one point (the rows of its timeline and preemptions appended to the
    tables' rows)."""
    cut = point_cut(p)
    findings = _request_findings(pre, p, campaign, cut)
    if p.run.engine == "llamacpp":
        findings += _llamacpp_findings(pre, p, cut)
    findings += _versus_sweep(pre, p, campaign, rnd, cut)
    w = ctx.window(p)
    if w is None or p.run.name not in ctx.sampler_series:
        for k, u in (("mean_running_requests", "requests"), *RESIDENT_KEYS, *PREEMPTION_KEYS):
            findings.append(
                fnd.not_available(
                    pre(k), u, "no_sampler_csv", f"{p.run.cite_root} kept no sampler CSV", [p.cite()]
                )
            )
        return findings
    ts, cols = ctx.sampler_series[p.run.name]
    timeline_rows += _timeline_rows(p, rnd, w, ts, cols)
    findings += _running_findings(pre, p, w)
    if "preemptions" not in cols:
        for k, u in PREEMPTION_KEYS:
            findings.append(
                fnd.not_available(
                    pre(k),
                    u,
                    "no_preemption_counter",
                    f"{p.run.engine} has no preemption: a slot's context is fixed, a request "
                    "that outgrows it is truncated (see output_tokens_per_request)",
                    [p.run.cite(counter_file(p))],
                )
            )
        return findings
    pool = _pool_tokens(p.run, campaign)
    pool_tokens = pool[0] if pool is not None else None
    events = _preemption_events(p, rnd, ctx, w, ts, cols, pool_tokens)
    event_rows += events
    findings += _preemption_count_findings(pre, p, ctx, w)
    findings += _preemption_event_findings(pre, events, pool_tokens)
    return findings


def _timeline_rows(
    p: BenchPoint, rnd: str | None, w: PointWindowData, ts: Sequence[float], cols: dict[str, Any]
) -> list[dict[str, Any]]:
    """The overload_timeline table's rows of one point: KV usage, running and waiting requests and the
    preemptions since the window opened, one row per sample inside the window."""
    idx = window_indices(ts, w.window)
    has_pre = "preemptions" in cols
    # the sample just before the window anchors the cumulative counter
    i0 = max(0, idx.start - 1)
    pre_base = cols["preemptions"][i0] if has_pre else None
    rows: list[dict[str, Any]] = []
    for i in range(idx.start, idx.stop):
        row: dict[str, Any] = {
            "round": rnd or "",
            "run": p.run.name,
            "engine": p.run.engine,
            "test_kind": p.test_kind,
            "t_s": ts[i] - w.window.start_s,
            "row": i,
        }
        for c, scale in (("kv_usage", 100.0), ("running", 1.0), ("waiting", 1.0)):
            if c in cols:
                row["kv_usage_pct" if c == "kv_usage" else c] = cols[c][i] * scale
        if has_pre:
            row["preemptions"] = cols["preemptions"][i] - pre_base
        rows.append(row)
    return rows


def _log_limit(p: BenchPoint) -> tuple[float | None, str]:
    """The concurrency the server's start-up log says it holds (llama.cpp: its slots; vLLM: its maximum
    concurrency for full-length requests), and how the running gauge's mean reads against it."""
    _, log = p.run.server_log
    if p.run.engine == "llamacpp":
        max_conc = getattr(log, "n_slots", None) if log is not None else None
        return (
            max_conc,
            "mean of llamacpp:requests_processing over the window; the server's limit is its slots (-np)",
        )
    max_conc = getattr(log, "max_concurrency_x", None) if log is not None else None
    return max_conc, (
        "mean of the running gauge over the window; the log's maximum concurrency is for requests of "
        "max_model_len tokens, which these reach only at their last token"
    )


def _running_findings(pre: At, p: BenchPoint, w: PointWindowData) -> list[fnd.Finding]:
    """The mean running requests over the window, and what the server really held against its limit."""
    mean_run = w.gauges["running"].mean if "running" in w.gauges else None
    max_conc, detail = _log_limit(p)
    srel = counter_file(p)
    if mean_run is None or (isinstance(mean_run, float) and math.isnan(mean_run)):
        mean = fnd.not_available(
            pre("mean_running_requests"),
            "requests",
            "counter_not_enclosed",
            "no running gauge inside the window",
            [p.run.cite(srel)],
        )
    else:
        mean = fnd.measured(
            pre("mean_running_requests"),
            mean_run,
            "requests",
            [p.run.cite(srel, "running")],
            detail=detail,
            max_concurrency_log=max_conc,
            max_waiting=w.gauges["waiting"].max if "waiting" in w.gauges else None,
        )
    return [mean, *_residents(pre, p, w, mean_run, max_conc)]


def _preemption_events(
    p: BenchPoint,
    rnd: str | None,
    ctx: Context,
    w: PointWindowData,
    ts: Sequence[float],
    cols: dict[str, Any],
    pool: int | None,
) -> list[PreemptionEvent]:
    """The samples inside the window (and the one closing it) in which the preemption counter rose: KV usage
    before and after, and the tokens each preemption freed."""
    idx = window_indices(ts, w.window)
    out: list[PreemptionEvent] = []
    for i in range(max(idx.start, 1), idx.stop + 1 if idx.stop < len(ts) else idx.stop):
        d = cols["preemptions"][i] - cols["preemptions"][i - 1]
        if d > 0 and not math.isnan(d):
            out.append(
                {
                    "round": rnd or "",
                    "run": p.run.name,
                    "t_s": ts[i] - w.window.start_s,
                    "row": i,
                    "preemptions": d,
                    "kv_usage_before_pct": cols["kv_usage"][i - 1] * 100,
                    "kv_usage_after_pct": cols["kv_usage"][i] * 100,
                    "tokens_freed_per_preemption": tokens_freed(
                        cols["kv_usage"][i - 1], cols["kv_usage"][i], pool, d
                    )
                    if pool
                    else None,
                    "source": ctx.sample_cite(p.run, i),
                }
            )
    return out


def _preemption_count_findings(pre: At, p: BenchPoint, ctx: Context, w: PointWindowData) -> list[fnd.Finding]:
    """How many preemptions the window holds, and the share of inter-token intervals they can touch."""
    r = p.result
    srel = counter_file(p)
    n_pre = w.delta("preemptions")
    assert n_pre is not None, "the preemption counter is in the window's deltas"
    out = [
        fnd.measured(
            pre("preemptions"),
            int(n_pre),
            "count",
            [p.run.cite(srel, "preemptions")],
            sampler_rows=[ctx.sample_line(p.run, w.first_row), ctx.sample_line(p.run, w.last_row)],
        )
    ]
    out_len = p.requested_output_len_tokens
    if out_len and r.completed:
        out.append(
            fnd.measured(
                pre("itl_share_touched_by_preemptions_pct"),
                itl_share_touched_pct(n_pre, r.completed, out_len),
                "%",
                [p.run.cite(srel, "preemptions"), p.cite("completed")],
                p99_itl_ms=r.itl.p99_ms,
                p50_itl_ms=r.itl.p50_ms,
            )
        )
    else:
        out.append(
            fnd.not_available(
                pre("itl_share_touched_by_preemptions_pct"),
                "%",
                "point_cut",
                "no completed request to share the intervals",
                [p.cite("completed")],
            )
        )
    return out


def _preemption_event_findings(pre: At, ev: list[PreemptionEvent], pool: int | None) -> list[fnd.Finding]:
    """The KV usage at which the preemptions fired, and the tokens each freed."""
    if not ev:
        return [
            fnd.not_available(
                pre("kv_usage_at_preemption_pct"), "%", "unknown", "no preemption inside the window"
            ),
            fnd.not_available(
                pre("tokens_freed_per_preemption"), "tokens", "unknown", "no preemption inside the window"
            ),
        ]
    sources = [e["source"] for e in ev][:5]
    out = [
        fnd.measured(
            pre("kv_usage_at_preemption_pct"),
            sum(e["kv_usage_before_pct"] for e in ev) / len(ev),
            "%",
            sources,
            events=len(ev),
            min_pct=min(e["kv_usage_before_pct"] for e in ev),
        )
    ]
    freed = [f for e in ev if (f := e["tokens_freed_per_preemption"]) is not None]
    if freed:
        out.append(
            fnd.measured(
                pre("tokens_freed_per_preemption"),
                sum(freed) / len(freed),
                "tokens",
                sources,
                pool_tokens=pool,
                detail="mean over preemption samples of Δkv_usage × pool ÷ Δpreemptions "
                "(other requests finishing in the same second blur it)",
            )
        )
    else:
        out.append(
            fnd.not_available(
                pre("tokens_freed_per_preemption"), "tokens", "no_kv_pool_line", "pool size unknown", sources
            )
        )
    return out


def _sweep_twin(p: BenchPoint, campaign: Campaign, rnd: str | None) -> BenchPoint | None:
    """The sweep point of the same engine (our runs: the same run) at the overload point's concurrency: the
    same load but for the lengths, so the two differ only by how much KV each request needs."""
    pts = run_sweep_points(p.run) if p.run.own else sweep_points(campaign, rnd, p.run.engine)
    return next((q for q in pts if q.concurrency == p.concurrency and q.result.completed), None)


def _versus_sweep(
    pre: At, p: BenchPoint, campaign: Campaign, rnd: str | None, cut: bool
) -> list[fnd.Finding]:
    """The price of overload: p50 TTFT and output throughput against the sweep point at the same concurrency
    (p50 ITL of both kept alongside: it says whether decoding itself got slower)."""
    twin = _sweep_twin(p, campaign, rnd)
    r = p.result
    why = (
        ("point_cut", "the overload point was cut before its requests finished")
        if cut or not r.completed
        else ("no_matching_sweep_point", f"no sweep point at concurrency {p.concurrency} to compare with")
        if twin is None
        else None
    )
    if why is not None:
        return [fnd.not_available(pre(k), u, why[0], why[1], [p.cite()]) for k, u in VERSUS_SWEEP_KEYS]
    assert twin is not None
    t = twin.result
    both: dict[str, Any] = {
        "concurrency": p.concurrency,
        "overload_input_len_tokens": p.input_len_tokens,
        "overload_output_len_tokens": p.requested_output_len_tokens,
        "sweep_input_len_tokens": twin.input_len_tokens,
        "sweep_output_len_tokens": twin.requested_output_len_tokens,
        "overload_p50_itl_ms": r.itl.p50_ms,
        "sweep_p50_itl_ms": t.itl.p50_ms,
        "decode": decode_verdict(r.itl.p50_ms, t.itl.p50_ms),
    }
    return [_ttft_ratio_finding(pre, p, twin, both), _throughput_change_finding(pre, p, twin, both)]


def _ttft_ratio_finding(pre: At, p: BenchPoint, twin: BenchPoint, both: dict[str, Any]) -> fnd.Finding:
    """p50 TTFT of the overload point ÷ of the sweep point at the same concurrency."""
    ov_ttft, sw_ttft = p.result.ttft.p50_ms, twin.result.ttft.p50_ms
    if ov_ttft is None or not sw_ttft:
        return fnd.not_available(pre("ttft_ratio_over_sweep"), "ratio", "unknown", "no p50 TTFT", [p.cite()])
    return fnd.measured(
        pre("ttft_ratio_over_sweep"),
        ov_ttft / sw_ttft,
        "ratio",
        [p.cite("p50_ttft_ms"), twin.cite("p50_ttft_ms")],
        overload_p50_ttft_ms=ov_ttft,
        sweep_p50_ttft_ms=sw_ttft,
        detail="p50 TTFT of the overload point ÷ of the sweep point at the same concurrency",
        **both,
    )


def _throughput_change_finding(pre: At, p: BenchPoint, twin: BenchPoint, both: dict[str, Any]) -> fnd.Finding:
    """Output tokens/s of the overload point against the sweep point's at the same concurrency, %."""
    ov_thr, sw_thr = p.result.output_throughput_tok_s, twin.result.output_throughput_tok_s
    if ov_thr is None or not sw_thr:
        return fnd.not_available(
            pre("throughput_change_vs_sweep_pct"), "%", "unknown", "no throughput", [p.cite()]
        )
    return fnd.measured(
        pre("throughput_change_vs_sweep_pct"),
        change_pct(ov_thr, sw_thr),
        "%",
        [p.cite("output_throughput"), twin.cite("output_throughput")],
        overload_tokens_per_s=ov_thr,
        sweep_tokens_per_s=sw_thr,
        detail="(overload − sweep) output tokens/s ÷ sweep, at the same concurrency",
        **both,
    )


def _missing(x: float | None) -> bool:
    """A gauge statistic the window did not give (None or NaN)."""
    return x is None or (isinstance(x, float) and math.isnan(x))


def _residents(
    pre: At, p: BenchPoint, w: PointWindowData, mean_run: float | None, max_conc: float | None
) -> list[fnd.Finding]:
    """How many requests the server really held under overload: the running gauge's maximum (what the
    scheduler admitted; vLLM's --max-num-seqs caps it) and its mean against the limit the log states."""
    return [_max_running_finding(pre, p, w, mean_run), _resident_share_finding(pre, p, mean_run, max_conc)]


def _max_running_finding(pre: At, p: BenchPoint, w: PointWindowData, mean_run: float | None) -> fnd.Finding:
    """The running gauge's maximum over the window: what the scheduler admitted at most."""
    g = w.gauges.get("running")
    top = g.max if g is not None else None
    if top is None or _missing(top):
        return fnd.not_available(
            pre("max_running_requests"), "requests", "counter_not_enclosed", "no running gauge", [p.cite()]
        )
    _, log = p.run.server_log
    args = getattr(log, "non_default_args", None) or {}
    return fnd.measured(
        pre("max_running_requests"),
        top,
        "requests",
        [p.run.cite(counter_file(p), "running")],
        max_num_seqs=args.get("max_num_seqs"),
        mean_running=mean_run,
        detail="maximum of the running gauge over the window: what the scheduler admitted at most",
    )


def _resident_share_finding(
    pre: At, p: BenchPoint, mean_run: float | None, max_conc: float | None
) -> fnd.Finding:
    """The mean running requests against the limit the start-up log states, %."""
    log_rel, log = p.run.server_log
    if mean_run is None or _missing(mean_run) or not max_conc or log_rel is None:
        return fnd.not_available(
            pre("resident_share_of_log_max_pct"),
            "%",
            "no_server_log" if not max_conc else "counter_not_enclosed",
            "no limit in the start-up log" if not max_conc else "no running gauge",
            [p.cite()],
        )
    llama = p.run.engine == "llamacpp"
    line = log.lines.get("n_slots" if llama else "max_concurrency_x") if log is not None else None
    return fnd.measured(
        pre("resident_share_of_log_max_pct"),
        resident_share_pct(mean_run, max_conc),
        "%",
        [p.run.cite(counter_file(p), "running"), p.run.cite(log_rel, line)],
        mean_running=mean_run,
        log_max_concurrency=max_conc,
        basis="slots" if llama else "log_max_concurrency",
        detail="mean running requests over the window ÷ the limit the start-up log states",
    )


def run(s: SectionInput) -> Section:
    campaign, ctx, th = s.campaign, s.ctx, s.th
    findings: list[fnd.Finding] = []
    timeline_rows: list[dict[str, Any]] = []
    event_rows: list[PreemptionEvent] = []
    for rnd in campaign.rounds:
        pre = At(round=rnd, topic="overload")
        ov = overload_points(campaign, rnd)
        if not ov:
            for k, u in (
                ("oversubscription", "ratio"),
                ("output_tokens_complete", "bool"),
                ("preemptions", "count"),
            ):
                findings.append(
                    fnd.not_available(
                        pre(k), u, "no_such_test", f"no overload run in {rnd or 'the campaign'}"
                    )
                )
            continue
        head = headline(ov, ctx)
        # the round's overload findings describe the headline point: they know its run, engine and format
        head_at = pre.with_(
            run=head.run.name, engine=head.run.engine, weight_format=th.weight_format_for(head.run)
        )
        findings += _point_findings(head_at, head, campaign, ctx, rnd, timeline_rows, event_rows)
        for p in ov:
            if p is not head:
                own = run_at(p.run, th.weight_format_for(p.run), topic="overload")
                findings += _point_findings(own, p, campaign, ctx, rnd, timeline_rows, event_rows)
    # the weight format names the series in the figure's legend (llama.cpp（F16）), not the run's folder name
    formats = {r.name: th.weight_format_for(r) for r in campaign.runs}
    for row in timeline_rows:
        row["weight_format"] = formats.get(row["run"])
    tables = {
        "overload_timeline": pd.DataFrame(timeline_rows),
        "overload_preemptions": pd.DataFrame(event_rows),
    }
    return Section(name="overload", tables=tables, findings=findings)
