"""TTFT anatomy: per point, mean TTFT split into queue (Δqueue_sum/Δqueue_cnt), prefill
(Δprefill_sum/Δprefill_cnt) and the remainder (frontend, network, detokenize); the overload run's
queue share of TTFT."""

from __future__ import annotations

from typing import Any

import pandas as pd

from analysis.core import findings as fnd
from analysis.core import metrics
from analysis.core.keys import At
from analysis.core.windows import PointWindowData
from analysis.loading.campaign import BenchPoint, iter_points
from analysis.reconcile import Section, SectionInput, overload


def remainder_ms(ttft_ms: float, queue_ms: float, prefill_ms: float) -> float:
    """What the server's histograms do not cover, ms: mean TTFT − mean queue − mean prefill."""
    return ttft_ms - queue_ms - prefill_ms


def llamacpp_prefill_ms(prompt_seconds_delta: float | None, completed: int) -> float | None:
    """llama.cpp's mean prompt processing per request over a point, ms: Δllamacpp:prompt_seconds_total ÷
    completed requests × 1000 (each prompt is evaluated once; waiting for a free slot is not in it)."""
    if prompt_seconds_delta is None or not completed:
        return None
    return prompt_seconds_delta / completed * 1000.0


def share_pct(part: float, whole: float) -> float:
    """part ÷ whole × 100, %."""
    return part / whole * 100.0


def llamacpp_wait_ms(ttft_ms: float, prompt_ms: float) -> float:
    """What of one request's TTFT llama.cpp's own prompt timing does not cover, ms: TTFT − timings.prompt_ms
    (waiting for a slot or for its turn in the prompt batches, plus the first decode step and transport)."""
    return ttft_ms - prompt_ms


# What the waiting in TTFT is, decided from what measured it (the verdict codes labels_zh.PHRASES words):
#   queue          vLLM's queue histogram holds most of TTFT: requests wait for the scheduler (admission
#                  control helps; a faster card only shortens the compute part)
#   compute        vLLM's prefill histogram is the largest part: a faster card shortens it directly
#   outside        neither histogram holds most of TTFT: the time is in the frontend, network, detokenizing
#   batch_prefill  llama.cpp (no queue histogram), every request had a slot at once: the wait beyond a
#                  request's own prompt timing is the other requests' prompts in the same batches — compute
#   slot_or_batch  llama.cpp with more requests than slots (or slots unknown): a slot wait and the batches'
#                  prefill cannot be told apart
MOST_PCT = 50.0  # "most of TTFT": more than half


def histogram_verdict(queue_ms: float, prefill_ms: float | None, ttft_ms: float) -> str:
    """The verdict of a TTFT split by vLLM's queue and prefill histograms: ``queue`` when the queue holds
    more than half of TTFT, else ``compute`` when prefill is the larger of prefill and the remainder, else
    ``outside``."""
    if share_pct(queue_ms, ttft_ms) > MOST_PCT:
        return "queue"
    if prefill_ms is not None and prefill_ms >= remainder_ms(ttft_ms, queue_ms, prefill_ms):
        return "compute"
    return "outside"


def prompt_timing_verdict(concurrency: int | None, slots: int | None) -> str:
    """The verdict of llama.cpp's TTFT − timings.prompt_ms: ``batch_prefill`` when concurrency ≤ slots (no
    request waited for a slot, so the wait is other requests' prompts in the same batches), else
    ``slot_or_batch``."""
    if concurrency is not None and slots and concurrency <= slots:
        return "batch_prefill"
    return "slot_or_batch"


def _llamacpp_queue_share(p: BenchPoint, key: At) -> fnd.Finding | None:
    """llama.cpp has no queue histogram; a collector run keeps each request's `timings.prompt_ms`, so the part
    of TTFT before the server started on the prompt is TTFT − prompt_ms, request by request."""
    rel, log = p.run.requests
    recs = metrics.completed(log.point_records(p.label) if log is not None else [])
    pairs = []
    for r in recs:
        ttft = metrics.ttft_ms(r)
        pm = (r.engine_timings or {}).get("prompt_ms")
        if ttft is not None and isinstance(pm, int | float):
            pairs.append((ttft, float(pm)))
    if not pairs or rel is None:
        return None
    mean_ttft = sum(t for t, _ in pairs) / len(pairs)
    mean_wait = sum(llamacpp_wait_ms(t, pm) for t, pm in pairs) / len(pairs)
    lrel, slog = p.run.server_log
    slots = getattr(slog, "n_slots", None) if slog is not None else None
    return fnd.measured(
        key,
        share_pct(mean_wait, mean_ttft),
        "%",
        [p.run.cite(rel, "engine_timings.prompt_ms"), p.run.cite(rel, "chunk_mono_ns")]
        + (
            [p.run.cite(lrel, slog.lines.get("n_slots"))]
            if slots and lrel is not None and slog is not None
            else []
        ),
        mean_wait_ms=mean_wait,
        mean_ttft_ms=mean_ttft,
        mean_prompt_ms=mean_ttft - mean_wait,
        requests=len(pairs),
        concurrency=p.concurrency,
        slots=slots,
        wait_source="prompt_timing",
        verdict=prompt_timing_verdict(p.concurrency, slots),
        detail="mean over requests of (TTFT − llama.cpp's timings.prompt_ms) ÷ mean TTFT: waiting for a "
        "slot or for the prompt batches, plus the first decode step and transport (llama.cpp has no "
        "queue histogram)",
    )


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else seconds * 1000.0


