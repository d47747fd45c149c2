"""The quantization speed-up: per engine with two or more weight formats, the single-stream step ratio of
each heavier format over the lightest, measured vs the byte ledger (the ratio of the roofline floors)."""

from __future__ import annotations

from typing import Any

from analysis.core import findings as fnd
from analysis.reconcile import engine_at
from analysis.reconcile.roofline.series import SweepSeries, step_ratio, throughput_ratio
from analysis.reconcile.theoryctx import TheoryCtx

# The byte ledger predicts a step ratio only if both formats reach the same share of their roofline.
QUANT_RATIO_TOLERANCE_PCT = 10.0


def quantization_findings(
    series: list[SweepSeries], rows: list[dict[str, Any]], th: TheoryCtx
) -> list[fnd.Finding]:
    """Per engine with two or more weight formats: the single-stream step ratio of each heavier format over
    the lightest, measured vs the byte ledger (ratio of the floors: the bytes each step reads)."""
    out: list[fnd.Finding] = []
    by_engine: dict[str, list[SweepSeries]] = {}
    for s in series:
        if s["weight_format"] and s["weight_bytes_per_step"]:
            by_engine.setdefault(s["engine"], []).append(s)
    for engine in sorted({s["engine"] for s in series}):
        group = by_engine.get(engine, [])
        fmts = sorted({s["weight_format"] or "" for s in group})
        if len(fmts) < 2:
            out.append(
                fnd.not_available(
                    engine_at(None, engine, topic="quantization")("step_ratio"),
                    "ratio",
                    "no_second_format",
                    f"{engine}: one weight format only ({', '.join(fmts) or 'unknown'})",
                )
            )
            continue
        lightest = min(group, key=_bytes_per_step)
        # one ratio per format: a campaign may hold several runs of one (repeats, an experiment's arms)
        done: set[str | None] = set()
        for heavy in sorted(group, key=lambda s: (-_bytes_per_step(s), s["series"])):
            if heavy is lightest or heavy["weight_format"] in done | {lightest["weight_format"]}:
                continue
            done.add(heavy["weight_format"])
            out.append(_step_ratio_finding(engine, heavy, lightest, rows, th))
    return out


def _bytes_per_step(s: SweepSeries) -> float:
    """The weight bytes a step of the series reads (set on every series a quantization group holds)."""
    return s["weight_bytes_per_step"] or 0.0


def _step_ratio_finding(
    engine: str, heavy: SweepSeries, lightest: SweepSeries, rows: list[dict[str, Any]], th: TheoryCtx
) -> fnd.Finding:
    """The heavier format's p50 ITL ÷ the lightest's at their lowest common concurrency, against the ratio of
    the bytes each step reads; the ratios at every common concurrency beside it."""
    key = engine_at(None, engine, topic="quantization")(
        "step_ratio", formats=(heavy["weight_format"], lightest["weight_format"])
    )
    hr = {r["concurrency"]: r for r in rows if r["series"] == heavy["series"]}
    lr = {r["concurrency"]: r for r in rows if r["series"] == lightest["series"]}
    common = sorted(set(hr) & set(lr))
    if not common:
        return fnd.not_available(key, "ratio", "no_concurrency_1", "no concurrency measured in both runs")
    c = common[0]
    h, lo = hr[c], lr[c]
    meas = step_ratio(h["p50_itl_ms"], lo["p50_itl_ms"])
    theo = (
        h["bytes_per_step"] / lo["bytes_per_step"]
        if h.get("bytes_per_step") and lo.get("bytes_per_step")
        else None
    )
    return fnd.measured(
        key,
        meas,
        "ratio",
        [h["source"], lo["source"], heavy["format_source"], lightest["format_source"], *th.model_source],
        theory=theo,
        tolerance_pct=QUANT_RATIO_TOLERANCE_PCT if theo is not None else None,
        concurrency=c,
        weight_bytes_ratio=_bytes_per_step(heavy) / _bytes_per_step(lightest),
        throughput_ratio_by_concurrency={
            str(int(x)): throughput_ratio(
                lr[x]["output_throughput_tokens_per_s"], hr[x]["output_throughput_tokens_per_s"]
            )
            for x in common
            if hr[x]["output_throughput_tokens_per_s"]
        },
        gap_direction=None if theo is None else ("below" if meas < theo else "above"),
        # measured ÷ predicted ratio = the lighter format's achievement ÷ the heavier's
        achievement_pct={
            heavy["weight_format"]: h.get("achievement_datasheet_pct"),
            lightest["weight_format"]: lo.get("achievement_datasheet_pct"),
        },
        itl_ratio_by_concurrency={
            str(int(x)): step_ratio(hr[x]["p50_itl_ms"], lr[x]["p50_itl_ms"]) for x in common
        },
        detail=f"p50 ITL {heavy['weight_format']} ÷ p50 ITL {lightest['weight_format']} at "
        f"concurrency {c}; theory: ratio of the bytes each step reads (weights + KV), "
        "i.e. of the roofline floors",
    )
