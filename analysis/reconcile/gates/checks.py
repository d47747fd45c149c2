"""Self-check gates: per benchmark point, pass/fail/unknown with the reason and the file it rests on.

A point that fails a gate stays in every table (column `gate_ok` = false) and every figure (drawn
differently, with a legend saying so); findings list the points they rest on. `unknown` (the campaign
kept no file to check against) never fails a point but is reported.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from analysis import findings as fnd
from analysis import metrics
from analysis.campaign import BenchPoint, Campaign, iter_points
from analysis.keys import At
from analysis.parse.requests_jsonl import RequestRecord
from analysis.reconcile import Context, Section, SectionInput

GATE_ORDER = (
    "completed",
    "no_failures",
    "output_tokens",
    "input_tokens",
    "stream_token_counts",
    "greedy",
    "prefix_caching_off",
    "no_preemptions",
    "fingerprint",
    "client_not_saturated",
)
# A failed `exclude` gate means the point measured a different workload or server (fewer requests, a
# cache that skips prefill, preemptions in a run meant to have none): conclusions leave it out. A failed
# `flag` gate is a weaker protocol lapse (no fingerprint, sampling not forced greedy — output length is
# fixed by ignore-eos either way — or a small output shortfall reported by its own finding): the point is
# used and every conclusion resting on it lists it.
SEVERITY = {
    "completed": "exclude",
    "no_failures": "exclude",
    "input_tokens": "exclude",  # a different prompt length is a different workload
    # the client's per-chunk token counts disagree with the server's usage: ITL/TPOT of the point are suspect
    "stream_token_counts": "flag",
    "prefix_caching_off": "exclude",
    "no_preemptions": "exclude",
    "output_tokens": "flag",
    "greedy": "flag",
    "fingerprint": "flag",
    # the load client's event loop ran late (analysis.metrics.client_saturated): the point's latencies and its
    # closed-loop throughput were set by the client, not the server
    "client_not_saturated": "exclude",
}


@dataclass(frozen=True)
class GateResult:
    gate: str
    status: str  # "pass" | "fail" | "unknown"
    reason: str | None  # labels_zh.REASONS code when not pass
    source: str | None
    detail: str

    @property
    def severity(self) -> str:
        """What a failure of this gate means for its point: ``exclude`` or ``flag`` (``SEVERITY``)."""
        return SEVERITY[self.gate]


def gate_completed(num_prompts: int | None, completed: int) -> bool:
    """completed == num_prompts (every request sent came back)."""
    return num_prompts is None or completed == num_prompts


def gate_output_tokens(total_output_tokens: int, completed: int, requested_output_len: int) -> bool:
    """total_output_tokens == completed × requested output length (ignore-eos honoured)."""
    return total_output_tokens == completed * requested_output_len


def prefix_caching_enabled(run) -> tuple[bool | None, str | None]:
    """What the server log says about prefix caching: (enabled?, citation); (None, None) if it does not.
    vLLM states it in its engine-config line; llama.cpp's start-up excerpt does not."""
    rel, log = run.server_log
    if log is None:
        return None, None
    cfg = getattr(log, "engine_config", None)
    if cfg is not None and cfg.enable_prefix_caching is not None:
        return bool(cfg.enable_prefix_caching), run.cite(rel, cfg.line)
    return None, run.cite(rel)


# collector check name (events.jsonl) -> gate; startup checks apply to every point of the run
OWN_POINT_CHECKS = {
    "completed_vs_sent": "completed",
    "failures": "no_failures",
    "output_tokens": "output_tokens",
    "input_tokens": "input_tokens",
}
OWN_REASONS = {
    "completed": "completed_below_requested",
    "no_failures": "failed_requests",
    "output_tokens": "output_tokens_short",
    "input_tokens": "input_tokens_differ",
    "greedy": "temperature_not_zero",
    "prefix_caching_off": "prefix_caching_on",
    "no_preemptions": "preemptions_outside_overload",
}


def stream_counts_agree(r: RequestRecord) -> bool:
    """The client's streamed token count equals the server's usage.completion_tokens, the counting source
    stayed one kind for the whole stream (``mixed`` means the client itself distrusts it), and no chunk's
    count was impossible (below 0 — a cumulative counter that went back, recorded as such by older
    collectors — or flagged by the collector as ``token_count_problem``)."""
    return (
        r.token_count_source != "mixed"
        and r.token_count_problem is None
        and all(n >= 0 for n in r.chunk_tokens)
        and r.completion_tokens is not None
        and sum(r.chunk_tokens) == r.completion_tokens
    )


