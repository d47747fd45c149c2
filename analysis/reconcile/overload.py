"""Overload cliff: KV demand against the pool, preemptions (count, timeline, KV usage when each fired,
tokens freed), failures, whether every request got its requested output, mean running requests vs the
log's maximum concurrency, and the share of inter-token intervals a preemption can touch."""

from __future__ import annotations

import math

import pandas as pd

from analysis import findings as fnd
from analysis.campaign import Campaign, iter_points
from analysis.reconcile import Context, Section
from analysis.reconcile.theoryctx import TheoryCtx
from analysis.windows import window_indices


def oversubscription(concurrency: int, input_len: float, output_len: float, pool_tokens: int) -> float:
    """KV demand ÷ pool, ratio: concurrency × (input + output) ÷ pool tokens (> 1: cannot all fit)."""
    return concurrency * (input_len + output_len) / pool_tokens


def itl_share_touched_pct(preemptions: float, completed: int, output_len: int) -> float:
    """Upper bound on the share of inter-token intervals a preemption can lengthen, %:
    preemptions ÷ (completed × (output − 1)) × 100 (each preemption stalls one interval of one request).
    Below 1 %, p99 ITL cannot see preemptions at all."""
    return preemptions / (completed * (output_len - 1)) * 100.0


def tokens_freed(kv_before: float, kv_after: float, pool_tokens: int, n: float) -> float:
    """KV tokens released per preemption between two samples, tokens: (usage before − after) × pool ÷ n."""
    return (kv_before - kv_after) * pool_tokens / n


def _pool_tokens(run, campaign: Campaign) -> tuple[int | None, str | None]:
    rel, log = run.server_log
    if log is not None and getattr(log, "kv_cache_tokens", None):
        return log.kv_cache_tokens, run.cite(rel, log.lines.get("kv_cache_tokens"))
    for r in campaign.select(round=run.round, engine="vllm"):
        rel, log = r.server_log
        if log is not None and getattr(log, "kv_cache_tokens", None):
            return log.kv_cache_tokens, r.cite(rel, log.lines.get("kv_cache_tokens"))
    return None, None


