"""Where the memory goes: the KV pool a hand estimate gives from memory arithmetic against the pool the engine
logged, and the split the engine's own log lines give (weights, non-torch memory, activation peak, CUDA
graphs; llama.cpp: model, KV, compute and output buffers).

vLLM sizes its pool as  utilization × total − (weights + non-torch) − activation peak  (the profiling run's
``Free memory on device … Actual usage is …`` line, GiB with two decimals); CUDA graphs are captured after the
pool is sized and come on top. The hand estimate (``theory.estimated_kv_pool_bytes``) uses the datasheet's
memory, the theory's weight bytes and a fixed reserve for everything else; the difference between the two is
split term by term:

    log − hand = u·(total_cuda − total_datasheet) − (weights_loaded − weights_theory) − non_torch − activation
                 + reserve

Keys: ``<round>.memory.<metric>`` (an imported campaign, from the round's first vLLM log) and
``runs.<run>.memory.<metric>`` (our own runs).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pandas as pd

from analysis.core import findings as fnd
from analysis.core import theory
from analysis.core.keys import At
from analysis.loading.campaign import RunData
from analysis.reconcile import Section, SectionInput, run_at
from analysis.reconcile.theoryctx import TheoryCtx

GIB = theory.GIB
MIB = 2**20
LOG_HALF_GIB = 0.005  # vLLM prints GiB with two decimals
# "Model loading took X GiB" holds the weights plus the few buffers the model allocates with them (rotary
# tables, …): within this of the theory's weight bytes it is the weights.
WEIGHTS_TOLERANCE_PCT = 2.0
# llama.cpp's model buffers are the GGUF tensor data plus 32-byte alignment padding.
BUFFER_TOLERANCE_PCT = 0.5


def pool_from_ledger_gib(requested_gib: float, consumed_gib: float, activation_gib: float) -> float:
    """vLLM's KV pool from its own ledger, GiB: utilization × total − (weights + non-torch) − activation
    peak."""
    return requested_gib - consumed_gib - activation_gib


def hand_gap_terms(
    util: float,
    total_cuda_gib: float,
    total_datasheet_gib: float,
    weights_loaded_gib: float,
    weights_theory_gib: float,
    non_torch_gib: float,
    activation_gib: float,
    reserve_gib: float,
) -> dict[str, float]:
    """The logged pool minus the hand estimate, term by term, GiB (their sum is the gap up to log rounding):
    memory CUDA reports vs the datasheet (× u), weights loaded vs theory, non-torch, activation peak, the
    reserve the estimate set aside."""
    return {
        "total_memory": util * (total_cuda_gib - total_datasheet_gib),
        "weights": -(weights_loaded_gib - weights_theory_gib),
        "non_torch": -non_torch_gib,
        "peak_activation": -activation_gib,
        "reserve": reserve_gib,
    }


@dataclass
class _Ledger:
    """One vLLM start-up log's memory ledger, as the findings read it (GiB; citations)."""

    run: RunData
    rel: str  # the log, run-relative
    log: Any  # analysis.parse.vllm_log.VllmServerLog
    mem: Any  # its memory line (log.memory)
    line: str  # citation of the memory line
    pool_src: str  # citation of 'Available KV cache memory'
    weights_theory_gib: float | None  # the theory's weight bytes of the served format
    ledger_gib: float  # pool_from_ledger_gib

    @property
    def loaded_gib(self) -> float | None:
        """'Model loading took X GiB'."""
        gib: float | None = self.log.weights_loaded_gib
        return gib

    @property
    def non_torch_gib(self) -> float | None:
        """consumed (weights + non-torch) − loaded weights."""
        return self.mem.consumed_gib - self.loaded_gib if self.loaded_gib is not None else None

    @property
    def weights_src(self) -> str:
        return self.run.cite(self.rel, self.log.lines.get("weights_loaded_gib"))