def _own_checks(run) -> dict[tuple[str, str | None], tuple[object, int]]:
    """(check name, point or None for start-up) -> (the check event, its events.jsonl line); last one wins."""
    rel, log = run.events
    out = {}
    for i, e in enumerate(log.records if log is not None else [], 1):
        if e.kind == "check":
            out[(e.get("name"), e.get("point") if e.get("scope") == "point" else None)] = (e, i)
    return out


def client_gate(run, point: str) -> GateResult:
    """Our load client's self-check for one point: its ``client_probe`` events (event-loop lag, one per
    load-client process) judged together by ``analysis.metrics.client_saturated``; unknown for runs whose
    collector did not record them yet."""
    rel, log = run.events
    hits = [(i, e) for i, e in enumerate(log.records if log is not None else [], 1)
            if e.kind == "client_probe" and e.get("point") == point]  # fmt: skip
    if not hits:
        return GateResult(
            "client_not_saturated",
            "unknown",
            "no_client_probe",
            run.cite(rel) if rel else None,
            "no client_probe event (collector predates the client's self-check)",
        )
    line = hits[0][0]
    lag = [x for _, e in hits for x in (e.get("lag_ns") or [])]  # every shard's loop: one process is enough
    sat = metrics.client_saturated(lag)
    p99 = metrics.client_loop_lag_p99_ms(lag)
    detail = "no probe sample" if p99 is None else (
        f"event-loop lag p99 {p99:.2f} ms over {len(lag)} wake-ups of {len(hits)} process(es) "
        f"(limit {metrics.CLIENT_LOOP_LAG_LIMIT_MS:g} ms)")  # fmt: skip
    status = "unknown" if sat is None else ("fail" if sat else "pass")
    reason = None if sat is False else ("client_saturated" if sat else "unknown")
    return GateResult("client_not_saturated", status, reason, run.cite(rel, line), detail)


def evaluate_own_point(p: BenchPoint, ctx: Context) -> list[GateResult]:
    """A collector run's point: the gates are the collector's own recorded self-checks (events.jsonl),
    plus the stream-count agreement read from requests.jsonl."""
    run = p.run
    erel, _ = run.events
    checks = _own_checks(run)
    out: list[GateResult] = []

    def from_check(gate: str, name: str, point: str | None) -> None:
        hit = checks.get((name, point))
        if hit is None:
            out.append(
                GateResult(gate, "unknown", "unknown", run.cite(erel) if erel else None, f"no {name} check")
            )
            return
        e, line = hit
        ok = e.get("ok")
        status = "unknown" if ok is None else ("pass" if ok else "fail")
        out.append(
            GateResult(
                gate,
                status,
                None if ok else (OWN_REASONS.get(gate) if ok is False else "unknown"),
                run.cite(erel, line),
                str(e.get("detail", "")),
            )
        )

    for name, gate in OWN_POINT_CHECKS.items():
        from_check(gate, name, p.label)
    rrel, _ = run.requests
    recs = [r for r in p.records if r.ok]
    bad = [r.request_id for r in recs if not stream_counts_agree(r)]
    absurd = [r.request_id for r in recs if not metrics.token_counts_plausible(r)]  # 2^62 tokens …
    sources = sorted({str(r.token_count_source) for r in recs})
    out.append(
        GateResult(
            "stream_token_counts",
            "pass" if not bad and not absurd else "fail",
            None if not bad and not absurd else "token_counts_unreliable",
            run.cite(rrel, "chunk_tokens") if rrel else None,
            f"{len(bad)} of {len(recs)} requests disagree with usage.completion_tokens; "
            + (f"{len(absurd)} claim more tokens than max_tokens; " if absurd else "")
            + f"token_count_source {sources}",
        )
    )
    out.append(client_gate(run, p.label))
    from_check("greedy", "greedy_sampling", None)
    # prefix caching: off at start-up and no cache hit during the point
    start_hit, point_hit = (
        checks.get(("prefix_caching_off", None)),
        checks.get(("prefix_cache_hits", p.label)),
    )
    oks = [h[0].get("ok") for h in (start_hit, point_hit) if h is not None]
    src = [run.cite(erel, h[1]) for h in (start_hit, point_hit) if h is not None]
    if False in oks:
        out.append(
            GateResult(
                "prefix_caching_off",
                "fail",
                "prefix_caching_on",
                src[0],
                "; ".join(str(h[0].get("detail", "")) for h in (start_hit, point_hit) if h),
            )
        )
    elif oks and all(o is True for o in oks):
        out.append(
            GateResult(
                "prefix_caching_off",
                "pass",
                None,
                src[0],
                "; ".join(str(h[0].get("detail", "")) for h in (start_hit, point_hit) if h),
            )
        )
    else:
        out.append(
            GateResult("prefix_caching_off", "unknown", "unknown", src[0] if src else None, "not decided")
        )
    hit = checks.get(("preemptions", p.label))
    if hit is None or hit[0].get("ok") is None:
        out.append(
            GateResult(
                "no_preemptions",
                "unknown",
                "unknown",
                run.cite(erel, hit[1]) if hit else None,
                str(hit[0].get("detail", "")) if hit else "no preemptions check",
            )
        )
    else:
        e, line = hit
        d = (e.get("facts") or {}).get("preemptions_delta")
        ok = p.test_kind == "overload" or d == 0
        out.append(
            GateResult(
                "no_preemptions",
                "pass" if ok else "fail",
                None if ok else "preemptions_outside_overload",
                run.cite(erel, line),
                str(e.get("detail", "")),
            )
        )
    fp = run.docs.files.get("fingerprint_summary")
    out.append(
        GateResult(
            "fingerprint",
            "pass" if fp else "fail",
            None if fp else "no_fingerprint",
            run.cite(fp) if fp else None,
            "present" if fp else "missing",
        )
    )
    return out


