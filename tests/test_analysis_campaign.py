"""The analysis on the real reference campaign, imported into a temporary store the way a user would.

Numbers are checked against independent computations from the raw files (the json/csv modules and the
model's config numbers by hand), not against the code's own intermediate output.
"""

from __future__ import annotations

import csv
import json
import math
from datetime import UTC, datetime
from pathlib import Path

import pytest

from analysis.pipeline.analyze import analyze
from collector.protocol.importer import import_results
from tests.seed import SEED

CAMPAIGN = "rtx4090-qwen2.5-7b"
pytestmark = pytest.mark.skipif(not SEED.is_dir(), reason="reference campaign not available")

# Qwen2.5-7B: 2 (K,V) × 28 layers × 4 KV heads × 128 head_dim × 2 bytes (bf16)
KV_BYTES_PER_TOKEN = 2 * 28 * 4 * 128 * 2


@pytest.fixture(scope="module")
def out(tmp_path_factory, reference_raw) -> Path:
    out = tmp_path_factory.mktemp("out")
    lines = list(analyze([reference_raw], out, None))
    assert len(lines) == 1 and CAMPAIGN in lines[0]
    return out / CAMPAIGN


@pytest.fixture(scope="module")
def findings(out) -> dict:
    return json.loads((out / "findings.json").read_text())


def _csv(path: Path) -> list[dict]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


REQUIRED = [
    "{r}.vllm.knee_concurrency",
    "{r}.llamacpp.knee_concurrency",
    "{r}.kv_pool_gib_log",
    "{r}.kv_pool_tokens_log",
    "{r}.max_concurrency_log",
    "{r}.kv_pool_tokens_theory",
    "{r}.max_concurrency_theory",
    "{r}.kv_fit_slope",
    "{r}.kv_fit_intercept",
    "{r}.kv_fit_r2",
    "{r}.overload.oversubscription",
    "{r}.overload.output_tokens_complete",
    "{r}.overload.ttft_queue_share_pct",
    "{r}.single_stream_step_ratio",
    "{r}.vllm.roofline_achievement_pct",
    "{r}.llamacpp.roofline_achievement_pct",
    "{r}.selection.boundary_p99_ttft_ms",
    "{r}.gates.all_passed",
    "{r}.gates.points_failed",
    "{r}.windows.client_clock_offset_s",
]


def test_every_named_key_exists_for_both_rounds(findings):
    for r in ("round1", "round2"):
        for k in REQUIRED:
            key = k.format(r=r)
            assert key in findings, key
            f = findings[key]
            assert f["status"] in ("ok", "mismatch", "n/a")
            if f["status"] == "n/a":
                assert f["reason"] and f["detail"], key
            else:
                assert f["value"] is not None and f["sources"], key
    assert "reproducibility.max_abs_throughput_delta_pct" in findings


def test_round1_has_no_sampler_and_says_so(findings):
    for k in (
        "round1.kv_fit_slope",
        "round1.overload.ttft_queue_share_pct",
        "round1.windows.client_clock_offset_s",
    ):
        assert findings[k]["status"] == "n/a" and findings[k]["reason"] == "no_sampler_csv"


def test_sources_name_real_files(findings):
    for key, f in findings.items():
        for s in f["sources"]:
            rel = s.split(":", 1)[0]
            if rel.startswith("analysis/"):
                continue
            assert (SEED / rel).is_file(), (key, s)


def test_kv_pool_against_hand_theory(findings):
    # Round 2 logged "Available KV cache memory: 6.41 GiB" and "GPU KV cache size: 120,064 tokens"
    f = findings["round2.kv_pool_tokens_log"]
    assert f["value"] == 120064
    assert f["theory"] == math.floor(6.41 * 2**30 / KV_BYTES_PER_TOKEN)
    # the log's GiB has two decimals: ±0.005 GiB = ±93.6 tokens, so 40 tokens of error is within it
    assert abs(f["value"] - f["theory"]) <= 0.005 * 2**30 / KV_BYTES_PER_TOKEN
    assert f["status"] == "ok"
    assert findings["round1.kv_pool_tokens_theory"]["value"] == math.floor(4.64 * 2**30 / KV_BYTES_PER_TOKEN)
    # vLLM: blocks = floor(bytes / (16 × 57344)), concurrency = blocks / (8192 / 16)
    blocks = math.floor(6.41 * 2**30 / (16 * KV_BYTES_PER_TOKEN))
    assert findings["round2.max_concurrency_theory"]["value"] == pytest.approx(blocks / 512)


def test_throughput_times_duration_is_token_total(out):
    rows = _csv(out / "tables" / "points.csv")
    assert len(rows) == 47  # every bench JSON of the campaign is a point
    for row in rows:
        path = SEED / row["file"]
        d = json.loads(path.read_text())
        assert float(row["total_output_tokens"]) == d["total_output_tokens"]
        assert d["output_throughput"] * d["duration"] == pytest.approx(d["total_output_tokens"], rel=1e-9)
        assert float(row["output_throughput_tokens_per_s"]) == pytest.approx(d["output_throughput"], rel=1e-9)