def _vllm(at: At, run: RunData, th: TheoryCtx) -> tuple[list[dict[str, Any]], list[fnd.Finding]]:
    """The pool from vLLM's own ledger against the logged pool, the ledger's terms, and the hand estimate's
    gap to the logged pool term by term."""
    rel, log = run.server_log
    mem = getattr(log, "memory", None) if log is not None else None
    names = (
        "kv_pool_hand_estimate_gib",
        "kv_pool_from_ledger_gib",
        "weights_loaded_gib",
        "peak_activation_gib",
    )
    if (
        rel is None
        or log is None
        or mem is None
        or mem.consumed_gib is None
        or log.kv_cache_memory_gib is None
    ):
        why = (
            f"{run.cite(rel) if rel else run.name}: no 'Free memory on device … Actual usage is …' line "
            "(a CPU vLLM sizes its pool from VLLM_CPU_KVCACHE_SPACE, not from memory arithmetic)"
        )
        return [], [fnd.not_available(at(n), "GiB", "no_memory_line", why) for n in names]
    m = _Ledger(
        run=run,
        rel=rel,
        log=log,
        mem=mem,
        line=run.cite(rel, mem.line),
        pool_src=run.cite(rel, log.lines.get("kv_cache_memory_gib")),
        weights_theory_gib=(
            theory.weight_bytes(th.cfg, th.weight_format_for(run) or "bf16") / GIB
            if th.cfg is not None
            else None
        ),
        ledger_gib=pool_from_ledger_gib(mem.requested_gib, mem.consumed_gib, mem.peak_activation_gib),
    )
    out = _ledger_findings(at, m, th)
    rows, hand = _hand_estimate(at, m, th)
    out += hand
    return rows + _ledger_rows(m, th), out


def _ledger_findings(at: At, m: _Ledger, th: TheoryCtx) -> list[fnd.Finding]:
    """The pool from the log's own ledger against the logged pool; weights loaded against theory; non-torch;
    activation peak; CUDA graphs."""
    mem, line = m.mem, m.line
    out = [
        fnd.measured(
            at("kv_pool_from_ledger_gib"),
            m.ledger_gib,
            "GiB",
            [line],
            theory=m.log.kv_cache_memory_gib,
            tolerance_pct=3 * LOG_HALF_GIB / m.log.kv_cache_memory_gib * 100,
            requested_gib=mem.requested_gib,
            consumed_gib=mem.consumed_gib,
            peak_activation_gib=mem.peak_activation_gib,
            detail="utilization × CUDA total − (weights + non-torch) − activation peak, from the log's own "
            "ledger line, against 'Available KV cache memory' (three numbers of two decimals: ±0.015 GiB)",
        )
    ]
    if m.loaded_gib is not None:
        kw = (
            {"theory": m.weights_theory_gib, "tolerance_pct": WEIGHTS_TOLERANCE_PCT}
            if m.weights_theory_gib
            else {}
        )
        out.append(
            fnd.measured(
                at("weights_loaded_gib"),
                m.loaded_gib,
                "GiB",
                [m.weights_src, *th.model_source],
                **kw,
                detail="'Model loading took X GiB' against the theory's weight bytes of the served format",
            )
        )
        out.append(
            fnd.measured(
                at("non_torch_gib"),
                m.non_torch_gib,
                "GiB",
                [line, m.weights_src],
                detail=(
                    "consumed (weights + non-torch) − 'Model loading took': CUDA context, NCCL, "
                    "allocator slack"
                ),
            )
        )
    out.append(fnd.measured(at("peak_activation_gib"), mem.peak_activation_gib, "GiB", [line]))
    if mem.cuda_graph_gib is not None:
        out.append(
            fnd.measured(
                at("cuda_graph_gib"),
                mem.cuda_graph_gib,
                "GiB",
                [line],
                detail="captured after the pool was sized: on top of the utilization budget",
            )
        )
    return out


