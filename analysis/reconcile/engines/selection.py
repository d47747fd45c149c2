"""Selection guide: per engine, the Pareto curve of output tokens/s against p99 TTFT across concurrency
(log–log interpolation between points), the p99 TTFT budget where the better engine changes, and a
table "p99 TTFT < X ms ⇒ concurrency N, tokens/s T" per engine for X in 500, 1000, 2000 ms and no limit.

Two answers between series (a round's engines in an imported campaign; our own runs, where the H200
campaign's two series are two weight formats of one engine), each a finding per round:

- the best series per p99 TTFT budget: for each budget of a 1-2-5 ladder across the round's measured p99 TTFTs
  (``budget_ladder_ms``, plus the SLO page's budget), the series whose planner answer (``slo.plan_sweep``: the
  highest concurrency within the budget, p99 linear in log2(concurrency) between the bracketing points, output
  tokens/s interpolated the same way) delivers the most output tokens/s;
- the single-stream advantage (decode step at concurrency 1, ``roofline.step_ratio``) and the
  peak-throughput advantage (each series' highest gated-in output tokens/s,
  ``concurrency.peak_throughput_finding``, compared by ``roofline.throughput_ratio``), each stated as the
  leader's lead (≥ 1) with the leader named."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from analysis.core import findings as fnd
from analysis.core import fits
from analysis.core.keys import At, slug
from analysis.loading.campaign import BenchPoint, Campaign
from analysis.reconcile import Context, Section, SectionInput, engine_at, slo
from analysis.reconcile.concurrency import peak_throughput_finding, sweep_points
from analysis.reconcile.roofline import SweepSeries, step_bytes, step_ratio, sweep_series, throughput_ratio
from analysis.reconcile.theoryctx import TheoryCtx

BUDGETS_MS = (500.0, 1000.0, 2000.0, math.inf)
ENGINES = ("vllm", "llamacpp")
# the best-per-budget ladder: round budgets, three per decade
LADDER_STEPS = (1.0, 2.0, 5.0)
# a lead under this is within the interpolation's error (the curve between two measured points need not be
# a straight line): the page says either series will do
TIE_PCT = 5.0


def _fmt(value: object) -> str | None:
    return value if isinstance(value, str) else None


def _better(budget_ms: float, fronts: dict[str, tuple[list[float], list[float]]]) -> str:
    """The engine whose front gives more throughput within the budget, llama.cpp on a tie. An engine with no
    point inside the budget can deliver nothing within it: its throughput there is 0 tokens/s by definition
    (not a missing value)."""

    def within(engine: str) -> float:
        gain = fits.envelope_gain(budget_ms, *fronts[engine])
        return 0.0 if gain is None else gain

    return "vllm" if within("vllm") > within("llamacpp") else "llamacpp"


def step_winners(
    measured: dict[str, tuple[list[float], list[float]]],
) -> list[tuple[float, str, dict[str, Any]]]:
    """Per measured p99 TTFT (each a budget just above it), the engine whose best measured point within the
    budget gives more output tokens/s — the table's own rule (strict "p99 TTFT < budget"), so what this says
    never contradicts the budget table. An engine with nothing inside a budget delivers nothing there."""
    out = []
    for b in sorted({c for cost, _ in measured.values() for c in cost}):
        within = math.nextafter(b, math.inf)
        gain = {e: fits.best_within_budget(c, g, within).gain for e, (c, g) in measured.items()}
        best = max(ENGINES, key=lambda e: (-math.inf if gain[e] is None else gain[e], e == "llamacpp"))
        out.append((b, best, gain))
    return out


def _measured_boundary(key: At, measured: dict[str, Any], srcs: list[str], rnd: str | None) -> fnd.Finding:
    """Where the better engine changes on the measured points: below ``first_flip_ms`` the first winner always
    leads, from the value on the last winner always does; between them they alternate (with how far the first
    winner leads there)."""
    if len(measured) < 2 or not all(c for c, _ in measured.values()):
        return fnd.not_available(
            key, "ms", "engine_missing", f"needs both engines' sweeps in {rnd or 'the campaign'}"
        )
    steps = step_winners(measured)
    first, last = steps[0][1], steps[-1][1]
    if first == last:  # the same engine leads at the smallest and the largest budget
        return fnd.not_available(
            key,
            "ms",
            "no_crossing",
            f"{first} leads at both ends of the measured budgets",
            srcs,
            better=first,
        )
    trailing = len(steps)
    while trailing > 0 and steps[trailing - 1][1] == last:
        trailing -= 1
    flip = next(i for i, (_, w, _) in enumerate(steps) if w != first)
    zone = [g for _, w, g in steps[flip:trailing] if w == first and g[last]]
    lead = max(((g[first] - g[last]) / g[last] * 100 for g in zone), default=None)
    return fnd.measured(
        key,
        steps[trailing][0],
        "ms",
        srcs,
        better_below=first,
        better_above=last,
        first_flip_ms=steps[flip][0],
        contested_lead_pct=lead,
        detail="budgets at the measured p99 TTFTs: below first_flip_ms better_below always delivers more, "
        "from the value on better_above does; in between they alternate, better_below leading by at "
        "most contested_lead_pct",
    )


def budget_ladder_ms(p99_ttft_ms: list[float], extra_ms: tuple[float, ...] = ()) -> list[float]:
    """The p99 TTFT budgets the best-per-budget table asks about, ms: every 1-2-5 step (…, 100, 200, 500,
    1,000, …) from the lowest measured p99 TTFT to the highest, and each of ``extra_ms`` inside that range;
    sorted, no repeats. Below the lowest no series has a point within the budget; above the highest every
    series' answer is its highest measured point."""
    lo, hi = min(p99_ttft_ms), max(p99_ttft_ms)
    out = {b for b in extra_ms if lo <= b <= hi}
    decade = math.floor(math.log10(lo))
    while 10.0**decade <= hi:
        out |= {m * 10.0**decade for m in LADDER_STEPS if lo <= m * 10.0**decade <= hi}
        decade += 1
    return sorted(out)


