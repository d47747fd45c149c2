"""Aligning sampler rows to benchmark points by time window, and differences of cumulative counters.

A `vllm bench serve` result carries `date` = the client's wall clock when the run ended, to the second
and with no time zone, and `duration` (s). The sampler's `ts` is epoch seconds. The client's zone offset
is not assumed: ``estimate_clock_offset`` finds it from the sampler's own running/waiting activity, and
the analysis records it as a finding.

Conventions: every time here is in seconds; `offset_s` is client wall clock − UTC, so
epoch = (client wall time read as if it were UTC) − offset_s.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

# `date` is truncated to whole seconds, so the true end lies in [date, date + 1 s).
DATE_TRUNCATION_S = 1.0


def naive_as_utc_epoch_s(wall: datetime) -> float:
    """Seconds since the epoch of a zone-less wall-clock time read as if it were UTC (s)."""
    if wall.tzinfo is not None:
        raise ValueError("naive_as_utc_epoch_s: expected a wall time without a zone")
    return wall.replace(tzinfo=UTC).timestamp()


@dataclass(frozen=True)
class Window:
    """A benchmark point's span on the sampler's clock: [start_s, end_s], epoch seconds."""

    start_s: float
    end_s: float

    @property
    def length_s(self) -> float:
        return self.end_s - self.start_s


def point_window(end_naive_utc_s: float, duration_s: float, offset_s: float) -> Window:
    """Window of a point on the epoch clock.

    end_claimed = end_naive_utc_s − offset_s; start = end_claimed − duration_s;
    end = end_claimed + DATE_TRUNCATION_S (the field is truncated to the second). Seconds."""
    end_claimed = end_naive_utc_s - offset_s
    return Window(start_s=end_claimed - duration_s, end_s=end_claimed + DATE_TRUNCATION_S)


@dataclass(frozen=True)
class ClockOffset:
    """The client's zone offset as found from activity: offset_s = client wall − UTC (s)."""

    offset_s: float
    score: int  # active samples inside the windows − idle samples inside them, at offset_s
    active_in_windows: int
    samples_in_windows: int
    active_total: int
    runner_up_offset_s: float | None
    runner_up_score: int | None


def estimate_clock_offset(
    ends_naive_utc_s: Sequence[float],
    durations_s: Sequence[float],
    ts_s: Sequence[float],
    active: Sequence[bool],
    step_s: float = 900.0,
    max_abs_s: float = 14 * 3600.0,
) -> ClockOffset:
    """Pick the zone offset (a multiple of step_s within ±max_abs_s; zones are whole quarter hours)
    whose shifted windows hold the most sampler activity.

    score(offset) = Σ over points of (active samples in window − idle samples in window); the
    highest score wins, ties going to the smaller |offset| (then the negative one). A wrong offset
    puts windows over idle time or outside the sampler's span and scores ≤ 0."""
    if len(ends_naive_utc_s) != len(durations_s):
        raise ValueError("estimate_clock_offset: ends and durations differ in length")
    if len(ts_s) != len(active):
        raise ValueError("estimate_clock_offset: ts and activity differ in length")
    if not ends_naive_utc_s or not ts_s:
        raise ValueError("estimate_clock_offset: need at least one point and one sample")
    n_steps = int(round(max_abs_s / step_s))
    candidates = sorted((k * step_s for k in range(-n_steps, n_steps + 1)), key=lambda o: (abs(o), o))
    scored: list[tuple[int, float, int, int]] = []
    for offset in candidates:
        act_in = 0
        n_in = 0
        for end, dur in zip(ends_naive_utc_s, durations_s, strict=True):
            w = point_window(end, dur, offset)
            lo = bisect.bisect_left(ts_s, w.start_s)
            hi = bisect.bisect_right(ts_s, w.end_s)
            n_in += hi - lo
            act_in += sum(1 for i in range(lo, hi) if active[i])
        scored.append((act_in - (n_in - act_in), offset, act_in, n_in))
    # stable sort keeps the |offset| preference among equal scores
    ranked = sorted(scored, key=lambda s: -s[0])
    best = ranked[0]
    second = next((s for s in ranked[1:]), None)
    return ClockOffset(
        offset_s=best[1],
        score=best[0],
        active_in_windows=best[2],
        samples_in_windows=best[3],
        active_total=sum(1 for a in active if a),
        runner_up_offset_s=second[1] if second else None,
        runner_up_score=second[0] if second else None,
    )


@dataclass(frozen=True)
class ActivitySpan:
    """First and last active sample inside a (padded) window; None when the window saw no activity."""

    first_active_s: float | None
    last_active_s: float | None
    samples: int


def activity_span(
    ts_s: Sequence[float], active: Sequence[bool], window: Window, pad_s: float = 2.0
) -> ActivitySpan:
    """First/last active sample in [start − pad_s, end + pad_s]: the sampler's view of the point (s)."""
    lo = bisect.bisect_left(ts_s, window.start_s - pad_s)
    hi = bisect.bisect_right(ts_s, window.end_s + pad_s)
    hits = [ts_s[i] for i in range(lo, hi) if active[i]]
    return ActivitySpan(
        first_active_s=hits[0] if hits else None, last_active_s=hits[-1] if hits else None, samples=hi - lo
    )


def window_indices(ts_s: Sequence[float], window: Window) -> range:
    """Indices of the samples with start_s ≤ ts ≤ end_s (ts sorted ascending)."""
    return range(bisect.bisect_left(ts_s, window.start_s), bisect.bisect_right(ts_s, window.end_s))