def test_clock_offset_is_zero_and_windows_hold_the_activity(findings, out):
    assert findings["round2.windows.client_clock_offset_s"]["value"] == 0
    # independently: c001's window from its JSON, read as UTC, against the CSV's running column
    d = json.loads((SEED / "Round2/01-02-perf-test/vllm_c001.json").read_text())
    end = datetime.strptime(d["date"], "%Y%m%d-%H%M%S").replace(tzinfo=UTC).timestamp()
    start = end - d["duration"]
    rows = _csv(SEED / "Round2/01-02-perf-test/metrics_sweep.csv")
    active = [
        float(r["ts"])
        for r in rows
        if float(r["running"]) + float(r["waiting"]) > 0 and start - 10 <= float(r["ts"]) <= end + 10
    ]
    assert active and start - 1.5 <= active[0] and active[-1] <= end + 1.5
    assert findings["round2.windows.max_abs_end_lag_s"]["value"] < 2.0


def test_overload_preemptions_from_csv(findings):
    d = json.loads((SEED / "Round2/04-perf-test/stress.json").read_text())
    end = datetime.strptime(d["date"], "%Y%m%d-%H%M%S").replace(tzinfo=UTC).timestamp() + 1
    start = end - 1 - d["duration"]
    rows = _csv(SEED / "Round2/04-perf-test/metrics_sweep.csv")
    before = [r for r in rows if float(r["ts"]) <= start][-1]
    after = [r for r in rows if float(r["ts"]) >= end][0]
    n = float(after["preemptions"]) - float(before["preemptions"])
    assert findings["round2.overload.preemptions"]["value"] == n > 0
    # 64 × (6144 + 2048) tokens of demand over the 120,064-token pool
    assert findings["round2.overload.oversubscription"]["value"] == pytest.approx(64 * 8192 / 120064)
    assert findings["round2.overload.output_tokens_complete"]["value"] is True
    q = (float(after["queue_sum"]) - float(before["queue_sum"])) / (
        float(after["queue_cnt"]) - float(before["queue_cnt"])
    )
    assert findings["round2.overload.ttft_queue_share_pct"]["value"] == pytest.approx(
        q * 1000 / d["mean_ttft_ms"] * 100
    )


def test_flops_counter_matches_theory(findings):
    f = findings["round2.vllm.flops_per_output_token_gflop"]
    assert f["status"] == "ok" and abs(f["error_pct"]) < 1


def test_kv_fit_is_linear_with_unit_slope(findings):
    assert findings["round2.kv_fit_r2"]["value"] > 0.999
    assert findings["round2.kv_fit_slope"]["value"] == pytest.approx(1.0, abs=0.05)


def test_single_stream_ratio_from_the_jsons(findings):
    v = json.loads((SEED / "Round2/01-02-perf-test/vllm_c001.json").read_text())
    ll = json.loads((SEED / "Round2/05-perf-test/llamacpp_c001.json").read_text())
    assert findings["round2.single_stream_step_ratio"]["value"] == pytest.approx(
        v["p50_itl_ms"] / ll["p50_itl_ms"]
    )


def test_knee_by_hand(findings):
    rows = []
    for c in (1, 2, 4, 8, 16, 32, 64):
        d = json.loads((SEED / f"Round2/01-02-perf-test/vllm_c{c:03d}.json").read_text())
        rows.append((c, d["p50_itl_ms"], d["p99_itl_ms"]))
    expected = min(c for c, p50, p99 in rows if p99 > 2 * p50)
    assert findings["round2.vllm.knee_concurrency"]["value"] == expected


def test_failed_points_are_flagged_not_dropped(findings, out):
    assert "05-perf-test/llamacpp_c32" in findings["round1.gates.points_failed"]["value"]
    rows = {(r["round"], r["point"]): r for r in _csv(out / "tables" / "points.csv")}
    assert rows[("round1", "llamacpp_c32")]["gate_ok"] == "False"
    assert "no_failures" in rows[("round1", "llamacpp_c32")]["gate_failures"]


def test_output_is_byte_identical(out, tmp_path):
    raw = tmp_path / "raw"
    list(import_results(SEED, CAMPAIGN, raw))
    again = tmp_path / "out"
    list(analyze([raw], again, [CAMPAIGN]))
    a = sorted(p.relative_to(out) for p in out.rglob("*") if p.is_file())
    b = sorted(p.relative_to(again / CAMPAIGN) for p in (again / CAMPAIGN).rglob("*") if p.is_file())
    assert a == b and len(a) > 20
    for rel in a:
        assert (out / rel).read_bytes() == (again / CAMPAIGN / rel).read_bytes(), rel


def test_figures_carry_chinese_titles(out):
    for spec_path in (out / "figures").glob("*.vl.json"):
        spec = json.loads(spec_path.read_text())
        text = json.dumps(spec, ensure_ascii=False)
        assert any("\u4e00" <= ch <= "\u9fff" for ch in text), spec_path.name


def test_unknown_campaign_is_a_one_line_error(tmp_path):
    from collector.raw.errors import AnatomyError

    raw = tmp_path / "raw"  # --out beside the raw root, never inside it (refused since issue #20)
    raw.mkdir()
    with pytest.raises(AnatomyError, match="nope"):
        list(analyze([raw], tmp_path / "o", ["nope"]))