def round_series(campaign: Campaign, th: TheoryCtx, rnd: str | None) -> list[SweepSeries]:
    """The series that compete in a round (``roofline.sweep_series``: an imported round's engines, our own
    runs), one per engine and weight format (the first sweep of each: a later one is a repeat)."""
    out: list[SweepSeries] = []
    for s in sweep_series(campaign, th):
        if s["round"] == (rnd or "") and all(
            (o["engine"], o["weight_format"]) != (s["engine"], s["weight_format"]) for o in out
        ):
            out.append(s)
    return out


def _ident(s: SweepSeries) -> dict[str, Any]:
    return {"engine": s["engine"], "weight_format": s["weight_format"], "run": s["run"]}


def _same_engine(ss: list[SweepSeries]) -> bool:
    return len({s["engine"] for s in ss}) == 1


def _within_budget(s: SweepSeries, ans: slo.SloAnswer | None) -> dict[str, Any]:
    """One series at one budget: the planner's concurrency and output tokens/s there, with the bracketing
    points (``at_least``: the highest measured point is within the budget, so the series sustains at least
    that; nothing: no point is within it)."""
    row = _ident(s) | {"status": ans.status if ans is not None else "no_points", "at_least": False}
    if ans is None or ans.status in ("none_meet", "no_points"):
        return row | {"concurrency": None, "output_tokens_per_s": None}
    by_label = {(p.run.name, p.label): p for p in s["points"]}
    if ans.status == "bracketed" and ans.lower is not None and ans.upper is not None:
        lo, hi = ans.lower, ans.upper
        return row | {
            "concurrency": ans.concurrency,
            "output_tokens_per_s": ans.output_throughput_tok_s,
            "lower_concurrency": lo.concurrency,
            "lower_p99_ttft_ms": lo.p99_ttft_ms,
            "lower_output_tokens_per_s": lo.output_throughput_tok_s,
            "upper_concurrency": hi.concurrency,
            "upper_p99_ttft_ms": hi.p99_ttft_ms,
            "upper_output_tokens_per_s": hi.output_throughput_tok_s,
            "sources": [
                lo.source,
                hi.source,
                by_label[(lo.run, lo.label)].cite("output_throughput"),
                by_label[(hi.run, hi.label)].cite("output_throughput"),
            ],
        }
    top = ans.points[-1]
    return row | {
        "concurrency": top.concurrency,
        "output_tokens_per_s": top.output_throughput_tok_s,
        "at_least": True,
        "lower_concurrency": top.concurrency,
        "lower_p99_ttft_ms": top.p99_ttft_ms,
        "lower_output_tokens_per_s": top.output_throughput_tok_s,
        "sources": [top.source, by_label[(top.run, top.label)].cite("output_throughput")],
    }


