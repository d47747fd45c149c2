"""Percentiles configurable at analysis time (issue #14 item 5): `collector analyze --metric-percentiles`
(vllm bench serve's name) flows through analysis.core.metrics (the one definition) into the per-point tables;
p50/p90/p99 — what the pages answer with — stay what they were whatever the set."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from analysis.core import metrics
from analysis.loading.campaign import load_campaign
from analysis.pipeline.analyze import gated_context
from analysis.reconcile import concurrency
from analysis.reconcile.theoryctx import build as build_theory
from tests.by_hand import request_lines, ttft_ms
from tests.seed import SEED

CPU = Path(__file__).resolve().parents[1] / "raw" / "cpu-tiny-qwen2"
REF = "rtx4090-qwen2.5-7b"


def test_parse_percentiles():
    assert metrics.parse_percentiles("99,50, 90,99.9") == (50.0, 90.0, 99.0, 99.9)
    assert [metrics.percentile_name(q) for q in metrics.DEFAULT_PERCENTILES] == [
        "p50", "p90", "p95", "p99", "p99.9",
    ]  # fmt: skip
    for bad in ("50,x", "0", "101", ""):
        with pytest.raises(metrics.PercentileError, match="--metric-percentiles"):
            metrics.parse_percentiles(bad)


@pytest.mark.skipif(not CPU.is_dir(), reason="the CPU smoke campaign is not committed in raw/")
def test_configured_percentiles_by_hand_and_the_fixed_ones_unchanged():
    """p75 and p99.9 of one llama.cpp sweep point's TTFT, worked out here from requests.jsonl with numpy's
    linear percentile; p50/p90/p99 equal under any set; the points table carries the set's columns."""
    lines = request_lines(CPU / "llamacpp")
    point = next(o["point"] for o in lines if o["phase_kind"] == "concurrency" and o["concurrency"] == 8)
    ttfts = [t for o in lines if o["point"] == point and (t := ttft_ms(o)) is not None]
    mine = load_campaign([CPU.parent], CPU.name, percentiles=(75.0, 99.9))
    default = load_campaign([CPU.parent], CPU.name)
    assert default.percentiles == metrics.DEFAULT_PERCENTILES
    p = next(p for p in mine.points(engine="llamacpp") if p.label == point)
    d = next(p for p in default.points(engine="llamacpp") if p.label == point)
    assert p.result.ttft.p75_ms == pytest.approx(float(np.percentile(ttfts, 75)), rel=1e-12)
    assert p.result.ttft.p999_ms == pytest.approx(float(np.percentile(ttfts, 99.9)), rel=1e-12)
    assert p.result.ttft.p95_ms is None and d.result.ttft.p95_ms is not None
    for s in ("p50", "p90", "p99"):
        for m in ("ttft", "tpot", "itl", "e2el"):
            assert p.result.stat_ms(s, m) == d.result.stat_ms(s, m)
    points = concurrency.points_frame(mine, gated_context(mine), build_theory(mine))
    assert {"p75_ttft_ms", "p99.9_itl_ms", "p99_ttft_ms", "p90_e2el_ms"} <= set(points.columns)
    assert "p95_ttft_ms" not in points.columns


def test_reference_files_give_only_their_own_percentiles(reference_raw):
    """An imported vllm bench file holds its own percentiles: the evidence table has them from the file and
    leaves the others empty (never a number the file does not hold)."""
    if reference_raw is None:
        pytest.skip("the reference campaign is not beside the checkout")
    ref = load_campaign([reference_raw], REF)
    table = concurrency.percentile_table(ref, gated_context(ref), build_theory(ref))
    assert [c for c in table.columns if c.startswith("p") and c.endswith("_ms")] == [
        "p50_ms", "p90_ms", "p95_ms", "p99_ms", "p99.9_ms",
    ]  # fmt: skip
    ttft = table[table["metric"] == "ttft"]
    assert len(ttft) and ttft["p95_ms"].isna().all() and ttft["p99.9_ms"].isna().all()
    for _, row in ttft.iterrows():  # each row's p99 is its cited file's own p99_ttft_ms
        on_disk = json.loads((SEED / row["file"].split(":")[0]).read_text())
        assert row["p99_ms"] == pytest.approx(on_disk["p99_ttft_ms"], rel=1e-12)
