"""Rate sweeps (issue #14, items 1 and 5): open-loop points (a ``kind = "rate"`` phase of our collector) read
against the rate they were offered.

Per rate point, from its request records (``requests.jsonl``): the plan's offered rate, the rate its
schedule actually offered and the rate the server completed requests at (``metrics.offered_rate_req_s`` /
``achieved_rate_req_s``: the same event-rate estimate on the scheduled sends and on the completions), the
throughputs and latency percentiles (``metrics.point_result``), goodput against the SLOs
(``metrics.good_requests`` / ``goodput_req_s``: the analysis-time ``--slo`` values, else the plan's
``[slo]``, else the SLO page's budget as a per-request TTFT SLO), and how late the client sent
(``metrics.send_lateness_ms``; its p50 and p99 by ``metrics.stats``).

Per sweep (one run's rate points, by offered rate): the saturation point, the first offered rate whose
achieved rate falls short of its schedule's offered rate by more than ``SATURATION_SHORTFALL_PCT``
(``shortfall_pct``); the highest achieved rate and the highest goodput. A sweep whose every point kept up:
the saturation finding is n/a, saying so; a run without request records has no rate points at all.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pandas as pd

from analysis.core import findings as fnd
from analysis.core import metrics, metrics_columns
from analysis.core.keys import At
from analysis.loading.campaign import PHASE_TEST_KIND, BenchPoint, Campaign
from analysis.reconcile import Context, Section, SectionInput, run_at
from analysis.reconcile.concurrency import percentile_stats
from analysis.reconcile.slo import default_budget_ms, slos_for

# a rate point's test kind (analysis.loading.campaign.PHASE_TEST_KIND of its phase kind "rate")
RATE_KIND = PHASE_TEST_KIND["rate"]
# achieved more than this far below offered: the server no longer keeps up (the methodology page's method)
SATURATION_SHORTFALL_PCT = 10.0
# (column name, BenchResult's metric): e2el as vllm bench serve and the points table name it (one name)
LATENCIES = (("ttft", "ttft"), ("itl", "itl"), ("e2el", "e2el"))
STATS = ("p50", "p90", "p99")  # always; beside them the campaign's analysis-time percentiles


def shortfall_pct(offered_req_s: float, achieved_req_s: float) -> float:
    """How far the achieved rate falls behind the offered one, % = (offered − achieved) ÷ offered × 100
    (negative: completions came faster than the schedule, as a burst after a slow start can)."""
    return (offered_req_s - achieved_req_s) / offered_req_s * 100.0


def rate_points(campaign: Campaign) -> list[BenchPoint]:
    """The campaign's open-loop points (every run, protocol runs only), by run then order."""
    return [p for p in campaign.points() if p.test_kind == RATE_KIND and not p.warmup]


def _plan_rate(p: BenchPoint) -> Any | None:
    """The point's ``collector.raw.plan.RatePlan`` from the plan its run kept, None without one."""
    plan = p.run.docs.plan
    if plan is None:
        return None
    return next((pt.rate for pt in plan.points if pt.point_id == p.label), None)


def point_row(
    p: BenchPoint,
    slos_ms: Mapping[str, float],
    ctx: Context | None,
    weight_format: str | None,
    percentiles: tuple[str, ...] = (),
) -> dict[str, Any] | None:
    """One rate point's row of the ``rate_points`` table; None when its run has no records for it. Latency
    columns ``<stat>_<metric>_ms`` for ``STATS`` and the analysis-time ``percentiles`` (names as
    ``concurrency.percentile_stats``)."""
    rel, _ = p.run.requests
    cols = p.columns
    if cols is None or not len(cols) or rel is None:
        return None
    res = p.result
    rate = _plan_rate(p)
    offered = metrics_columns.offered_rate_req_s(cols)
    achieved = metrics_columns.achieved_rate_req_s(cols)
    late = metrics_columns.send_lateness_ms(cols)
    late_q = metrics.stats(late, (50.0, 99.0)).percentiles_ms  # empty when no send was timed
    good = metrics_columns.good_requests(cols, dict(slos_ms))
    row: dict[str, Any] = {
        "round": p.run.round or "",
        "engine": p.run.engine,
        "weight_format": weight_format,
        "run": p.run.name,
        "point": p.label,
        "test_kind": p.test_kind,
        "request_rate_req_s": cols.record(0).request_rate,
        "arrival": rate.arrival if rate is not None else None,
        "burstiness": rate.burstiness if rate is not None else None,
        "max_concurrency": p.concurrency or None,
        "requests": len(cols),
        "completed": res.completed,
        "failed": res.failed,
        "offered_rate_req_s": offered,
        "achieved_rate_req_s": achieved,
        "shortfall_pct": shortfall_pct(offered, achieved) if offered and achieved is not None else None,
        "request_throughput_req_s": res.request_throughput_req_s,
        "output_throughput_tok_s": res.output_throughput_tok_s,
    }
    for name, metric in LATENCIES:
        for s in (*STATS, *(q for q in percentiles if q not in STATS)):
            row[f"{s}_{name}_ms"] = res.stat_ms(s, metric) if res.completed else None
    row |= {
        "good_requests": good,
        "goodput_req_s": metrics.goodput_req_s(good, metrics_columns.duration_s(cols)),
        "lateness_p50_ms": late_q.get(50.0),
        "lateness_p99_ms": late_q.get(99.0),
        "lateness_max_ms": float(late.max()) if len(late) else None,
        "gate_ok": ctx.gate_ok(p) if ctx is not None else None,
        "source": p.run.cite(rel, "scheduled_mono_ns"),
    }
    return row


