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

import pandas as pd

from analysis import findings as fnd
from analysis import theory
from analysis.campaign import RunData
from analysis.parse.scrapes_jsonl import parsed_samples
from analysis.reconcile import Context, Section, SectionInput, run_at
from analysis.reconcile.capacity.pool import (
    flag,
    half_unit_pct,
    has_flag,
    logged_gib_tolerance_pct,
    server_argv,
)
from analysis.reconcile.theoryctx import TheoryCtx

GIB = theory.GIB


def _vllm(run: RunData, th: TheoryCtx, ctx: Context) -> tuple[list[dict], list[fnd.Finding]]:
    pre = run_at(run, th.weight_format_for(run))
    rel, log = run.server_log
    argv, argv_src = server_argv(run)
    plan = run.docs.plan
    rows: list[dict] = []
    out: list[fnd.Finding] = []
    if log is None or log.kv_cache_tokens is None:
        out.append(
            fnd.not_available(
                pre("kv_pool_tokens"),
                "tokens",
                "no_kv_pool_line",
                f"{run.cite(rel) if rel else run.name}: no 'KV cache size' line",
            )
        )
        return rows, out
    kvb = th.kv_bytes_per_token_for_run(run.name)
    src_tokens = run.cite(rel, log.lines.get("kv_cache_tokens"))
    mml = log.max_concurrency_tokens_per_request or log.max_model_len
    block = plan.model.block_size if plan is not None else None
    block_src = run.cite(run.docs.files["plan"], "model.block_size") if plan is not None else None
    if argv and flag(argv, "--block-size"):
        block, block_src = int(flag(argv, "--block-size")), argv_src
    override = flag(argv, "--num-gpu-blocks-override") if argv else None
    blocks = None
    basis = None
    srcs = [src_tokens, *th.model_source]
    space = plan.server.env.get("VLLM_CPU_KVCACHE_SPACE") if plan is not None else None
    space_blocks = (
        theory.vllm_num_gpu_blocks(float(space) * GIB, block, kvb)
        if space is not None and kvb is not None and block
        else None
    )
    if override is not None:
        blocks, basis = int(override), "--num-gpu-blocks-override"
        srcs.append(argv_src)
    elif kvb is not None and block:
        if space is not None:
            pool_bytes = float(space) * GIB
            blocks, basis = theory.vllm_num_gpu_blocks(pool_bytes, block, kvb), "VLLM_CPU_KVCACHE_SPACE"
            srcs.append(run.cite(run.docs.files["plan"], "server.env.VLLM_CPU_KVCACHE_SPACE"))
        elif log.kv_cache_memory_gib is not None:
            blocks = theory.vllm_num_gpu_blocks(log.kv_cache_memory_gib * GIB, block, kvb)
            basis = "Available KV cache memory (logged, two decimals)"
            srcs.append(run.cite(rel, log.lines.get("kv_cache_memory_gib")))
    row = {
        "run": run.name,
        "engine": "vllm",
        "device": log.kv_cache_device,
        "kv_bytes_per_token": kvb,
        "block_size": block,
        "max_model_len_tokens": mml,
        "blocks_theory": blocks,
        "blocks_basis": basis,
        "kv_pool_tokens_log": log.kv_cache_tokens,
        "max_concurrency_log": log.max_concurrency_x,
        "source": src_tokens,
    }
    if blocks is None or not block or not mml:
        out.append(
            fnd.not_available(
                pre("kv_pool_tokens"),
                "tokens",
                "no_theory",
                "no block count: neither an override, VLLM_CPU_KVCACHE_SPACE nor a logged pool",
                [src_tokens],
                model_reason=th.model_reason,
            )
        )
        rows.append(row)
        return rows, out
    # a logged GiB is rounded: the block count is then known only to a range
    rounded = basis is not None and basis.startswith("Available")
    tokens_th = theory.vllm_kv_cache_tokens_reported(blocks, block, mml)
    conc_th = theory.vllm_max_concurrency(blocks, block, mml)
    row.update(kv_pool_tokens_theory=tokens_th, max_concurrency_theory=conc_th)
    tol = 0.0
    if rounded:
        tol = logged_gib_tolerance_pct(log.kv_cache_memory_gib, kvb, block, tokens_th)
    out.append(
        fnd.measured(
            pre("kv_pool_tokens"),
            log.kv_cache_tokens,
            "tokens",
            srcs,
            theory=float(tokens_th),
            tolerance_pct=tol,
            blocks=blocks,
            block_size=block,
            basis=basis,
            device=log.kv_cache_device,
            blocks_from_kvcache_space=space_blocks,
            kv_bytes_per_token=kvb,
            detail="logged 'KV cache size' vs floor(blocks ÷ ceil(max_model_len ÷ block) × max_model_len)",
        )
    )
    if log.max_concurrency_x is not None:
        out.append(
            fnd.measured(
                pre("max_concurrency"),
                log.max_concurrency_x,
                "requests",
                [run.cite(rel, log.lines.get("max_concurrency_x")), *srcs[1:]],
                theory=conc_th,
                tolerance_pct=half_unit_pct(conc_th) + tol,
                detail="logged maximum concurrency (two decimals) vs blocks ÷ ceil(max_model_len ÷ block)",
            )
        )
    # /metrics: vllm:cache_config_info carries the block count the scheduler really has
    srel, scrapes = run.scrapes
    if scrapes is not None:
        for r in scrapes.records:
            if r.source != "metrics" or not r.ok:
                continue
            info = next(
                (
                    dict(lbl)
                    for (name, lbl) in parsed_samples(r, str(run.info.path / srel)) or {}
                    if name == "vllm:cache_config_info"
                ),
                None,
            )
            if info and info.get("num_gpu_blocks") not in (None, "None"):
                nb = int(info["num_gpu_blocks"])
                row["blocks_metrics"] = nb
                row["block_size_metrics"] = int(info["block_size"]) if info.get("block_size") else None
                out.append(
                    fnd.measured(
                        pre("kv_pool_blocks_metrics"),
                        nb,
                        "count",
                        [run.cite(srel, r.line), *srcs[1:]],
                        theory=float(blocks),
                        tolerance_pct=0.0 if not rounded else tol,
                        block_size_metrics=row["block_size_metrics"],
                        detail="vllm:cache_config_info num_gpu_blocks vs the theory's block count",
                    )
                )
                if row["block_size_metrics"] is not None:
                    out.append(
                        fnd.checked(
                            pre("block_size_matches_metrics"),
                            row["block_size_metrics"] == block,
                            [run.cite(srel, r.line), block_src or ""],
                            theory_block_size=block,
                            metrics_block_size=row["block_size_metrics"],
                        )
                    )
                break
    rows.append(row)
    return rows, out


