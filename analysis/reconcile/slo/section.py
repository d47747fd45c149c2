"""The SLO section: goodput per point and sweep, the planners' answers for the campaign's default budget as
findings and tables (``run``)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import pandas as pd

from analysis.core import findings as fnd
from analysis.core.keys import At
from analysis.loading.campaign import BenchPoint, Campaign
from analysis.reconcile import Context, Section, SectionInput, engine_at, run_at
from analysis.reconcile.concurrency import sweep_points
from analysis.reconcile.slo.budgets import (
    ENGINES,
    default_budget_ms,
    point_goodput,
    point_weight_format,
    slos_for,
)
from analysis.reconcile.slo.planner import (
    PlannerPoint,
    SloAnswer,
    answer_concurrency,
    describe,
    sweep_concurrency,
)
from analysis.reconcile.slo.rate_planner import RateAnswer, RateMeasured, answer_rates, describe_rate


def describe_any(ans: SloAnswer | RateAnswer) -> list[str]:
    """``describe`` for a concurrency answer, ``describe_rate`` for a request-rate one."""
    return describe_rate(ans) if isinstance(ans, RateAnswer) else describe(ans)


def _bracket_p99_ms(
    lower: PlannerPoint | RateMeasured, upper: PlannerPoint | RateMeasured
) -> dict[str, float | None]:
    """The two bracketing points' p99 TTFT and ITL, ms, as an answer finding's fields
    ``{lower,upper}_p99_{ttft,itl}_ms`` (the concurrency and the request-rate answer alike)."""
    return {
        "lower_p99_ttft_ms": lower.p99_ttft_ms,
        "upper_p99_ttft_ms": upper.p99_ttft_ms,
        "lower_p99_itl_ms": lower.p99_itl_ms,
        "upper_p99_itl_ms": upper.p99_itl_ms,
    }


def rate_answer_findings(ans: RateAnswer) -> list[fnd.Finding]:
    """The request-rate answer as a finding under topic ``slo`` (run level: one rate sweep per run)."""
    at = At(level="run", run=ans.run, engine=ans.engine, weight_format=ans.weight_format, topic="slo")(
        "slo_request_rate_req_s"
    )
    budget: dict[str, Any] = {
        "ttft_p99_budget_ms": ans.ttft_p99_ms,
        "itl_p99_budget_ms": ans.itl_p99_ms,
        "load": "open-loop",
    }
    if ans.status != "bracketed" or ans.lower is None or ans.upper is None:
        detail = {
            "no_points": "no gated rate point",
            "highest_meets": "the highest measured rate meets the budget",
            "none_meet": "no measured rate meets the budget",
        }[ans.status]
        return [
            fnd.not_available(
                at,
                "req/s",
                "slo_not_bracketed",
                detail,
                [m.source for m in ans.points] or ans.excluded,
                slo_status=ans.status,
                excluded=ans.excluded,
                next_rate_req_s=ans.next_rate_req_s,
                stanza=ans.stanza,
                **budget,
            )
        ]
    return [
        fnd.measured(
            at,
            ans.request_rate_req_s,
            "req/s",
            [ans.lower.source, ans.upper.source],
            detail=ans.method,
            binding=ans.binding,
            lower_rate_req_s=ans.lower.request_rate_req_s,
            upper_rate_req_s=ans.upper.request_rate_req_s,
            **_bracket_p99_ms(ans.lower, ans.upper),
            achieved_rate_req_s=ans.achieved_rate_req_s,
            excluded=ans.excluded,
            non_monotone=ans.non_monotone,
            **budget,
        )
    ]


def answer_findings(ans: SloAnswer) -> list[fnd.Finding]:
    """The answer as findings under topic ``slo`` (engine level)."""
    at = (
        At(level="run", run=ans.run, engine=ans.engine, weight_format=ans.weight_format, topic="slo")
        if ans.level == "run"
        else engine_at(ans.round, ans.engine, ans.weight_format, topic="slo")
    )
    budget: dict[str, Any] = {
        "ttft_p99_budget_ms": ans.ttft_p99_ms,
        "itl_p99_budget_ms": ans.itl_p99_ms,
        "load": ans.load,
    }
    if ans.status != "bracketed" or ans.lower is None or ans.upper is None:
        detail = {
            "no_points": "no gated sweep point",
            "highest_meets": "the highest measured concurrency meets the budget",
            "none_meet": "no measured point meets the budget",
        }[ans.status]
        return [
            fnd.not_available(
                at("slo_concurrency"),
                "requests",
                "slo_not_bracketed",
                detail,
                [m.source for m in ans.points],
                slo_status=ans.status,
                non_monotone=ans.non_monotone,
                next_concurrency=ans.next_concurrency,
                stanza=ans.stanza,
                **budget,
            )
        ]
    srcs = [ans.lower.source, ans.upper.source]
    out = [
        fnd.measured(
            at("slo_concurrency"),
            ans.concurrency,
            "requests",
            srcs,
            detail=ans.method,
            binding=ans.binding,
            lower_concurrency=ans.lower.concurrency,
            upper_concurrency=ans.upper.concurrency,
            **_bracket_p99_ms(ans.lower, ans.upper),
            lower_max_running=ans.lower.max_running,
            non_monotone=ans.non_monotone,
            **budget,
            **{k: v for k, v in ans.settings.items() if k != "source"},
        )
    ]
    if ans.request_throughput_req_s is not None:
        out.append(
            fnd.measured(at("slo_request_throughput_req_s"), ans.request_throughput_req_s, "req/s", srcs)
        )
    if ans.goodput_req_s is not None:
        out.append(
            fnd.measured(
                at("slo_goodput_req_s"),
                ans.goodput_req_s,
                "req/s",
                [ans.lower.source],
                at_concurrency=ans.lower.concurrency,
                good_requests=ans.goodput_good,
            )
        )
    else:
        out.append(
            fnd.not_available(
                at("slo_goodput_req_s"),
                "req/s",
                "no_request_records",
                ans.goodput_reason or "",
                [ans.lower.source],
            )
        )
    return out


def goodput_findings(
    campaign: Campaign,
    slos_ms: Mapping[str, float] | None,
    ctx: Context | None = None,
    weight_format_of: Callable[..., Any] | None = None,
    fallback_ms: Mapping[str, float] | None = None,
) -> list[Any]:
    """Per sweep point, goodput against the SLOs (``slos_for``: the analysis-time ones, else the sweep run's
    plan's ``[slo]``, else ``fallback_ms``; per request, exact from requests.jsonl); per sweep, the point with
    the highest goodput. A run without request records: one n/a per sweep saying why."""
    out: list[fnd.Finding] = []
    for rnd in campaign.rounds:
        for eng in ENGINES:
            pts = sweep_points(campaign, rnd, eng)
            if not pts:
                continue
            slos, basis = slos_for(pts[0].run, slos_ms, fallback_ms)
            if not slos:
                continue
            slo_extra: dict[str, Any] = {f"slo_{k}": v for k, v in slos.items()} | {"slo_basis": basis}
            sweep_at = engine_at(rnd, eng, point_weight_format(pts[0], weight_format_of), topic="goodput")
            rows = []
            for p in pts:
                g = point_goodput(p, slos)
                if g is None:
                    continue
                good, gp = g
                at = run_at(p.run, point_weight_format(p, weight_format_of), topic="goodput")(
                    "goodput_req_s", test=p.label
                )
                if gp is None:
                    out.append(fnd.not_available(at, "req/s", "unknown", "zero point duration", [p.cite()]))
                    continue
                rows.append((gp, p))
                out.append(
                    fnd.measured(
                        at,
                        gp,
                        "req/s",
                        [p.cite()],
                        concurrency=p.concurrency,
                        good_requests=good,
                        completed=p.result.completed,
                        request_throughput_req_s=p.result.request_throughput_req_s,
                        gate_ok=ctx.gate_ok(p) if ctx is not None else None,
                        **slo_extra,
                    )
                )
            if not rows:
                out.append(
                    fnd.not_available(
                        sweep_at("goodput_max_req_s"),
                        "req/s",
                        "no_request_records",
                        "no requests.jsonl: per-request goodput needs each request's latencies; "
                        "goodput from percentiles is not per-request goodput",
                        [pts[0].cite()],
                        **slo_extra,
                    )
                )
                continue
            gp, p = max(rows, key=lambda t: (t[0], -sweep_concurrency(t[1])))
            out.append(
                fnd.measured(
                    sweep_at("goodput_max_req_s"),
                    gp,
                    "req/s",
                    [p.cite()],
                    concurrency=p.concurrency,
                    **slo_extra,
                )
            )
    return out


def max_running(ctx: Context) -> Callable[[BenchPoint], float | None]:
    """Per point, the running gauge's highest sample in its aligned window (None without a sampler)."""

    def of(p: BenchPoint) -> float | None:
        w = ctx.window(p)
        g = getattr(w, "gauges", {}).get("running") if w is not None else None
        return g.max if g is not None else None

    return of


def run(s: SectionInput) -> Section:
    """The SLO section: goodput per point and sweep (against the SLOs given at analysis time, else the plan's
    ``[slo]``, else the page's budget as a per-request TTFT SLO) and the planner's answers for the campaign's
    default budget (``default_budget_ms``): the highest concurrency per sweep (table ``slo_plan``) and the
    highest request rate per rate sweep (``answer_rates``; table ``slo_rate_plan`` where rate points
    exist)."""
    campaign, ctx, th, slos_ms = s.campaign, s.ctx, s.th, s.slos_ms
    budget, basis = default_budget_ms(campaign)
    fmt = th.weight_format_for
    answers = answer_concurrency(
        campaign, budget, gate_ok=ctx.gate_ok, window_max_running=max_running(ctx), weight_format_of=fmt
    )
    found = goodput_findings(campaign, slos_ms, ctx, fmt, fallback_ms={"ttft_ms": budget})
    goodput = {(f.run, f.test): f.value for f in found if f.metric == "goodput_req_s" and f.available}
    rate_answers = answer_rates(campaign, budget, gate_ok=ctx.gate_ok, weight_format_of=fmt)
    rate_rows = []
    for ra in rate_answers:
        found += rate_answer_findings(ra)
        for rm in ra.points:
            rate_rows.append(
                {
                    "round": ra.round or "",
                    "engine": ra.engine,
                    "run": ra.run,
                    "request_rate_req_s": rm.request_rate_req_s,
                    "achieved_rate_req_s": rm.achieved_rate_req_s,
                    "p99_ttft_ms": rm.p99_ttft_ms,
                    "p99_itl_ms": rm.p99_itl_ms,
                    "ttft_p99_budget_ms": budget,
                    "budget_basis": basis,
                    "bracketing": ra.lower is rm or ra.upper is rm,
                    "source": rm.source,
                }
            )
    rows = []
    for a in answers:
        found += [f for f in answer_findings(a)]
        for m in a.points:
            rows.append(
                {
                    "round": a.round or "",
                    "engine": a.engine,
                    "weight_format": a.weight_format,
                    "concurrency": m.concurrency,
                    "p99_ttft_ms": m.p99_ttft_ms,
                    "p99_itl_ms": m.p99_itl_ms,
                    "request_throughput_req_s": m.request_throughput_req_s,
                    "goodput_req_s": goodput.get((m.run, m.label)),
                    "ttft_p99_budget_ms": budget,
                    "budget_basis": basis,
                    "bracketing": a.lower is m or a.upper is m,
                    "source": m.source,
                }
            )
    tables = {"slo_plan": pd.DataFrame(rows)}
    if rate_rows:
        tables["slo_rate_plan"] = pd.DataFrame(rate_rows)
    return Section(name="slo", tables=tables, findings=found)