def evaluate_point(p: BenchPoint, ctx: Context) -> list[GateResult]:
    if p.run.own:
        return evaluate_own_point(p, ctx)
    r = p.result
    out: list[GateResult] = []
    ok = gate_completed(r.num_prompts, r.completed)
    out.append(
        GateResult(
            "completed",
            "pass" if ok else "fail",
            None if ok else "completed_below_requested",
            p.cite("completed"),
            f"{r.completed}/{r.num_prompts}",
        )
    )
    if r.failed is None:
        out.append(GateResult("no_failures", "unknown", "unknown", p.cite("failed"), "no failed count"))
    else:
        out.append(
            GateResult(
                "no_failures",
                "pass" if r.failed == 0 else "fail",
                None if r.failed == 0 else "failed_requests",
                p.cite("failed"),
                f"failed={r.failed}",
            )
        )
    if p.requested_output_len_tokens is None or r.total_output_tokens is None:
        out.append(
            GateResult(
                "output_tokens",
                "unknown",
                "no_sweep_log",
                p.cite("total_output_tokens"),
                "requested output length unknown",
            )
        )
    else:
        want = r.completed * p.requested_output_len_tokens
        ok = gate_output_tokens(r.total_output_tokens, r.completed, p.requested_output_len_tokens)
        out.append(
            GateResult(
                "output_tokens",
                "pass" if ok else "fail",
                None if ok else "output_tokens_short",
                p.cite("total_output_tokens"),
                f"{r.total_output_tokens}/{want}",
            )
        )
    if p.sweep_point is None:
        out.append(GateResult("greedy", "unknown", "no_sweep_log", None, "no client log kept for this run"))
    else:
        t = p.sweep_point.namespace.get("temperature")
        ok = t == 0
        sweep_rel, _ = p.run.sweep
        out.append(
            GateResult(
                "greedy",
                "pass" if ok else "fail",
                None if ok else "temperature_not_zero",
                p.run.cite(sweep_rel, p.sweep_point.namespace_line),
                f"temperature={t!r}",
            )
        )
    enabled, src = prefix_caching_enabled(p.run)
    if enabled is None:
        # a log that is there but silent on it (llama.cpp's start-up lines) is not a missing log
        why = "no_server_log" if src is None else "prefix_cache_not_logged"
        out.append(GateResult("prefix_caching_off", "unknown", why, src, "server log does not say"))
    else:
        out.append(
            GateResult(
                "prefix_caching_off",
                "fail" if enabled else "pass",
                "prefix_caching_on" if enabled else None,
                src,
                f"prefix_caching={enabled}",
            )
        )
    w = ctx.window(p)
    if w is None or w.delta("preemptions") is None:
        out.append(
            GateResult("no_preemptions", "unknown", "no_sampler_csv", None, "no counter for this point")
        )
    else:
        n = w.delta("preemptions")
        overload = p.test_kind == "overload"
        ok = overload or n == 0
        srel = p.run.counter_source
        out.append(
            GateResult(
                "no_preemptions",
                "pass" if ok else "fail",
                None if ok else "preemptions_outside_overload",
                p.run.cite(srel, "preemptions"),
                f"preemptions={n:g}" + (" (overload run: expected)" if overload else ""),
            )
        )
    frel, fp = p.run.fingerprint
    out.append(
        GateResult(
            "fingerprint",
            "pass" if fp is not None else "fail",
            None if fp is not None else "no_fingerprint",
            p.run.cite(frel) if frel else None,
            "present" if fp is not None else "missing",
        )
    )
    return out


