"""An experiment's runs in one campaign: its arms with their runs by repeat, each arm's values at each point
(mean over repeats, repeat spread, the spread borrowed from the repeated arms where an arm ran once), the
difference of two arms at a point, and the per-extra-stream slope of p50 ITL over concurrency.

Numbers: every point's metric comes from ``BenchPoint.result`` — ``analysis.core.metrics.point_result`` over
the
run's requests.jsonl; nothing here computes a percentile."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from analysis.core import fits
from analysis.loading.campaign import BenchPoint, Campaign, RunData
from analysis.reconcile.experiments.formulas import (
    difference,
    difference_pct,
    distinguishable,
    mean,
    repeat_spread,
    spread_pct,
)
from analysis.reconcile.experiments.spec import Arm, Experiment, Target, repeat_of

METRICS = ("p50_itl_ms", "p50_tpot_ms", "output_throughput_tokens_per_s")


def point_metrics(p: BenchPoint) -> dict[str, float | None]:
    """The point's numbers, as analysis.core.metrics computed them (point_result over its requests)."""
    r = p.result
    return {
        "p50_itl_ms": r.itl.p50_ms if r.completed else None,
        "p50_tpot_ms": r.tpot.p50_ms if r.completed else None,
        "output_throughput_tokens_per_s": r.output_throughput_tok_s,
    }


def point_id(p: BenchPoint) -> tuple[str, int, int, int | None]:
    """What makes two runs' points the same point: test kind, concurrency, prompt and requested output
    length."""
    return (
        p.test_kind,
        int(p.concurrency or 0),
        int(round(p.input_len_tokens or 0)),
        p.requested_output_len_tokens,
    )


@dataclass
class ArmRuns:
    """An arm's runs in this campaign, by repeat number, and the plan check."""

    experiment: Experiment
    arm: Arm
    runs: dict[int, RunData] = field(default_factory=dict)
    knob_values: dict[int, str | None] = field(default_factory=dict)

    @property
    def first(self) -> RunData:
        return self.runs[min(self.runs)]

    @property
    def plan_ok(self) -> bool:
        return all(v == self.arm.value for v in self.knob_values.values())


def arm_runs(campaign: Campaign, exp: Experiment) -> dict[str, ArmRuns]:
    """The experiment's arms with their runs (the rule in the module docstring), by arm run name."""
    out: dict[str, ArmRuns] = {}
    for arm in exp.arms:
        ar = ArmRuns(exp, arm)
        for run in campaign.all_runs:
            k = repeat_of(run.name, arm.run)
            if k is None:
                continue
            ar.runs[k] = run
            plan = run.docs.plan
            ar.knob_values[k] = exp.knob.value(plan) if plan is not None else None
        if ar.runs:
            out[arm.run] = ar
    return out


@dataclass
class ArmPoint:
    """One arm at one point: its runs' values per metric."""

    experiment: str
    arm: ArmRuns
    pid: tuple[Any, ...]
    points: dict[int, BenchPoint]  # repeat -> point
    values: dict[str, list[float]]

    def value(self, metric: str) -> float | None:
        v = self.values.get(metric) or []
        return mean(v) if v else None

    def spread(self, metric: str) -> float | None:
        v = self.values.get(metric) or []
        return repeat_spread(v) if v else None