@dataclass(frozen=True)
class CounterDelta:
    """Increase of a cumulative counter across a window, and the two samples it was taken between."""

    delta: float | None  # None when the sampler does not enclose the window or the counter went down
    before_ts_s: float | None
    after_ts_s: float | None
    reason: str | None  # why delta is None: "window_not_enclosed" | "counter_reset"


def counter_delta(ts_s: Sequence[float], values: Sequence[float], window: Window) -> CounterDelta:
    """Δ = value(first sample at or after end_s) − value(last sample at or before start_s).

    The enclosing samples (not the ones inside) are used so that every increment made inside the
    window is counted; the idle gap between benchmark points keeps neighbours out. A negative Δ means
    the server restarted (counters reset) and is refused."""
    i_before = bisect.bisect_right(ts_s, window.start_s) - 1
    i_after = bisect.bisect_left(ts_s, window.end_s)
    if i_before < 0 or i_after >= len(ts_s):
        return CounterDelta(None, None, None, "window_not_enclosed")
    d = values[i_after] - values[i_before]
    if d < 0:
        return CounterDelta(None, ts_s[i_before], ts_s[i_after], "counter_reset")
    return CounterDelta(d, ts_s[i_before], ts_s[i_after], None)


def ratio_of_deltas(num: CounterDelta, den: CounterDelta) -> float | None:
    """Mean per event of a Prometheus histogram over a window: Δsum / Δcount (unit of the sum per
    event); None when either delta is missing or Δcount = 0."""
    if num.delta is None or den.delta is None or den.delta == 0:
        return None
    return num.delta / den.delta


def rate_over(delta: CounterDelta) -> float | None:
    """Average rate of a counter between its enclosing samples: Δvalue / (t_after − t_before), per s."""
    if delta.delta is None or delta.before_ts_s is None or delta.after_ts_s is None:
        return None
    span = delta.after_ts_s - delta.before_ts_s
    return delta.delta / span if span > 0 else None


@dataclass(frozen=True)
class GaugeStats:
    """A gauge's samples inside a window: mean and max over the samples (NaN-free), and how many."""

    mean: float | None
    max: float | None
    n: int


def gauge_stats(ts_s: Sequence[float], values: Sequence[float], window: Window) -> GaugeStats:
    """mean = Σv / n and max over the samples with start_s ≤ ts ≤ end_s (units of the gauge)."""
    vals = [values[i] for i in window_indices(ts_s, window) if not math.isnan(values[i])]
    if not vals:
        return GaugeStats(None, None, 0)
    return GaugeStats(math.fsum(vals) / len(vals), max(vals), len(vals))


def order_matches(marker_order: Sequence[object], date_order: Sequence[object]) -> bool:
    """True when the points sorted by their end time appear in the same order as the sweep log's
    markers (the log is the console of the runs, so it is the ground truth of their order)."""
    return list(marker_order) == list(date_order)


@dataclass(frozen=True)
class PointWindowData:
    """Everything the sampler says about one benchmark point, on its aligned window."""

    window: Window
    activity: ActivitySpan
    deltas: dict[str, CounterDelta]
    gauges: dict[str, GaugeStats]
    first_row: int  # 0-based index of the first sample in the window (the CSV line is row + 2)
    last_row: int  # 0-based index of the last sample in the window

    def delta(self, name: str) -> float | None:
        d = self.deltas.get(name)
        return None if d is None else d.delta

    def mean_of(self, sum_name: str, count_name: str) -> float | None:
        """Δsum / Δcount of a histogram inside the window (unit of the sum per event)."""
        if sum_name not in self.deltas or count_name not in self.deltas:
            return None
        return ratio_of_deltas(self.deltas[sum_name], self.deltas[count_name])

    @property
    def end_lag_s(self) -> float | None:
        """Last active sample − claimed end (s): how the sampler's view lines up with `date`."""
        if self.activity.last_active_s is None:
            return None
        return self.activity.last_active_s - (self.window.end_s - DATE_TRUNCATION_S)


@dataclass(frozen=True)
class PointTiming:
    key: str
    end_naive_utc_s: float
    duration_s: float


def align_points(
    ts_s: Sequence[float],
    columns: Mapping[str, Sequence[float]],
    points: Sequence[PointTiming],
    counters: Sequence[str],
    gauges: Sequence[str],
    activity_columns: Sequence[str] = ("running", "waiting"),
) -> tuple[ClockOffset, dict[str, PointWindowData]]:
    """Find the client's clock offset from activity (running + waiting > 0), then cut every point's
    window and take counter differences and gauge statistics inside it."""
    active = [any(columns[c][i] > 0 for c in activity_columns) for i in range(len(ts_s))]
    est = estimate_clock_offset(
        [p.end_naive_utc_s for p in points], [p.duration_s for p in points], ts_s, active
    )
    out: dict[str, PointWindowData] = {}
    for p in points:
        win = point_window(p.end_naive_utc_s, p.duration_s, est.offset_s)
        idx = window_indices(ts_s, win)
        out[p.key] = PointWindowData(
            window=win,
            activity=activity_span(ts_s, active, win),
            deltas={c: counter_delta(ts_s, columns[c], win) for c in counters if c in columns},
            gauges={g: gauge_stats(ts_s, columns[g], win) for g in gauges if g in columns},
            first_row=idx.start,
            last_row=idx.stop - 1,
        )
    return est, out