Row = dict[str, Any]  # a row of the rate_points table (point_row)


def _point_findings(r: Row, p: BenchPoint, at: At, slo_extra: dict[str, Any]) -> list[fnd.Finding]:
    """One rate point: its achieved rate, its send lateness and its goodput (each where measured)."""
    src = [r["source"]]
    common = {"request_rate_req_s": r["request_rate_req_s"], "gate_ok": r["gate_ok"]}
    if r["achieved_rate_req_s"] is None or r["offered_rate_req_s"] is None:
        out = [
            fnd.not_available(
                at("achieved_rate_req_s", test=p.label),
                "req/s",
                "too_few_points",
                "fewer than 2 scheduled or completed requests: no rate between them",
                src,
                **common,
            )
        ]
    else:
        out = [
            fnd.measured(
                at("achieved_rate_req_s", test=p.label),
                r["achieved_rate_req_s"],
                "req/s",
                src,
                offered_rate_req_s=r["offered_rate_req_s"],
                shortfall_pct=r["shortfall_pct"],
                **common,
            )
        ]
    if r["lateness_p99_ms"] is not None:
        out.append(
            fnd.measured(
                at("send_lateness_p99_ms", test=p.label),
                r["lateness_p99_ms"],
                "ms",
                src,
                lateness_p50_ms=r["lateness_p50_ms"],
                lateness_max_ms=r["lateness_max_ms"],
                **common,
            )
        )
    if r["goodput_req_s"] is not None:
        out.append(
            fnd.measured(
                at("goodput_req_s", test=p.label),
                r["goodput_req_s"],
                "req/s",
                src,
                good_requests=r["good_requests"],
                completed=r["completed"],
                **common,
                **slo_extra,
            )
        )
    return out


SATURATION_METHOD: dict[str, Any] = {
    "threshold_pct": SATURATION_SHORTFALL_PCT,
    "method": "first offered rate whose achieved rate "
    "falls behind its schedule's offered rate by more than the threshold",
}


def _saturation_finding(rows: list[Row], at: At) -> fnd.Finding:
    """The first offered rate the server fell behind by more than SATURATION_SHORTFALL_PCT, with the highest
    rate it still kept up with below it; n/a when no point has a rate or every point kept up."""
    rated = [r for r in rows if r["shortfall_pct"] is not None]
    behind = [r for r in rated if r["shortfall_pct"] > SATURATION_SHORTFALL_PCT]
    if not rated:
        return fnd.not_available(
            at("saturation_rate_req_s"),
            "req/s",
            "too_few_points",
            "no rate point with 2 or more completed requests",
            [rows[0]["source"]],
            **SATURATION_METHOD,
        )
    if not behind:
        top = rated[-1]
        return fnd.not_available(
            at("saturation_rate_req_s"),
            "req/s",
            "not_saturated",
            f"every offered rate up to {top['request_rate_req_s']:g} req/s was kept up "
            f"with (shortfall ≤ {SATURATION_SHORTFALL_PCT:g} %)",
            [r["source"] for r in rated],
            highest_sustained_req_s=top["request_rate_req_s"],
            **SATURATION_METHOD,
        )
    sat = behind[0]
    below = [r for r in rated if r["request_rate_req_s"] < sat["request_rate_req_s"]]
    sustained = below[-1] if below and below[-1]["shortfall_pct"] <= SATURATION_SHORTFALL_PCT else None
    return fnd.measured(
        at("saturation_rate_req_s"),
        sat["request_rate_req_s"],
        "req/s",
        [sat["source"]] + ([sustained["source"]] if sustained else []),
        offered_rate_req_s=sat["offered_rate_req_s"],
        achieved_rate_req_s=sat["achieved_rate_req_s"],
        shortfall_pct=sat["shortfall_pct"],
        highest_sustained_req_s=sustained["request_rate_req_s"] if sustained else None,
        lateness_p99_ms=sat["lateness_p99_ms"],
        gate_ok=sat["gate_ok"],
        **SATURATION_METHOD,
    )