def _llamacpp(run: RunData, th: TheoryCtx) -> tuple[list[dict], list[fnd.Finding]]:
    pre = run_at(run, th.weight_format_for(run))
    rel, log = run.server_log
    argv, argv_src = server_argv(run)
    rows: list[dict] = []
    out: list[fnd.Finding] = []
    if log is None or log.n_slots is None or log.n_ctx_slot is None:
        out.append(
            fnd.not_available(
                pre("n_ctx_slot"),
                "tokens",
                "no_kv_pool_line",
                f"{run.cite(rel) if rel else run.name}: no n_slots / n_ctx_slot line",
            )
        )
        return rows, out
    c = flag(argv, "-c", "--ctx-size") if argv else None
    np_ = flag(argv, "-np", "--parallel") if argv else None
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
        out.append(
            fnd.not_available(
                pre("n_ctx_slot"),
                "tokens",
                "no_theory",
                "the server command gave no -c and -np to compute from",
                [slot_src],
            )
        )
        rows.append(row)
        return rows, out
    c_i, np_i = int(c), int(np_)
    ctx_th = theory.llama_cpp_n_ctx_slot(c_i, np_i, unified)
    row["n_ctx_slot_theory"] = ctx_th
    out.append(
        fnd.measured(
            pre("n_ctx_slot"),
            log.n_ctx_slot,
            "tokens",
            [slot_src, argv_src],
            theory=float(ctx_th),
            tolerance_pct=0.0,
            ctx_total=c_i,
            slots=np_i,
            detail="logged n_ctx_slot vs -c ÷ -np (all of -c per slot with -kvu)",
        )
    )
    out.append(
        fnd.measured(
            pre("n_slots"), log.n_slots, "count", [slot_src, argv_src], theory=float(np_i), tolerance_pct=0.0
        )
    )
    cap = log.n_slots * log.n_ctx_slot
    row["capacity_tokens"] = cap
    out.append(
        fnd.measured(
            pre("capacity_tokens"),
            cap,
            "tokens",
            [slot_src, argv_src],
            theory=float(c_i),
            tolerance_pct=0.0,
            detail="slots × n_ctx_slot vs -c (the cells the server allocated for all slots)",
        )
    )
    kv_type = log.kv_k_type or "f16"
    kvb = theory.kv_bytes_per_token(th.cfg, kv_type) if th.cfg is not None else None
    if log.kv_cache_mib is not None and kvb is not None:
        mib_th = theory.llama_cpp_kv_mib(c_i, kvb)
        row.update(kv_cache_mib_theory=mib_th, kv_bytes_per_token=kvb)
        out.append(
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
        )
    elif kvb is None:
        out.append(
            fnd.not_available(
                pre("kv_cache_mib"),
                "MiB",
                "no_theory",
                th.model_reason or "no model config for this campaign",
                [slot_src],
            )
        )
    rows.append(row)
    return rows, out


def run(s: SectionInput) -> Section:
    campaign, ctx, th = s.campaign, s.ctx, s.th
    rows: list[dict] = []
    findings: list[fnd.Finding] = []
    for r in campaign.runs:
        if not r.own or not r.points:
            continue
        if r.engine == "vllm":
            rr, ff = _vllm(r, th, ctx)
        elif r.engine == "llamacpp":
            rr, ff = _llamacpp(r, th)
        else:
            continue
        rows += rr
        findings += ff
    return Section(name="capacity", tables={"capacity": pd.DataFrame(rows)}, findings=findings)
