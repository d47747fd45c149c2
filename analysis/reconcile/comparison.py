"""Across campaigns (e.g. the RTX 4090 reference and our H200 campaign): per series (engine + weight
format) the decode step floor vs the measured single-stream step, roofline achievement per concurrency
(datasheet and measured ceilings), the knee, the quantization speed-up, and capacity — each against theory;
and, for every pair of campaigns sharing a series, the single-stream speed-up against the ratio of their
floors (the byte ledger says a step costs bytes ÷ bandwidth, so the same model on a card with k× the
bandwidth should step k× faster, if both reach the same share of their roofline).

Input: every campaign's own analysis (its tables and findings, as written per campaign); nothing is
re-measured. Output (``out/_comparison/``): ``comparison.json`` (findings, the same record as a campaign's
findings.json), ``tables/*.csv``, ``figures/*.vl.json``, ``index.json``.
Findings are addressed with ``cross=True``, their campaign (and, for a pair, ``versus``) and series
(`analysis.core.keys`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import combinations
from typing import Any

import pandas as pd

from analysis.core import findings as fnd
from analysis.core import fits
from analysis.core.findings import FindingSet
from analysis.core.keys import At, series_id

DIR_NAME = "_comparison"
FINDINGS_FILE = "comparison.json"
# Two cards reach different shares of their roofline (kernels, clocks); beyond this the floor ratio fails
# to predict the speed-up and the pair's achievement columns say why.
SPEEDUP_TOLERANCE_PCT = 15.0


@dataclass
class CampaignSummary:
    """What the comparison needs from one analysed campaign."""

    name: str
    tables: dict[str, pd.DataFrame]
    findings: FindingSet
    gpu: str | None  # datasheet key (e.g. "rtx4090", "h200"); None for a CPU campaign
    gpu_display: str | None
    bandwidth_datasheet_bytes_per_s: float | None
    bandwidth_measured_bytes_per_s: float | None
    capacity: list[dict[str, Any]] = field(
        default_factory=list
    )  # per series: measured pool tokens (+ theory)
    model_shape: tuple[Any, ...] | None = (
        None  # (h, I, L, H, K, d, V): pairs compare only the same model shape
    )
    model_name: str | None = None


def speedup(slow_ms: float, fast_ms: float) -> float:
    """How many times faster the second step is, dimensionless: slow step ÷ fast step."""
    return slow_ms / fast_ms


def slower_first(x: CampaignSummary, y: CampaignSummary) -> tuple[str, str]:
    """A pair's order: the card with the lower datasheet bandwidth first (no datasheet, e.g. a CPU, counts as
    slowest), ties by name — so a pair's speed-up reads "fast ÷ slow card", ≥ 1 when the faster card wins."""

    def key(c: CampaignSummary) -> tuple[float, str]:
        return (c.bandwidth_datasheet_bytes_per_s or 0.0, c.name)

    a, b = sorted((x, y), key=key)
    return a.name, b.name


def _latest_series(points: pd.DataFrame) -> pd.DataFrame:
    """One sweep per (engine, weight format): the last round of an imported campaign (its final protocol),
    the first run by name of our own."""
    if not len(points):
        return points
    df = points.copy()
    df["series_key"] = [series_id(e, w) for e, w in zip(df["engine"], df["weight_format"], strict=True)]
    keep = []
    for _key, g in df.groupby("series_key", sort=True):
        rounds = sorted(g["round"].fillna("").unique())
        g = g[g["round"].fillna("") == rounds[-1]]
        first = sorted(g["series"].unique())[0]
        keep.append(g[g["series"] == first])
    return pd.concat(keep, ignore_index=True)


def _str(v: object) -> str | None:
    return v if isinstance(v, str) else None


def _capacity_tolerance(r: dict[str, Any]) -> float:
    """The capacity's own tolerance (vLLM's logged pool is rounded); llama.cpp's slots × n_ctx_slot is
    exact."""
    tol = _num(r.get("capacity_tolerance_pct"))
    return 0.0 if tol is None else tol


