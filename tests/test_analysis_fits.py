"""The numerical methods on small hand-made inputs whose answers are checked by hand."""

from __future__ import annotations

import math

import pytest

from analysis.core import fits


def test_least_squares_exact_line():
    # y = 3x + 2 through x = 0..3: slope 3, intercept 2, r² 1
    f = fits.least_squares([0, 1, 2, 3], [2, 5, 8, 11])
    assert f.slope == 3 and f.intercept == 2 and f.r2 == 1 and f.n == 4


def test_least_squares_with_noise_by_hand():
    # x̄ = 2, ȳ = 3; Sxy = (-1)(-1)+0+1·1... points (1,2),(2,4),(3,3)
    # Sxx = 2, Sxy = (−1)(−1) + 0·1 + 1·0 = 1 -> slope 0.5, intercept 3 − 1 = 2
    # ŷ = 2.5, 3, 3.5 ; SS_res = 0.25 + 1 + 0.25 = 1.5 ; SS_tot = 1 + 1 + 0 = 2 -> r² = 0.25
    f = fits.least_squares([1, 2, 3], [2, 4, 3])
    assert f.slope == pytest.approx(0.5)
    assert f.intercept == pytest.approx(2.0)
    assert f.r2 == pytest.approx(0.25)
    assert f.predict(4) == pytest.approx(4.0)


def test_least_squares_refuses_degenerate_input():
    with pytest.raises(ValueError):
        fits.least_squares([1], [1])
    with pytest.raises(ValueError):
        fits.least_squares([2, 2, 2], [1, 2, 3])


def test_error_pct():
    assert fits.error_pct(110, 100) == pytest.approx(10)
    assert fits.error_pct(90, 100) == pytest.approx(-10)


def test_loglog_interp_is_a_power_law_between_points():
    # y = x² sampled at 1 and 4: at 2 the power law gives 4 (linear interpolation would give 6)
    assert fits.loglog_interp(2, [1, 4], [1, 16]) == pytest.approx(4)
    assert fits.loglog_interp(4, [1, 4, 16], [1, 16, 16]) == pytest.approx(16)
    assert fits.loglog_interp(8, [1, 4, 16], [1, 16, 16]) == pytest.approx(16)
    with pytest.raises(ValueError):
        fits.loglog_interp(32, [1, 4], [1, 16])


def test_loglog_crossing_of_two_power_laws():
    # a = 8 · x^0 ; b = x^1.5 on [1, 16]: b hits 8 at x = 4
    xs = [1, 16]
    assert fits.loglog_crossings(xs, [8, 8], [1, 64]) == [pytest.approx(4)]
    assert fits.loglog_crossings([1, 2], [1, 1], [2, 2]) == []


def test_knee_is_lowest_concurrency_with_p99_over_twice_p50():
    xs = [16, 1, 4, 8, 32]
    p50 = [17, 16, 16, 16, 20]
    p99 = [179, 16.5, 17, 99, 190]
    assert fits.knee(xs, p50, p99) == 8
    assert fits.knee([1, 2], [10, 10], [20, 20]) is None  # exactly 2× is not a knee


def test_pareto_front_drops_dominated_points():
    cost = [100, 200, 150, 400, 300]
    gain = [60, 110, 50, 400, 400]
    # (150, 50) dominated by (100, 60); (400, 400) dominated by (300, 400)
    assert fits.pareto_front(cost, gain) == [0, 1, 4]


def test_best_within_budget_is_strict():
    cost = [100, 200, 400]
    gain = [60, 110, 400]
    assert fits.best_within_budget(cost, gain, 200).index == 0
    assert fits.best_within_budget(cost, gain, 201).index == 1
    assert fits.best_within_budget(cost, gain, math.inf).index == 2
    assert fits.best_within_budget(cost, gain, 50).index is None


def test_envelope_crossing_by_hand():
    # engine a: (1, 10) -> (100, 100): gain = 10·b^0.5 ; flat 100 after b = 100
    # engine b: (1, 40) -> (10, 40) -> flat 40: a overtakes b where 10·b^0.5 = 40, b = 16
    assert fits.envelope_gain(16, [1, 100], [10, 100]) == pytest.approx(40)
    assert fits.envelope_gain(0.5, [1, 100], [10, 100]) is None
    assert fits.envelope_gain(1000, [1, 100], [10, 100]) == 100
    assert fits.envelope_crossings([1, 100], [10, 100], [1, 10], [40, 40]) == [pytest.approx(16)]