def run(campaign: Campaign, ctx: Context, th: TheoryCtx, points: pd.DataFrame) -> Section:
    findings: list[fnd.Finding] = []
    timeline_rows: list[dict] = []
    event_rows: list[dict] = []
    for rnd in campaign.rounds:
        pre = campaign.prefix(rnd) + "overload."
        ov = list(iter_points(campaign, round=rnd, test_kind="overload"))
        if not ov:
            for k, u in (("oversubscription", "ratio"), ("output_tokens_complete", "bool"), ("preemptions", "count")):
                findings.append(fnd.not_available(pre + k, u, "no_such_test", f"no overload run in {rnd}"))
            continue
        p = ov[0]
        r = p.result
        pool, pool_src = _pool_tokens(p.run, campaign)
        out_len = p.requested_output_len_tokens
        borrowed = {"protocol_borrowed": True, "protocol_source": p.protocol_source} if p.protocol_borrowed else {}
        if pool is None or out_len is None:
            findings.append(fnd.not_available(pre + "oversubscription", "ratio", "no_server_log",
                                              "pool or requested lengths unknown", [p.cite()]))
        else:
            findings.append(fnd.measured(
                pre + "oversubscription", oversubscription(p.concurrency, p.input_len_tokens, out_len, pool), "ratio",
                [pool_src, p.cite("max_concurrency"), p.cite("total_input_tokens"), *( [p.protocol_source] if p.protocol_source else [])],
                demand_tokens=p.concurrency * (p.input_len_tokens + out_len), pool_tokens=pool, **borrowed))
        findings.append(fnd.measured(pre + "failed_requests", r.failed or 0, "requests", [p.cite("failed")]))
        findings.append(fnd.measured(pre + "completed_requests", r.completed, "requests", [p.cite("completed")],
                                     num_prompts=r.num_prompts))
        if out_len is None:
            findings.append(fnd.not_available(pre + "output_tokens_complete", "bool", "no_sweep_log",
                                              "requested output length unknown", [p.cite("total_output_tokens")]))
        else:
            ok = r.total_output_tokens == r.completed * out_len
            findings.append(fnd.checked(pre + "output_tokens_complete", ok,
                                        [p.cite("total_output_tokens"), p.cite("completed"),
                                         *([p.protocol_source] if p.protocol_source else [])],
                                        total_output_tokens=r.total_output_tokens,
                                        expected_tokens=r.completed * out_len, **borrowed))
        w = ctx.window(p)
        srel = p.run.counter_source
        if w is None or p.run.name not in ctx.sampler_series:
            for k, u in (("preemptions", "count"), ("mean_running_requests", "requests"),
                         ("itl_share_touched_by_preemptions_pct", "%"), ("tokens_freed_per_preemption", "tokens"),
                         ("kv_usage_at_preemption_pct", "%")):
                findings.append(fnd.not_available(pre + k, u, "no_sampler_csv",
                                                  f"{p.run.cite_root} kept no sampler CSV", [p.cite()]))
            continue
        ts, cols = ctx.sampler_series[p.run.name]
        idx = window_indices(ts, w.window)
        # the sample just before the window anchors the cumulative counter
        i0 = max(0, idx.start - 1)
        pre_base = cols["preemptions"][i0]
        for i in range(idx.start, idx.stop):
            timeline_rows.append({"round": rnd or "", "t_s": ts[i] - w.window.start_s, "row": i,
                                  "kv_usage_pct": cols["kv_usage"][i] * 100, "running": cols["running"][i],
                                  "waiting": cols["waiting"][i], "preemptions": cols["preemptions"][i] - pre_base})
        for i in range(max(idx.start, 1), idx.stop + 1 if idx.stop < len(ts) else idx.stop):
            d = cols["preemptions"][i] - cols["preemptions"][i - 1]
            if d > 0 and not math.isnan(d):
                event_rows.append({"round": rnd or "", "t_s": ts[i] - w.window.start_s, "row": i, "preemptions": d,
                                   "kv_usage_before_pct": cols["kv_usage"][i - 1] * 100,
                                   "kv_usage_after_pct": cols["kv_usage"][i] * 100,
                                   "tokens_freed_per_preemption": tokens_freed(cols["kv_usage"][i - 1],
                                                                               cols["kv_usage"][i], pool, d)
                                   if pool else None,
                                   "source": ctx.sample_cite(p.run, i)})
        n_pre = w.delta("preemptions")
        findings.append(fnd.measured(pre + "preemptions", int(n_pre), "count", [p.run.cite(srel, "preemptions")],
                                     sampler_rows=[ctx.sample_line(p.run, w.first_row), ctx.sample_line(p.run, w.last_row)]))
        mean_run = w.gauges["running"].mean
        log_rel, log = p.run.server_log
        max_conc = getattr(log, "max_concurrency_x", None) if log is not None else None
        findings.append(fnd.measured(
            pre + "mean_running_requests", mean_run, "requests", [p.run.cite(srel, "running")],
            detail="mean of the running gauge over the window; the log's maximum concurrency is for requests of "
                   "max_model_len tokens, which these reach only at their last token",
            max_concurrency_log=max_conc))
        if out_len:
            findings.append(fnd.measured(pre + "itl_share_touched_by_preemptions_pct",
                                         itl_share_touched_pct(n_pre, r.completed, out_len), "%",
                                         [p.run.cite(srel, "preemptions"), p.cite("completed")],
                                         p99_itl_ms=r.stat_ms("p99", "itl"), p50_itl_ms=r.stat_ms("p50", "itl")))
        ev = [e for e in event_rows if e["round"] == (rnd or "")]
        if ev:
            freed = [e["tokens_freed_per_preemption"] for e in ev if e["tokens_freed_per_preemption"] is not None]
            findings.append(fnd.measured(pre + "kv_usage_at_preemption_pct",
                                         sum(e["kv_usage_before_pct"] for e in ev) / len(ev), "%",
                                         [e["source"] for e in ev][:5], events=len(ev),
                                         min_pct=min(e["kv_usage_before_pct"] for e in ev)))
            if freed:
                findings.append(fnd.measured(pre + "tokens_freed_per_preemption", sum(freed) / len(freed), "tokens",
                                             [e["source"] for e in ev][:5], pool_tokens=pool,
                                             detail="mean over preemption samples of Δkv_usage × pool ÷ Δpreemptions "
                                                    "(other requests finishing in the same second blur it)"))
        else:
            findings.append(fnd.not_available(pre + "kv_usage_at_preemption_pct", "%", "unknown",
                                              "no preemption inside the window"))
    tables = {"overload_timeline": pd.DataFrame(timeline_rows), "overload_preemptions": pd.DataFrame(event_rows)}
    return Section(name="overload", tables=tables, findings=findings)
