"""Small numerical methods the reconciliations share: least squares, log–log interpolation, knees,
Pareto fronts and the crossing of two piecewise log–log curves.

Pure functions on plain sequences (no pandas), so each one is tested on hand-checkable integers.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class LinearFit:
    """y ≈ slope · x + intercept, fitted by ordinary least squares over n points."""

    slope: float
    intercept: float
    r2: float
    n: int

    def predict(self, x: float) -> float:
        """ŷ = slope · x + intercept (units of y)."""
        return self.slope * x + self.intercept


def least_squares(xs: Sequence[float], ys: Sequence[float]) -> LinearFit:
    """Ordinary least squares line through (x, y).

    slope = Σ(x−x̄)(y−ȳ) / Σ(x−x̄)², intercept = ȳ − slope·x̄,
    r² = 1 − SS_res / SS_tot with SS_res = Σ(y−ŷ)², SS_tot = Σ(y−ȳ)² (r² = 1 when SS_tot = 0 and the fit is
    exact). Units: slope in [y]/[x], intercept in [y].
    """
    if len(xs) != len(ys):
        raise ValueError(f"least_squares: {len(xs)} x values but {len(ys)} y values")
    n = len(xs)
    if n < 2:
        raise ValueError(f"least_squares: need at least 2 points, got {n}")
    x_mean = math.fsum(xs) / n
    y_mean = math.fsum(ys) / n
    sxx = math.fsum((x - x_mean) ** 2 for x in xs)
    if sxx == 0:
        raise ValueError("least_squares: all x values are equal; the slope is undefined")
    sxy = math.fsum((x - x_mean) * (y - y_mean) for x, y in zip(xs, ys, strict=True))
    slope = sxy / sxx
    intercept = y_mean - slope * x_mean
    ss_res = math.fsum((y - (slope * x + intercept)) ** 2 for x, y in zip(xs, ys, strict=True))
    ss_tot = math.fsum((y - y_mean) ** 2 for y in ys)
    r2 = 1.0 - ss_res / ss_tot if ss_tot > 0 else 1.0
    return LinearFit(slope=slope, intercept=intercept, r2=r2, n=n)


def chord_slope(x_lo: float, y_lo: float, x_hi: float, y_hi: float) -> float:
    """Slope of the chord between two points, (y_hi − y_lo) ÷ (x_hi − x_lo), units [y]/[x]: the average growth
    from one end to the other. Not ``least_squares``' slope: that one fits every point in between and weighs
    the far ones most; the two agree only when the points lie on a line. So "ms per extra request" is two
    numbers with two names: concurrency_depth's ``step_marginal_ms_per_request`` (the chord from concurrency 1
    to the highest) and engines' ``itl_marginal_ms_per_request`` (the fitted slope)."""
    if x_hi == x_lo:
        raise ValueError(f"chord_slope: both ends at x = {x_lo}; the slope is undefined")
    return (y_hi - y_lo) / (x_hi - x_lo)


def error_pct(measured: float, theory: float) -> float:
    """Relative error of a measurement against theory: (measured − theory) / theory · 100, in %."""
    if theory == 0:
        raise ValueError("error_pct: theory is zero; a relative error is undefined")
    return (measured - theory) / theory * 100.0


def loglog_interp(x: float, xs: Sequence[float], ys: Sequence[float]) -> float:
    """Value at x of the piecewise-linear curve through (log xᵢ, log yᵢ), i.e. a power law between
    neighbours: y = y₀ · (x/x₀)^(log(y₁/y₀)/log(x₁/x₀)). xs strictly increasing, all values > 0;
    x outside [x₀, xₙ] raises (no extrapolation)."""
    _check_loglog(xs, ys)
    if x <= 0:
        raise ValueError(f"loglog_interp: x must be > 0, got {x}")
    if x < xs[0] or x > xs[-1]:
        raise ValueError(f"loglog_interp: x = {x} outside [{xs[0]}, {xs[-1]}]")
    for i in range(len(xs) - 1):
        x0, x1 = xs[i], xs[i + 1]
        if x0 <= x <= x1:
            y0, y1 = ys[i], ys[i + 1]
            t = math.log(x / x0) / math.log(x1 / x0)
            return math.exp(math.log(y0) + t * math.log(y1 / y0))
    return ys[-1]


