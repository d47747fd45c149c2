"""Per-series derivations the reference study drew for its engine comparison and its TTFT analysis:

- engines: each slot's decode rate (output tokens/s ÷ concurrency) and the points whose output throughput
  falls below their lower-concurrency neighbour's — flagged as unexplained, with the evidence the files hold
  (gate results, duration, output shortfall, p50 ITL against the neighbours);
- TTFT: how much the mean prefill time per request grows from one stream to the highest concurrency, the queue
  as a share of the prefill there (vLLM's histograms), and the KV pool in blocks against the blocks one
  request reserves (vLLM, 16-token blocks on GPU);
- the mixed-batch ratio (prefill vs decode tokens in one iteration): always n/a — it needs a record per engine
  iteration, and the sampler (the reference's 1 Hz CSV, our point-edge scrapes) holds only running sums, whose
  window ratio is the workload's input ÷ output and says nothing about how iterations mix the two; the finding
  carries that workload ratio so the page can say what is and is not known.

Keys: ``<round>.engines.<engine>.<metric>``, ``<round>.ttft.<engine>.<metric>``;
``runs.<run>.{engines,ttft}.…``.
"""

from __future__ import annotations

import math

from analysis import findings as fnd
from analysis.campaign import BenchPoint, Campaign
from analysis.keys import At
from analysis.reconcile import Context, Section, SectionInput, engine_at, run_at
from analysis.reconcile.engines import shortfall_pct
from analysis.reconcile.lengths import pool_tokens, prefill_ms
from analysis.reconcile.roofline import sweep_series

BLOCK_SIZE_GPU = 16  # vLLM's default KV block on GPU (kv.py reconciles the pool with it)


def per_slot_tokens_per_s(output_tokens_per_s: float, concurrency: int) -> float:
    """Each slot's decode rate, tokens/s: output tokens/s ÷ concurrency."""
    return output_tokens_per_s / concurrency


def throughput_dips(concurrency: list[int], tokens_per_s: list[float]) -> list[int]:
    """The concurrencies (ascending) whose output throughput is below the next lower concurrency's."""
    pairs = sorted(zip(concurrency, tokens_per_s, strict=True))
    return [c for (c0, t0), (c, t) in zip(pairs, pairs[1:], strict=False) if t < t0]


def blocks_for(tokens: float, block_size: int) -> int:
    """Whole KV blocks a request of `tokens` reserves, blocks: ceil(tokens ÷ block size)."""
    return math.ceil(tokens / block_size)


def workload_prefill_per_decode(input_tokens: float, output_tokens: float) -> float:
    """Prompt tokens per generated token over a whole point, ratio: input length ÷ output length (what the
    running sums give; an iteration's own mix can be anything around it)."""
    return input_tokens / output_tokens


def _at(s: dict, run, topic: str) -> At:
    if run.own:
        return run_at(run, s["weight_format"], topic=topic)
    return engine_at(s["round"] or None, s["engine"], s["weight_format"], topic=topic)


def engine_findings(s: dict, ctx: Context) -> list[fnd.Finding]:
    pts: list[BenchPoint] = [p for p in s["points"] if p.result.output_throughput_tok_s]
    if not pts:
        return []
    at = _at(s, pts[0].run, "engines")
    out: list[fnd.Finding] = []
    top = max(pts, key=lambda p: p.concurrency)
    out.append(
        fnd.measured(
            at("per_slot_decode_tokens_per_s"),
            per_slot_tokens_per_s(top.result.output_throughput_tok_s, top.concurrency),
            "tokens/s",
            [top.cite("output_throughput")],
            concurrency=top.concurrency,
            by_concurrency={
                str(p.concurrency): per_slot_tokens_per_s(p.result.output_throughput_tok_s, p.concurrency)
                for p in pts
            },
            detail="output tokens/s ÷ concurrency at the highest concurrency of the sweep",
        )
    )
    by_c = {p.concurrency: p for p in pts}
    dips = throughput_dips([p.concurrency for p in pts], [p.result.output_throughput_tok_s for p in pts])
    evidence = {}
    cs = sorted(by_c)
    for c in dips:
        p = by_c[c]
        lower = by_c[cs[cs.index(c) - 1]]
        higher = by_c[cs[cs.index(c) + 1]] if cs.index(c) + 1 < len(cs) else None
        r = p.result
        evidence[str(c)] = {
            "tokens_per_s": r.output_throughput_tok_s,
            "lower_neighbour_tokens_per_s": lower.result.output_throughput_tok_s,
            "higher_neighbour_tokens_per_s": higher.result.output_throughput_tok_s if higher else None,
            "duration_s": r.duration_s,
            "p50_itl_ms": r.itl.p50_ms,
            "lower_p50_itl_ms": lower.result.itl.p50_ms,
            # what the self-checks found, as results (completed 319 of 320, 1 failed), not only gate names
            "completed": r.completed,
            "requests": r.num_prompts,
            "failed": r.failed,
            "gate_failures": ctx.gate_failures(p),
            "gate_flags": ctx.gate_flags(p),
            "output_shortfall_pct": shortfall_pct(
                r.total_output_tokens, r.completed, p.requested_output_len_tokens
            )
            if p.requested_output_len_tokens and r.completed
            else None,
        }
    out.append(
        fnd.measured(
            at("throughput_dips"),
            dips,
            "list",
            [by_c[c].cite("output_throughput") for c in dips] or [top.cite("output_throughput")],
            evidence=evidence,
            explained=False,
            detail="concurrencies whose output tokens/s fall below the next lower concurrency's: "
            "unexplained by the analysis; the evidence lists what the files say about each",
        )
    )
    return out