def _num(v: Any) -> float | None:
    return None if v is None or (isinstance(v, float) and v != v) else float(v)


def series_rows(c: CampaignSummary) -> list[dict[str, Any]]:
    """Per series of one campaign: the single-stream step, its floors, achievement, knee, peak, capacity."""
    pts = _latest_series(c.tables.get("roofline_points", pd.DataFrame()))
    out: list[dict[str, Any]] = []
    if not len(pts):
        return out
    for key, g in pts.groupby("series_key", sort=True):
        g = g.sort_values("concurrency")
        first = g.iloc[0]
        xs, p50, p99 = g["concurrency"].tolist(), g["p50_itl_ms"].tolist(), g["p99_itl_ms"].tolist()
        ok = [i for i in range(len(xs)) if _num(p50[i]) is not None and _num(p99[i]) is not None]
        knee = fits.knee([xs[i] for i in ok], [p50[i] for i in ok], [p99[i] for i in ok]) if ok else None
        best = g.loc[g["output_throughput_tokens_per_s"].idxmax()]
        row = {
            "campaign": c.name,
            "gpu": c.gpu or "",
            "gpu_display": c.gpu_display or "",
            "series_key": key,
            "series": first["series"],
            "engine": first["engine"],
            "weight_format": first["weight_format"],
            "bandwidth_datasheet_bytes_per_s": c.bandwidth_datasheet_bytes_per_s,
            "bandwidth_measured_bytes_per_s": c.bandwidth_measured_bytes_per_s,
            "single_stream_concurrency": int(first["concurrency"]),
            "single_stream_p50_itl_ms": _num(first["p50_itl_ms"]),
            "floor_datasheet_ms": _num(first.get("floor_datasheet_ms")),
            "floor_measured_ms": _num(first.get("floor_measured_ms")),
            "achievement_datasheet_pct": _num(first.get("achievement_datasheet_pct")),
            "achievement_measured_pct": _num(first.get("achievement_measured_pct")),
            "knee_concurrency": knee,
            "max_concurrency_measured": int(g["concurrency"].max()),
            "peak_output_throughput_tokens_per_s": _num(best["output_throughput_tokens_per_s"]),
            "peak_concurrency": int(best["concurrency"]),
            "source": first["source"],
        }
        cap = next((x for x in c.capacity if x["series_key"] == key), None)
        if cap:
            row.update(
                capacity_tokens=cap.get("tokens"),
                capacity_tokens_theory=cap.get("theory"),
                capacity_tolerance_pct=cap.get("tolerance_pct"),
                capacity_source=cap.get("source"),
            )
        out.append(row)
    return out


def _quant_rows(c: CampaignSummary) -> list[dict[str, Any]]:
    rows = []
    for f in c.findings.select(topic="quantization", metric="step_ratio"):
        if f.engine:
            rows.append(
                {
                    "campaign": c.name,
                    "key": f.key,
                    "engine": f.engine,
                    "heavier_format": f.formats[0] if f.formats else None,
                    "lighter_format": f.formats[1] if f.formats else None,
                    "value": f.value,
                    "theory": f.theory,
                    "error_pct": f.error_pct,
                    "status": f.status,
                    "reason": f.reason or "",
                }
            )
    if rows:
        return rows
    # one format per engine (the reference: vLLM bf16, llama.cpp Q4_K_M): the quantization's byte saving
    # shows across the two engines, in the latest round's single-stream step ratio (engines page, home)
    cross = [f for f in c.findings.select(metric="single_stream_step_ratio") if f.available and f.theory]
    if cross:
        f = max(cross, key=lambda x: x.round or "")
        rows.append(
            {
                "campaign": c.name,
                "key": f.key,
                "engine": "vllm ÷ llamacpp",
                "heavier_format": "bf16",
                "lighter_format": "q4_k_m",
                "value": f.value,
                "theory": f.theory,
                "error_pct": f.error_pct,
                "status": f.status,
                "reason": "",
                "cross_engine": True,
            }
        )
    return rows