def _weight_formats(points: pd.DataFrame) -> dict[str, Any]:
    """Point key → weight format, from the points table ({} without the column)."""
    return dict(zip(points["key"], points["weight_format"], strict=True)) if "weight_format" in points else {}


def _anatomy_rows(
    p: BenchPoint, w: PointWindowData, ttft: float, base: dict[str, Any]
) -> list[dict[str, Any]]:
    """One point's mean TTFT split into its parts (queue, prefill, the remainder; llama.cpp: prefill and the
    remainder), one row each; [] when the server's counters cannot split it."""
    q = w.mean_of("queue_sum", "queue_cnt")
    pf = w.mean_of("prefill_sum", "prefill_cnt")
    if q is None or pf is None:
        # llama.cpp: no queue histogram; its prompt seconds counter gives the mean prefill per request
        lp = llamacpp_prefill_ms(w.delta("prompt_s"), p.result.completed)
        if lp is None:
            return []
        parts: tuple[tuple[str, float], ...] = (("prefill", lp), ("remainder", ttft - lp))
    else:
        q_ms, pf_ms = q * 1000, pf * 1000
        parts = (("queue", q_ms), ("prefill", pf_ms), ("remainder", remainder_ms(ttft, q_ms, pf_ms)))
    return [{**base, "part": part, "ms": v, "share_pct": share_pct(v, ttft)} for part, v in parts]


def _anatomy_table(s: SectionInput) -> pd.DataFrame:
    """The ttft_anatomy table: every point's mean TTFT split into its parts (the weight format names the
    series in the figure, llama.cpp（F16）, not the run's folder name)."""
    fmt_of = _weight_formats(s.points)
    rows = []
    for p in iter_points(s.campaign, include_warmup=True):
        w = s.ctx.window(p)
        ttft = p.result.mean_ttft_ms
        if w is None or ttft is None:
            continue
        base = {
            "round": p.run.round or "",
            "engine": p.run.engine,
            "weight_format": fmt_of.get(p.key),
            "test": p.run.test,
            "test_kind": p.test_kind,
            "point": p.label,
            "concurrency": p.concurrency,
            "input_len_tokens": p.input_len_tokens,
            "warmup": p.warmup,
            "gate_ok": s.ctx.gate_ok(p),
            "mean_ttft_ms": ttft,
        }
        rows += _anatomy_rows(p, w, ttft, base)
    return pd.DataFrame(rows)


def _histogram_queue_share(p: BenchPoint, key: At, w: PointWindowData, q_s: float) -> fnd.Finding:
    """vLLM: the queue histogram's mean against the point's mean TTFT, with the prefill and the remainder."""
    srel = p.run.counter_source
    ttft = p.result.mean_ttft_ms
    if srel is None or ttft is None:
        return fnd.not_available(key, "%", "unknown", "no mean TTFT or counter file", [p.cite()])
    pf_ms = _ms(w.mean_of("prefill_sum", "prefill_cnt"))
    return fnd.measured(
        key,
        share_pct(q_s * 1000, ttft),
        "%",
        [p.run.cite(srel, "queue_sum"), p.run.cite(srel, "queue_cnt"), p.cite("mean_ttft_ms")],
        mean_queue_ms=q_s * 1000,
        mean_prefill_ms=pf_ms,
        mean_ttft_ms=ttft,
        mean_remainder_ms=remainder_ms(ttft, q_s * 1000, pf_ms or 0.0),
        wait_source="queue_histogram",
        verdict=histogram_verdict(q_s * 1000, pf_ms, ttft),
    )


def _queue_share_finding(rnd: str | None, s: SectionInput) -> fnd.Finding:
    """The overload headline point's queue share of TTFT: vLLM's queue histogram, else llama.cpp's
    per-request prompt timing."""
    campaign, ctx = s.campaign, s.ctx
    ov = overload.overload_points(campaign, rnd)
    key = At(round=rnd, topic="overload", metric="ttft_queue_share_pct")
    if not ov:
        return fnd.not_available(key, "%", "no_such_test", f"no overload run in {rnd or 'the campaign'}")
    p = overload.headline(ov, ctx)
    fmt = _weight_formats(s.points).get(p.key)
    # the headline point's run, engine and weight format, as overload.run's findings carry them
    key = key.with_(run=p.run.name, engine=p.run.engine, weight_format=fmt if isinstance(fmt, str) else None)
    w = ctx.window(p)
    q = w.mean_of("queue_sum", "queue_cnt") if w is not None else None
    lq = _llamacpp_queue_share(p, key) if q is None and p.run.engine == "llamacpp" else None
    if lq is not None:
        return lq
    if w is None or q is None:
        return fnd.not_available(
            key,
            "%",
            "no_sampler_csv",
            f"{p.run.cite_root} kept no sampler CSV (request_queue_time)",
            [p.cite()],
        )
    return _histogram_queue_share(p, key, w, q)


def run(s: SectionInput) -> Section:
    findings = [_queue_share_finding(rnd, s) for rnd in s.campaign.rounds]
    return Section(name="ttft", tables={"ttft_anatomy": _anatomy_table(s)}, findings=findings)
