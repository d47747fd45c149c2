"""Self-check gates: per benchmark point, pass/fail/unknown with the reason and the file it rests on.

A point that fails a gate stays in every table (column `gate_ok` = false) and every figure (drawn
differently, with a legend saying so); findings list the points they rest on. `unknown` (the campaign
kept no file to check against) never fails a point but is reported.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from analysis.core import findings as fnd
from analysis.core import metrics, metrics_columns
from analysis.core.keys import At
from analysis.loading.campaign import BenchPoint, Campaign, RunData, iter_points
from analysis.parse.request_columns import RequestColumns
from analysis.reconcile import Context, Section, SectionInput
from collector.raw.records import EventRecord, RequestRecord

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
    # the load client's event loop ran late (analysis.core.metrics.client_saturated): the point's latencies
    # and its
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


def prefix_caching_enabled(run: RunData) -> tuple[bool | None, str | None]:
    """What the server log says about prefix caching: (enabled?, citation); (None, None) if it does not.
    vLLM states it in its engine-config line; llama.cpp's start-up excerpt does not."""
    rel, log = run.server_log
    if rel is None or log is None:
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


OwnChecks = dict[tuple[str, str | None], tuple[EventRecord, int]]


def _own_checks(run: RunData) -> OwnChecks:
    """(check name, point or None for start-up) -> (the check event, its events.jsonl line); last one wins."""
    rel, log = run.events
    out: OwnChecks = {}
    for i, e in enumerate(log.records if log is not None else [], 1):
        if e.kind == "check":
            out[(e.get("name"), e.get("point") if e.get("scope") == "point" else None)] = (e, i)
    return out


def client_gate(run: RunData, point: str) -> GateResult:
    """Our load client's self-check for one point: its ``client_probe`` events (event-loop lag, one per
    load-client process) judged together by ``analysis.core.metrics.client_saturated``; unknown for runs whose
    collector did not record them yet."""
    rel, log = run.events
    hits = [
        (i, e)
        for i, e in enumerate(log.records if log is not None else [], 1)
        if e.kind == "client_probe" and e.get("point") == point
    ]
    if not hits or rel is None:
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
    detail = (
        "no probe sample"
        if p99 is None
        else (
            f"event-loop lag p99 {p99:.2f} ms over {len(lag)} wake-ups of {len(hits)} process(es) "
            f"(limit {metrics.CLIENT_LOOP_LAG_LIMIT_MS:g} ms)"
        )
    )
    status = "unknown" if sat is None else ("fail" if sat else "pass")
    reason = None if sat is False else ("client_saturated" if sat else "unknown")
    return GateResult("client_not_saturated", status, reason, run.cite(rel, line), detail)


def _cite_event(run: RunData, line: int | None = None) -> str | None:
    """The citation of the run's events.jsonl (at a line); None for a run without one."""
    rel, _ = run.events
    return None if rel is None else run.cite(rel, line)


def _own_check_gate(run: RunData, checks: OwnChecks, gate: str, name: str, point: str | None) -> GateResult:
    """A gate decided by one check the collector recorded (events.jsonl ``check``): pass, fail or unknown."""
    hit = checks.get((name, point))
    if hit is None:
        return GateResult(gate, "unknown", "unknown", _cite_event(run), f"no {name} check")
    e, line = hit
    ok = e.get("ok")
    status = "unknown" if ok is None else ("pass" if ok else "fail")
    return GateResult(
        gate,
        status,
        None if ok else (OWN_REASONS.get(gate) if ok is False else "unknown"),
        _cite_event(run, line),
        str(e.get("detail", "")),
    )


def _stream_counts_gate(p: BenchPoint) -> GateResult:
    """The client's streamed token counts against the server's usage, over the point's completed requests."""
    rrel, _ = p.run.requests
    n, bad, absurd, sources = _stream_counts(p.columns)
    return GateResult(
        "stream_token_counts",
        "pass" if not bad and not absurd else "fail",
        None if not bad and not absurd else "token_counts_unreliable",
        p.run.cite(rrel, "chunk_tokens") if rrel else None,
        f"{bad} of {n} requests disagree with usage.completion_tokens; "
        + (f"{absurd} claim more tokens than max_tokens; " if absurd else "")
        + f"token_count_source {sources}",
    )


