"""The KV capacity arithmetic a reader does with the pool the server logged, per round: the pool with
multi-head attention instead of GQA and the longest prompt it would allow the length sweep; requests that fit
at the length sweep's longest input; what one overload request and all of them need against the pool; what
``--max-num-seqs`` would admit at the sweep's workload; the ``--kv-cache-memory`` vLLM suggests to fill the
card and the requests it would hold; the pool's change from the previous round; and llama.cpp's GPU memory
in use (nvidia-smi after start-up) against its weights plus its slots' KV, and its KV cells against vLLM's
pool.

Keys: ``<round>.<metric>``, ``<round>.length.vllm.<metric>``, ``<round>.overload.<metric>``,
``<round>.telemetry.llamacpp.<metric>``. Imported campaigns only: our own campaigns state their pools on the
KV page and run no second round.
"""

from __future__ import annotations

import math
from typing import Any

from analysis.core import findings as fnd
from analysis.core import theory
from analysis.core.keys import At
from analysis.loading.campaign import BenchPoint, Campaign, RunData
from analysis.reconcile import Section, SectionInput, engine_at
from analysis.reconcile.lengths import pool_tokens
from analysis.reconcile.theoryctx import TheoryCtx

GIB = 2**30


def pool_tokens_at(pool_tokens_: int, kv_bytes_per_token: float, other_kv_bytes_per_token: float) -> float:
    """The same pool in tokens of another KV size, tokens: pool × bytes per token ÷ the other's bytes per
    token (the pool's bytes do not change)."""
    return pool_tokens_ * kv_bytes_per_token / other_kv_bytes_per_token


def max_input_len(pool_tokens_: float, concurrency: int, output_len: int) -> int:
    """The longest prompt that lets ``concurrency`` requests of ``output_len`` outputs fit, tokens:
    floor(pool ÷ concurrency − output)."""
    return math.floor(pool_tokens_ / concurrency - output_len)


def requests_that_fit(pool_tokens_: float, tokens_per_request: float) -> float:
    """Requests the pool holds at their largest, requests: pool ÷ (prompt + output)."""
    return pool_tokens_ / tokens_per_request


def kv_gib(tokens: float, kv_bytes_per_token: float) -> float:
    """KV of ``tokens`` cached tokens, GiB: tokens × bytes per token ÷ 2³⁰."""
    return tokens * kv_bytes_per_token / GIB


def change_pct(before: float, after: float) -> float:
    """Change from ``before`` to ``after``, %: (after ÷ before − 1) × 100."""
    return (after / before - 1.0) * 100.0


def _vllm_pool(campaign: Campaign, rnd: str | None) -> tuple[int | None, str | None, RunData | None]:
    runs = campaign.select(round=rnd, engine="vllm")
    for r in runs:
        pool, src = pool_tokens(r, campaign)
        if pool:
            return pool, src, r
    return None, None, None


def _first(campaign: Campaign, rnd: str | None, kind: str) -> list[BenchPoint]:
    return [p for p in campaign.points(round=rnd, engine="vllm", test_kind=kind) if not p.warmup]


def _mha(
    rnd: str | None, pool: int, src: str, kvb: float, th: TheoryCtx, lengths: list[BenchPoint]
) -> list[Any]:
    cfg = th.cfg
    if cfg is None or cfg.num_key_value_heads == cfg.num_attention_heads:
        return []
    mha_kvb = kvb * cfg.num_attention_heads / cfg.num_key_value_heads
    mha_pool = pool_tokens_at(pool, kvb, mha_kvb)
    out = [
        fnd.measured(
            At(round=rnd, metric="kv_pool_tokens_mha"),
            mha_pool,
            "tokens",
            [src],
            kv_bytes_per_token_mha=mha_kvb,
        )
    ]
    p = lengths[-1] if lengths else None
    if p is not None and p.concurrency and p.requested_output_len_tokens:
        v = max_input_len(mha_pool, p.concurrency, p.requested_output_len_tokens)
        out.append(
            fnd.measured(
                At(round=rnd, metric="max_input_len_mha_at_length_sweep"),
                v,
                "tokens",
                [src, p.cite()],
                concurrency=p.concurrency,
                output_len_tokens=p.requested_output_len_tokens,
            )
        )
    return out


