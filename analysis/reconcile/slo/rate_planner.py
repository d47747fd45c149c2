"""The request-rate planner: per open-loop rate sweep (a ``kind = "rate"`` phase), the highest offered
request rate whose p99 TTFT (and p99 ITL) stays within the budget, and its plain English lines."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from analysis.core import metrics_columns
from analysis.loading.campaign import PHASE_TEST_KIND, BenchPoint, Campaign
from analysis.reconcile.slo.budgets import interpolate_log2, point_weight_format, value_at_log2
from analysis.reconcile.slo.planner import budget_crossing, meets_budget

RATE_TEST_KIND = PHASE_TEST_KIND["rate"]  # an open-loop point's test kind


# --- request rate (open-loop sweeps: a kind = "rate" phase) -------------------------------------------------

RATE_METHOD = (
    "p99 per measured rate point (open loop, by offered request rate); the highest rate within the budget "
    "and the next one up bracket the answer; p99 linear in log2(request rate) between them; with two "
    "budgets the lower rate binds"
)


@dataclass(frozen=True)
class RateMeasured:
    request_rate_req_s: float  # the plan's offered rate
    p99_ttft_ms: float | None
    p99_itl_ms: float | None
    achieved_rate_req_s: float | None  # completions per second (metrics.achieved_rate_req_s)
    source: str  # the point's p99_ttft_ms, in requests.jsonl
    run: str
    label: str


@dataclass
class RateAnswer:
    """The planner's request-rate answer for one run's rate sweep (``answer_rates``; ``RATE_METHOD``)."""

    campaign: str
    round: str | None
    engine: str
    weight_format: str | None
    run: str
    ttft_p99_ms: float
    itl_p99_ms: float | None
    points: list[RateMeasured] = field(default_factory=list)
    excluded: list[str] = field(default_factory=list)  # gated-out points' files, with the checks they failed
    status: str = "no_points"  # bracketed | highest_meets | none_meet | no_points
    non_monotone: list[float] = field(default_factory=list)
    binding: str | None = None
    request_rate_req_s: float | None = None
    lower: RateMeasured | None = None
    upper: RateMeasured | None = None
    achieved_rate_req_s: float | None = None  # interpolated like the rate
    next_rate_req_s: float | None = None
    stanza: str | None = None
    method: str = RATE_METHOD


def rate_stanza(rate_req_s: float, p: BenchPoint) -> str:
    """A ``[[phase]]`` stanza (collector.raw.plan's rate phase schema) measuring one more rate point with the
    measured point's lengths, arrivals and stop conditions (from the plan its run kept)."""
    plan = p.run.docs.plan
    rp = next((pt for pt in plan.points if pt.point_id == p.label), None) if plan is not None else None
    r = rp.rate if rp is not None else None
    name = "slo-next-r" + f"{rate_req_s:g}".replace(".", "_")  # phase names: letters, digits, - and _
    lines = [
        "[[phase]]",
        f'name = "{name}"',
        'kind = "rate"',
        f"request_rates = [{rate_req_s:g}]",
        f'arrival = "{r.arrival if r is not None else "poisson"}"',
    ]
    if r is not None and r.arrival == "gamma":
        lines.append(f"burstiness = {r.burstiness:g}")
    lines += [
        f"seed = {rp.seed if rp is not None else 0}",
        f"input_len = {rp.input_len if rp is not None else round(p.input_len_tokens or 0)}",
        f"output_len = {rp.output_len if rp is not None else p.requested_output_len_tokens}",
    ]
    if r is not None and r.max_concurrency is not None:
        lines.append(f"max_concurrency = {r.max_concurrency}")
    if r is not None and r.duration_s is not None:
        lines.append(f"duration_s = {r.duration_s:g}")
    if r is not None and r.max_requests is not None:
        lines.append(f"max_requests = {r.max_requests}")
    if r is None or (r.duration_s is None and r.max_requests is None):
        lines.append(f"max_requests = {p.result.num_prompts or p.result.completed}")
    return "\n".join(lines) + "\n"


def answer_rates(
    campaign: Campaign,
    ttft_p99_ms: float,
    itl_p99_ms: float | None = None,
    engine: str | None = None,
    gate_ok: Callable[[BenchPoint], bool] | None = None,
    weight_format_of: Callable[..., Any] | None = None,
) -> list[RateAnswer]:
    """The highest request rate meeting the p99 budget(s), per run with open-loop rate points
    (``RATE_METHOD``: the concurrency answer's bracketing and log2 interpolation on the offered rate). Where
    the points do not bracket: double the highest rate (it meets) or halve the lowest (none meets), as a
    ``[[phase]]`` stanza."""
    pts = [p for p in campaign.points() if p.test_kind == RATE_TEST_KIND and not p.warmup]
    out = []
    for run_name in sorted({p.run.name for p in pts}):
        mine = [p for p in pts if p.run.name == run_name]
        if engine is not None and mine[0].run.engine != engine:
            continue
        out.append(_plan_rate_sweep(campaign.name, mine, ttft_p99_ms, itl_p99_ms, gate_ok, weight_format_of))
    return out


def _rate_measured(p: BenchPoint) -> RateMeasured:
    cols = p.columns
    first = cols.record(0) if cols is not None and len(cols) else None
    return RateMeasured(
        request_rate_req_s=first.request_rate if first is not None and first.request_rate else 0.0,
        p99_ttft_ms=p.result.p99_ttft_ms if p.result.completed else None,
        p99_itl_ms=p.result.itl.p99_ms if p.result.completed else None,
        achieved_rate_req_s=metrics_columns.achieved_rate_req_s(cols) if cols is not None and first else None,
        source=p.cite("p99_ttft_ms"),
        run=p.run.name,
        label=p.label,
    )


def _plan_rate_sweep(
    campaign: str,
    sweep: list[BenchPoint],
    ttft_p99_ms: float,
    itl_p99_ms: float | None,
    gate_ok: Callable[[BenchPoint], bool] | None,
    weight_format_of: Callable[..., Any] | None,
) -> RateAnswer:
    run = sweep[0].run
    ans = RateAnswer(
        campaign=campaign,
        round=run.round,
        engine=run.engine,
        weight_format=point_weight_format(sweep[0], weight_format_of),
        run=run.name,
        ttft_p99_ms=ttft_p99_ms,
        itl_p99_ms=itl_p99_ms,
    )
    by_m: dict[int, BenchPoint] = {}
    for p in sweep:
        if gate_ok is not None and not gate_ok(p):
            ans.excluded.append(p.cite())
            continue
        m = _rate_measured(p)
        if m.request_rate_req_s > 0:
            ans.points.append(m)
            by_m[id(m)] = p
    ans.points.sort(key=lambda m: m.request_rate_req_s)
    if not ans.points:
        return ans
    budgets = [("ttft", "p99_ttft_ms", ttft_p99_ms)]
    if itl_p99_ms is not None:
        budgets.append(("itl", "p99_itl_ms", itl_p99_ms))
    best: tuple[float, str, int] | None = None
    statuses = []
    for name, attr, b in budgets:
        status, i = budget_crossing(ans.points, attr, b)  # type: ignore[arg-type]
        statuses.append(status)
        if status == "bracketed" and i is not None:
            lo, hi = ans.points[i - 1], ans.points[i]
            x = interpolate_log2(
                lo.request_rate_req_s, getattr(lo, attr), hi.request_rate_req_s, getattr(hi, attr), b
            )
            if best is None or x < best[0]:
                best = (x, name, i)
    ans.status = "none_meet" if "none_meet" in statuses else "bracketed" if best else "highest_meets"
    top = best[2] - 1 if ans.status == "bracketed" and best else len(ans.points) - 1
    if ans.status != "none_meet":
        ans.non_monotone = [
            m.request_rate_req_s
            for m in ans.points[:top]
            if not all(meets_budget(m, attr, b) for _, attr, b in budgets)  # type: ignore[arg-type]
        ]
    if ans.status == "bracketed" and best is not None:
        x, ans.binding, i = best
        ans.request_rate_req_s, ans.lower, ans.upper = x, ans.points[i - 1], ans.points[i]
        lo, hi = ans.lower, ans.upper
        if lo.achieved_rate_req_s is not None and hi.achieved_rate_req_s is not None:
            ans.achieved_rate_req_s = value_at_log2(
                lo.request_rate_req_s,
                lo.achieved_rate_req_s,
                hi.request_rate_req_s,
                hi.achieved_rate_req_s,
                x,
            )
        return ans
    ref = ans.points[-1] if ans.status == "highest_meets" else ans.points[0]
    factor = 2.0 if ans.status == "highest_meets" else 0.5
    ans.next_rate_req_s = ref.request_rate_req_s * factor
    ans.stanza = rate_stanza(ans.next_rate_req_s, by_m[id(ref)])
    return ans


def describe_rate(ans: RateAnswer) -> list[str]:
    """The request-rate answer as plain English lines (the CLI prints them after the concurrency answers)."""
    where = f"{ans.campaign} {ans.round or ''} {ans.engine} {ans.run}".replace("  ", " ")
    budget = f"p99 TTFT ≤ {ans.ttft_p99_ms:g} ms" + (
        f", p99 ITL ≤ {ans.itl_p99_ms:g} ms" if ans.itl_p99_ms is not None else ""
    )
    out = [f"{where}: {budget} (open loop: request-rate points)"]
    if ans.excluded:
        out.append(f"  excluded by the point checks: {', '.join(ans.excluded)}")
    if ans.status == "no_points":
        return out + ["  no gated rate point to plan from"]
    if ans.status == "bracketed" and ans.lower is not None and ans.upper is not None:
        lo, hi = ans.lower, ans.upper
        attr, name = ("p99_itl_ms", "ITL") if ans.binding == "itl" else ("p99_ttft_ms", "TTFT")
        out += [
            f"  highest request rate meeting it: {ans.request_rate_req_s:.2f} req/s "
            f"(binding: p99 {ans.binding})",
            f"  method: {ans.method}",
            f"  bracketing points: {lo.request_rate_req_s:g} req/s p99 {name} {getattr(lo, attr):.1f} ms "
            f"({lo.source}); {hi.request_rate_req_s:g} req/s p99 {name} {getattr(hi, attr):.1f} ms "
            f"({hi.source})",
        ]
        if ans.achieved_rate_req_s is not None:
            out.append(f"  achieved rate there (same interpolation): {ans.achieved_rate_req_s:.3f} req/s")
    else:
        what = (
            "the highest measured rate meets it"
            if ans.status == "highest_meets"
            else "no measured rate meets it"
        )
        out.append(f"  not bracketed: {what}")
        out.append(f"  measure next: request rate {ans.next_rate_req_s:g} req/s; plan stanza:")
        out += ["    " + line for line in (ans.stanza or "").splitlines()]
    if ans.non_monotone:
        out.append(f"  note: p99 not monotone in rate: lower rates {ans.non_monotone} miss the budget")
    return out
