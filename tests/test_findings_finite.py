"""No NaN or infinity reaches a finding (issue #12): ``measured()`` turns a non-finite value or theory into an
n/a finding that says so, and a Finding built directly with one is a one-line error (an AnatomyError), never a
number in findings.json that is not one nor a traceback."""

from __future__ import annotations

import math

import pytest

from analysis.core import findings as fnd
from analysis.core import labels_zh as zh
from analysis.core.keys import At
from collector.raw.errors import AnatomyError

AT = At(campaign="c", topic="concurrency", metric="itl_ms")


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_measured_non_finite_value_is_na_with_its_reason(value):
    f = fnd.measured(AT, value, "ms", ["bench/p01.json:mean_itl_ms"], detail="mean ITL")
    assert f.status == "n/a" and f.value is None and f.reason in zh.REASONS
    assert f"the computed value is {value!r}, not a finite number (mean ITL)" == f.detail
    assert f.sources == ("bench/p01.json:mean_itl_ms",)
    assert f.to_json()["value"] is None


def test_measured_non_finite_theory_is_na():
    f = fnd.measured(AT, 12.0, "ms", [], theory=math.nan, tolerance_pct=10.0)
    assert f.status == "n/a" and "theory is nan" in f.detail


def test_measured_finite_values_are_untouched():
    f = fnd.measured(AT, 12.0, "ms", [], theory=10.0, tolerance_pct=10.0)
    assert f.status == "mismatch" and f.value == 12.0 and f.error_pct == pytest.approx(20.0)


@pytest.mark.parametrize("field", ["value", "theory", "error_pct", "tolerance_pct"])
def test_a_finding_built_with_nan_is_a_one_line_error(field):
    kwargs = {"value": 1.0, "theory": 1.0, "error_pct": 0.0, "tolerance_pct": 5.0, field: math.nan}
    with pytest.raises(AnatomyError, match=rf"^finding {AT.key}: {field} is nan, not a finite number$"):
        fnd.Finding(at=AT, unit="ms", **kwargs)
