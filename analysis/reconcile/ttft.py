"""TTFT anatomy: per point, mean TTFT split into queue (Δqueue_sum/Δqueue_cnt), prefill
(Δprefill_sum/Δprefill_cnt) and the remainder (frontend, network, detokenize); the overload run's
queue share of TTFT."""

from __future__ import annotations

import pandas as pd

from analysis import findings as fnd
from analysis.campaign import Campaign, iter_points
from analysis.reconcile import Context, Section


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


def run(campaign: Campaign, ctx: Context, points: pd.DataFrame) -> Section:
    rows = []
    findings: list[fnd.Finding] = []
    for p in iter_points(campaign, include_warmup=True):
        w = ctx.window(p)
        ttft = p.result.mean_ttft_ms
        if w is None or ttft is None:
            continue
        q = w.mean_of("queue_sum", "queue_cnt")
        pf = w.mean_of("prefill_sum", "prefill_cnt")
        base = {"round": p.run.round or "", "engine": p.run.engine, "test": p.run.test, "point": p.label,
                "concurrency": p.concurrency, "warmup": p.warmup, "gate_ok": ctx.gate_ok(p), "mean_ttft_ms": ttft}
        if q is None or pf is None:
            # llama.cpp: no queue histogram; its prompt seconds counter gives the mean prefill per request
            lp = llamacpp_prefill_ms(w.delta("prompt_s"), p.result.completed)
            if lp is None:
                continue
            for part, v in (("prefill", lp), ("remainder", ttft - lp)):
                rows.append({**base, "part": part, "ms": v, "share_pct": share_pct(v, ttft)})
            continue
        q_ms, pf_ms = q * 1000, pf * 1000
        for part, v in (("queue", q_ms), ("prefill", pf_ms), ("remainder", remainder_ms(ttft, q_ms, pf_ms))):
            rows.append({**base, "part": part, "ms": v, "share_pct": share_pct(v, ttft)})
    table = pd.DataFrame(rows)
    for rnd in campaign.rounds:
        pre = campaign.prefix(rnd)
        ov = [p for p in iter_points(campaign, round=rnd, test_kind="overload")]
        key = f"{pre}overload.ttft_queue_share_pct"
        if not ov:
            findings.append(fnd.not_available(key, "%", "no_such_test", f"no overload run in {rnd}"))
            continue
        p = ov[0]
        w = ctx.window(p)
        q = w.mean_of("queue_sum", "queue_cnt") if w is not None else None
        if q is None:
            findings.append(fnd.not_available(key, "%", "no_sampler_csv",
                                              f"{p.run.cite_root} kept no sampler CSV (request_queue_time)", [p.cite()]))
            continue
        srel = p.run.counter_source
        findings.append(fnd.measured(
            key, share_pct(q * 1000, p.result.mean_ttft_ms), "%",
            [p.run.cite(srel, "queue_sum"), p.run.cite(srel, "queue_cnt"), p.cite("mean_ttft_ms")],
            mean_queue_ms=q * 1000, mean_ttft_ms=p.result.mean_ttft_ms))
    return Section(name="ttft", tables={"ttft_anatomy": table}, findings=findings)
