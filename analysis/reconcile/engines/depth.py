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
from typing import Any

from analysis.core import findings as fnd
from analysis.core.keys import At
from analysis.core.windows import PointWindowData
from analysis.loading.campaign import BenchPoint, Campaign, RunData
from analysis.reconcile import Context, Section, SectionInput, engine_at, run_at
from analysis.reconcile.engines.points import shortfall_pct
from analysis.reconcile.lengths import pool_tokens, prefill_ms
from analysis.reconcile.roofline import SweepSeries, sweep_series

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


def _at(s: SweepSeries, run: RunData, topic: str) -> At:
    if run.own:
        return run_at(run, s["weight_format"], topic=topic)
    return engine_at(s["round"] or None, s["engine"], s["weight_format"], topic=topic)


def _concurrency(p: BenchPoint) -> int:
    """A sweep point's concurrency (every sweep point has one: concurrency.run_sweep_points)."""
    assert p.concurrency is not None
    return p.concurrency


def _tokens_per_s(p: BenchPoint) -> float:
    """Output tokens/s of a point kept for having one (engine_findings)."""
    assert p.result.output_throughput_tok_s is not None
    return p.result.output_throughput_tok_s


def _dip_evidence(
    p: BenchPoint, lower: BenchPoint, higher: BenchPoint | None, ctx: Context
) -> dict[str, Any]:
    """What the files say about a throughput dip: the neighbours' throughput and ITL, the duration, and what
    the self-checks found, as results (completed 319 of 320, 1 failed), not only gate names."""
    r = p.result
    short = (
        shortfall_pct(r.total_output_tokens, r.completed, p.requested_output_len_tokens)
        if p.requested_output_len_tokens and r.completed and r.total_output_tokens is not None
        else None
    )
    return {
        "tokens_per_s": r.output_throughput_tok_s,
        "lower_neighbour_tokens_per_s": lower.result.output_throughput_tok_s,
        "higher_neighbour_tokens_per_s": higher.result.output_throughput_tok_s if higher else None,
        "duration_s": r.duration_s,
        "p50_itl_ms": r.itl.p50_ms,
        "lower_p50_itl_ms": lower.result.itl.p50_ms,
        "completed": r.completed,
        "requests": r.num_prompts,
        "failed": r.failed,
        "gate_failures": ctx.gate_failures(p),
        "gate_flags": ctx.gate_flags(p),
        "output_shortfall_pct": short,
    }


def engine_findings(s: SweepSeries, ctx: Context) -> list[fnd.Finding]:
    pts: list[BenchPoint] = [p for p in s["points"] if p.result.output_throughput_tok_s]
    if not pts:
        return []
    at = _at(s, pts[0].run, "engines")
    top = max(pts, key=_concurrency)
    per_slot = fnd.measured(
        at("per_slot_decode_tokens_per_s"),
        per_slot_tokens_per_s(_tokens_per_s(top), _concurrency(top)),
        "tokens/s",
        [top.cite("output_throughput")],
        concurrency=top.concurrency,
        by_concurrency={
            str(p.concurrency): per_slot_tokens_per_s(_tokens_per_s(p), _concurrency(p)) for p in pts
        },
        detail="output tokens/s ÷ concurrency at the highest concurrency of the sweep",
    )
    by_c = {_concurrency(p): p for p in pts}
    dips = throughput_dips([_concurrency(p) for p in pts], [_tokens_per_s(p) for p in pts])
    cs = sorted(by_c)
    evidence = {}
    for c in dips:
        i = cs.index(c)
        higher = by_c[cs[i + 1]] if i + 1 < len(cs) else None
        evidence[str(c)] = _dip_evidence(by_c[c], by_c[cs[i - 1]], higher, ctx)
    dips_finding = fnd.measured(
        at("throughput_dips"),
        dips,
        "list",
        [by_c[c].cite("output_throughput") for c in dips] or [top.cite("output_throughput")],
        evidence=evidence,
        explained=False,
        detail="concurrencies whose output tokens/s fall below the next lower concurrency's: "
        "unexplained by the analysis; the evidence lists what the files say about each",
    )
    return [per_slot, dips_finding]


