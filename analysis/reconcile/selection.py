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
        srcs: list[str] = []
        for engine in ENGINES:
            # gated-out points (failed requests, short outputs) cannot be recommended: they are drawn, not picked
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
