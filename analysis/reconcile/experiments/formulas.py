"""The experiments' pure formulas: a mean over repeats, the repeat spread, differences and when they are
distinguishable, the KV buffer and capacity from the block formats, the byte ledger's step change, vLLM's
lock-step preemption wave, and the verdict rule (see the package docstring)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from analysis.core import theory

MIB = 2**20
GIB = 2**30
INF = math.inf
# llama.cpp prints buffer sizes with two decimals
LOG_MIB_RESOLUTION = 0.005
VERDICTS = ("confirmed", "refuted", "inconclusive")


def mean(values: Sequence[float]) -> float:
    """An arm's value at a point: the arithmetic mean over its repeats (units of the metric)."""
    return math.fsum(values) / len(values)


def repeat_spread(values: Sequence[float]) -> float | None:
    """The repeat spread of one arm at one point: max − min over its runs (units of the metric); None for one
    run."""
    return max(values) - min(values) if len(values) > 1 else None


def spread_pct(spread: float, base: float) -> float:
    """A spread relative to a value, %: spread ÷ base × 100."""
    return spread / base * 100.0


def difference(treatment: float, baseline: float) -> float:
    """Treatment − baseline (units of the metric)."""
    return treatment - baseline


def difference_pct(treatment: float, baseline: float) -> float:
    """(treatment − baseline) ÷ baseline × 100, %."""
    return (treatment - baseline) / baseline * 100.0


def distinguishable(delta: float, spread: float | None) -> bool | None:
    """A difference is distinguishable when it is larger than the spread: |Δ| > s; None without a spread."""
    return None if spread is None else abs(delta) > spread


def consecutive_runs(ids: Sequence[int]) -> int:
    """Maximal runs of consecutive integers in a set of slot ids: {0,1,2, 60,61, 63} → 3."""
    s = sorted(set(ids))
    return (1 + sum(1 for a, b in zip(s, s[1:], strict=False) if b != a + 1)) if s else 0


def kv_buffer_mib(n_ctx_tokens: int, kv_bytes_per_token: float) -> float:
    """llama.cpp's KV buffer, MiB = −c (cells, all slots) × KV bytes per token (all layers, K + V) ÷ 2^20."""
    return n_ctx_tokens * kv_bytes_per_token / MIB


def capacity_tokens(budget_bytes: float, kv_bytes_per_token: float) -> int:
    """Tokens a KV budget holds, tokens = floor(budget bytes ÷ KV bytes per token)."""
    return math.floor(budget_bytes / kv_bytes_per_token)


def ledger_itl_change_ms(
    concurrency: int,
    mean_context: float,
    kv_bytes_per_token: float,
    kv_bytes_per_token_base: float,
    bw: float,
) -> float:
    """The change of a decode step the byte ledger predicts when only the KV bytes per token change, ms:
    concurrency × mean context [tokens] × (bytes/token − baseline bytes/token) ÷ bandwidth [B/s] × 1000."""
    return (
        theory.kv_bytes_read_per_step(kv_bytes_per_token - kv_bytes_per_token_base, concurrency, mean_context)
        / bw
        * 1000.0
    )


def lockstep_preemptions(
    n_blocks: int, block_tokens: int, concurrency: int, input_len: int, output_len: int
) -> tuple[list[int], int]:
    """One lock-step wave of ``concurrency`` equal requests in a vLLM pool of ``n_blocks`` blocks (one is the
    null block, so n − 1 hold KV), each admitted with its prompt and grown a token per step, the newest
    preempted (recompute) when the running ones need one block more than is free: (the output token after
    which each preempted stream stops, in order; the requests still running at the wave's peak).

    With m requests running at context T each, they need m × ceil(T ÷ B) blocks; the next preemption comes at
    T = B × floor((n − 1) ÷ m) + 1, i.e. after output token T − prompt, if T stays within the request's
    largest context (prompt + output − 1; the last token is never cached); then m − 1 requests run on."""
    usable = n_blocks - 1
    peak = input_len + output_len - 1
    stops: list[int] = []
    m = concurrency
    while m > 0:
        t = block_tokens * (usable // m) + 1
        if t > peak:
            break
        stops.append(t - input_len)
        m -= 1
    return stops, m


def demand_over_pool(
    concurrency: int, input_len: int, output_len: int, block_tokens: int, n_blocks: int
) -> float:
    """KV demand of a wave over the pool, ratio = concurrency × ceil((prompt + output − 1) ÷ B) ÷ n blocks."""
    return concurrency * math.ceil((input_len + output_len - 1) / block_tokens) / n_blocks


def log_max_concurrency(pool_tokens: int, tokens_per_request: int) -> float:
    """vLLM's start-up "Maximum concurrency for T tokens per request: X x" = pool tokens ÷ T (it counts the
    null block as usable)."""
    return pool_tokens / tokens_per_request


def stop_tokens(records: Sequence[Any], n: int) -> list[tuple[int, float, int]]:
    """The n streams whose largest gap between two chunks is longest — preempted streams stop for whole
    seconds while the others decode on —: (output tokens received before that gap, the gap's start [mono ns],
    the request's line), sorted by the token count. The count n comes from the server's preemption counter."""
    gaps = []
    for r in records:
        c, k = r.chunk_mono_ns, r.chunk_tokens
        if len(c) < 2:
            continue
        i = max(range(len(c) - 1), key=lambda j: c[j + 1] - c[j])
        gaps.append((c[i + 1] - c[i], sum(k[: i + 1]), c[i], r))
    top = sorted(gaps, key=lambda g: -g[0])[:n]
    return sorted((tokens, start, r.index) for _, tokens, start, r in top)


def share_removed_pct(slope_treatment: float, slope_baseline: float) -> float:
    """Share of the per-stream cost a change removes, %: (1 − slope_treatment ÷ slope_baseline) × 100."""
    return (1.0 - slope_treatment / slope_baseline) * 100.0


def verdict(
    kind: str, m: float, s: float | None, lo: float = -INF, hi: float = INF, value: float | None = None
) -> str:
    """One point's verdict (see the module docstring): the measurement is [m − s, m + s]."""
    if kind == "exact":
        assert value is not None
        return "confirmed" if abs(m - value) <= LOG_MIB_RESOLUTION else "refuted"
    if s is None:
        return "inconclusive"
    a, b = m - s, m + s
    if kind == "bound":
        if lo <= a and b <= hi:
            return "confirmed"
        if b < lo or a > hi:
            return "refuted"
        return "inconclusive"
    assert value is not None
    if not a <= value <= b:
        return "refuted"
    return "inconclusive" if a <= 0.0 <= b else "confirmed"


def combine(verdicts: Sequence[str]) -> str:
    """Several points: refuted if any point refutes, confirmed if every point confirms, else inconclusive."""
    if "refuted" in verdicts:
        return "refuted"
    if verdicts and all(v == "confirmed" for v in verdicts):
        return "confirmed"
    return "inconclusive"
