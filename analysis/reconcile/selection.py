"""Selection guide: per engine, the Pareto curve of output tokens/s against p99 TTFT across concurrency
(log–log interpolation between points), the p99 TTFT budget where the better engine changes, and a
table "p99 TTFT < X ms ⇒ concurrency N, tokens/s T" per engine for X in 500, 1000, 2000 ms and no limit."""

from __future__ import annotations

import math

import pandas as pd

from analysis import findings as fnd
from analysis import fits
from analysis.campaign import Campaign
from analysis.keys import At
from analysis.reconcile import Context, Section, engine_at
from analysis.reconcile.concurrency import sweep_points

BUDGETS_MS = (500.0, 1000.0, 2000.0, math.inf)
ENGINES = ("vllm", "llamacpp")


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


def step_winners(measured: dict[str, tuple[list[float], list[float]]]) -> list[tuple[float, str, dict]]:
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


def _measured_boundary(key: At, measured: dict, srcs: list[str], rnd: str | None) -> fnd.Finding:
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


def run(campaign: Campaign, ctx: Context, points: pd.DataFrame) -> Section:
    findings: list[fnd.Finding] = []
    curve_rows: list[dict] = []
    guide_rows: list[dict] = []
    fmt_of = (
        dict(zip(points["key"], points["weight_format"], strict=True))
        if len(points) and "weight_format" in points
        else {}
    )
    for rnd in campaign.rounds:
        at = At(round=rnd, topic="selection")
        fronts: dict[str, tuple[list[float], list[float]]] = {}
        measured: dict[str, tuple[list[float], list[float]]] = {}
        srcs: list[str] = []
        for engine in ENGINES:
            # gated-out points (failed requests, short outputs) cannot be recommended: they are drawn, not
            # picked
            allpts = sweep_points(campaign, rnd, engine)
            pts = [p for p in allpts if ctx.gate_ok(p)]
            cost = [p.result.p99_ttft_ms for p in pts]
            gain = [p.result.output_throughput_tok_s for p in pts]
            front = fits.pareto_front(cost, gain) if pts else []
            for p in allpts:
                curve_rows.append(
                    {
                        "round": rnd or "",
                        "engine": engine,
                        "weight_format": fmt_of.get(p.key),
                        "test_kind": p.test_kind,
                        "concurrency": p.concurrency,
                        "p99_ttft_ms": p.result.p99_ttft_ms,
                        "output_throughput_tokens_per_s": p.result.output_throughput_tok_s,
                        "gate_ok": ctx.gate_ok(p),
                        "on_front": p in [pts[i] for i in front],
                        "source": p.cite("p99_ttft_ms"),
                    }
                )
            measured[engine] = (cost, gain)
            if front:
                fronts[engine] = ([cost[i] for i in front], [gain[i] for i in front])
                srcs += [pts[i].cite("p99_ttft_ms") for i in front] + [
                    pts[i].cite("output_throughput") for i in front
                ]
            for b in BUDGETS_MS:
                pick = fits.best_within_budget(cost, gain, b) if pts else fits.BudgetPick(b, None, None, None)
                guide_rows.append(
                    {
                        "round": rnd or "",
                        "engine": engine,
                        "weight_format": fmt_of.get(allpts[0].key) if allpts else None,
                        "p99_ttft_budget_ms": "none" if math.isinf(b) else int(b),
                        "concurrency": pts[pick.index].concurrency if pick.index is not None else None,
                        "output_throughput_tokens_per_s": pick.gain,
                        "p99_ttft_ms": pick.cost,
                    }
                )
        findings.append(_measured_boundary(at("boundary_measured_p99_ttft_ms"), measured, srcs, rnd))
        key = at("boundary_p99_ttft_ms")
        if len(fronts) < 2:
            findings.append(
                fnd.not_available(
                    key, "ms", "engine_missing", f"needs both engines' sweeps in {rnd or 'the campaign'}"
                )
            )
            continue
        (ac, ag), (bc, bg) = fronts["vllm"], fronts["llamacpp"]
        xs = fits.envelope_crossings(ac, ag, bc, bg)
        if not xs:
            lead = _better(max(ac[0], bc[0]), fronts)
            findings.append(
                fnd.not_available(
                    key, "ms", "no_crossing", f"{lead} is better at every shared budget", srcs, better=lead
                )
            )
        else:
            x = xs[0]
            below = _better(x * 0.99, fronts)
            findings.append(
                fnd.measured(
                    key,
                    x,
                    "ms",
                    srcs,
                    all_boundaries_ms=xs,
                    better_below=below,
                    better_above="vllm" if below == "llamacpp" else "llamacpp",
                    only_engine_below_ms={
                        "engine": "vllm" if ac[0] < bc[0] else "llamacpp",
                        "ms": max(ac[0], bc[0]),
                    },
                )
            )
        for engine in ENGINES:
            for row in guide_rows:
                if (
                    row["round"] == (rnd or "")
                    and row["engine"] == engine
                    and row["p99_ttft_budget_ms"] == 1000
                ):
                    k = engine_at(rnd, engine, _fmt(row["weight_format"]), topic="selection")(
                        "best_under_1000ms_tokens_per_s"
                    )
                    if row["output_throughput_tokens_per_s"] is None:
                        findings.append(
                            fnd.not_available(k, "tokens/s", "unknown", "no point has p99 TTFT < 1000 ms")
                        )
                    else:
                        findings.append(
                            fnd.measured(
                                k,
                                row["output_throughput_tokens_per_s"],
                                "tokens/s",
                                srcs,
                                concurrency=row["concurrency"],
                            )
                        )
    return Section(
        name="selection",
        tables={"selection_curve": pd.DataFrame(curve_rows), "selection_guide": pd.DataFrame(guide_rows)},
        findings=findings,
    )