def _hand_estimate(at: At, m: _Ledger, th: TheoryCtx) -> tuple[list[dict[str, Any]], list[fnd.Finding]]:
    """The hand estimate of the pool (utilization × datasheet memory − theory weights − a fixed reserve) and
    the logged pool's gap to it, term by term (``hand_gap_terms``); n/a without a datasheet or theory."""
    gpu, mem = th.gpu, m.mem
    if gpu is None or not gpu.memory_bytes or m.weights_theory_gib is None:
        why = th.gpu_reason or "no datasheet memory or no model theory for the hand estimate"
        return [], [fnd.not_available(at("kv_pool_hand_estimate_gib"), "GiB", "no_gpu_datasheet", why)]
    util = mem.gpu_memory_utilization
    reserve = theory.DEFAULT_KV_RESERVE_BYTES / GIB
    hand = (
        theory.estimated_kv_pool_bytes(
            gpu.memory_bytes, m.weights_theory_gib * GIB, util, theory.DEFAULT_KV_RESERVE_BYTES
        )
        / GIB
    )
    terms = (
        hand_gap_terms(
            util,
            mem.total_gib,
            gpu.memory_bytes / GIB,
            m.loaded_gib,
            m.weights_theory_gib,
            m.non_torch_gib,
            mem.peak_activation_gib,
            reserve,
        )
        if m.loaded_gib is not None and m.non_torch_gib is not None
        else {}
    )
    out = [
        fnd.measured(
            at("kv_pool_hand_estimate_gib"),
            hand,
            "GiB",
            [*th.gpu_source, *th.model_source, m.line],
            gpu_memory_gib=gpu.memory_bytes / GIB,
            gpu_memory_utilization=util,
            weights_gib=m.weights_theory_gib,
            reserve_gib=reserve,
            detail="utilization × datasheet memory − theory weight bytes − a fixed 1 GiB reserve",
        ),
        fnd.measured(
            at("kv_pool_log_minus_hand_estimate_gib"),
            m.log.kv_cache_memory_gib - hand,
            "GiB",
            [m.pool_src, m.line, *th.gpu_source],
            terms_gib=terms,
            terms_sum_gib=sum(terms.values()) if terms else None,
            detail="logged pool − hand estimate, split into: CUDA total vs datasheet (× utilization), "
            "weights loaded vs theory, non-torch, activation peak, + the reserve the estimate "
            "set aside",
        ),
    ]
    rows = [_row(m.run, "hand_estimate", hand, None, ";".join([*th.gpu_source, *th.model_source]))]
    rows += [_row(m.run, f"gap_{k}", v, None, m.line) for k, v in terms.items()]
    return rows, out


def _ledger_rows(m: _Ledger, th: TheoryCtx) -> list[dict[str, Any]]:
    """The memory table's ledger rows: CUDA total, budget, weights, non-torch, activation, pool, graphs."""
    gpu, mem, line = th.gpu, m.mem, m.line
    items = (
        ("cuda_total", mem.total_gib, gpu.memory_bytes / GIB if gpu and gpu.memory_bytes else None, line),
        ("budget", mem.requested_gib, None, line),
        ("weights", m.loaded_gib, m.weights_theory_gib, m.weights_src),
        ("non_torch", m.non_torch_gib, None, line),
        ("peak_activation", mem.peak_activation_gib, None, line),
        ("kv_pool", m.log.kv_cache_memory_gib, m.ledger_gib, m.pool_src),
        ("cuda_graph", mem.cuda_graph_gib, None, line),
    )
    return [_row(m.run, item, v, theo, src) for item, v, theo, src in items if v is not None]


def _row(run: RunData, item: str, gib: float, theory_gib: float | None, source: str) -> dict[str, Any]:
    return {
        "round": run.round or "",
        "run": run.name,
        "engine": run.engine,
        "item": item,
        "gib": gib,
        "theory_gib": theory_gib,
        "source": source,
    }


def _gpu_memory_used(at: At, run: RunData) -> list[fnd.Finding]:
    """What the fingerprint's ``nvidia-smi --query-gpu=memory.used`` read after the server started (MiB, the
    whole device: weights, KV, compute buffers and the CUDA context together); none where it was not kept."""
    frel, fp = run.fingerprint
    used = fp.gpu_memory_used_mib if fp is not None else None
    if frel is None or fp is None or not used:
        return []
    src = run.cite(frel, fp.lines.get("gpu_memory_used_mib"))
    detail = "nvidia-smi memory.used after the server started: weights, KV, compute buffers and context"
    return [fnd.measured(at("gpu_memory_used_mib"), max(used), "MiB", [src], detail=detail)]


