"""The Finding record and the deterministic writers."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from analysis import findings as fnd
from analysis import labels_zh as zh


def test_measured_against_theory_within_and_outside_tolerance():
    ok = fnd.measured(
        "round2.kv_pool_tokens_log", 120064, "tokens", ["a.log:36"], theory=120024.0, tolerance_pct=0.1
    )
    # (120064 − 120024) / 120024 = 40 / 120024 = 0.0333 %
    assert ok.error_pct == pytest.approx(40 / 120024 * 100)
    assert ok.status == "ok"
    bad = fnd.measured("x.ratio", 2.7, "ratio", [], theory=3.2, tolerance_pct=10)
    assert bad.status == "mismatch" and bad.error_pct == pytest.approx(-15.625)


def test_theory_without_tolerance_is_refused():
    with pytest.raises(ValueError):
        fnd.measured("x.y", 1.0, "ratio", [], theory=2.0)


def test_not_available_needs_reason_and_keys_are_snake_case():
    na = fnd.not_available("round1.kv_fit_slope", "tokens/token", "no_sampler_csv", "Round1 kept no CSV")
    assert na.to_json()["status"] == "n/a" and na.to_json()["value"] is None
    assert na.reason in zh.REASONS
    with pytest.raises(ValueError):
        fnd.Finding(key="Round1.Bad-Key", value=1, unit="")
    with pytest.raises(ValueError):
        fnd.Finding(key="a.b", value=None, unit="", status="n/a")


def test_dumps_is_deterministic_and_rounds_floats():
    a = fnd.dumps({"b": 0.1 + 0.2, "a": [1, 2.0], "c": float("nan")})
    assert a == fnd.dumps({"c": float("nan"), "a": [1, 2.0], "b": 0.30000000000000004})
    d = json.loads(a)
    assert list(d) == ["a", "b", "c"]
    assert d["b"] == 0.3 and d["c"] is None


def test_finding_set_refuses_duplicates_and_sorts(tmp_path):
    s = fnd.FindingSet()
    s.add(fnd.measured("z.k", 1, "count", ["f:1"]), fnd.measured("a.k", 2, "count", ["f:2"]))
    with pytest.raises(ValueError):
        s.add(fnd.measured("a.k", 3, "count", []))
    fnd.write_findings(tmp_path / "f.json", s)
    assert list(json.loads((tmp_path / "f.json").read_text())) == ["a.k", "z.k"]


def test_write_table_fixed_format(tmp_path):
    fnd.write_table(tmp_path / "t.csv", pd.DataFrame({"x": [2, 1], "y": [1 / 3, 2.5]}), sort_by=["x"])
    assert (tmp_path / "t.csv").read_text() == "x,y\n1,2.5\n2,0.3333333333\n"


def test_labels_number_formatting():
    assert zh.fmt_int(120064) == "120,064"
    assert zh.fmt_num(1404.6621, 2) == "1,404.66"
    assert zh.fmt_pct(12.345) == "12.3%"
    assert zh.fmt_pct(-15.52, 1, signed=True) == "-15.5%"
    assert zh.fmt_sig(0.015827, 3) == "0.0158"
    assert zh.fmt_value(120064, "tokens") == "120,064 token"