def evaluate(campaign: Campaign, ctx: Context) -> None:
    """Fill ctx.gates for every point (warm-ups included: they are flagged like any other)."""
    for p in iter_points(campaign, include_warmup=True):
        ctx.gates[p.key] = evaluate_point(p, ctx)


def shortfall_total_pct(expected_tokens: int, delivered_tokens: int) -> float:
    """Output tokens asked for but not delivered, %: (expected − delivered) ÷ expected × 100."""
    return (expected_tokens - delivered_tokens) / expected_tokens * 100.0


def shortfall_cause(p: BenchPoint) -> str:
    """Why a point's requests came back short: ``slot_full`` when a request (prompt + requested output) does
    not fit llama.cpp's per-slot context (truncated by design), else ``early_stop`` (the engine stopped before
    the requested length, e.g. at EOS despite ignore-eos)."""
    _, log = p.run.server_log
    n_ctx = getattr(log, "n_ctx_slot", None) if log is not None else None
    need = (p.input_len_tokens or 0) + (p.requested_output_len_tokens or 0)
    return "slot_full" if n_ctx and need > n_ctx else "early_stop"


def _output_shortfall(at: At, pts: list[BenchPoint]) -> fnd.Finding:
    """What the output-token gate caught, in total: of all the tokens the sweeps asked for (completed requests
    × requested output), the share not delivered, per engine (with its cause, shortfall_cause) and in
    total. Output tokens/s counts only the tokens delivered: a short request means fewer decode steps at the
    same rate, not a higher rate. Overload points are left out: truncation there is by design."""
    key = at("output_shortfall_total_pct")
    known = [
        p
        for p in pts
        if p.requested_output_len_tokens and p.result.completed and p.result.total_output_tokens is not None
    ]
    if not known:
        return fnd.not_available(key, "%", "no_sweep_log", "no point with a known requested output length")
    expected: dict[str, int] = {}
    short: dict[str, int] = {}
    cause: dict[str, str] = {}
    for p in known:
        want = p.result.completed * p.requested_output_len_tokens
        expected[p.run.engine] = expected.get(p.run.engine, 0) + want
        short[p.run.engine] = short.get(p.run.engine, 0) + max(0, want - p.result.total_output_tokens)
        if p.result.total_output_tokens < want:
            cause[p.run.engine] = max(cause.get(p.run.engine, ""), shortfall_cause(p))
    total_expected, total_short = sum(expected.values()), sum(short.values())
    return fnd.measured(
        key,
        shortfall_total_pct(total_expected, total_expected - total_short),
        "%",
        [
            p.cite("total_output_tokens")
            for p in known
            if p.result.total_output_tokens < p.result.completed * p.requested_output_len_tokens
        ][:5],
        expected_tokens=total_expected,
        missing_tokens=total_short,
        by_engine_pct={e: shortfall_total_pct(expected[e], expected[e] - short[e]) for e in sorted(expected)},
        by_engine_missing_tokens={e: short[e] for e in sorted(expected)},
        by_engine_cause=cause,
        points_short=sum(
            1
            for p in known
            if p.result.total_output_tokens < p.result.completed * p.requested_output_len_tokens
        ),
        points=len(known),
    )


SWEEP_KINDS = ("concurrency_sweep", "engine_comparison")


