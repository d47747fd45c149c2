"""The Finding type (written by the analysis, read back by the report), its address and key, the deterministic
writers, and the one labels + formatting module."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from analysis.core import findings as fnd
from analysis.core import labels_zh as zh
from analysis.core.keys import At, series_id, slug
from analysis.reconcile.engines.selection import bytes_reason

R2 = At(round="round2")


def test_measured_against_theory_within_and_outside_tolerance():
    ok = fnd.measured(
        R2("kv_pool_tokens_log"), 120064, "tokens", ["a.log:36"], theory=120024.0, tolerance_pct=0.1
    )
    # (120064 − 120024) / 120024 = 40 / 120024 = 0.0333 %
    assert ok.error_pct == pytest.approx(40 / 120024 * 100)
    assert ok.status == "ok" and ok.key == "round2.kv_pool_tokens_log"
    bad = fnd.measured(At(metric="step_ratio"), 2.7, "ratio", [], theory=3.2, tolerance_pct=10)
    assert bad.status == "mismatch" and bad.error_pct == pytest.approx(-15.625)


def test_theory_without_tolerance_is_refused():
    with pytest.raises(ValueError):
        fnd.measured(At(metric="y"), 1.0, "ratio", [], theory=2.0)


def test_not_available_needs_reason_and_missing_data_is_never_a_value():
    na = fnd.not_available(
        At(round="round1", metric="kv_fit_slope"), "", "no_sampler_csv", "Round1 kept no CSV"
    )
    assert na.to_json()["status"] == "n/a" and na.to_json()["value"] is None
    assert na.reason in zh.REASONS
    with pytest.raises(ValueError):  # n/a without its reason
        fnd.Finding(at=At(metric="b"), value=None, unit="", status="n/a")
    with pytest.raises(ValueError):  # a missing value that claims to be a measurement
        fnd.Finding(at=At(metric="b"), value=None, unit="", status="ok")
    with pytest.raises(ValueError):  # not snake_case
        fnd.Finding(at=At(metric="Bad-Key"), value=1, unit="")


def test_keys_are_made_from_fields_one_layout():
    """Every scope the analysis writes, and the id it gets (findings.json keys the pages have always used)."""
    assert At(topic="model", metric="params_total").key == "model.params_total"
    assert At(round="round2", level="engine", engine="vllm", metric="knee_concurrency").key == (
        "round2.vllm.knee_concurrency"
    )
    assert At(round="round2", topic="selection", level="engine", engine="vllm", metric="best").key == (
        "round2.selection.vllm.best"
    )
    run = At(level="run", run="llamacpp-f16", engine="llamacpp", weight_format="fp16", topic="overload")
    assert run("preemptions").key == "runs.llamacpp_f16.overload.preemptions"
    assert run.series == "llamacpp_fp16"  # engine + format make the cross-campaign series id
    q = At(topic="quantization", level="engine", engine="llamacpp", formats=("fp16", "q4_k_m"))
    assert q("step_ratio").key == "quantization.llamacpp.fp16_over_q4_k_m.step_ratio"
    assert At(round="round2", topic="windows", test="01-02-perf-test")("order_matches_sweep_log").key == (
        "round2.windows.01_02_perf_test.order_matches_sweep_log"
    )
    pair = At(cross=True, campaign="rtx4090-qwen2.5-7b", versus="h200", level="series", series="vllm_bf16")
    assert (
        pair("single_stream_speedup").key
        == "comparison.rtx4090_qwen2_5_7b__vs__h200.vllm_bf16.single_stream_speedup"
    )
    assert q.with_(cross=True, campaign="h200")("step_ratio").key == (
        "comparison.h200.quantization.llamacpp.fp16_over_q4_k_m.step_ratio"
    )
    with pytest.raises(ValueError):  # an engine-level finding must name its engine
        At(level="engine", metric="x")
    assert (
        slug("rtx4090-qwen2.5-7b") == "rtx4090_qwen2_5_7b"
        and series_id("llamacpp", "q4_k_m") == "llamacpp_q4_k_m"
    )


def test_written_findings_read_back_as_the_same_type_and_are_selected_by_fields(tmp_path):
    s = fnd.FindingSet()
    s.add(
        fnd.measured(
            R2.with_(level="engine", engine="vllm", weight_format="bf16")("knee_concurrency"),
            8,
            "requests",
            ["f:1"],
        ),
        fnd.measured(
            At(level="run", run="llamacpp-f16", engine="llamacpp")("knee_concurrency"),
            16,
            "requests",
            ["f:2"],
        ),
        fnd.measured(R2.with_(topic="overload")("preemptions"), 38, "count", ["f:3"], sampler_rows=[3, 9]),
    )
    fnd.write_findings(tmp_path / "f.json", s)
    raw = json.loads((tmp_path / "f.json").read_text())
    assert raw["round2.vllm.knee_concurrency"]["engine"] == "vllm"  # the fields sit beside the value
    back = fnd.FindingSet.from_json(raw)
    assert back.to_json() == s.to_json()
    assert back.find(metric="knee_concurrency", engine="vllm").value == 8
    assert back.find(metric="knee_concurrency", run="llamacpp-f16").value == 16
    assert back.find(metric="preemptions") is None  # topic always counts: `preemptions` lives under overload
    assert back.find(metric="preemptions", topic="overload").extra == {"sampler_rows": [3, 9]}
    with pytest.raises(LookupError):  # two findings answer: the query is ambiguous, never a silent pick
        back.find(metric="knee_concurrency")
    raw["round2.vllm.knee_concurrency"]["engine"] = "llamacpp"  # fields that no longer make the key
    with pytest.raises(ValueError, match="make the key"):
        fnd.FindingSet.from_json(raw)


def test_extra_fields_may_not_shadow_the_record():
    with pytest.raises(ValueError, match="collide"):
        fnd.measured(At(metric="x"), 1, "count", [], run="other")


def test_dumps_is_deterministic_and_rounds_floats():
    a = fnd.dumps({"b": 0.1 + 0.2, "a": [1, 2.0], "c": float("nan")})
    assert a == fnd.dumps({"c": float("nan"), "a": [1, 2.0], "b": 0.30000000000000004})
    d = json.loads(a)
    assert list(d) == ["a", "b", "c"]
    assert d["b"] == 0.3 and d["c"] is None


def test_finding_set_refuses_duplicates_and_sorts(tmp_path):
    s = fnd.FindingSet()
    s.add(
        fnd.measured(At(topic="z", metric="k"), 1, "count", ["f:1"]),
        fnd.measured(At(topic="a", metric="k"), 2, "count", ["f:2"]),
    )
    with pytest.raises(ValueError):
        s.add(fnd.measured(At(topic="a", metric="k"), 3, "count", []))
    fnd.write_findings(tmp_path / "f.json", s)
    assert list(json.loads((tmp_path / "f.json").read_text())) == ["a.k", "z.k"]


def test_write_table_fixed_format(tmp_path):
    fnd.write_table(tmp_path / "t.csv", pd.DataFrame({"x": [2, 1], "y": [1 / 3, 2.5]}), sort_by=["x"])
    assert (tmp_path / "t.csv").read_text() == "x,y\n1,2.5\n2,0.3333333333\n"


# -- the one labels + formatting module
# ------------------------------------------------------------------------


def test_numbers_thousands_separators_and_precision():
    assert zh.fmt_int(120064) == "120,064"
    assert zh.fmt_num(1404.6621, 2) == "1,404.66"
    assert zh.fmt_num(12345.6) == "12,346"
    assert zh.fmt_num(0.015827) == "0.0158"
    assert zh.fmt_num(120064) == "120,064"  # an integer prints exactly, whatever its size
    assert zh.fmt_num(-0.0001, 2) == "0.00"  # no "-0.00"
    assert zh.fmt_num(None) == "—" and zh.fmt_num(float("nan")) == "—"  # a gap, never 0


def test_percent_one_rule_everywhere():
    """0.0145 % is 0.015 % in a table, in prose and as a theory value: small shares keep two digits."""
    assert zh.fmt_pct(12.345) == "12.3%"
    assert zh.fmt_pct(0.4567) == "0.46%"
    assert zh.fmt_pct(0.0145) == zh.fmt_value(0.0145, "%") == zh.cell_text("share_pct", 0.0145) == "0.015%"
    assert zh.fmt_signed_pct(-0.4) == "−0.40%" and zh.fmt_signed_pct(3.21) == "+3.2%"
    # float noise of an exact agreement reads as 0, not as 0.000000000000038 % (issue #19's false precision)
    assert zh.fmt_signed_pct(3.8e-14) == zh.fmt_pct(1.1e-14) == "0.0%" and zh.fmt_pct(1.2e-4) == "0.00012%"
    # headline ratios at reader precision: the reference's 22× / 215× / 4.4×, never 214.9×
    assert [zh.fmt_times(x) for x in (22.44, 214.9, 4.41, 2.710)] == ["22", "215", "4.4", "2.7"]
    assert zh.fmt_fraction_pct(0.9123) == "91.2%"


def test_bytes_binary_units():
    # 14.19 GiB: 15,231,233,024 / 2**30 = 14.1852... → four significant digits
    assert zh.fmt_bytes(15_231_233_024) == "14.19 GiB"
    assert zh.fmt_bytes(57_344) == "56.00 KiB"  # 57344 / 1024 = 56 exactly
    assert zh.fmt_bytes(512) == "512 B"


def test_finding_values_units_and_no_unit_on_a_plain_number():
    assert zh.fmt_value(120064, "tokens") == "120,064 token"
    assert zh.fmt_value(0.99994, "") == "0.9999"  # R²: no 倍, no unit
    assert zh.fmt_value(4.256e12, "bytes/s") == "4.26 TB/s"
    assert zh.fmt_value(True, "bool") == "是"
    assert (
        zh.fmt_value(["no_preemptions", "03-perf-test/c064"], "list")
        == "非过载测试无抢占、`03-perf-test/c064`"
    )
    assert zh.fmt_value(None, "ms") == "—"


def test_table_cells_formatted_by_column_unit():
    assert zh.cell_text("ttft_ms", 1234.5678) == "1,235"
    assert zh.cell_text("mfu_pct", 41.23) == "41.2%"
    assert zh.cell_text("slope_error_pct", -1.5) == "−1.5%"
    assert zh.cell_text("peak_kv_usage_fraction", 0.5) == "50.0%"
    assert zh.cell_text("weight_bytes", 2**30 * 4.5) == "4.500 GiB"
    assert zh.cell_text("bandwidth_bytes_per_s", 1.008e12) == "1,008 GB/s"
    assert zh.cell_text("kv_bytes_per_token", 57344) == "57,344"
    assert zh.cell_text("round", "round2") == "第二轮"
    assert zh.cell_text("what", "llamacpp_slots") == "llama.cpp 槽数（-np）"
    assert zh.cell_text("test", "03-perf-test") == "03-perf-test"


def test_finding_labels_come_from_fields_never_from_keys():
    f = fnd.measured(
        At(round="round2", level="engine", engine="llamacpp", weight_format="q4_k_m")("knee_concurrency"),
        8,
        "requests",
        [],
    )
    assert zh.finding_label(f) == "llama.cpp（Q4_K_M） · 拐点并发（p99 ITL > 2 × p50）"
    assert zh.finding_label(f, scope=False) == "拐点并发（p99 ITL > 2 × p50）"
    q = fnd.measured(
        At(topic="quantization", level="engine", engine="llamacpp", formats=("fp16", "q4_k_m"))("step_ratio"),
        1.35,
        "ratio",
        [],
    )
    assert zh.finding_label(q) == "llama.cpp · 量化加速：单流解码步时间比（实测 vs 字节之比）（F16 ÷ Q4_K_M）"
    slot = fnd.measured(
        At(topic="overload", run="x", engine="llamacpp")("oversubscription"), 1.4, "ratio", []
    )
    assert "单个槽位" in zh.finding_label(slot)  # llama.cpp's overload is per slot, not a shared pool
    assert zh.value_text(f) == "8 个请求"


def test_single_stream_why_is_decided_in_analysis():
    """The selection page's "why" at one stream: the reference's pair (3.20× the bytes, 2.71× the speed) is
    bytes with the leader farther from its floor; bytes within 5 % are overhead; no byte counts, no reason."""
    assert bytes_reason(3.202, 2.710) == "bytes_farther"
    assert bytes_reason(2.0, 2.4) == "bytes"
    assert bytes_reason(1.03, 1.30) == "overhead"
    assert bytes_reason(None, 2.0) is None