def _measured_within(
    s: SweepSeries, budget_ms: float, gate_ok: Callable[[BenchPoint], bool]
) -> dict[str, Any] | None:
    """One series' measured gated point with the most output tokens/s among those with p99 TTFT ≤ the
    budget, as a ``_within_budget`` row; None when no point is within it."""
    pts = [
        p
        for p in s["points"]
        if gate_ok(p)
        and p.result.p99_ttft_ms is not None
        and p.result.p99_ttft_ms <= budget_ms
        and p.result.output_throughput_tok_s is not None
    ]
    if not pts:
        return None
    p = max(pts, key=lambda q: (q.result.output_throughput_tok_s or 0.0, -(q.concurrency or 0)))
    return _ident(s) | {
        "status": "measured",
        "at_least": False,
        "concurrency": p.concurrency,
        "output_tokens_per_s": p.result.output_throughput_tok_s,
        "lower_concurrency": p.concurrency,
        "lower_p99_ttft_ms": p.result.p99_ttft_ms,
        "lower_output_tokens_per_s": p.result.output_throughput_tok_s,
        "sources": [p.cite("p99_ttft_ms"), p.cite("output_throughput")],
    }


def most_within(*rows: dict[str, Any] | None) -> dict[str, Any]:
    """Of one series' candidate operating points within a budget (the planner's interpolated answer, its
    best measured point, its best at a tighter budget), the one with the most output tokens/s: what a looser
    budget buys is never less than a tighter one's (the same operating point stays within it). The first
    row when none has a throughput."""
    rated = [r for r in rows if r is not None and r.get("output_tokens_per_s") is not None]
    return max(rated, key=lambda r: r["output_tokens_per_s"]) if rated else next(r for r in rows if r)


def best_per_budget(
    campaign: Campaign, ctx: Context, th: TheoryCtx, rnd: str | None, series: list[SweepSeries]
) -> tuple[list[fnd.Finding], list[dict[str, Any]]]:
    """Per budget of the ladder, the series delivering the most output tokens/s within it (findings, one per
    budget, and the table rows, one per budget and series)."""
    at = At(round=rnd, topic="selection")
    if len(series) < 2:
        why = f"one series in {rnd or 'the campaign'}: nothing to choose between"
        return [
            fnd.not_available(at("best_within_budget_tokens_per_s"), "tokens/s", "engine_missing", why)
        ], []
    p99 = [
        p.result.p99_ttft_ms
        for s in series
        for p in s["points"]
        if ctx.gate_ok(p) and p.result.p99_ttft_ms is not None
    ]
    if not p99:
        key = at("best_within_budget_tokens_per_s")
        return [fnd.not_available(key, "tokens/s", "too_few_points", "no gated-in sweep point")], []
    page_budget, _ = slo.default_budget_ms(campaign)
    findings: list[fnd.Finding] = []
    rows: list[dict[str, Any]] = []
    tighter: list[dict[str, Any] | None] = [None] * len(series)  # each series' best at the budgets so far
    for b in budget_ladder_ms(p99, (page_budget,)):
        per = [
            most_within(
                _planned_within(campaign, ctx, th, rnd, s, b), _measured_within(s, b, ctx.gate_ok), tighter[i]
            )
            for i, s in enumerate(series)
        ]
        tighter = list(per)
        basis = "page" if b == page_budget else "ladder"
        finding, best = _best_at_budget(at, b, basis, per, _same_engine(series))
        rows += [
            {
                "round": rnd or "",
                "p99_ttft_budget_ms": b,
                "budget_basis": basis,
                **{k: v for k, v in r.items() if k != "sources"},
                "best": r is best,
                "source": "; ".join(r.get("sources", [])),
            }
            for r in per
        ]
        findings.append(finding)
    findings += _same_best(at, findings)
    return findings, rows


def _planned_within(
    campaign: Campaign, ctx: Context, th: TheoryCtx, rnd: str | None, s: SweepSeries, budget_ms: float
) -> dict[str, Any]:
    """One series at one budget by the SLO planner (``slo.plan_sweep``), as a ``_within_budget`` row."""
    ans = slo.plan_sweep(
        campaign.name,
        rnd,
        s["engine"],
        s["points"],
        budget_ms,
        readers=slo.PointReaders(gate_ok=ctx.gate_ok, weight_format_of=th.weight_format_for),
    )
    return _within_budget(s, ans)