def _sample_sizes(at: At, pts: list[BenchPoint]) -> list[fnd.Finding]:
    """How many requests a concurrency-sweep point holds (fewest, most) and the concurrencies whose points
    are one wave (requests ≤ concurrency: every request starts together, so the point's p99 is its slowest
    request or two and its throughput includes the ramp-down)."""
    sized = [p for p in pts if p.result.num_prompts]
    if not sized:
        return []
    n = [int(p.result.num_prompts) for p in sized]
    cite = [p.cite("completed") for p in sized][:1]
    one_wave = sorted(
        {int(p.concurrency) for p in sized if p.concurrency and p.result.num_prompts <= p.concurrency}
    )
    return [
        fnd.measured(at("sweep_requests_per_point_min"), min(n), "requests", cite),
        fnd.measured(at("sweep_requests_per_point_max"), max(n), "requests", cite),
        fnd.measured(
            at("sweep_one_wave_concurrencies"),
            one_wave,
            "list",
            [p.cite("completed") for p in sized if p.concurrency in one_wave][:3],
            detail="sweep concurrencies whose point sent no more requests than its concurrency",
        ),
    ]


def run(s: SectionInput) -> Section:
    campaign, ctx = s.campaign, s.ctx
    rows = []
    for p in iter_points(campaign, include_warmup=True):
        for g in ctx.gates[p.key]:
            rows.append(
                {
                    "round": p.run.round or "",
                    "engine": p.run.engine,
                    "test": p.run.test,
                    "point": p.label,
                    "warmup": p.warmup,
                    "gate": g.gate,
                    "severity": SEVERITY[g.gate],
                    "status": g.status,
                    "reason": g.reason or "",
                    "detail": g.detail,
                    "source": g.source or "",
                }
            )
    table = pd.DataFrame(
        rows,
        columns=[
            "round",
            "engine",
            "test",
            "point",
            "warmup",
            "gate",
            "severity",
            "status",
            "reason",
            "detail",
            "source",
        ],
    )
    findings: list[fnd.Finding] = []
    for rnd in campaign.rounds:
        pts = [p for p in iter_points(campaign, include_warmup=True) if p.run.round == rnd]
        failed = sorted(f"{p.run.test}/{p.label}" for p in pts if not ctx.gate_ok(p))
        flagged = sorted(f"{p.run.test}/{p.label}" for p in pts if ctx.gate_flags(p))
        unknown = sorted({g.gate for p in pts for g in ctx.gates[p.key] if g.status == "unknown"})
        at = At(round=rnd, topic="gates")
        srcs = [g.source for p in pts for g in ctx.gates[p.key] if g.status == "fail" and g.source]
        findings.append(fnd.measured(at("points_total"), len(pts), "count", [p.cite() for p in pts][:1]))
        findings.append(
            fnd.Finding(
                at=at("points_failed"),
                value=failed,
                unit="list",
                sources=tuple(srcs),
                status="ok" if not failed else "mismatch",
                detail=(
                    "points failing an exclude-severity gate: kept in tables and figures, left out "
                    "of conclusions"
                ),
            )
        )
        findings.append(
            fnd.measured(
                at("points_flagged"),
                flagged,
                "list",
                [],
                detail="points failing only flag-severity gates: used, and listed",
            )
        )
        findings.append(fnd.measured(at("points_failed_count"), len(failed), "count", srcs))
        findings.append(
            fnd.measured(
                at("gates_unknown"),
                unknown,
                "list",
                [],
                detail="gates that could not be checked for some point (file missing)",
            )
        )
        findings.append(_output_shortfall(at, [p for p in pts if not p.warmup and p.test_kind != "overload"]))
        findings += _sample_sizes(at, [p for p in pts if not p.warmup and p.test_kind in SWEEP_KINDS])
        by_gate = {}
        for gate in GATE_ORDER:
            res = [g for p in pts for g in ctx.gates[p.key] if g.gate == gate]
            if not res:
                continue
            by_gate[gate] = {
                "pass": sum(g.status == "pass" for g in res),
                "fail": sum(g.status == "fail" for g in res),
                "unknown": sum(g.status == "unknown" for g in res),
            }
        findings.append(
            fnd.measured(
                at("all_passed"),
                not failed and not flagged,
                "bool",
                srcs,
                by_gate=by_gate,
                severity={g: SEVERITY[g] for g in by_gate},
            )
        )
    return Section(name="gates", tables={"gates": table}, findings=findings)