def ttft_findings(s: dict, campaign: Campaign, ctx: Context) -> list[fnd.Finding]:
    pts: list[BenchPoint] = s["points"]
    run = pts[0].run
    at = _at(s, run, "ttft")
    out: list[fnd.Finding] = []
    pf = {p.concurrency: prefill_ms(p, ctx) for p in pts if ctx.gate_ok(p)}
    pf = {c: v for c, v in pf.items() if v[0] is not None}
    srcs = [p.cite() for p in pts]
    if 1 not in pf or len(pf) < 2:
        out.append(
            fnd.not_available(
                at("prefill_growth_single_to_max"),
                "ratio",
                "no_sampler_csv" if not pf else "no_concurrency_1",
                f"{run.cite_root}: needs the prefill time (vLLM histogram, llama.cpp prompt seconds) at "
                "concurrency 1 and a higher point",
                srcs,
            )
        )
    else:
        c_top = max(pf)
        out.append(
            fnd.measured(
                at("prefill_growth_single_to_max"),
                pf[c_top][0] / pf[1][0],
                "ratio",
                [pf[c_top][1], pf[1][1]],
                concurrency=c_top,
                single_prefill_ms=pf[1][0],
                top_prefill_ms=pf[c_top][0],
                by_concurrency={str(c): v[0] for c, v in sorted(pf.items())},
                detail="mean prefill time per request at the highest concurrency ÷ at concurrency 1",
            )
        )
    top = max(pts, key=lambda p: p.concurrency)
    w = ctx.window(top)
    q = w.mean_of("queue_sum", "queue_cnt") if w is not None else None
    pm = w.mean_of("prefill_sum", "prefill_cnt") if w is not None else None
    if q is None or not pm:
        out.append(
            fnd.not_available(
                at("queue_share_of_prefill_pct"),
                "%",
                "no_queue_histogram" if run.engine == "llamacpp" else "no_sampler_csv",
                f"{run.cite_root}: no queue-time histogram (vLLM's /metrics only)",
                [top.cite()],
            )
        )
    else:
        out.append(
            fnd.measured(
                at("queue_share_of_prefill_pct"),
                q / pm * 100.0,
                "%",
                [run.cite(run.counter_source, "queue_sum"), run.cite(run.counter_source, "prefill_sum")],
                concurrency=top.concurrency,
                mean_queue_ms=q * 1000,
                mean_prefill_ms=pm * 1000,
                detail=(
                    "mean queue time ÷ mean prefill time at the highest concurrency (both from "
                    "vLLM's histograms)"
                ),
            )
        )
    # The mix of prefill and decode tokens inside one iteration needs per-iteration scheduling records (vLLM's
    # scheduler stats per step, a trace); no source we read has them, only sums over many iterations.
    out.append(
        fnd.not_available(
            at("mixed_batch_prefill_decode_ratio"),
            "ratio",
            "no_per_iteration_records",
            f"{run.cite_root}: the sampler holds running sums (iteration tokens, prompt and generation "
            "totals), not one record per iteration; their ratio over a window is the workload's input ÷ "
            "output",
            [top.protocol_source or top.cite()],
            concurrency=top.concurrency,
            input_len_tokens=top.input_len_tokens,
            output_len_tokens=top.requested_output_len_tokens,
            workload_prefill_per_decode=workload_prefill_per_decode(
                top.input_len_tokens, top.requested_output_len_tokens
            )
            if top.input_len_tokens and top.requested_output_len_tokens
            else None,
        )
    )
    if s["engine"] == "vllm" and not run.own:
        pool, psrc = pool_tokens(run, campaign)
        need = (top.input_len_tokens or 0) + (top.requested_output_len_tokens or 0)
        if pool and need:
            out.append(
                fnd.measured(
                    at("kv_pool_blocks"),
                    pool // BLOCK_SIZE_GPU,
                    "count",
                    [psrc, top.protocol_source or top.cite()],
                    block_size=BLOCK_SIZE_GPU,
                    blocks_per_request=blocks_for(need, BLOCK_SIZE_GPU),
                    tokens_per_request=need,
                    requests_at_full_length=(pool // BLOCK_SIZE_GPU) // blocks_for(need, BLOCK_SIZE_GPU),
                    detail=(
                        "pool tokens ÷ 16-token blocks; one request of the sweep reserves "
                        "ceil((prompt + output) ÷ 16)"
                    ),
                )
            )
            blocks = blocks_for(need, BLOCK_SIZE_GPU)
            out.append(
                fnd.measured(
                    at("block_rounding_tokens_per_request"),
                    blocks * BLOCK_SIZE_GPU - need,
                    "tokens",
                    [top.protocol_source or top.cite()],
                    blocks_per_request=blocks,
                    tokens_per_request=need,
                    input_len_tokens=top.input_len_tokens,
                    block_size=BLOCK_SIZE_GPU,
                    detail="the last block's unused slots: blocks × 16 − (prompt + output)",
                )
            )
    return out


def run(s: SectionInput) -> Section:
    campaign, ctx, th = s.campaign, s.ctx, s.th
    findings: list[fnd.Finding] = []
    for s in sweep_series(campaign, th):
        findings += engine_findings(s, ctx)
        findings += ttft_findings(s, campaign, ctx)
    return Section(name="engines_depth", tables={}, findings=findings)