def _longest(rnd: str | None, campaign: Campaign, lengths: list[BenchPoint]) -> list[fnd.Finding]:
    """Requests that fit at the length sweep's longest input (the pool its own run logged)."""
    if not lengths:
        return []
    p = max(lengths, key=lambda q: q.input_len_tokens or 0)
    pool, src = pool_tokens(p.run, campaign)
    if not pool or not src or not p.input_len_tokens or not p.requested_output_len_tokens:
        return []
    need = p.input_len_tokens + p.requested_output_len_tokens
    at = engine_at(rnd, "vllm", topic="length")
    out = [
        fnd.measured(
            at("capacity_at_longest_input"),
            requests_that_fit(pool, need),
            "requests",
            [src, p.cite()],
            input_len_tokens=p.input_len_tokens,
            tokens_per_request=need,
            nominal_concurrency=p.concurrency,
        )
    ]
    if p.concurrency:
        # the next length the reference proposes: twice the longest prompt, at the sweep's concurrency
        double = p.concurrency * (2 * p.input_len_tokens + p.requested_output_len_tokens)
        out.append(
            fnd.measured(
                at("kv_demand_at_double_longest_input_pct"),
                double / pool * 100.0,
                "%",
                [src, p.cite()],
                input_len_tokens=2 * p.input_len_tokens,
                demand_tokens=double,
                pool_tokens=pool,
            )
        )
    return out


def _overload(rnd: str | None, pool: int, src: str, kvb: float, points: list[BenchPoint]) -> list[Any]:
    """What one overload request and all of them need, GiB, beside the pool."""
    if not points:
        return []
    p = points[0]
    if not p.input_len_tokens or not p.requested_output_len_tokens or not p.concurrency:
        return []
    need = p.input_len_tokens + p.requested_output_len_tokens
    at = At(round=rnd, topic="overload")
    one = kv_gib(need, kvb)
    return [
        fnd.measured(at("kv_demand_per_request_gib"), one, "GiB", [p.cite()], tokens_per_request=need),
        fnd.measured(
            at("kv_demand_total_gib"),
            one * p.concurrency,
            "GiB",
            [p.cite(), src],
            concurrency=p.concurrency,
            pool_gib=kv_gib(pool, kvb),
        ),
    ]


def _sweep_top(
    rnd: str | None, pool: int, src: str, kvb: float, th: TheoryCtx, sweep: list[Any]
) -> list[Any]:
    """The KV the sweep's highest concurrency needs at the requests' largest, as a share of the pool, and as a
    multiple of the K/V projection weights that write it."""
    top = max((p for p in sweep if p.concurrency), key=lambda p: p.concurrency, default=None)
    if top is None or not top.input_len_tokens or not top.requested_output_len_tokens:
        return []
    tokens = top.concurrency * (top.input_len_tokens + top.requested_output_len_tokens)
    out = [
        fnd.measured(
            At(round=rnd, metric="kv_demand_at_max_concurrency_pct"),
            tokens / pool * 100.0,
            "%",
            [src, top.cite()],
            concurrency=top.concurrency,
            tokens=tokens,
        )
    ]
    if th.cfg is not None:
        wkv = theory.kv_projection_weight_bytes(th.cfg)
        out.append(
            fnd.measured(
                At(round=rnd, metric="kv_at_max_concurrency_over_kv_projections"),
                tokens * kvb / wkv,
                "ratio",
                [top.cite()],
                concurrency=top.concurrency,
                kv_gib=kv_gib(tokens, kvb),
                kv_projection_weight_bytes=wkv,
            )
        )
    return out


def _server_knobs(rnd: str | None, run: RunData, pool: int, kvb: float, sweep: list[BenchPoint]) -> list[Any]:
    """What --max-num-seqs would admit at the sweep's workload, and the --kv-cache-memory vLLM suggests."""
    rel, log = run.server_log
    if (
        log is None
        or rel is None
        or not sweep
        or not sweep[0].input_len_tokens
        or not sweep[0].requested_output_len_tokens
    ):
        return []
    need = sweep[0].input_len_tokens + sweep[0].requested_output_len_tokens
    out: list[fnd.Finding] = []
    seqs = (getattr(log, "non_default_args", None) or {}).get("max_num_seqs")
    if seqs:
        out.append(
            fnd.measured(
                At(round=rnd, metric="max_num_seqs_demand_over_pool"),
                int(seqs) * need / pool,
                "ratio",
                [run.cite(rel, log.lines.get("non_default_args")), sweep[0].cite()],
                max_num_seqs=int(seqs),
                tokens_per_request=need,
            )
        )
    full = getattr(getattr(log, "memory", None), "kv_cache_memory_full_bytes", None)
    if full:
        out.append(
            fnd.measured(
                At(round=rnd, metric="kv_cache_memory_suggested_gib"),
                full / GIB,
                "GiB",
                [run.cite(rel, log.lines.get("memory"))],
                requests_at_workload=math.floor(full / kvb / need),
                tokens_per_request=need,
            )
        )
    return out