def _best_at_budget(
    at: At, b: float, basis: str, per: list[dict[str, Any]], same_engine: bool
) -> tuple[fnd.Finding, dict[str, Any]]:
    """The series with the most output tokens/s within budget ``b`` (ms), with its lead over the runner-up
    (%); and that series' row."""
    rated = sorted(
        (r for r in per if r["output_tokens_per_s"] is not None),
        key=lambda r: -r["output_tokens_per_s"],
    )
    best = rated[0]  # the ladder starts at the lowest measured p99: some series is within every budget
    runner = rated[1] if len(rated) > 1 else None
    lead = (
        (throughput_ratio(best["output_tokens_per_s"], runner["output_tokens_per_s"]) - 1) * 100
        if runner is not None
        else None
    )
    # a lower bound below the best may still be above it: measured further up, it could lead
    certain = not any(r["at_least"] for r in rated[1:])
    finding = fnd.measured(
        at("best_within_budget_tokens_per_s", test=slug(f"p99_ttft_{b:g}ms")),
        best["output_tokens_per_s"],
        "tokens/s",
        [src for r in per for src in r.get("sources", [])],
        budget_ms=b,
        budget_basis=basis,
        best_engine=best["engine"],
        best_weight_format=best["weight_format"],
        best_concurrency=best["concurrency"],
        best_at_least=best["at_least"],
        runner_up_engine=runner["engine"] if runner else None,
        runner_up_weight_format=runner["weight_format"] if runner else None,
        runner_up_tokens_per_s=runner["output_tokens_per_s"] if runner else None,
        lead_pct=lead,
        tie=lead is not None and lead < TIE_PCT,
        certain=certain,
        same_engine=same_engine,
        by_series=[{k: v for k, v in r.items() if k != "sources"} for r in per],
        detail="per series the SLO planner's answer (highest concurrency with p99 TTFT ≤ budget, p99 "
        "linear in log2(concurrency) between the bracketing points) and the output tokens/s there "
        "(same interpolation); best: the most tokens/s; at_least: the highest measured point is "
        "within the budget",
    )
    return finding, best


def _same_best(at: At, per_budget: list[fnd.Finding]) -> list[fnd.Finding]:
    """When one series is best at every budget of the ladder: a finding saying so, its value the smallest
    lead (%) over the runner-up where there is one, with the largest; none otherwise."""
    ok = [f for f in per_budget if f.available and f.extra.get("lead_pct") is not None]
    best = {(f.extra.get("best_engine"), f.extra.get("best_weight_format")) for f in per_budget}
    if len(ok) < 2 or len(best) != 1:  # a budget only one series reaches still names the same best
        return []
    (engine, fmt), lo = best.pop(), min(ok, key=lambda f: f.extra["lead_pct"])
    hi = max(ok, key=lambda f: f.extra["lead_pct"])
    return [
        fnd.measured(
            at("best_at_every_budget_min_lead_pct"),
            lo.extra["lead_pct"],
            "%",
            [src for f in ok for src in f.sources],
            best_engine=engine,
            best_weight_format=fmt,
            runner_up_engine=lo.extra["runner_up_engine"],
            runner_up_weight_format=lo.extra["runner_up_weight_format"],
            min_lead_budget_ms=lo.extra["budget_ms"],
            max_lead_pct=hi.extra["lead_pct"],
            max_lead_budget_ms=hi.extra["budget_ms"],
            budgets=len(ok),
            detail="the same series delivers the most output tokens/s within every budget of the ladder; "
            "value: its smallest lead over the runner-up",
        )
    ]


def _step_bytes_at(s: SweepSeries, concurrency: int) -> float | None:
    """The bytes one decode step of the series reads at its point of that concurrency (roofline.step_bytes:
    the same count as the engines page's and the quantization finding's byte ratio)."""
    p = next((q for q in s["points"] if q.concurrency == concurrency), None)
    return step_bytes(s, p) if p is not None else None


# Two series whose decode steps read within this factor of each other's bytes read "the same": the speed gap
# then comes from per-step overhead, not from bytes (the selection page's single-stream "why").
SAME_BYTES_RATIO = 1.05


