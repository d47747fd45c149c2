"""Where our reading of a campaign differs from a first reading of the same files: the findings the
differences page needs that no other section states. Both read tables other sections wrote (the pipeline runs
this after them).

- ``ttft_growth_queue_share_pct``: of the mean TTFT's growth from the lowest to the highest concurrency of a
  sweep, the share that is queueing (vLLM's queue histogram), beside the shares of prefill and the remainder;
  "TTFT's growth is almost all queueing" holds only where this is near 100 %.
- ``p99_itl_repeat_max_spread_pct``: two sweeps of one engine and format in one round of an imported
  campaign at the same concurrencies (a repeat): the largest relative spread of their p99 ITL, and where — one
  run's p99 does not stand for both.
- ``recommended_concurrency`` (topic operating_point): the highest concurrency of a sweep up to which every
  step up still bought at least half a single stream's throughput per added request
  (``MARGINAL_SHARE_MIN_PCT``); beyond it, more concurrency mostly buys latency. The reference's C=16 is this
  rule's answer on its round 2.
"""

from __future__ import annotations

import pandas as pd

from analysis.core import findings as fnd
from analysis.core.keys import At
from analysis.reconcile import Section, engine_at

SWEEP = "concurrency_sweep"
# a step up in concurrency is worth taking while each added request adds at least this share of one stream
MARGINAL_SHARE_MIN_PCT = 50.0


def growth_share_pct(part_lo_ms: float, part_hi_ms: float, total_lo_ms: float, total_hi_ms: float) -> float:
    """One part's share of a total's growth, %: (part_hi − part_lo) ÷ (total_hi − total_lo) × 100."""
    return (part_hi_ms - part_lo_ms) / (total_hi_ms - total_lo_ms) * 100.0


def spread_pct(values: list[float]) -> float:
    """Relative spread of repeated measurements, %: (max − min) ÷ mean × 100."""
    return (max(values) - min(values)) / (sum(values) / len(values)) * 100.0


def _ttft_growth(anatomy: pd.DataFrame, files: dict[tuple[str, str, int], str]) -> list[fnd.Finding]:
    """``files``: (round, test, concurrency) -> the point's result file, to cite the two points compared."""
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
        cite = [files[k] for k in ((rnd_ or "", str(test), int(c)) for c in (lo, hi)) if k in files]
        out.append(
            fnd.measured(
                at("ttft_growth_queue_share_pct"),
                share["queue"],
                "%",
                cite,
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


def marginal_share_pct(tok_s_lo: float, tok_s_hi: float, c_lo: int, c_hi: int, single_tok_s: float) -> float:
    """Throughput each added request bought, as a share of one stream's, %:
    (tok/s_hi − tok/s_lo) ÷ (c_hi − c_lo) ÷ single-stream tok/s × 100."""
    return (tok_s_hi - tok_s_lo) / (c_hi - c_lo) / single_tok_s * 100.0


def _operating_points(points: pd.DataFrame) -> list[fnd.Finding]:
    d = points[
        (points["test_kind"] == SWEEP) & ~points["warmup"].astype(bool) & points["gate_ok"].astype(bool)
    ]
    out = []
    for (rnd, engine, fmt, test), g in d.groupby(["round", "engine", "weight_format", "test"], dropna=False):
        g = g.dropna(subset=["output_throughput_tokens_per_s"]).sort_values("concurrency")
        if len(g) < 3 or int(g["concurrency"].iloc[0]) != 1:
            continue
        c = [int(x) for x in g["concurrency"]]
        tok = [float(x) for x in g["output_throughput_tokens_per_s"]]
        shares = [marginal_share_pct(tok[i - 1], tok[i], c[i - 1], c[i], tok[0]) for i in range(1, len(c))]
        k = 0
        while k < len(shares) and shares[k] >= MARGINAL_SHARE_MIN_PCT:
            k += 1
        row = g.iloc[k]
        rnd_ = None if pd.isna(rnd) or rnd == "" else str(rnd)
        fmt_ = None if pd.isna(fmt) or fmt == "" else str(fmt)
        at = At(
            level="run",
            round=rnd_,
            run=str(test),
            engine=str(engine),
            weight_format=fmt_,
            topic="operating_point",
        )
        out.append(
            fnd.measured(
                at("recommended_concurrency"),
                c[k],
                "requests",
                [str(f) for f in g["file"].iloc[max(0, k - 1) : k + 2]] if "file" in g else [],
                detail=f"{test}: the highest concurrency up to which every step up bought ≥ "
                f"{MARGINAL_SHARE_MIN_PCT:g} % of a single stream's tok/s per added request",
                sweep=str(test),
                output_tokens_per_s=tok[k],
                p99_ttft_ms=float(row["p99_ttft_ms"]),
                p50_itl_ms=float(row["p50_itl_ms"]),
                marginal_share_pct_to_here=shares[k - 1] if k > 0 else None,
                marginal_share_pct_next=shares[k] if k < len(shares) else None,
                next_concurrency=c[k + 1] if k + 1 < len(c) else None,
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
    pts = tables.get("points", pd.DataFrame())
    files = (
        {
            ("" if pd.isna(r) else str(r), str(t), int(c)): str(f)
            for r, t, c, f in zip(pts["round"], pts["test"], pts["concurrency"], pts["file"], strict=True)
            if c == c
        }
        if {"round", "test", "concurrency", "file"} <= set(pts.columns)
        else {}
    )
    if "ttft_anatomy" in tables:
        found += _ttft_growth(tables["ttft_anatomy"], files)
    if "points" in tables and "p99_itl_ms" in tables["points"]:
        found += _p99_itl_repeats(tables["points"])
        found += _operating_points(tables["points"])
    return Section(name="differences", findings=found)
