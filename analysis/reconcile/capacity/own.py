"""Capacity of our own runs against theory, exactly: what the server says it can hold (its start-up log,
its /metrics) against what the model's config and the server's own flags imply.

- vLLM: blocks = --num-gpu-blocks-override, else floor(pool bytes ÷ (block size × KV bytes/token)) with the
  pool from VLLM_CPU_KVCACHE_SPACE (GiB, CPU) or the logged 'Available KV cache memory' (GPU, two decimals);
  the logged tokens = floor(blocks ÷ ceil(max_model_len ÷ block) × max_model_len); maximum concurrency =
  blocks ÷ ceil(max_model_len ÷ block) (logged with two decimals); /metrics cache_config_info num_gpu_blocks.
- llama.cpp: n_ctx_slot = -c ÷ -np, slots = -np, KV buffer = -c × KV bytes/token (MiB, two decimals),
  capacity = slots × n_ctx_slot.

Keys: ``runs.<run>.<quantity>``; the flags come from the server command the collector recorded
(events.jsonl `server_start`), the environment from the plan the run kept.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pandas as pd

from analysis.core import findings as fnd
from analysis.core import theory
from analysis.core.keys import At
from analysis.loading.campaign import RunData
from analysis.parse.scrapes_jsonl import parsed_samples
from analysis.reconcile import Section, SectionInput, run_at
from analysis.reconcile.capacity.pool import (
    half_unit_pct,
    has_flag,
    logged_gib_tolerance_pct,
    server_argv,
)
from analysis.reconcile.theoryctx import TheoryCtx
from collector.protocol.checks import flag_value as flag
from collector.raw.metric_families import VLLM_CACHE_CONFIG

GIB = theory.GIB


@dataclass
class _Blocks:
    """The theory's vLLM block count for one run and where it comes from."""

    block: int | None  # block size, tokens: the plan's, else --block-size
    block_src: str | None
    blocks: int | None  # --num-gpu-blocks-override, else from VLLM_CPU_KVCACHE_SPACE or the logged pool
    basis: str | None  # which of the three
    srcs: list[str]  # citations of the pool check: the logged tokens', the model's, the basis'
    space_blocks: int | None  # the block count VLLM_CPU_KVCACHE_SPACE implies, whatever the basis

    @property
    def rounded(self) -> bool:
        """A logged GiB is rounded: the block count is then known only to a range."""
        return self.basis is not None and self.basis.startswith("Available")


def _command(run: RunData) -> tuple[list[str], str]:
    """The server's argv and its citation; ([], "") when the run recorded no server start."""
    argv, argv_src = server_argv(run)
    return (argv, argv_src) if argv is not None and argv_src is not None else ([], "")


def _vllm_blocks(
    run: RunData, rel: str, log: Any, kvb: float | None, src_tokens: str, th: TheoryCtx
) -> _Blocks:
    """blocks = --num-gpu-blocks-override, else floor(pool bytes ÷ (block size × KV bytes/token)) with the
    pool from VLLM_CPU_KVCACHE_SPACE (GiB) or the logged 'Available KV cache memory' (GiB, two decimals)."""
    argv, argv_src = _command(run)
    plan = run.docs.plan
    b = _Blocks(
        block=plan.model.block_size if plan is not None else None,
        block_src=run.cite(run.docs.files["plan"], "model.block_size") if plan is not None else None,
        blocks=None,
        basis=None,
        srcs=[src_tokens, *th.model_source],
        space_blocks=None,
    )
    block_flag = flag(argv, "--block-size")
    if block_flag:
        b.block, b.block_src = int(block_flag), argv_src
    override = flag(argv, "--num-gpu-blocks-override")
    space = plan.server.env.get("VLLM_CPU_KVCACHE_SPACE") if plan is not None else None
    if space is not None and kvb is not None and b.block:
        b.space_blocks = theory.vllm_num_gpu_blocks(float(space) * GIB, b.block, kvb)
    if override is not None:
        b.blocks, b.basis = int(override), "--num-gpu-blocks-override"
        b.srcs.append(argv_src)
    elif kvb is not None and b.block:
        if space is not None:
            b.blocks, b.basis = b.space_blocks, "VLLM_CPU_KVCACHE_SPACE"
            b.srcs.append(run.cite(run.docs.files["plan"], "server.env.VLLM_CPU_KVCACHE_SPACE"))
        elif log.kv_cache_memory_gib is not None:
            b.blocks = theory.vllm_num_gpu_blocks(log.kv_cache_memory_gib * GIB, b.block, kvb)
            b.basis = "Available KV cache memory (logged, two decimals)"
            b.srcs.append(run.cite(rel, log.lines.get("kv_cache_memory_gib")))
    return b


