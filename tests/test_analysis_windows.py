"""Window alignment and counter differences on small hand-made sampler series."""

from __future__ import annotations

from datetime import datetime

import pytest

from analysis.core import windows as w


def test_naive_as_utc():
    assert w.naive_as_utc_epoch_s(datetime(1970, 1, 1, 1, 0, 0)) == 3600


def test_point_window_allows_for_truncated_date():
    win = w.point_window(end_naive_utc_s=1000, duration_s=100, offset_s=3600)
    assert (win.start_s, win.end_s) == (1000 - 3600 - 100, 1000 - 3600 + 1)


def _sampler():
    # 1 Hz samples t = 0..99; active 10..29 and 50..79
    ts = [float(t) for t in range(100)]
    active = [(10 <= t <= 29) or (50 <= t <= 79) for t in range(100)]
    return ts, active


def test_clock_offset_found_from_activity():
    ts, active = _sampler()
    # the client's clock runs one hour ahead of UTC: its naive ends read 3600 s later
    ends = [29 + 3600, 79 + 3600]
    durs = [19, 29]
    est = w.estimate_clock_offset(ends, durs, ts, active)
    assert est.offset_s == 3600
    # at +1 h: window 1 = [10, 30] -> samples 10..30, 20 active 1 idle; window 2 = [50, 80]: 30 active 1 idle
    assert (est.active_in_windows, est.samples_in_windows) == (50, 52)
    assert est.score == 48
    assert est.active_total == 50


def test_clock_offset_zero_when_client_is_utc():
    ts, active = _sampler()
    est = w.estimate_clock_offset([29, 79], [19, 29], ts, active)
    assert est.offset_s == 0


def test_counter_delta_uses_enclosing_samples():
    ts = [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
    cum = [5.0, 5.0, 7.0, 10.0, 12.0, 12.0]
    d = w.counter_delta(ts, cum, w.Window(1.5, 3.5))
    # before = sample at 1 (5), after = sample at 4 (12)
    assert d.delta == 7 and (d.before_ts_s, d.after_ts_s) == (1.0, 4.0)
    assert w.rate_over(d) == pytest.approx(7 / 3)
    assert w.counter_delta(ts, cum, w.Window(-1, 3)).reason == "window_not_enclosed"
    assert w.counter_delta(ts, [5, 5, 1, 1, 1, 1], w.Window(1.5, 3.5)).reason == "counter_reset"


def test_histogram_mean_in_window():
    ts = [0.0, 10.0, 20.0]
    sums = [1.0, 1.0, 4.0]  # 3 s of queue time added …
    cnts = [1.0, 1.0, 7.0]  # … over 6 requests
    m = w.ratio_of_deltas(
        w.counter_delta(ts, sums, w.Window(5, 15)), w.counter_delta(ts, cnts, w.Window(5, 15))
    )
    assert m == pytest.approx(0.5)


def test_gauge_stats_and_activity_span():
    ts, active = _sampler()
    vals = [float(t) for t in range(100)]
    g = w.gauge_stats(ts, vals, w.Window(10, 12))
    assert (g.mean, g.max, g.n) == (11, 12, 3)
    span = w.activity_span(ts, active, w.Window(48, 82), pad_s=0)
    assert (span.first_active_s, span.last_active_s) == (50, 79)


def test_order_matches():
    assert w.order_matches([8, 1, 2], [8, 1, 2])
    assert not w.order_matches([8, 1, 2], [1, 8, 2])