def bytes_reason(byte_ratio: float | None, speed_ratio: float) -> str | None:
    """Why the leader is faster at one stream, from how many times more bytes the other reads per step:
    ``bytes`` (reads fewer bytes, and the speed gap matches), ``bytes_farther`` (reads fewer bytes but the
    speed gap is smaller than the byte gap: the leader is farther from its own bandwidth floor),
    ``overhead`` (the byte counts are within SAME_BYTES_RATIO), None without the byte counts."""
    if byte_ratio is None:
        return None
    if byte_ratio <= SAME_BYTES_RATIO:
        return "overhead"
    return "bytes_farther" if speed_ratio < byte_ratio else "bytes"


def _lead(
    key: At,
    a: tuple[SweepSeries, float, list[str], int],
    b: tuple[SweepSeries, float, list[str], int],
    ratio: Callable[[float, float], float],
    **extra: Any,
) -> fnd.Finding:
    """The leader's advantage over the other series, ≥ 1 (``ratio(x, y)``: how many times better x is than
    y), with both series' values and how many times more weight bytes the other reads per decode step."""
    lead, other = (a, b) if ratio(a[1], b[1]) >= 1 else (b, a)
    wl, wo = (_step_bytes_at(x[0], x[3]) for x in (lead, other))
    value = ratio(lead[1], other[1])
    byte_ratio = wo / wl if wl and wo else None
    return fnd.measured(
        key,
        value,
        "ratio",
        a[2] + b[2],
        leader_value=lead[1],
        other_value=other[1],
        leader_concurrency=lead[3],
        other_concurrency=other[3],
        leader_engine=lead[0]["engine"],
        leader_weight_format=lead[0]["weight_format"],
        other_engine=other[0]["engine"],
        other_weight_format=other[0]["weight_format"],
        same_engine=lead[0]["engine"] == other[0]["engine"],
        other_over_leader_step_bytes=byte_ratio,
        bytes_reason=bytes_reason(byte_ratio, value),
        **extra,
    )


def advantages(ctx: Context, rnd: str | None, series: list[SweepSeries]) -> list[fnd.Finding]:
    """The single-stream and the peak-throughput advantage between the round's two series (the first two when
    there are more: one per engine and format)."""
    at = At(round=rnd, topic="selection")
    if len(series) < 2:
        why = f"one series in {rnd or 'the campaign'}: no second engine or weight format to compare"
        return [
            fnd.not_available(at(m), "ratio", "engine_missing", why)
            for m in ("single_stream_advantage", "peak_throughput_advantage")
        ]
    pair = series[:2]
    out: list[fnd.Finding] = []
    # 1. one stream: the decode step (p50 ITL) at concurrency 1
    c1: list[BenchPoint | None] = [
        next((p for p in s["points"] if p.concurrency == 1 and ctx.gate_ok(p)), None) for s in pair
    ]
    itl = [p.result.itl.p50_ms if p is not None else None for p in c1]
    key = at("single_stream_advantage")
    if any(p is None for p in c1) or any(not v for v in itl):
        missing = [s["run"] for s, p, v in zip(pair, c1, itl, strict=True) if p is None or not v]
        out.append(
            fnd.not_available(
                key, "ratio", "no_concurrency_1", f"no gated-in concurrency-1 point with an ITL in {missing}"
            )
        )
    else:
        pa, pb = c1
        ia, ib = itl
        assert pa is not None and pb is not None and ia and ib  # checked above
        out.append(
            _lead(
                key,
                (pair[0], ia, [pa.cite("p50_itl_ms")], 1),
                (pair[1], ib, [pb.cite("p50_itl_ms")], 1),
                lambda x, y: step_ratio(y, x),  # a shorter step leads
                detail="the slower series' p50 ITL ÷ the faster one's at concurrency 1 (= the faster one's "
                "decode tokens/s per stream ÷ the slower one's)",
            )
        )
    # 2. each series at its own peak (gated-in points)
    key = at("peak_throughput_advantage")
    peaks = [peak_throughput_finding(at, [p for p in s["points"] if ctx.gate_ok(p)], ctx) for s in pair]
    if not all(f.available and isinstance(f.value, int | float) for f in peaks):
        out.append(
            fnd.not_available(
                key, "ratio", "too_few_points", "a series has no gated-in point with a throughput"
            )
        )
    else:
        (fa, fb), (sa, sb) = peaks, pair
        assert isinstance(fa.value, int | float) and isinstance(fb.value, int | float)  # checked above
        out.append(
            _lead(
                key,
                (sa, float(fa.value), list(fa.sources), fa.extra["concurrency"]),
                (sb, float(fb.value), list(fb.sources), fb.extra["concurrency"]),
                throughput_ratio,
                same_concurrency=fa.extra["concurrency"] == fb.extra["concurrency"],
                detail="the higher peak output tokens/s ÷ the lower, each series at its own best gated-in "
                "concurrency",
            )
        )
    return out