def _vllm(run: RunData, th: TheoryCtx) -> tuple[list[dict[str, Any]], list[fnd.Finding]]:
    """The logged pool (tokens) and maximum concurrency against the theory's block count, and the block
    count /metrics reports."""
    pre = run_at(run, th.weight_format_for(run))
    rel, log = run.server_log
    if rel is None or log is None or log.kv_cache_tokens is None:
        why = f"{run.cite(rel) if rel else run.name}: no 'KV cache size' line"
        return [], [fnd.not_available(pre("kv_pool_tokens"), "tokens", "no_kv_pool_line", why)]
    kvb = th.kv_bytes_per_token_for_run(run.name)
    src_tokens = run.cite(rel, log.lines.get("kv_cache_tokens"))
    mml = log.max_concurrency_tokens_per_request or log.max_model_len
    b = _vllm_blocks(run, rel, log, kvb, src_tokens, th)
    row = {
        "run": run.name,
        "engine": "vllm",
        "device": log.kv_cache_device,
        "kv_bytes_per_token": kvb,
        "block_size": b.block,
        "max_model_len_tokens": mml,
        "blocks_theory": b.blocks,
        "blocks_basis": b.basis,
        "kv_pool_tokens_log": log.kv_cache_tokens,
        "max_concurrency_log": log.max_concurrency_x,
        "source": src_tokens,
    }
    if b.blocks is None or not b.block or not mml or kvb is None:
        missing = fnd.not_available(
            pre("kv_pool_tokens"),
            "tokens",
            "no_theory",
            "no block count: neither an override, VLLM_CPU_KVCACHE_SPACE nor a logged pool",
            [src_tokens],
            model_reason=th.model_reason,
        )
        return [row], [missing]
    tokens_th = theory.vllm_kv_cache_tokens_reported(b.blocks, b.block, mml)
    conc_th = theory.vllm_max_concurrency(b.blocks, b.block, mml)
    row.update(kv_pool_tokens_theory=tokens_th, max_concurrency_theory=conc_th)
    rounded = b.rounded and kvb is not None  # (a logged pool is a basis only with the KV bytes per token)
    tol = logged_gib_tolerance_pct(log.kv_cache_memory_gib, kvb, b.block, tokens_th) if rounded else 0.0
    out = [
        fnd.measured(
            pre("kv_pool_tokens"),
            log.kv_cache_tokens,
            "tokens",
            b.srcs,
            theory=float(tokens_th),
            tolerance_pct=tol,
            blocks=b.blocks,
            block_size=b.block,
            basis=b.basis,
            device=log.kv_cache_device,
            blocks_from_kvcache_space=b.space_blocks,
            kv_bytes_per_token=kvb,
            detail="logged 'KV cache size' vs floor(blocks ÷ ceil(max_model_len ÷ block) × max_model_len)",
        )
    ]
    if log.max_concurrency_x is not None:
        out.append(
            fnd.measured(
                pre("max_concurrency"),
                log.max_concurrency_x,
                "requests",
                [run.cite(rel, log.lines.get("max_concurrency_x")), *b.srcs[1:]],
                theory=conc_th,
                tolerance_pct=half_unit_pct(conc_th) + tol,
                detail="logged maximum concurrency (two decimals) vs blocks ÷ ceil(max_model_len ÷ block)",
            )
        )
    out += _metrics_blocks(run, pre, row, b, tol)
    return [row], out


def _cache_config_info(run: RunData) -> tuple[dict[str, str], str] | None:
    """The labels of vllm:cache_config_info in the first /metrics scrape that has them, and its citation."""
    srel, scrapes = run.scrapes
    if srel is None or scrapes is None:
        return None
    for r in scrapes.records:
        if r.source != "metrics" or not r.ok:
            continue
        samples = parsed_samples(r, str(run.info.path / srel)) or {}
        info = next((dict(lbl) for (name, lbl) in samples if name == VLLM_CACHE_CONFIG), None)
        if info and info.get("num_gpu_blocks") not in (None, "None"):
            return info, run.cite(srel, r.line)
    return None


def _metrics_blocks(run: RunData, pre: At, row: dict[str, Any], b: _Blocks, tol: float) -> list[fnd.Finding]:
    """/metrics: vllm:cache_config_info carries the block count the scheduler really has; against the theory's
    block count (the pool check's tolerance when that is rounded) and block size. Adds to ``row``."""
    found = _cache_config_info(run)
    if found is None or b.blocks is None:
        return []
    info, src = found
    nb = int(info["num_gpu_blocks"])
    row["blocks_metrics"] = nb
    row["block_size_metrics"] = int(info["block_size"]) if info.get("block_size") else None
    out = [
        fnd.measured(
            pre("kv_pool_blocks_metrics"),
            nb,
            "count",
            [src, *b.srcs[1:]],
            theory=float(b.blocks),
            tolerance_pct=0.0 if not b.rounded else tol,
            block_size_metrics=row["block_size_metrics"],
            detail="vllm:cache_config_info num_gpu_blocks vs the theory's block count",
        )
    ]
    if row["block_size_metrics"] is not None:
        out.append(
            fnd.checked(
                pre("block_size_matches_metrics"),
                row["block_size_metrics"] == b.block,
                [src, b.block_src or ""],
                theory_block_size=b.block,
                metrics_block_size=row["block_size_metrics"],
            )
        )
    return out