def _max_achieved_findings(rows: list[Row], at: At) -> list[fnd.Finding]:
    """The highest achieved rate over the sweep (none without a rated point)."""
    rated = [r for r in rows if r["shortfall_pct"] is not None]
    if not rated:
        return []
    top = max(rated, key=lambda r: r["achieved_rate_req_s"])
    return [
        fnd.measured(
            at("max_achieved_rate_req_s"),
            top["achieved_rate_req_s"],
            "req/s",
            [top["source"]],
            request_rate_req_s=top["request_rate_req_s"],
            gate_ok=top["gate_ok"],
        )
    ]


def _goodput_max_finding(rows: list[Row], at: At, slo_extra: dict[str, Any]) -> fnd.Finding:
    """The highest goodput over the sweep (the lowest offered rate among equals)."""
    good = [r for r in rows if r["goodput_req_s"] is not None]
    if not good:
        return fnd.not_available(
            at("goodput_max_req_s"),
            "req/s",
            "unknown",
            "no point with a duration",
            [rows[0]["source"]],
            **slo_extra,
        )
    best = max(good, key=lambda r: (r["goodput_req_s"], -r["request_rate_req_s"]))
    return fnd.measured(
        at("goodput_max_req_s"),
        best["goodput_req_s"],
        "req/s",
        [best["source"]],
        request_rate_req_s=best["request_rate_req_s"],
        **slo_extra,
    )


def _sweep_findings(
    rows: list[Row], pts: dict[str, BenchPoint], at: At, slo_extra: dict[str, Any]
) -> list[fnd.Finding]:
    """One run's sweep: per point achieved rate, lateness and goodput; the saturation point, the highest
    achieved rate and the highest goodput."""
    out = [f for r in rows for f in _point_findings(r, pts[r["point"]], at, slo_extra)]
    return [
        *out,
        _saturation_finding(rows, at),
        *_max_achieved_findings(rows, at),
        _goodput_max_finding(rows, at, slo_extra),
    ]


def run(s: SectionInput) -> Section:
    """The rate-sweep section: the table ``rate_points`` (one row per open-loop point) and, per run with rate
    points, its sweep's findings (topic ``rate``). Goodput is judged against ``slos_ms`` (analysis-time
    ``--slo``), else the run's plan's ``[slo]``, else the SLO page's default budget as a per-request TTFT SLO
    (``slo.slos_for``; ``slo_basis`` says which). A campaign without rate points: an empty section (its
    page is not rendered)."""
    campaign, ctx, th, slos_ms = s.campaign, s.ctx, s.th, s.slos_ms
    pts = rate_points(campaign)
    if not pts:
        return Section(name="rates")
    fmt = th.weight_format_for
    budget, _ = default_budget_ms(campaign)
    qs = percentile_stats(campaign)
    rows_all: list[dict[str, Any]] = []
    found: list[fnd.Finding] = []
    for run_name in sorted({p.run.name for p in pts}):
        mine = [p for p in pts if p.run.name == run_name]
        wf = fmt(mine[0].run)
        slos, basis = slos_for(mine[0].run, slos_ms, {"ttft_ms": budget})
        slo_extra: dict[str, Any] = {f"slo_{k}": v for k, v in slos.items()} | {"slo_basis": basis}
        rows = [r | {"slo_basis": basis} for p in mine if (r := point_row(p, slos, ctx, wf, qs)) is not None]
        rows.sort(key=lambda r: (r["request_rate_req_s"] or 0.0, r["point"]))
        if not rows:
            continue
        rows_all += rows
        at = run_at(mine[0].run, wf, topic="rate")
        found += _sweep_findings(rows, {p.label: p for p in mine}, at, slo_extra)
    return Section(name="rates", tables={"rate_points": pd.DataFrame(rows_all)}, findings=found)