def _series_findings(r: dict[str, Any]) -> list[fnd.Finding]:
    """One series of one campaign: its single-stream step, roofline achievement (datasheet and measured
    ceilings), knee, peak throughput and KV capacity."""
    pre = At(
        cross=True,
        campaign=r["campaign"],
        level="series",
        series=r["series_key"],
        engine=r["engine"],
        weight_format=_str(r["weight_format"]),
    )
    src = [f"{r['campaign']}/{r['source']}"]
    out = [
        fnd.measured(
            pre("single_stream_p50_itl_ms"),
            r["single_stream_p50_itl_ms"],
            "ms",
            src,
            concurrency=r["single_stream_concurrency"],
            floor_datasheet_ms=r["floor_datasheet_ms"],
            floor_measured_ms=r["floor_measured_ms"],
            gpu=r["gpu"],
        )
    ]
    for tag, reason in (("datasheet", "no_gpu_datasheet"), ("measured", "no_measured_ceiling")):
        key = pre(
            "roofline_achievement_pct" if tag == "datasheet" else "roofline_achievement_measured_ceiling_pct"
        )
        v = r[f"achievement_{tag}_pct"]
        if v is None:
            why = f"{r['campaign']}: no {tag} bandwidth for a floor"
            out.append(fnd.not_available(key, "%", reason, why, src))
        else:
            floor, bw = r[f"floor_{tag}_ms"], r[f"bandwidth_{tag}_bytes_per_s"]
            out.append(fnd.measured(key, v, "%", src, floor_ms=floor, bandwidth_bytes_per_s=bw))
    if r["knee_concurrency"] is None:
        why = f"no point up to concurrency {r['max_concurrency_measured']} has p99 ITL > 2 × p50"
        out.append(fnd.not_available(pre("knee_concurrency"), "requests", "no_knee", why, src))
    else:
        out.append(fnd.measured(pre("knee_concurrency"), int(r["knee_concurrency"]), "requests", src))
    out.append(
        fnd.measured(
            pre("peak_output_throughput_tokens_per_s"),
            r["peak_output_throughput_tokens_per_s"],
            "tokens/s",
            src,
            concurrency=r["peak_concurrency"],
        )
    )
    if r.get("capacity_tokens") is not None:
        th = r.get("capacity_tokens_theory")
        out.append(
            fnd.measured(
                pre("capacity_tokens"),
                r["capacity_tokens"],
                "tokens",
                [f"{r['campaign']}/{r['capacity_source']}"],
                theory=float(th) if th is not None else None,
                tolerance_pct=_capacity_tolerance(r) if th is not None else None,
                detail="vLLM: logged KV pool tokens; llama.cpp: slots × n_ctx_slot — vs theory",
            )
        )
    return out


def _floor_speedup(ra: dict[str, Any], rb: dict[str, Any], col: str) -> float | None:
    """Two series' roofline floors' ratio (``col``: datasheet or measured ceilings); None unless both."""
    return speedup(ra[col], rb[col]) if ra[col] and rb[col] else None


def _pair(
    a: str, b: str, key: str, ra: dict[str, Any], rb: dict[str, Any]
) -> tuple[fnd.Finding, dict[str, Any]]:
    """One series measured on two campaigns of the same model (``a`` the slower card): the single-stream
    speedup against the ratio of their floors; the finding and the pairs table's row."""
    pre = At(
        cross=True,
        campaign=a,
        versus=b,
        level="series",
        series=key,
        engine=ra["engine"],
        weight_format=_str(ra["weight_format"]),
    )
    meas = speedup(ra["single_stream_p50_itl_ms"], rb["single_stream_p50_itl_ms"])
    th_ds = _floor_speedup(ra, rb, "floor_datasheet_ms")
    th_ms = _floor_speedup(ra, rb, "floor_measured_ms")
    finding = fnd.measured(
        pre("single_stream_speedup"),
        meas,
        "ratio",
        [f"{a}/{ra['source']}", f"{b}/{rb['source']}"],
        theory=th_ds,
        tolerance_pct=SPEEDUP_TOLERANCE_PCT if th_ds is not None else None,
        theory_measured_ceilings=th_ms,
        faster=b if meas > 1 else a,
        detail=f"p50 ITL on {a} ÷ p50 ITL on {b} at the lowest concurrency; theory: the ratio "
        "of their roofline floors (bytes per step ÷ bandwidth), datasheet; measured "
        "ceilings alongside",
    )
    row = {
        "a": a,
        "b": b,
        "series_key": key,
        "speedup_measured": meas,
        "speedup_theory_datasheet": th_ds,
        "speedup_theory_measured_ceilings": th_ms,
        "achievement_datasheet_pct_a": ra["achievement_datasheet_pct"],
        "achievement_datasheet_pct_b": rb["achievement_datasheet_pct"],
    }
    return finding, row