def _llamacpp(rnd: str | None, campaign: Campaign, th: TheoryCtx, vllm_pool: int | None) -> list[Any]:
    """llama.cpp's KV cells (every slot's context, allocated at start) against vLLM's pool, and its GPU memory
    in use after start-up (nvidia-smi, where the fingerprint has it) against its weights plus those cells."""
    for run in campaign.select(round=rnd, engine="llamacpp"):
        lrel, log = run.server_log
        fmt, kvb = th.weight_formats.get("llamacpp"), th.kv_bytes_per_token_for("llamacpp")
        if log is None or lrel is None or not fmt:
            continue
        cells = log.kv_cache_cells or (log.n_slots or 0) * (log.n_ctx_slot or 0)
        if not cells:
            continue
        at = engine_at(rnd, "llamacpp", fmt, topic="telemetry")
        src = run.cite(lrel, log.lines.get("n_ctx_slot"))
        out = []
        if vllm_pool:
            out.append(
                fnd.measured(
                    at("kv_pool_over_vllm"),
                    cells / vllm_pool,
                    "ratio",
                    [src],
                    kv_cells=cells,
                    vllm_pool_tokens=vllm_pool,
                )
            )
        if kvb:
            out.append(
                fnd.measured(
                    at("kv_cells_gib"),
                    kv_gib(cells, kvb),
                    "GiB",
                    [src],
                    kv_cells=cells,
                    kv_bytes_per_token=kvb,
                )
            )
        out += _llamacpp_ctx(at, campaign, rnd, cells, src)
        frel, fp = run.fingerprint
        if fp is not None and frel is not None and fp.gpu_memory_used_mib and kvb and th.cfg is not None:
            used = fp.gpu_memory_used_mib[-1] / 1024
            expect = (theory.weight_bytes(th.cfg, fmt) + cells * kvb) / GIB
            out.append(
                fnd.measured(
                    at("gpu_memory_used_gib"),
                    used,
                    "GiB",
                    [run.cite(frel, fp.lines.get("gpu_memory_used_mib")), src],
                    theory=expect,
                    tolerance_pct=5.0,
                    kv_cells=cells,
                    detail="theory: weights + every slot's KV, allocated at start",
                )
            )
        return out
    return []


def _llamacpp_ctx(at: At, campaign: Campaign, rnd: str | None, cells: int, src: str) -> list[fnd.Finding]:
    """The context llama.cpp needs for its own sweep: the highest concurrency × (prompt + output) — one slot
    per request, each slot as long as one request — against the cells it allocated."""
    pts = [
        p
        for p in campaign.points(round=rnd, engine="llamacpp")
        if not p.warmup and p.concurrency and p.input_len_tokens and p.requested_output_len_tokens
    ]
    if not pts:
        return []
    top = max(pts, key=lambda p: p.concurrency or 0)
    assert top.input_len_tokens and top.requested_output_len_tokens and top.concurrency  # filtered above
    per_slot = round(top.input_len_tokens) + top.requested_output_len_tokens
    need = top.concurrency * per_slot
    return [
        fnd.measured(
            at("ctx_needed_for_sweep_tokens"),
            need,
            "tokens",
            [src, top.cite()],
            slots=top.concurrency,
            tokens_per_slot=per_slot,
            share_of_cells_pct=need / cells * 100.0,
        )
    ]


def _round(campaign: Campaign, rnd: str | None, th: TheoryCtx, prev_pool: int | None) -> list[fnd.Finding]:
    pool, src, run = _vllm_pool(campaign, rnd)
    out = _llamacpp(rnd, campaign, th, pool)
    kvb = th.kv_bytes_per_token_for("vllm")
    if not pool or not src or run is None or not kvb:
        return out
    lengths = _first(campaign, rnd, "length_sweep")
    out += _mha(rnd, pool, src, kvb, th, lengths)
    out += _longest(rnd, campaign, lengths)
    out += _overload(rnd, pool, src, kvb, _first(campaign, rnd, "overload"))
    out += _server_knobs(rnd, run, pool, kvb, _first(campaign, rnd, "concurrency_sweep"))
    out += _sweep_top(rnd, pool, src, kvb, th, _first(campaign, rnd, "concurrency_sweep"))
    if prev_pool:
        out.append(
            fnd.measured(
                At(round=rnd, metric="kv_pool_change_over_previous_round_pct"),
                change_pct(prev_pool, pool),
                "%",
                [src],
                previous_pool_tokens=prev_pool,
                pool_tokens=pool,
            )
        )
    return out


def run(s: SectionInput) -> Section:
    campaign, th = s.campaign, s.th
    findings: list[fnd.Finding] = []
    if campaign.own:
        return Section(name="capacity_arith")
    prev: int | None = None
    for rnd in campaign.rounds:
        findings += _round(campaign, rnd, th, prev)
        prev = _vllm_pool(campaign, rnd)[0] or prev
    return Section(name="capacity_arith", findings=findings)