def _stream_counts(cols: RequestColumns | None) -> tuple[int, int, int, list[str]]:
    """Over the completed requests: (how many, how many fail ``stream_counts_agree``, how many fail
    ``metrics.token_counts_plausible`` — 2^62 tokens …, the token count sources), vectorised."""
    if cols is None or not len(cols):
        return 0, 0, 0, []
    ok = cols.ok
    streamed, plausible = metrics_columns.stream_counts(cols)
    ct, has_ct = metrics_columns.completion_tokens(cols)
    neg = metrics_columns.negative_chunk(cols)
    src, problem = cols.strs("token_count_source"), cols.strs("token_count_problem")
    agree = (
        np.asarray([s != "mixed" and q is None for s, q in zip(src, problem, strict=True)], dtype=bool)
        & ~neg
        & has_ct
        & np.asarray(streamed == ct, dtype=bool)
    )
    sources = sorted({str(s) for s, k in zip(src, ok, strict=True) if k})
    return int(ok.sum()), int((ok & ~agree).sum()), int((ok & ~plausible).sum()), sources


def _own_prefix_caching_gate(run: RunData, checks: OwnChecks, point: str) -> GateResult:
    """Prefix caching: off at start-up and no cache hit during the point."""
    hits = [
        h for h in (checks.get(("prefix_caching_off", None)), checks.get(("prefix_cache_hits", point))) if h
    ]
    oks = [e.get("ok") for e, _ in hits]
    src = [_cite_event(run, line) for _, line in hits]
    detail = "; ".join(str(e.get("detail", "")) for e, _ in hits)
    if False in oks:
        return GateResult("prefix_caching_off", "fail", "prefix_caching_on", src[0], detail)
    if oks and all(o is True for o in oks):
        return GateResult("prefix_caching_off", "pass", None, src[0], detail)
    return GateResult("prefix_caching_off", "unknown", "unknown", src[0] if src else None, "not decided")


def _own_preemptions_gate(p: BenchPoint, checks: OwnChecks) -> GateResult:
    """No preemption during the point (the collector's counter check), unless it is an overload point."""
    hit = checks.get(("preemptions", p.label))
    if hit is None or hit[0].get("ok") is None:
        return GateResult(
            "no_preemptions",
            "unknown",
            "unknown",
            _cite_event(p.run, hit[1]) if hit else None,
            str(hit[0].get("detail", "")) if hit else "no preemptions check",
        )
    e, line = hit
    d = (e.get("facts") or {}).get("preemptions_delta")
    ok = p.test_kind == "overload" or d == 0
    return GateResult(
        "no_preemptions",
        "pass" if ok else "fail",
        None if ok else "preemptions_outside_overload",
        _cite_event(p.run, line),
        str(e.get("detail", "")),
    )


def _own_fingerprint_gate(run: RunData) -> GateResult:
    fp = run.docs.files.get("fingerprint_summary")
    return GateResult(
        "fingerprint",
        "pass" if fp else "fail",
        None if fp else "no_fingerprint",
        run.cite(fp) if fp else None,
        "present" if fp else "missing",
    )


def evaluate_own_point(p: BenchPoint, ctx: Context) -> list[GateResult]:
    """A collector run's point: the gates are the collector's own recorded self-checks (events.jsonl),
    plus the stream-count agreement read from requests.jsonl."""
    checks = _own_checks(p.run)
    return [
        *(_own_check_gate(p.run, checks, gate, name, p.label) for name, gate in OWN_POINT_CHECKS.items()),
        _stream_counts_gate(p),
        client_gate(p.run, p.label),
        _own_check_gate(p.run, checks, "greedy", "greedy_sampling", None),
        _own_prefix_caching_gate(p.run, checks, p.label),
        _own_preemptions_gate(p, checks),
        _own_fingerprint_gate(p.run),
    ]


def _completed_gate(p: BenchPoint) -> GateResult:
    r = p.result
    ok = gate_completed(r.num_prompts, r.completed)
    return GateResult(
        "completed",
        "pass" if ok else "fail",
        None if ok else "completed_below_requested",
        p.cite("completed"),
        f"{r.completed}/{r.num_prompts}",
    )


def _failures_gate(p: BenchPoint) -> GateResult:
    r = p.result
    if r.failed is None:
        return GateResult("no_failures", "unknown", "unknown", p.cite("failed"), "no failed count")
    return GateResult(
        "no_failures",
        "pass" if r.failed == 0 else "fail",
        None if r.failed == 0 else "failed_requests",
        p.cite("failed"),
        f"failed={r.failed}",
    )