def _llamacpp(at: At, run: RunData, th: TheoryCtx) -> tuple[list[dict[str, Any]], list[fnd.Finding]]:
    """llama.cpp's buffers by kind (summed over devices) from its log, the model buffers against the theory's
    tensor bytes of the served format."""
    rel, log = run.server_log
    bufs = getattr(log, "buffers", None) if log is not None else None
    if rel is None or not bufs:
        return [], [
            fnd.not_available(
                at("model_buffer_gib"),
                "GiB",
                "no_memory_line",
                f"{run.cite(rel) if rel else run.name}: no 'buffer size' lines (llama.cpp prints them only "
                "at verbosity ≥ the default of the build that wrote this log)",
            ),
            *_gpu_memory_used(at, run),
        ]
    rows: list[dict[str, Any]] = []
    by_kind: dict[str, float] = {}
    lines: dict[str, list[str]] = {}
    for b in bufs:
        by_kind[b.kind] = by_kind.get(b.kind, 0.0) + b.mib
        lines.setdefault(b.kind, []).append(run.cite(rel, b.line))
        rows.append(
            {
                "round": run.round or "",
                "run": run.name,
                "engine": run.engine,
                "item": f"{b.kind}_{b.device}",
                "gib": b.mib / 1024,
                "theory_gib": None,
                "source": run.cite(rel, b.line),
            }
        )
    out: list[fnd.Finding] = []
    fmt = th.weight_format_for(run)
    theo = theory.weight_bytes(th.cfg, fmt) / GIB if th.cfg is not None and fmt else None
    model = by_kind.get("model")
    if model is not None:
        kw = {"theory": theo, "tolerance_pct": BUFFER_TOLERANCE_PCT} if theo else {}
        out.append(
            fnd.measured(
                at("model_buffer_gib"),
                model / 1024,
                "GiB",
                [*lines["model"], *th.model_source],
                **kw,
                detail="Σ 'model buffer size' over devices (a host-mapped part holds the embedding table) "
                "against the theory's tensor bytes of the weight format",
            )
        )
    for kind in ("KV", "compute", "output"):
        if kind in by_kind:
            out.append(
                fnd.measured(
                    at(f"{kind.lower()}_buffer_gib"),
                    by_kind[kind] / 1024,
                    "GiB",
                    lines[kind],
                    devices=len(lines[kind]),
                )
            )
    return rows, out


def run(s: SectionInput) -> Section:
    campaign, th = s.campaign, s.th
    rows: list[dict[str, Any]] = []
    findings: list[fnd.Finding] = []
    if campaign.own:
        for r in campaign.runs:
            if not r.points or r.server_log[1] is None:
                continue
            at = run_at(r, th.weight_format_for(r), topic="memory")
            got = _vllm(at, r, th) if r.engine == "vllm" else _llamacpp(at, r, th)
            rows += got[0]
            findings += got[1]
    else:
        for rnd in campaign.rounds:
            runs = [r for r in campaign.select(round=rnd, engine="vllm") if r.server_log[1] is not None]
            if not runs:
                findings.append(
                    fnd.not_available(
                        At(round=rnd, topic="memory")("kv_pool_hand_estimate_gib"),
                        "GiB",
                        "no_server_log",
                        f"no vLLM start-up log in {rnd or 'the campaign'}",
                    )
                )
                continue
            r = runs[0]  # the round's first vLLM start-up, as kv.py reports the pool from it
            at = At(
                round=rnd, topic="memory", run=r.name, engine="vllm", weight_format=th.weight_format_for(r)
            )
            got = _vllm(at, r, th)
            rows += got[0]
            findings += got[1]
            for r in campaign.select(round=rnd, engine="llamacpp"):
                if r.server_log[1] is None:
                    continue
                at = At(
                    round=rnd,
                    topic="memory",
                    level="engine",
                    engine="llamacpp",
                    weight_format=th.weight_format_for(r),
                )
                got = _llamacpp(at, r, th)
                rows += got[0]
                findings += got[1]
                break
    cols = ["round", "run", "engine", "item", "gib", "theory_gib", "source"]
    return Section(
        name="memory", tables={"memory_ledger": pd.DataFrame(rows, columns=cols)}, findings=findings
    )
