"""Where our reading of a campaign differs from a first reading of the same files: the findings the
differences page needs that no other section states. Both read tables other sections wrote (the pipeline runs
this after them).

- ``ttft_growth_queue_share_pct``: of the mean TTFT's growth from the lowest to the highest concurrency of a
  sweep, the share that is queueing (vLLM's queue histogram), beside the shares of prefill and the remainder;
  "TTFT's growth is almost all queueing" holds only where this is near 100 %.
- ``p99_itl_repeat_max_spread_pct``: two sweeps of one engine and format in one round of an imported
  campaign at the same concurrencies (a repeat): the largest relative spread of their p99 ITL, and where — one
  run's p99 does not stand for both.
"""

from __future__ import annotations

import pandas as pd

from analysis import findings as fnd
from analysis.reconcile import Section, engine_at

SWEEP = "concurrency_sweep"


def growth_share_pct(part_lo_ms: float, part_hi_ms: float, total_lo_ms: float, total_hi_ms: float) -> float:
    """One part's share of a total's growth, %: (part_hi − part_lo) ÷ (total_hi − total_lo) × 100."""
    return (part_hi_ms - part_lo_ms) / (total_hi_ms - total_lo_ms) * 100.0


def spread_pct(values: list[float]) -> float:
    """Relative spread of repeated measurements, %: (max − min) ÷ mean × 100."""
    return (max(values) - min(values)) / (sum(values) / len(values)) * 100.0


def _ttft_growth(anatomy: pd.DataFrame) -> list[fnd.Finding]:
    if anatomy.empty or "queue" not in set(anatomy["part"]):
        return []
    d = anatomy[
        (anatomy["test_kind"] == SWEEP) & ~anatomy["warmup"].astype(bool) & anatomy["gate_ok"].astype(bool)
    ]
    out = []
    for (rnd, engine, test), g in d.groupby(["round", "engine", "test"], dropna=False, sort=True):
        parts = g.pivot_table(index="concurrency", columns="part", values="ms", aggfunc="first")
        ttft = g.groupby("concurrency")["mean_ttft_ms"].first()
        if "queue" not in parts or len(parts) < 2:
            continue
        lo, hi = parts.index.min(), parts.index.max()
        if ttft[hi] <= ttft[lo]:
            continue
        share = {p: growth_share_pct(parts.at[lo, p], parts.at[hi, p], ttft[lo], ttft[hi]) for p in parts}
        rnd_ = None if pd.isna(rnd) or rnd == "" else str(rnd)
        at = engine_at(rnd_, str(engine), topic="differences")
        out.append(
            fnd.measured(
                at("ttft_growth_queue_share_pct"),
                share["queue"],
                "%",
                [],
                detail=f"{test}: Δ mean queue time ÷ Δ mean TTFT between concurrency {lo} and {hi} "
                "(ttft_anatomy: vLLM's queue and prefill histograms, the remainder by subtraction)",
                sweep=str(test),
                concurrency_low=int(lo),
                concurrency_high=int(hi),
                ttft_low_ms=float(ttft[lo]),
                ttft_high_ms=float(ttft[hi]),
                queue_high_ms=float(parts.at[hi, "queue"]),
                prefill_low_ms=float(parts.at[lo, "prefill"]),
                prefill_high_ms=float(parts.at[hi, "prefill"]),
                prefill_share_pct=share.get("prefill"),
                remainder_share_pct=share.get("remainder"),
            )
        )
    return out


def _p99_itl_repeats(points: pd.DataFrame) -> list[fnd.Finding]:
    # a round's sweeps of one engine and format are repeats of one protocol; our own campaigns have no rounds,
    # and their sweeps of one engine differ by a knob (experiments), so they are not compared here
    d = points[(points["test_kind"] == SWEEP) & ~points["warmup"].astype(bool)].dropna(subset=["p99_itl_ms"])
    d = d[d["round"].fillna("").astype(str) != ""]
    out = []
    for (rnd, engine, _fmt), g in d.groupby(["round", "engine", "weight_format"], dropna=False, sort=True):
        if g["test"].nunique() < 2:
            continue
        spreads = {
            int(c): (spread_pct(list(h["p99_itl_ms"])), dict(zip(h["test"], h["p99_itl_ms"], strict=True)))
            for c, h in g.groupby("concurrency")
            if h["test"].nunique() == len(h) >= 2
        }
        if not spreads:
            continue
        c = max(spreads, key=lambda k: spreads[k][0])
        rnd_ = None if pd.isna(rnd) or rnd == "" else str(rnd)
        at = engine_at(rnd_, str(engine), topic="differences")
        files = [str(f) for f in g[g["concurrency"] == c]["file"]] if "file" in g else []
        out.append(
            fnd.measured(
                at("p99_itl_repeat_max_spread_pct"),
                spreads[c][0],
                "%",
                files,
                detail="repeated sweeps of one engine in one round: the largest (max − min) ÷ mean of their "
                "p99 ITL at one concurrency",
                concurrency=c,
                p99_itl_ms_by_test={str(k): float(v) for k, v in sorted(spreads[c][1].items())},
            )
        )
    return out


def run(tables: dict[str, pd.DataFrame]) -> Section:
    found = []
    if "ttft_anatomy" in tables:
        found += _ttft_growth(tables["ttft_anatomy"])
    if "points" in tables and "p99_itl_ms" in tables["points"]:
        found += _p99_itl_repeats(tables["points"])
    return Section(name="differences", findings=found)
