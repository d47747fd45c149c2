"""The small formulas of the reconciliations, on hand-checkable numbers."""

from __future__ import annotations

import pytest

from analysis.reconcile import concurrency, engines, gates, kv, overload, ttft


def test_overload_formulas():
    # 64 × (6144 + 2048) = 524288 tokens of demand against a 120064-token pool
    assert overload.oversubscription(64, 6144, 2048, 120064) == pytest.approx(524288 / 120064)
    # 38 preemptions over 128 × 2047 intervals
    assert overload.itl_share_touched_pct(38, 128, 2048) == pytest.approx(38 / 262016 * 100)
    # usage 0.9 -> 0.4 of a 1000-token pool, 2 preemptions: 250 tokens each
    assert overload.tokens_freed(0.9, 0.4, 1000, 2) == pytest.approx(250)


def test_roofline_floor_by_hand():
    # 1000 B of weights + 4 requests × 250 B of KV = 2000 B at 1e6 B/s = 2 ms
    assert engines.roofline_floor_ms(1000, 4, 250, 1e6) == pytest.approx(2.0)
    assert engines.achievement_pct(2.0, 2.5) == pytest.approx(80)
    assert engines.mean_context_tokens(1024, 256) == 1152
    # 10 requests asked for 256 tokens, 2500 came back: 10 short of 2560 -> 2.34375 %
    assert engines.shortfall_pct(2500, 10, 256) == pytest.approx(60 / 2560 * 100)


def test_kv_and_ttft_and_rates():
    assert kv.tokens_in_flight(16, 4096, 256) == 16 * 4352
    assert kv.usage_tokens(0.5, 120064) == 60032
    assert ttft.remainder_ms(100, 10, 80) == 10
    assert ttft.share_pct(25, 200) == 12.5
    assert concurrency.achieved_rate(5e12, 2.0) == 2.5e12
    assert concurrency.utilization_pct(82.6e12, 165.2e12) == pytest.approx(50)
    assert concurrency.tokens_from_throughput(61.5, 10) == 615


def test_gate_predicates():
    assert gates.gate_completed(40, 40) and not gates.gate_completed(320, 312)
    assert gates.gate_output_tokens(10240, 40, 256)
    assert not gates.gate_output_tokens(10238, 40, 256)
