"""The SLOs and budgets the planners and goodput judge by: ``--slo`` parsing, the SLOs per run (given, the
plan's ``[slo]``, the page's budget), one point's exact goodput, the page's default budget, and the log2
interpolation both planners use."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

from analysis.core import metrics, metrics_columns
from analysis.loading.campaign import BenchPoint, Campaign, RunData
from analysis.reconcile.concurrency import sweep_points
from collector.raw.errors import AnatomyError

ENGINES = ("vllm", "llamacpp")
# the reference campaign's budget: p99 TTFT 730 ms, where its two engines' p99 TTFT curves cross (the
# engine-selection boundary), borrowed as a demonstration budget — not a production target
REFERENCE_TTFT_P99_MS = 730.0
# our own campaigns, when no budget lies between every sweep's lowest and highest p99 TTFT: twice the
# slowest sweep's lowest (default_budget_ms; the page says which it is)
OWN_BUDGET_FACTOR = 2.0


class SloError(AnatomyError, ValueError):
    """A malformed ``--slo`` (one line saying which and why)."""


def parse_slos(items: list[str] | None) -> dict[str, float]:
    """``["ttft_ms=730", "tpot_ms=50"]`` → ``{"ttft_ms": 730.0, "tpot_ms": 50.0}`` (metrics.SLO_METRICS)."""
    out: dict[str, float] = {}
    for item in items or []:
        name, sep, val = item.partition("=")
        name = name.strip()
        if not sep or name not in metrics.SLO_METRICS:
            raise SloError(f"--slo {item!r}: want NAME=MS with NAME one of {', '.join(metrics.SLO_METRICS)}")
        try:
            ms = float(val)
        except ValueError:
            raise SloError(f"--slo {item!r}: {val!r} is not a number of milliseconds") from None
        if not math.isfinite(ms) or ms <= 0:
            raise SloError(f"--slo {item!r}: the threshold must be a positive number of ms")
        out[name] = ms
    return out


# `collector slo --p99 KEY:MS`: the planner's budgets, named as vllm bench serve's --goodput names its SLOs
P99_BUDGET_KEYS = ("ttft", "itl")


def parse_p99_budgets(pairs: list[str] | tuple[str, ...]) -> dict[str, float]:
    """``["ttft:730", "itl:50"]`` (or one ``"ttft:730 itl:50"``) → ``{"ttft": 730.0, "itl": 50.0}``: p99
    budgets, ms, with vllm bench serve's ``--goodput KEY:MS`` spelling (a budget on the p99, not a
    per-request SLO)."""
    return metrics.parse_key_ms(pairs, "--p99", {k: k for k in P99_BUDGET_KEYS}, "a budget", SloError)


def interpolate_log2(x_lo: float, y_lo: float, x_hi: float, y_hi: float, y: float) -> float:
    """The x where y is reached, y linear in log2(x) between (x_lo, y_lo) and (x_hi, y_hi):
    x = 2^(log2 x_lo + (y − y_lo) ÷ (y_hi − y_lo) × (log2 x_hi − log2 x_lo))."""
    frac = (y - y_lo) / (y_hi - y_lo)
    return 2 ** (math.log2(x_lo) + frac * (math.log2(x_hi) - math.log2(x_lo)))


def value_at_log2(x_lo: float, v_lo: float, x_hi: float, v_hi: float, x: float) -> float:
    """v at x, v linear in log2(x) between (x_lo, v_lo) and (x_hi, v_hi)."""
    frac = (math.log2(x) - math.log2(x_lo)) / (math.log2(x_hi) - math.log2(x_lo))
    return v_lo + frac * (v_hi - v_lo)


def slos_for(
    run: RunData, given: Mapping[str, float] | None, fallback: Mapping[str, float] | None = None
) -> tuple[dict[str, float], str]:
    """The per-request SLOs goodput is judged by for one run, and their basis: the analysis-time ``--slo``
    values (``given``) win; else the ``[slo]`` table of the plan the run kept (``plan``: its copy in raw/);
    else ``fallback`` (the SLO page's budget as a TTFT SLO: ``slo_page_budget``); ({}, "none") without any."""
    if given:
        return dict(given), "given"
    plan = run.docs.plan if run.docs is not None else None
    if plan is not None and getattr(plan, "slo", None):
        return dict(plan.slo), "plan"
    return (dict(fallback), "slo_page_budget") if fallback else ({}, "none")


def point_goodput(p: BenchPoint, slos_ms: Mapping[str, float]) -> tuple[int, float | None] | None:
    """(good requests, goodput req/s) of one point from its request records; None without them."""
    cols = p.columns
    if cols is None or not len(cols):
        return None
    good = metrics_columns.good_requests(cols, dict(slos_ms))
    return good, metrics.goodput_req_s(good, metrics_columns.duration_s(cols))


def point_weight_format(p: BenchPoint, of: Callable[..., Any] | None) -> str | None:
    """The weight format the point's run served (theoryctx.TheoryCtx.weight_format_for), None without it."""
    return of(p.run) if of is not None else None


def default_budget_ms(campaign: Campaign) -> tuple[float, str]:
    """The page's budget, ms: the reference study's 730 ms p99 TTFT for an imported campaign (basis
    ``reference``); for our own, a budget every sweep can bracket where one exists: with L the largest of the
    sweeps' lowest p99 TTFTs and H the smallest of their highest, sqrt(L × H) rounded up to 1 ms when L < H
    (basis ``geometric_mid``), else ``OWN_BUDGET_FACTOR`` × L (basis ``twice_lowest``)."""
    if not campaign.own:
        return REFERENCE_TTFT_P99_MS, "reference"
    lows, highs = [], []
    for rnd in campaign.rounds:
        for e in ENGINES:
            sweep = [p.result.p99_ttft_ms for p in sweep_points(campaign, rnd, e) if p.result.p99_ttft_ms]
            if sweep:
                lows.append(min(sweep))
                highs.append(max(sweep))
    if not lows:
        return REFERENCE_TTFT_P99_MS, "reference"
    low, high = max(lows), min(highs)
    if low < high:
        return float(math.ceil(math.sqrt(low * high))), "geometric_mid"
    return float(math.ceil(OWN_BUDGET_FACTOR * low)), "twice_lowest"