def _llamacpp(run: RunData, th: TheoryCtx) -> tuple[list[dict[str, Any]], list[fnd.Finding]]:
    """Slots, context per slot and the cells allocated (start-up log) against -c and -np, and the KV buffer
    against -c × KV bytes per token."""
    pre = run_at(run, th.weight_format_for(run))
    rel, log = run.server_log
    if rel is None or log is None or log.n_slots is None or log.n_ctx_slot is None:
        why = f"{run.cite(rel) if rel else run.name}: no n_slots / n_ctx_slot line"
        return [], [fnd.not_available(pre("n_ctx_slot"), "tokens", "no_kv_pool_line", why)]
    argv, argv_src = _command(run)
    c = flag(argv, "-c", "--ctx-size")
    np_ = flag(argv, "-np", "--parallel")
    unified = bool(argv) and has_flag(argv, "-kvu", "--kv-unified")
    slot_src = run.cite(rel, log.lines.get("n_slots"))
    row = {
        "run": run.name,
        "engine": "llamacpp",
        "n_slots_log": log.n_slots,
        "n_ctx_slot_log": log.n_ctx_slot,
        "kv_cache_mib_log": log.kv_cache_mib,
        "ctx_total_flag": int(c) if c else None,
        "slots_flag": int(np_) if np_ else None,
        "kv_unified": unified,
        "source": slot_src,
    }
    if c is None or np_ is None:
        why = "the server command gave no -c and -np to compute from"
        return [row], [fnd.not_available(pre("n_ctx_slot"), "tokens", "no_theory", why, [slot_src])]
    c_i, np_i = int(c), int(np_)
    ctx_th = theory.llama_cpp_n_ctx_slot(c_i, np_i, unified)
    row["n_ctx_slot_theory"] = ctx_th
    srcs = [slot_src, argv_src]
    out = [
        fnd.measured(
            pre("n_ctx_slot"),
            log.n_ctx_slot,
            "tokens",
            srcs,
            theory=float(ctx_th),
            tolerance_pct=0.0,
            ctx_total=c_i,
            slots=np_i,
            detail="logged n_ctx_slot vs -c ÷ -np (all of -c per slot with -kvu)",
        ),
        fnd.measured(pre("n_slots"), log.n_slots, "count", srcs, theory=float(np_i), tolerance_pct=0.0),
    ]
    cap = log.n_slots * log.n_ctx_slot
    row["capacity_tokens"] = cap
    out.append(
        fnd.measured(
            pre("capacity_tokens"),
            cap,
            "tokens",
            srcs,
            theory=float(c_i),
            tolerance_pct=0.0,
            detail="slots × n_ctx_slot vs -c (the cells the server allocated for all slots)",
        )
    )
    out += _llamacpp_kv_buffer(run, pre, rel, log, c_i, argv_src, row, th)
    return [row], out


def _llamacpp_kv_buffer(
    run: RunData,
    pre: At,
    rel: str,
    log: Any,
    ctx_total: int,
    argv_src: str,
    row: dict[str, Any],
    th: TheoryCtx,
) -> list[fnd.Finding]:
    """The logged KV buffer (MiB, two decimals) against -c × KV bytes per token of the logged K type; n/a
    without a model config. Adds the theory to ``row``."""
    kv_type = log.kv_k_type or "f16"
    kvb = theory.kv_bytes_per_token(th.cfg, kv_type) if th.cfg is not None else None
    if kvb is None:
        why = th.model_reason or "no model config for this campaign"
        slot_src = run.cite(rel, log.lines.get("n_slots"))
        return [fnd.not_available(pre("kv_cache_mib"), "MiB", "no_theory", why, [slot_src])]
    if log.kv_cache_mib is None:
        return []
    mib_th = theory.llama_cpp_kv_mib(ctx_total, kvb)
    row.update(kv_cache_mib_theory=mib_th, kv_bytes_per_token=kvb)
    return [
        fnd.measured(
            pre("kv_cache_mib"),
            log.kv_cache_mib,
            "MiB",
            [run.cite(rel, log.lines.get("kv_cache_mib")), argv_src, *th.model_source],
            theory=mib_th,
            tolerance_pct=half_unit_pct(mib_th),
            kv_type=kv_type,
            kv_bytes_per_token=kvb,
            detail="logged KV buffer (two decimals) vs -c × KV bytes/token",
        )
    ]


def run(s: SectionInput) -> Section:
    campaign, th = s.campaign, s.th
    rows: list[dict[str, Any]] = []
    findings: list[fnd.Finding] = []
    for r in campaign.runs:
        if not r.own or not r.points:
            continue
        if r.engine == "vllm":
            rr, ff = _vllm(r, th)
        elif r.engine == "llamacpp":
            rr, ff = _llamacpp(r, th)
        else:
            continue
        rows += rr
        findings += ff
    return Section(name="capacity", tables={"capacity": pd.DataFrame(rows)}, findings=findings)
