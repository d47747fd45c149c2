"""The one KV-pool tolerance both pool checks apply (imported runs in reconcile.capacity.kv, ours in
reconcile.capacity.own), on hand-checkable numbers."""

from __future__ import annotations

import pytest

from analysis.core import theory
from analysis.reconcile.capacity import flag, pool


def test_logged_gib_tolerance_by_hand():
    # Qwen2.5-7B, bf16 KV: 28 layers × 4 KV heads × 128 × 2 (K, V) × 2 bytes = 57344 bytes/token. A pool
    # logged as 2.50 GiB is anything in [2.495, 2.505) GiB: floor(2.495·2^30 ÷ (16 × 57344)) = 2919 blocks
    # to floor(2.505·2^30 ÷ 917504) = 2931 blocks of 16 tokens
    assert theory.vllm_tokens_range_for_logged_gib(2.5, 57344, 16) == (2919 * 16, 2931 * 16)
    # half of those 192 tokens, against the theory's floor(2.5·2^30 ÷ 57344) = 46811 tokens
    assert theory.kv_pool_tokens(2.5 * 2**30, 57344) == 46811
    assert pool.logged_gib_tolerance_pct(2.5, 57344, 16, 46811) == pytest.approx(96 / 46811 * 100)
    assert pool.half_range_pct(46704, 46896, 46811) == pytest.approx(0.20508, abs=1e-5)
    # a maximum concurrency printed as 3.27 stands for 3.265..3.275
    assert pool.half_unit_pct(3.27) == pytest.approx(0.005 / 3.27 * 100)


def test_server_flag_last_wins():
    # the engines take the last value given, in either spelling
    assert flag(["-c", "8192", "-np", "4", "--ctx-size=4096"], "-c", "--ctx-size") == "4096"
    assert flag(["-np", "4"], "-c", "--ctx-size") is None