def _prefill_growth(at: At, pts: list[BenchPoint], ctx: Context) -> fnd.Finding:
    """Mean prefill time per request at the highest gated-in concurrency ÷ at concurrency 1."""
    run = pts[0].run
    pf: dict[int, tuple[float, str]] = {}
    for p in pts:
        if ctx.gate_ok(p):
            ms, src = prefill_ms(p, ctx)
            if ms is not None and src is not None:
                pf[_concurrency(p)] = (ms, src)
    if 1 not in pf or len(pf) < 2:
        return fnd.not_available(
            at("prefill_growth_single_to_max"),
            "ratio",
            "no_sampler_csv" if not pf else "no_concurrency_1",
            f"{run.cite_root}: needs the prefill time (vLLM histogram, llama.cpp prompt seconds) at "
            "concurrency 1 and a higher point",
            [p.cite() for p in pts],
        )
    c_top = max(pf)
    return fnd.measured(
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


def _queue_share(at: At, top: BenchPoint, ctx: Context) -> fnd.Finding:
    """Mean queue time ÷ mean prefill time at the highest concurrency, % (vLLM's histograms)."""
    run = top.run
    w = ctx.window(top)
    w = w if isinstance(w, PointWindowData) else None
    q = w.mean_of("queue_sum", "queue_cnt") if w is not None else None
    pm = w.mean_of("prefill_sum", "prefill_cnt") if w is not None else None
    if q is None or not pm or run.counter_source is None:
        return fnd.not_available(
            at("queue_share_of_prefill_pct"),
            "%",
            "no_queue_histogram" if run.engine == "llamacpp" else "no_sampler_csv",
            f"{run.cite_root}: no queue-time histogram (vLLM's /metrics only)",
            [top.cite()],
        )
    return fnd.measured(
        at("queue_share_of_prefill_pct"),
        q / pm * 100.0,
        "%",
        [run.cite(run.counter_source, "queue_sum"), run.cite(run.counter_source, "prefill_sum")],
        concurrency=top.concurrency,
        mean_queue_ms=q * 1000,
        mean_prefill_ms=pm * 1000,
        detail="mean queue time ÷ mean prefill time at the highest concurrency (both from vLLM's histograms)",
    )


def _mixed_batch(at: At, top: BenchPoint) -> fnd.Finding:
    """Always n/a: the mix of prefill and decode tokens inside one iteration needs per-iteration scheduling
    records (vLLM's scheduler stats per step, a trace); no source we read has them, only sums over many
    iterations. Carries the workload's input ÷ output ratio, what the sums do say."""
    inp, outp = top.input_len_tokens, top.requested_output_len_tokens
    return fnd.not_available(
        at("mixed_batch_prefill_decode_ratio"),
        "ratio",
        "no_per_iteration_records",
        f"{top.run.cite_root}: the sampler holds running sums (iteration tokens, prompt and generation "
        "totals), not one record per iteration; their ratio over a window is the workload's input ÷ output",
        [top.protocol_source or top.cite()],
        concurrency=top.concurrency,
        input_len_tokens=inp,
        output_len_tokens=outp,
        workload_prefill_per_decode=workload_prefill_per_decode(inp, outp) if inp and outp else None,
    )


def _kv_pool_blocks(at: At, top: BenchPoint, campaign: Campaign) -> fnd.Finding | None:
    """An imported vLLM run: its pool in 16-token blocks against the blocks one sweep request reserves."""
    pool, psrc = pool_tokens(top.run, campaign)
    need = (top.input_len_tokens or 0) + (top.requested_output_len_tokens or 0)
    if not pool or not need or psrc is None:
        return None
    return fnd.measured(
        at("kv_pool_blocks"),
        pool // BLOCK_SIZE_GPU,
        "count",
        [psrc, top.protocol_source or top.cite()],
        block_size=BLOCK_SIZE_GPU,
        blocks_per_request=blocks_for(need, BLOCK_SIZE_GPU),
        tokens_per_request=need,
        requests_at_full_length=(pool // BLOCK_SIZE_GPU) // blocks_for(need, BLOCK_SIZE_GPU),
        detail="pool tokens ÷ 16-token blocks; one request of the sweep reserves "
        "ceil((prompt + output) ÷ 16)",
    )


def _block_rounding(at: At, top: BenchPoint) -> fnd.Finding:
    """The tokens one sweep request leaves unused in its last 16-token block: blocks × 16 − (prompt +
    output)."""
    need = (top.input_len_tokens or 0) + (top.requested_output_len_tokens or 0)
    blocks = blocks_for(need, BLOCK_SIZE_GPU)
    return fnd.measured(
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


def ttft_findings(s: SweepSeries, campaign: Campaign, ctx: Context) -> list[fnd.Finding]:
    pts: list[BenchPoint] = s["points"]
    run = pts[0].run
    at = _at(s, run, "ttft")
    top = max(pts, key=_concurrency)
    out = [_prefill_growth(at, pts, ctx), _queue_share(at, top, ctx), _mixed_batch(at, top)]
    if s["engine"] == "vllm" and not run.own and (blocks := _kv_pool_blocks(at, top, campaign)):
        out += [blocks, _block_rounding(at, top)]
    return out


def run(s: SectionInput) -> Section:
    findings: list[fnd.Finding] = []
    for series in sweep_series(s.campaign, s.th):
        findings += engine_findings(series, s.ctx)
        findings += ttft_findings(series, s.campaign, s.ctx)
    return Section(name="engines_depth", tables={}, findings=findings)