def guide(series: list[SweepSeries], ctx: Context, rnd: str | None) -> list[dict[str, Any]]:
    """The budget table on measured points only: per series the campaign has (engine and weight format)
    and budget of BUDGETS_MS, the gated point with the most output tokens/s and p99 TTFT under the budget."""
    rows = []
    for s in series:
        pts = [p for p in s["points"] if ctx.gate_ok(p)]
        cost = [_known(p.result.p99_ttft_ms) for p in pts]
        gain = [_known(p.result.output_throughput_tok_s) for p in pts]
        for b in BUDGETS_MS:
            pick = fits.best_within_budget(cost, gain, b) if pts else fits.BudgetPick(b, None, None, None)
            rows.append(
                {
                    "round": rnd or "",
                    "engine": s["engine"],
                    "weight_format": s["weight_format"],
                    "p99_ttft_budget_ms": "none" if math.isinf(b) else int(b),
                    "concurrency": pts[pick.index].concurrency if pick.index is not None else None,
                    "output_throughput_tokens_per_s": pick.gain,
                    "p99_ttft_ms": pick.cost,
                }
            )
    return rows


def _engine_order(engine: str) -> int:
    return ENGINES.index(engine) if engine in ENGINES else len(ENGINES)


def _curve_rows(series: SweepSeries, ctx: Context, fmt_of: dict[str, Any]) -> list[dict[str, Any]]:
    """One series' sweep points as rows of the selection curve, each marked on or off the series' own Pareto
    front (over its gated-in points)."""
    allpts = series["points"]
    pts = [p for p in allpts if ctx.gate_ok(p)]
    cost = [_known(p.result.p99_ttft_ms) for p in pts]
    gain = [_known(p.result.output_throughput_tok_s) for p in pts]
    on_front = [pts[i] for i in fits.pareto_front(cost, gain)] if pts else []
    return [
        {
            "round": series["round"],
            "engine": series["engine"],
            "weight_format": fmt_of.get(p.key),
            "test_kind": p.test_kind,
            "concurrency": p.concurrency,
            "p99_ttft_ms": p.result.p99_ttft_ms,
            "output_throughput_tokens_per_s": p.result.output_throughput_tok_s,
            "gate_ok": ctx.gate_ok(p),
            "on_front": p in on_front,
            "source": p.cite("p99_ttft_ms"),
        }
        for p in allpts
    ]


def _known(value: float | None) -> float:
    """A gated-in point's p99 TTFT or output tokens/s: a point without them fails its gates."""
    assert value is not None
    return value


@dataclass
class _RoundCurves:
    """One round's measured (p99 TTFT, output tokens/s) per engine over its gated-in points, the Pareto
    fronts of those and the citations of the front points."""

    measured: dict[str, tuple[list[float], list[float]]] = field(default_factory=dict)
    fronts: dict[str, tuple[list[float], list[float]]] = field(default_factory=dict)
    srcs: list[str] = field(default_factory=list)


def _round_curves(s: SectionInput, rnd: str | None) -> _RoundCurves:
    ctx, out = s.ctx, _RoundCurves()
    for engine in ENGINES:
        # gated-out points (failed requests, short outputs) cannot be recommended: they are drawn, not picked
        allpts = sweep_points(s.campaign, rnd, engine)
        pts = [p for p in allpts if ctx.gate_ok(p)]
        cost = [_known(p.result.p99_ttft_ms) for p in pts]
        gain = [_known(p.result.output_throughput_tok_s) for p in pts]
        front = fits.pareto_front(cost, gain) if pts else []
        out.measured[engine] = (cost, gain)
        if front:
            out.fronts[engine] = ([cost[i] for i in front], [gain[i] for i in front])
            out.srcs += [pts[i].cite("p99_ttft_ms") for i in front] + [
                pts[i].cite("output_throughput") for i in front
            ]
    return out