def _output_tokens_gate(p: BenchPoint) -> GateResult:
    r = p.result
    if p.requested_output_len_tokens is None or r.total_output_tokens is None:
        return GateResult(
            "output_tokens",
            "unknown",
            "no_sweep_log",
            p.cite("total_output_tokens"),
            "requested output length unknown",
        )
    want = r.completed * p.requested_output_len_tokens
    ok = gate_output_tokens(r.total_output_tokens, r.completed, p.requested_output_len_tokens)
    return GateResult(
        "output_tokens",
        "pass" if ok else "fail",
        None if ok else "output_tokens_short",
        p.cite("total_output_tokens"),
        f"{r.total_output_tokens}/{want}",
    )


def _greedy_gate(p: BenchPoint) -> GateResult:
    """Sampling forced greedy (temperature 0 in the client's sweep log)."""
    sweep_rel, _ = p.run.sweep
    if p.sweep_point is None or sweep_rel is None:
        return GateResult("greedy", "unknown", "no_sweep_log", None, "no client log kept for this run")
    t = p.sweep_point.namespace.get("temperature")
    ok = t == 0
    return GateResult(
        "greedy",
        "pass" if ok else "fail",
        None if ok else "temperature_not_zero",
        p.run.cite(sweep_rel, p.sweep_point.namespace_line),
        f"temperature={t!r}",
    )


def _prefix_caching_gate(p: BenchPoint) -> GateResult:
    enabled, src = prefix_caching_enabled(p.run)
    if enabled is None:
        # a log that is there but silent on it (llama.cpp's start-up lines) is not a missing log
        why = "no_server_log" if src is None else "prefix_cache_not_logged"
        return GateResult("prefix_caching_off", "unknown", why, src, "server log does not say")
    return GateResult(
        "prefix_caching_off",
        "fail" if enabled else "pass",
        "prefix_caching_on" if enabled else None,
        src,
        f"prefix_caching={enabled}",
    )


def _preemptions_gate(p: BenchPoint, ctx: Context) -> GateResult:
    """No preemption inside the point's window (the sampler's counter), unless it is an overload point."""
    w = ctx.window(p)
    n = w.delta("preemptions") if w is not None else None
    srel = p.run.counter_source
    if n is None or srel is None:
        return GateResult("no_preemptions", "unknown", "no_sampler_csv", None, "no counter for this point")
    overload = p.test_kind == "overload"
    ok = overload or n == 0
    return GateResult(
        "no_preemptions",
        "pass" if ok else "fail",
        None if ok else "preemptions_outside_overload",
        p.run.cite(srel, "preemptions"),
        f"preemptions={n:g}" + (" (overload run: expected)" if overload else ""),
    )


def _fingerprint_gate(p: BenchPoint) -> GateResult:
    frel, fp = p.run.fingerprint
    return GateResult(
        "fingerprint",
        "pass" if fp is not None else "fail",
        None if fp is not None else "no_fingerprint",
        p.run.cite(frel) if frel else None,
        "present" if fp is not None else "missing",
    )


