"""The length sweep second by second: vLLM's FLOPs counter differenced between consecutive 1 Hz samples gives
the FLOP/s of each second. A second that mostly ran a prefill sits near the card's peak, a second of pure
decode far below it; the reference study states the plateau of the first, the floor of the second and the
highest second. Split: a second at ≥ half the datasheet peak counts as a prefill second, one below a quarter
as a decode second (the seconds between mix both and are left out).

Keys: ``<round>.length.vllm.<metric>`` (imported campaigns), ``runs.<run>.length.<metric>`` (ours).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

from analysis.core import findings as fnd
from analysis.core.keys import At
from analysis.core.windows import window_indices
from analysis.loading.campaign import BenchPoint
from analysis.reconcile import Context, Section, SectionInput, engine_at

PREFILL_SHARE, DECODE_SHARE = 0.5, 0.25  # of the datasheet peak: the split between the two kinds of second


def per_second_flops(ts: Sequence[float], flops: Sequence[float], idx: range) -> list[float]:
    """FLOP/s of each sampling interval inside a window: Δflops ÷ Δt between consecutive samples (intervals
    with a missing sample, a non-positive Δt or a counter that went down left out)."""
    out = []
    for i in idx:
        if i == 0:
            continue
        dt, df = ts[i] - ts[i - 1], flops[i] - flops[i - 1]
        if dt > 0 and df >= 0 and not (math.isnan(df) or math.isnan(dt)):
            out.append(df / dt)
    return out


def _at(p: BenchPoint) -> At:
    if p.run.own:
        return At(level="run", run=p.run.name, engine="vllm", topic="length")
    return engine_at(p.run.round, "vllm", topic="length")


def _rates(ctx: Context, pts: list[BenchPoint]) -> list[float]:
    rates: list[float] = []
    for p in pts:
        w = ctx.window(p)
        if w is None or p.run.name not in ctx.sampler_series:
            continue
        ts, cols = ctx.sampler_series[p.run.name]
        if "flops" in cols:
            rates += per_second_flops(ts, cols["flops"], window_indices(ts, w.window))
    return rates


def run(s: SectionInput) -> Section:
    campaign, ctx, th = s.campaign, s.ctx, s.th
    findings: list[fnd.Finding] = []
    peak = th.gpu.bf16_flops_per_s if th.gpu else None
    runs = {p.run.name: p.run for p in campaign.points(engine="vllm", test_kind="length_sweep")}
    for name in sorted(runs):
        pts = [p for p in campaign.points(engine="vllm", test_kind="length_sweep") if p.run.name == name]
        pts = [p for p in pts if not p.warmup]
        rates = _rates(ctx, pts)
        if not peak or len(rates) < 3 or not pts[0].run.counter_source:
            continue
        at, src = _at(pts[0]), [pts[0].run.cite(pts[0].run.counter_source)] + list(th.gpu_source)
        prefill = [r for r in rates if r >= PREFILL_SHARE * peak]
        decode = [r for r in rates if r < DECODE_SHARE * peak]
        findings.append(
            fnd.measured(
                at("per_second_mfu_max_pct"), max(rates) / peak * 100.0, "%", src, seconds=len(rates)
            )
        )
        if prefill:
            findings.append(
                fnd.measured(
                    at("prefill_seconds_tflops_p50"),
                    statistics.median(prefill) / 1e12,
                    "TFLOP/s",
                    src,
                    seconds=len(prefill),
                )
            )
        if decode:
            findings.append(
                fnd.measured(
                    at("decode_seconds_mfu_p50_pct"),
                    statistics.median(decode) / peak * 100,
                    "%",
                    src,
                    seconds=len(decode),
                )
            )
    return Section(name="flops_phases", findings=findings)