def _boundary(key: At, fronts: dict[str, tuple[list[float], list[float]]], srcs: list[str]) -> fnd.Finding:
    """The p99 TTFT budget where the better engine changes: the first crossing of the two Pareto envelopes."""
    (ac, ag), (bc, bg) = fronts["vllm"], fronts["llamacpp"]
    xs = fits.envelope_crossings(ac, ag, bc, bg)
    if not xs:
        lead = _better(max(ac[0], bc[0]), fronts)
        why = f"{lead} is better at every shared budget"
        return fnd.not_available(key, "ms", "no_crossing", why, srcs, better=lead)
    x = xs[0]
    below = _better(x * 0.99, fronts)
    return fnd.measured(
        key,
        x,
        "ms",
        srcs,
        all_boundaries_ms=xs,
        better_below=below,
        better_above="vllm" if below == "llamacpp" else "llamacpp",
        only_engine_below_ms={"engine": "vllm" if ac[0] < bc[0] else "llamacpp", "ms": max(ac[0], bc[0])},
        # what each engine delivers at the crossing (equal there, up to the interpolation)
        tokens_per_s_at_boundary={e: fits.envelope_gain(x, *fronts[e]) for e in ENGINES},
    )


def _best_under_1000(rnd: str | None, guide_rows: list[dict[str, Any]], srcs: list[str]) -> list[fnd.Finding]:
    """Per engine, the most output tokens/s of its first series with p99 TTFT under 1000 ms (a second
    weight format is a run of our own)."""
    out = []
    for engine in ENGINES:
        row = next(
            (
                r
                for r in guide_rows
                if r["round"] == (rnd or "") and r["engine"] == engine and r["p99_ttft_budget_ms"] == 1000
            ),
            None,
        )
        if row is None:
            continue
        at = engine_at(rnd, engine, _fmt(row["weight_format"]), topic="selection")
        k = at("best_under_1000ms_tokens_per_s")
        if row["output_throughput_tokens_per_s"] is None:
            out.append(fnd.not_available(k, "tokens/s", "unknown", "no point has p99 TTFT < 1000 ms"))
        else:
            tps = row["output_throughput_tokens_per_s"]
            out.append(fnd.measured(k, tps, "tokens/s", srcs, concurrency=row["concurrency"]))
    return out


def run(s: SectionInput) -> Section:
    campaign, ctx, th, points = s.campaign, s.ctx, s.th, s.points
    findings: list[fnd.Finding] = []
    curve_rows: list[dict[str, Any]] = []
    guide_rows: list[dict[str, Any]] = []
    fmt_of = (
        dict(zip(points["key"], points["weight_format"], strict=True))
        if len(points) and "weight_format" in points
        else {}
    )
    for rnd in campaign.rounds:
        at = At(round=rnd, topic="selection")
        curves = _round_curves(s, rnd)
        # the figure draws every series (each weight format of an engine), the boundary compares engines
        series = round_series(campaign, th, rnd)
        by_engine = sorted(series, key=lambda sr: _engine_order(sr["engine"]))
        curve_rows += [row for sr in by_engine for row in _curve_rows(sr, ctx, fmt_of)]
        guide_rows += guide(series, ctx, rnd)
        findings.append(
            _measured_boundary(at("boundary_measured_p99_ttft_ms"), curves.measured, curves.srcs, rnd)
        )
        if len(curves.fronts) < 2:
            why = f"needs both engines' sweeps in {rnd or 'the campaign'}"
            findings.append(fnd.not_available(at("boundary_p99_ttft_ms"), "ms", "engine_missing", why))
            continue
        findings.append(_boundary(at("boundary_p99_ttft_ms"), curves.fronts, curves.srcs))
        findings += _best_under_1000(rnd, guide_rows, curves.srcs)
    budget_rows: list[dict[str, Any]] = []
    for rnd in campaign.rounds:
        series = round_series(campaign, th, rnd)
        found, rows = best_per_budget(campaign, ctx, th, rnd, series)
        findings += found + advantages(ctx, rnd, series)
        budget_rows += rows
    return Section(
        name="selection",
        tables={
            "selection_curve": pd.DataFrame(curve_rows),
            "selection_guide": pd.DataFrame(guide_rows),
            "selection_best_per_budget": pd.DataFrame(budget_rows),
        },
        findings=findings,
    )