def _check_loglog(xs: Sequence[float], ys: Sequence[float]) -> None:
    if len(xs) != len(ys) or len(xs) < 1:
        raise ValueError("log–log curve: need equally many x and y values, at least one")
    if any(v <= 0 for v in xs) or any(v <= 0 for v in ys):
        raise ValueError("log–log curve: all values must be > 0")
    if any(b <= a for a, b in zip(xs, xs[1:], strict=False)):
        raise ValueError("log–log curve: x values must be strictly increasing")


def loglog_crossings(xs: Sequence[float], ya: Sequence[float], yb: Sequence[float]) -> list[float]:
    """The x values where two curves sampled at the same xs cross, each segment a power law
    (log–log linear). On a segment where d = log(ya/yb) changes sign from d₀ to d₁, the crossing is
    log x* = log x₀ + d₀/(d₀ − d₁) · log(x₁/x₀). A point where d = 0 exactly counts once."""
    _check_loglog(xs, ya)
    _check_loglog(xs, yb)
    d = [math.log(a / b) for a, b in zip(ya, yb, strict=True)]
    out: list[float] = []
    for i in range(len(xs)):
        if d[i] == 0 and (not out or out[-1] != xs[i]):
            out.append(float(xs[i]))
    for i in range(len(xs) - 1):
        d0, d1 = d[i], d[i + 1]
        if d0 * d1 < 0:
            t = d0 / (d0 - d1)
            out.append(math.exp(math.log(xs[i]) + t * math.log(xs[i + 1] / xs[i])))
    return sorted(out)


def knee(
    xs: Sequence[float], p50: Sequence[float], p99: Sequence[float], factor: float = 2.0
) -> float | None:
    """The lowest x whose p99 exceeds factor × its p50 (p99 > factor · p50); None when no point does.
    xs need not be sorted."""
    hits = [x for x, a, b in zip(xs, p50, p99, strict=True) if b > factor * a]
    return min(hits) if hits else None


def pareto_front(cost: Sequence[float], gain: Sequence[float]) -> list[int]:
    """Indices of the points not dominated when cost should be low and gain high, ordered by cost
    ascending. A point is dominated when another has cost ≤ and gain ≥ with at least one strict.
    Ties (same cost and gain) keep the first index."""
    order = sorted(range(len(cost)), key=lambda i: (cost[i], -gain[i], i))
    front: list[int] = []
    best_gain = -math.inf
    for i in order:
        if gain[i] > best_gain:
            front.append(i)
            best_gain = gain[i]
    return front


@dataclass(frozen=True)
class BudgetPick:
    """What a cost budget buys on a Pareto curve: the best measured point within budget."""

    budget: float
    index: int | None  # index into the input points; None when no point fits the budget
    cost: float | None
    gain: float | None


def best_within_budget(cost: Sequence[float], gain: Sequence[float], budget: float) -> BudgetPick:
    """The measured point with the highest gain among those with cost < budget (strict: "p99 TTFT < X");
    budget = inf means no limit. Ties in gain go to the lower cost."""
    fits = [i for i in range(len(cost)) if cost[i] < budget]
    if not fits:
        return BudgetPick(budget=budget, index=None, cost=None, gain=None)
    i = max(fits, key=lambda j: (gain[j], -cost[j], -j))
    return BudgetPick(budget=budget, index=i, cost=cost[i], gain=gain[i])


def envelope_gain(budget: float, front_cost: Sequence[float], front_gain: Sequence[float]) -> float | None:
    """The gain reachable at a cost budget on a Pareto front (cost ascending, gain ascending):
    None below the cheapest point, log–log interpolation between front points (a concurrency between
    two measured ones is assumed to behave as a power law), and the best gain beyond the last point."""
    if budget < front_cost[0]:
        return None
    if budget >= front_cost[-1]:
        return float(front_gain[-1])
    return loglog_interp(budget, front_cost, front_gain)


