"""The overload run's cadence as the reference study states it: the mean interval between preemptions from
the first to the last (the counter's steps on the sampler's clock), the KV pool's highest use, the samples
and iterations of the window, the wall time its iterations take at the typical step, and the wall time the
recomputation of preempted requests costs.

Keys: ``<round>.overload.<metric>`` (imported campaigns; our vLLM overload runs: ``runs.<run>.overload.``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from analysis.core import findings as fnd
from analysis.core.keys import At
from analysis.core.windows import PointWindowData, window_indices
from analysis.loading.campaign import BenchPoint
from analysis.reconcile import Section, SectionInput


def step_times(ts: Sequence[float], counter: Sequence[float], idx: range) -> list[tuple[float, float]]:
    """Where a cumulative counter rose inside a window: (sample time s, increase) per rising sample."""
    out = []
    prev = None
    for i in idx:
        v = counter[i]
        if math.isnan(v):
            continue
        if prev is not None and v > prev:
            out.append((ts[i], v - prev))
        prev = v
    return out


def mean_interval_s(steps: list[tuple[float, float]]) -> float | None:
    """Mean time between events from the first to the last, s: (last time − first time) ÷ (events − 1); the
    events of one sample share its time. None below two events."""
    n = sum(d for _, d in steps)
    if n < 2:
        return None
    return (steps[-1][0] - steps[0][0]) / (n - 1)


def stolen_share_pct(mean_decode_ms: float, steps: int, p50_step_ms: float) -> float:
    """Share of a request's decode phase not spent on its own typical steps, %: (mean decode time − steps ×
    p50 ITL) ÷ mean decode time × 100 — the time other requests' prefills, recomputation and its own pauses
    took."""
    return (mean_decode_ms - steps * p50_step_ms) / mean_decode_ms * 100.0


# fewer samples than this in the window: its counter deltas say nothing about the run's cadence
MIN_WINDOW_SAMPLES = 10


def recompute_wall_share_pct(preemptions: float, mean_prefill_s: float, duration_s: float) -> float:
    """Share of a run's wall time spent recomputing preempted requests, %: preemptions × the mean prefill
    time of one request in the same window [s] ÷ the run's duration [s] × 100 (each preempted request is
    prefilled once more, at about the cost of its first prefill)."""
    return preemptions * mean_prefill_s / duration_s * 100.0


def _window_totals(at: At, p: BenchPoint, w: PointWindowData, idx: range, src: list[str]) -> list[Any]:
    """Samples and iterations in the window; the wall time its iterations take at the p50 step."""
    out = [
        fnd.measured(
            at("sampler_samples"), len(idx), "count", src, window_s=w.window.end_s - w.window.start_s
        )
    ]
    iters, itl = w.delta("iter_tok_cnt"), p.result.itl.p50_ms
    if iters and itl and p.result.duration_s:
        wall = iters * itl / 1000.0
        out.append(
            fnd.measured(
                at("iterations_at_p50_step_s"),
                wall,
                "s",
                src + [p.cite("median_itl_ms")],
                iterations=iters,
                p50_itl_ms=itl,
                share_of_duration_pct=wall / p.result.duration_s * 100.0,
            )
        )
    return out


def _recompute(at: At, p: BenchPoint, w: PointWindowData, preemptions: float, src: list[str]) -> list[Any]:
    prefill = w.mean_of("prefill_sum", "prefill_cnt")
    if not prefill or not p.result.duration_s:
        return []
    return [
        fnd.measured(
            at("recompute_wall_share_pct"),
            recompute_wall_share_pct(preemptions, prefill, p.result.duration_s),
            "%",
            src + [p.cite("duration")],
            preemptions=preemptions,
            mean_prefill_s=prefill,
            recompute_s=preemptions * prefill,
            duration_s=p.result.duration_s,
        )
    ]


def _stolen(at: At, p: BenchPoint, w: PointWindowData, src: list[str]) -> list[fnd.Finding]:
    dec = w.mean_of("decode_sum", "decode_cnt")
    itl = p.result.itl.p50_ms
    if not dec or not itl or not p.requested_output_len_tokens:
        return []
    steps = p.requested_output_len_tokens - 1
    return [
        fnd.measured(
            at("decode_time_stolen_share_pct"),
            stolen_share_pct(dec * 1000.0, steps, itl),
            "%",
            src + [p.cite("median_itl_ms")],
            mean_decode_ms=dec * 1000.0,
            steps=steps,
        )
    ]


def run(s: SectionInput) -> Section:
    campaign, ctx = s.campaign, s.ctx
    findings: list[fnd.Finding] = []
    for p in campaign.points(engine="vllm", test_kind="overload"):
        w = ctx.window(p)
        if p.warmup or w is None or p.run.name not in ctx.sampler_series:
            continue
        ts, cols = ctx.sampler_series[p.run.name]
        idx = window_indices(ts, w.window)
        at = (
            At(round=p.run.round, topic="overload")
            if not p.run.own
            else At(level="run", run=p.run.name, engine="vllm", topic="overload")
        )
        src = [p.run.cite(p.run.counter_source)] if p.run.counter_source else [p.cite()]
        enough = len(idx) >= MIN_WINDOW_SAMPLES
        findings += _window_totals(at, p, w, idx, src) if enough else []
        if "preemptions" in cols:
            steps = step_times(ts, cols["preemptions"], idx)
            if steps and enough:
                findings += _recompute(at, p, w, sum(d for _, d in steps), src)
            iv = mean_interval_s(steps)
            if iv is not None:
                findings.append(
                    fnd.measured(
                        at("preemption_interval_s"),
                        iv,
                        "s",
                        src,
                        first_s=steps[0][0] - w.window.start_s,
                        last_s=steps[-1][0] - w.window.start_s,
                    )
                )
        findings += _stolen(at, p, w, src)
        kv = [cols["kv_usage"][i] for i in idx if "kv_usage" in cols and not math.isnan(cols["kv_usage"][i])]
        for level in (90, 95):
            if kv:
                share = sum(1 for v in kv if v * 100.0 >= level) / len(kv) * 100.0
                findings.append(fnd.measured(at(f"kv_usage_at_least_{level}_share_pct"), share, "%", src))
        if kv:
            findings.append(
                fnd.measured(
                    at("peak_kv_usage_pct"),
                    max(kv) * 100.0,
                    "%",
                    src,
                    median_pct=sorted(kv)[len(kv) // 2] * 100.0,
                )
            )
    return Section(name="overload_cadence", findings=findings)