def _pairs(
    summaries: list[CampaignSummary], by: dict[tuple[str, str], dict[str, Any]]
) -> tuple[list[fnd.Finding], list[dict[str, Any]]]:
    """Every series two campaigns of the same model share (a step ratio between different models says
    nothing about the cards)."""
    names = sorted(c.name for c in summaries)
    shape = {c.name: c.model_shape for c in summaries}
    card = {c.name: c for c in summaries}
    found, rows = [], []
    for a, b in (slower_first(card[x], card[y]) for x, y in combinations(names, 2)):
        if shape[a] is None or shape[a] != shape[b]:
            continue
        for key in sorted({k for (cn, k) in by if cn == a} & {k for (cn, k) in by if cn == b}):
            finding, row = _pair(a, b, key, by[(a, key)], by[(b, key)])
            found.append(finding)
            rows.append(row)
    return found, rows


def _quant_findings(c: CampaignSummary, quant: list[dict[str, Any]]) -> list[fnd.Finding]:
    """A campaign's quantization step ratios restated for the comparison (n/a with one format per engine)."""
    own = [q for q in quant if q["campaign"] == c.name]
    if not own:
        at = At(cross=True, campaign=c.name, topic="quantization")("step_ratio")
        return [
            fnd.not_available(
                at, "ratio", "no_second_format", f"{c.name} measured one weight format per engine"
            )
        ]
    out = []
    for q in own:
        f = c.findings[q["key"]]
        qkey = (
            At(cross=True, campaign=c.name, topic="quantization")("step_ratio")
            if q.get("cross_engine")
            else f.at.with_(cross=True, campaign=c.name)
        )
        if f.value is None:
            out.append(fnd.not_available(qkey, "ratio", f.reason or "unknown", f.detail or "", f.sources))
            continue
        out.append(
            fnd.measured(
                qkey,
                f.value,
                "ratio",
                [f"{c.name}/{s}" for s in f.sources],
                theory=f.theory,
                tolerance_pct=f.tolerance_pct,
                detail=f.detail,
                cross_engine=bool(q.get("cross_engine")),
                achievement_pct=f.extra.get("achievement_pct"),
                gap_direction=f.extra.get("gap_direction"),
            )
        )
    return out


def build(summaries: list[CampaignSummary]) -> tuple[dict[str, pd.DataFrame], FindingSet]:
    """Tables and findings of the comparison of two or more analysed campaigns."""
    found = FindingSet()
    series: list[dict[str, Any]] = []
    for c in summaries:
        series += series_rows(c)
    for r in series:
        for f in _series_findings(r):
            found.add(f)
    pair_found, pair_rows = _pairs(summaries, {(r["campaign"], r["series_key"]): r for r in series})
    quant = [q for c in summaries for q in _quant_rows(c)]
    for f in pair_found + [f for c in summaries for f in _quant_findings(c, quant)]:
        found.add(f)
    roof = []
    for c in summaries:
        pts = _latest_series(c.tables.get("roofline_points", pd.DataFrame()))
        if len(pts):
            roof.append(pts.assign(campaign=c.name, gpu=c.gpu or ""))
    tables = {
        "comparison_series": pd.DataFrame(series),
        "comparison_pairs": pd.DataFrame(pair_rows),
        "comparison_roofline": pd.concat(roof, ignore_index=True) if roof else pd.DataFrame(),
        "comparison_quantization": pd.DataFrame(quant),
    }
    return tables, found