class ExpData:
    """One experiment's arms and points in this campaign, with the spread rules."""

    def __init__(self, exp: Experiment, arms: dict[str, ArmRuns]):
        self.exp = exp
        self.arms = arms
        self.at: dict[tuple[str, tuple[Any, ...]], ArmPoint] = {}
        for run_name, ar in arms.items():
            by_pid: dict[tuple[Any, ...], dict[int, BenchPoint]] = {}
            for k, run in ar.runs.items():
                for p in run.points:
                    if not p.warmup:
                        by_pid.setdefault(point_id(p), {})[k] = p
            for pid, pts in by_pid.items():
                vals: dict[str, list[float]] = {}
                for m in METRICS:
                    vs = [point_metrics(pts[k])[m] for k in sorted(pts)]
                    vals[m] = [v for v in vs if v is not None]
                self.at[(run_name, pid)] = ArmPoint(exp.name, ar, pid, pts, vals)

    def point(self, arm: str, pid: tuple[Any, ...]) -> ArmPoint | None:
        return self.at.get((arm, pid))

    def pids(self, arm: str) -> list[tuple[Any, ...]]:
        return sorted(pid for a, pid in self.at if a == arm)

    def find(self, arm: str, t: Target) -> list[tuple[Any, ...]]:
        return [
            pid
            for pid in self.pids(arm)
            if (t.concurrency is None or pid[1] == t.concurrency)
            and (t.input_len is None or pid[2] == t.input_len)
        ]

    def borrowed_pct(self, metric: str, pid: tuple[Any, ...]) -> float | None:
        """The largest relative repeat spread of the experiment's repeated arms at this point, %."""
        pcts = []
        for (_a, q), ap in self.at.items():
            if q != pid:
                continue
            s, v = ap.spread(metric), ap.value(metric)
            if s is not None and v:
                pcts.append(spread_pct(s, v))
        return max(pcts) if pcts else None

    def spread(self, arm: str, pid: tuple[Any, ...], metric: str) -> tuple[float | None, bool]:
        """(absolute spread, borrowed?) of one arm at one point."""
        ap = self.point(arm, pid)
        if ap is None:
            return None, False
        s = ap.spread(metric)
        if s is not None:
            return s, False
        pct, v = self.borrowed_pct(metric, pid), ap.value(metric)
        return (None, False) if pct is None or v is None else (pct / 100.0 * v, True)


def label_point(pid: tuple[Any, ...]) -> dict[str, Any]:
    return {
        "test_kind": pid[0],
        "concurrency": pid[1],
        "input_len_tokens": pid[2],
        "output_len_tokens": pid[3],
    }


@dataclass
class Diff:
    delta: float
    delta_pct: float
    spread: float | None
    spread_pct: float | None
    borrowed: bool
    treatment: ArmPoint
    baseline: ArmPoint

    @property
    def distinguishable(self) -> bool | None:
        return distinguishable(self.delta, self.spread)


def diff(
    e: ExpData, treatment: str, baseline: str, pid: tuple[Any, ...], metric: str = "p50_itl_ms"
) -> Diff | None:
    """Treatment − baseline at one point, with the larger of the two arms' spreads beside it."""
    t, b = e.point(treatment, pid), e.point(baseline, pid)
    tv = t.value(metric) if t is not None else None
    bv = b.value(metric) if b is not None else None
    if t is None or b is None or tv is None or bv is None:
        return None
    st, bt = e.spread(treatment, pid, metric)
    sb, bb = e.spread(baseline, pid, metric)
    spreads = [s for s in (st, sb) if s is not None]
    s = max(spreads) if spreads else None
    return Diff(
        delta=difference(tv, bv),
        delta_pct=difference_pct(tv, bv),
        spread=s,
        spread_pct=spread_pct(s, bv) if s is not None else None,
        borrowed=bt or bb,
        treatment=t,
        baseline=b,
    )


SLOPE_CONCURRENCIES = (8, 16, 32, 64)


def itl_slope(points: Sequence[BenchPoint]) -> fits.LinearFit | None:
    """p50 ITL [ms] against concurrency over c = 8..64 of one run, least squares: the slope is the step time
    each extra stream adds, ms/stream."""
    xs, ys = [], []
    for p in points:
        if p.warmup or p.test_kind != "concurrency_sweep" or p.concurrency not in SLOPE_CONCURRENCIES:
            continue
        v = point_metrics(p)["p50_itl_ms"]
        if v is not None:
            xs.append(float(p.concurrency))
            ys.append(v)
    return fits.least_squares(xs, ys) if len(xs) >= 2 else None


@dataclass
class Slope:
    arm: ArmRuns
    fits: dict[int, fits.LinearFit]

    @property
    def value(self) -> float:
        return mean([f.slope for f in self.fits.values()])

    @property
    def spread(self) -> float | None:
        return repeat_spread([f.slope for f in self.fits.values()])


def slopes(e: ExpData) -> dict[str, Slope]:
    out = {}
    for arm, ar in e.arms.items():
        fs = {k: f for k, run in ar.runs.items() if (f := itl_slope(run.points)) is not None}
        if fs:
            out[arm] = Slope(ar, fs)
    return out


def slope_spread(sl: dict[str, Slope], arm: str) -> tuple[float | None, bool]:
    """An arm's slope spread: its repeats' (max − min), else the largest relative one of the repeated arms."""
    s = sl[arm].spread
    if s is not None:
        return s, False
    pcts = [spread_pct(x.spread, x.value) for x in sl.values() if x.spread is not None and x.value]
    return (max(pcts) / 100.0 * sl[arm].value, True) if pcts else (None, False)