def evaluate_point(p: BenchPoint, ctx: Context) -> list[GateResult]:
    """Every gate of one point, in GATE_ORDER's families: our runs from the collector's own checks, an
    imported run's from its files."""
    if p.run.own:
        return evaluate_own_point(p, ctx)
    return [
        _completed_gate(p),
        _failures_gate(p),
        _output_tokens_gate(p),
        _greedy_gate(p),
        _prefix_caching_gate(p),
        _preemptions_gate(p, ctx),
        _fingerprint_gate(p),
    ]


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
    # (point, tokens asked for, tokens delivered) of every point whose requested output is known
    known = [
        (p, p.result.completed * want, got)
        for p in pts
        if (want := p.requested_output_len_tokens) and p.result.completed
        if (got := p.result.total_output_tokens) is not None
    ]
    if not known:
        return fnd.not_available(key, "%", "no_sweep_log", "no point with a known requested output length")
    expected: dict[str, int] = {}
    short: dict[str, int] = {}
    cause: dict[str, str] = {}
    for p, want, got in known:
        expected[p.run.engine] = expected.get(p.run.engine, 0) + want
        short[p.run.engine] = short.get(p.run.engine, 0) + max(0, want - got)
        if got < want:
            cause[p.run.engine] = max(cause.get(p.run.engine, ""), shortfall_cause(p))
    total_expected, total_short = sum(expected.values()), sum(short.values())
    came_short = [p for p, want, got in known if got < want]
    return fnd.measured(
        key,
        shortfall_total_pct(total_expected, total_expected - total_short),
        "%",
        [p.cite("total_output_tokens") for p in came_short][:5],
        expected_tokens=total_expected,
        missing_tokens=total_short,
        by_engine_pct={e: shortfall_total_pct(expected[e], expected[e] - short[e]) for e in sorted(expected)},
        by_engine_missing_tokens={e: short[e] for e in sorted(expected)},
        by_engine_cause=cause,
        points_short=len(came_short),
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
    n = [int(p.result.num_prompts or 0) for p in sized]  # all non-zero: ``sized``
    cite = [p.cite("completed") for p in sized][:1]
    one_wave = sorted({int(c) for p in sized if (c := p.concurrency) and (p.result.num_prompts or 0) <= c})
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


GATE_COLUMNS = (
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
)


def _gates_table(campaign: Campaign, ctx: Context) -> pd.DataFrame:
    """The gates table: one row per point (warm-ups included) and gate."""
    rows = [
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
        for p in iter_points(campaign, include_warmup=True)
        for g in ctx.gates[p.key]
    ]
    return pd.DataFrame(rows, columns=list(GATE_COLUMNS))


def _by_gate(pts: list[BenchPoint], ctx: Context) -> dict[str, dict[str, int]]:
    """How many points passed, failed and could not be checked, per gate (in GATE_ORDER, gates seen only)."""
    out = {}
    for gate in GATE_ORDER:
        res = [g for p in pts for g in ctx.gates[p.key] if g.gate == gate]
        if res:
            out[gate] = {s: sum(g.status == s for g in res) for s in ("pass", "fail", "unknown")}
    return out


def _round_findings(rnd: str | None, pts: list[BenchPoint], ctx: Context) -> list[fnd.Finding]:
    """What the gates say about one round's points: how many, which failed or were flagged, which gates
    could not be checked, and whether all passed."""
    failed = sorted(f"{p.run.test}/{p.label}" for p in pts if not ctx.gate_ok(p))
    flagged = sorted(f"{p.run.test}/{p.label}" for p in pts if ctx.gate_flags(p))
    unknown = sorted({g.gate for p in pts for g in ctx.gates[p.key] if g.status == "unknown"})
    at = At(round=rnd, topic="gates")
    srcs = [g.source for p in pts for g in ctx.gates[p.key] if g.status == "fail" and g.source]
    by_gate = _by_gate(pts, ctx)
    return [
        fnd.measured(at("points_total"), len(pts), "count", [p.cite() for p in pts][:1]),
        fnd.Finding(
            at=at("points_failed"),
            value=failed,
            unit="list",
            sources=tuple(srcs),
            status="ok" if not failed else "mismatch",
            detail=(
                "points failing an exclude-severity gate: kept in tables and figures, left out of conclusions"
            ),
        ),
        fnd.measured(
            at("points_flagged"),
            flagged,
            "list",
            [],
            detail="points failing only flag-severity gates: used, and listed",
        ),
        fnd.measured(at("points_failed_count"), len(failed), "count", srcs),
        fnd.measured(
            at("gates_unknown"),
            unknown,
            "list",
            [],
            detail="gates that could not be checked for some point (file missing)",
        ),
        _output_shortfall(at, [p for p in pts if not p.warmup and p.test_kind != "overload"]),
        *_sample_sizes(at, [p for p in pts if not p.warmup and p.test_kind in SWEEP_KINDS]),
        fnd.measured(
            at("all_passed"),
            not failed and not flagged,
            "bool",
            srcs,
            by_gate=by_gate,
            severity={g: SEVERITY[g] for g in by_gate},
        ),
    ]


def run(s: SectionInput) -> Section:
    campaign, ctx = s.campaign, s.ctx
    findings: list[fnd.Finding] = []
    for rnd in campaign.rounds:
        pts = [p for p in iter_points(campaign, include_warmup=True) if p.run.round == rnd]
        findings += _round_findings(rnd, pts, ctx)
    return Section(name="gates", tables={"gates": _gates_table(campaign, ctx)}, findings=findings)