def envelope_crossings(
    a_cost: Sequence[float], a_gain: Sequence[float], b_cost: Sequence[float], b_gain: Sequence[float]
) -> list[float]:
    """Budgets where the better of two Pareto envelopes (see ``envelope_gain``) changes.

    Both envelopes are power laws between their breakpoints and flat after their last point, so on
    the merged breakpoint grid log(gain_a/gain_b) is linear in log budget inside each interval and
    its zero is found exactly (``loglog_crossings`` on the two-point segment). Below the cheaper
    curve's first point only one engine is available; that change is not a crossing."""
    grid = sorted(set(a_cost) | set(b_cost))
    lo = max(a_cost[0], b_cost[0])
    grid = [g for g in grid if g >= lo]
    ga: list[float] = []
    gb: list[float] = []
    for g in grid:
        a, b = envelope_gain(g, a_cost, a_gain), envelope_gain(g, b_cost, b_gain)
        assert a is not None and b is not None  # the grid starts at both fronts' cheapest point: never below
        ga.append(a)
        gb.append(b)
    out: list[float] = []
    for i in range(len(grid) - 1):
        seg = loglog_crossings([grid[i], grid[i + 1]], [ga[i], ga[i + 1]], [gb[i], gb[i + 1]])
        out.extend(seg)
    if len(grid) == 1 and ga[0] == gb[0]:
        out.append(grid[0])
    # a crossing exactly on a grid point is reported by both neighbouring segments
    dedup: list[float] = []
    for x in sorted(out):
        if not dedup or not math.isclose(x, dedup[-1], rel_tol=1e-12):
            dedup.append(x)
    return dedup


@dataclass(frozen=True)
class PlaneFit:
    """y ≈ intercept + b1 · x1 + b2 · x2, fitted by ordinary least squares over n points."""

    intercept: float
    b1: float
    b2: float
    r2: float
    n: int

    def predict(self, x1: float, x2: float) -> float:
        """ŷ = intercept + b1 · x1 + b2 · x2 (units of y)."""
        return self.intercept + self.b1 * x1 + self.b2 * x2


def least_squares_plane(x1: Sequence[float], x2: Sequence[float], ys: Sequence[float]) -> PlaneFit:
    """Ordinary least squares with two regressors and an intercept: the normal equations on the centred
    values, [Sx1x1 Sx1x2; Sx1x2 Sx2x2] · [b1 b2] = [Sx1y Sx2y] (Sab = Σ(a−ā)(b−b̄)), solved by Cramer's rule;
    intercept = ȳ − b1·x̄1 − b2·x̄2; r² = 1 − SS_res / SS_tot as in ``least_squares``. Needs n ≥ 3 and the
    two regressors not collinear. Units: b1 in [y]/[x1], b2 in [y]/[x2], intercept in [y]."""
    n = len(ys)
    if not len(x1) == len(x2) == n:
        raise ValueError(f"least_squares_plane: {len(x1)}, {len(x2)} and {n} values")
    if n < 3:
        raise ValueError(f"least_squares_plane: need at least 3 points, got {n}")
    m1, m2, my = math.fsum(x1) / n, math.fsum(x2) / n, math.fsum(ys) / n
    d1, d2, dy = [a - m1 for a in x1], [b - m2 for b in x2], [y - my for y in ys]

    def s(a: Sequence[float], b: Sequence[float]) -> float:
        return math.fsum(p * q for p, q in zip(a, b, strict=True))

    s11, s22, s12, s1y, s2y = s(d1, d1), s(d2, d2), s(d1, d2), s(d1, dy), s(d2, dy)
    det = s11 * s22 - s12 * s12
    if det <= 1e-12 * max(s11 * s22, 1e-300):
        raise ValueError("least_squares_plane: the two regressors are collinear; the fit is undefined")
    b1 = (s1y * s22 - s2y * s12) / det
    b2 = (s2y * s11 - s1y * s12) / det
    intercept = my - b1 * m1 - b2 * m2
    ss_res = math.fsum((y - (intercept + b1 * a + b2 * b)) ** 2 for a, b, y in zip(x1, x2, ys, strict=True))
    ss_tot = math.fsum(v * v for v in dy)
    r2 = 1.0 - ss_res / ss_tot if ss_tot > 0 else 1.0
    return PlaneFit(intercept=intercept, b1=b1, b2=b2, r2=r2, n=n)
