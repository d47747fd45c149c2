"""Prediction vs measurement for our own runs: what `collector plan` wrote into prediction.json BEFORE the
first request, set against what the run then measured — decode step floor vs the measured single-stream
p50 ITL, KV pool tokens, maximum concurrency, and the weights the server loaded.

The prediction is never recomputed here: it is read as recorded, so a later change of the theory cannot
quietly improve an old prediction. A run whose prediction is empty (`collector plan` refused, e.g. a GPU
with no datasheet) gets n/a findings that quote the recorded error.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from analysis.core import findings as fnd
from analysis.core.keys import At
from analysis.loading.campaign import BenchPoint, RunData
from analysis.reconcile import Section, SectionInput, run_at
from analysis.reconcile.capacity import max_concurrency_measured, pool_tokens_measured
from analysis.reconcile.concurrency import run_sweep_points
from analysis.reconcile.theoryctx import TheoryCtx
from collector.raw.prediction import PredictedTheory

# An estimated pool (no --kv-pool-gib) is the vLLM-style guess: ±10 % is what it can promise.
ESTIMATED_POOL_TOLERANCE_PCT = 10.0
# llama.cpp's model buffers hold the tensors plus alignment padding; the GGUF recipe should be within 1 %.
WEIGHT_BYTES_TOLERANCE_PCT = 1.0
MIB = 2**20


def ratio(measured: float, predicted: float) -> float:
    """measured ÷ predicted, dimensionless (1 = as predicted)."""
    return measured / predicted


def floor_achievement_pct(floor_ms: float, measured_ms: float) -> float:
    """How close the measured step came to the predicted floor, %: floor ÷ measured × 100."""
    return floor_ms / measured_ms * 100.0


def model_buffer_mib(log: object) -> float | None:
    """The weights llama.cpp loaded, MiB: Σ of its `model buffer size` lines over devices."""
    bufs = [b.mib for b in getattr(log, "buffers", []) if b.kind == "model"]
    return sum(bufs) if bufs else None


@dataclass
class _RunPrediction:
    """One run's recorded prediction while its rows (the table) and findings are gathered."""

    run: RunData
    pred: PredictedTheory
    prel: str  # the run-relative prediction file
    pre: At  # quantity -> the finding's address
    rows: list[dict[str, Any]] = field(default_factory=list)
    out: list[fnd.Finding] = field(default_factory=list)

    def cite(self, key: str) -> str:
        """A citation of one key of the prediction file (``prediction.<name>``)."""
        return self.run.cite(self.prel, key)

    def row(
        self,
        quantity: str,
        unit: str,
        predicted: tuple[float | None, str],
        measured: tuple[float | None, str | None],
        **extra: Any,
    ) -> None:
        """A table row: (predicted value, its key in the file), (measured value, its citation)."""
        (pval, pkey), (mval, msrc) = predicted, measured
        self.rows.append(
            {
                "run": self.run.name,
                "engine": self.run.engine,
                "quantity": quantity,
                "unit": unit,
                "predicted": pval,
                "measured": mval,
                "ratio": ratio(mval, pval) if mval is not None and pval else None,
                "predicted_source": self.cite(pkey),
                "measured_source": msrc or "",
                **extra,
            }
        )


def _no_prediction(run: RunData, pre: At) -> list[fnd.Finding]:
    """n/a findings quoting why the run has no prediction (no file, or `collector plan` refused)."""
    doc = run.docs.prediction
    keys = (("decode_step_ms", "ms"), ("kv_pool_tokens", "tokens"), ("max_concurrency", "requests"))
    why = (
        "no prediction.json in the run"
        if doc is None
        else f"{run.cite(run.docs.files['prediction'], 'error')}: {doc.error}"
    )
    srcs = [run.cite(run.docs.files["prediction"])] if doc is not None else []
    return [fnd.not_available(pre(k), u, "no_prediction", why, srcs) for k, u in keys]


def _rows_for_run(run: RunData, th: TheoryCtx) -> tuple[list[dict[str, Any]], list[fnd.Finding]]:
    pre = run_at(run, th.weight_format_for(run), topic="prediction")
    doc = run.docs.prediction
    if doc is None or doc.prediction is None:
        return [], _no_prediction(run, pre)
    rp = _RunPrediction(run, doc.prediction, run.docs.files["prediction"], pre)
    _decode_step(rp)
    _kv_pool_and_concurrency(rp)
    _weights(rp)
    return rp.rows, rp.out


def _decode_step(rp: _RunPrediction) -> None:
    """The single-stream decode step (p50 ITL at the lowest concurrency) vs the predicted floor."""
    pre, pred, floor_key = rp.pre, rp.pred, "prediction.decode_step_floor_ms"
    sweep = run_sweep_points(rp.run)
    c1 = min(sweep, key=lambda p: p.concurrency or 0) if sweep else None
    floor = pred.decode_step_floor_ms
    if c1 is None:
        why = f"{rp.run.name}: no sweep point to set against the floor"
        rp.out.append(fnd.not_available(pre("decode_step_ms"), "ms", "no_concurrency_1", why))
        return
    if floor is None:
        rp.out.append(
            fnd.not_available(
                pre("decode_step_ms"),
                "ms",
                "no_gpu_datasheet",
                f"{rp.cite(floor_key)}: no floor predicted (device {pred.gpu!r} has no datasheet bandwidth)",
                [c1.cite("p50_itl_ms"), rp.cite(floor_key)],
                p50_itl_ms=c1.result.itl.p50_ms,
                concurrency=c1.concurrency,
            )
        )
        return
    itl = c1.result.itl.p50_ms
    if itl is None:
        why = f"{c1.key}: no request completed with a second token, so no ITL to set against the floor"
        rp.out.append(
            fnd.not_available(
                pre("decode_step_ms"),
                "ms",
                "point_cut",
                why,
                [c1.cite("p50_itl_ms")],
                concurrency=c1.concurrency,
            )
        )
        return
    _decode_step_measured(rp, c1, floor, itl)


def _decode_step_measured(rp: _RunPrediction, c1: BenchPoint, floor: float, itl: float) -> None:
    pre, pred, floor_key = rp.pre, rp.pred, "prediction.decode_step_floor_ms"
    srcs = [c1.cite("p50_itl_ms"), rp.cite(floor_key)]
    rp.row(
        "decode_step_ms",
        "ms",
        (floor, floor_key),
        (itl, c1.cite("p50_itl_ms")),
        concurrency=c1.concurrency,
        context_tokens_predicted=pred.decode_context_tokens,
    )
    rp.out.append(
        fnd.measured(
            pre("decode_step_ms"),
            itl,
            "ms",
            srcs,
            predicted_floor_ms=floor,
            floor_achievement_pct=floor_achievement_pct(floor, itl),
            concurrency=c1.concurrency,
            predicted_context_tokens=pred.decode_context_tokens,
            gpu=pred.gpu,
            detail="measured p50 ITL at the lowest concurrency; the prediction is a floor "
            "(bytes read per step ÷ datasheet bandwidth), so measured ≥ predicted",
        )
    )
    rp.out.append(
        fnd.checked(
            pre("decode_step_above_floor"),
            itl >= floor,
            srcs,
            detail="a step faster than its memory floor would mean the byte ledger or the bandwidth is wrong",
            floor_ms=floor,
            measured_ms=itl,
        )
    )
    tps = pred.decode_tokens_per_s_single_stream
    if c1.concurrency == 1 and tps:
        rp.row(
            "decode_tokens_per_s_single_stream",
            "tokens/s",
            (tps, "prediction.decode_tokens_per_s_single_stream"),
            (c1.result.output_throughput_tok_s, c1.cite("output_throughput")),
            concurrency=1,
        )


def _kv_pool_and_concurrency(rp: _RunPrediction) -> None:
    """The server's KV pool (tokens) and full-length concurrency vs the prediction: exact for a given
    pool, ±10 % for an estimated one (vLLM's logged concurrency also ±0.005 for its 2-decimal print)."""
    run, pred, pre = rp.run, rp.pred, rp.pre
    vllm = run.engine == "vllm"
    tol_pool = 0.0 if pred.kv_pool_source == "given" else ESTIMATED_POOL_TOLERANCE_PCT
    meas_pool, pool_src = pool_tokens_measured(run)
    pkey = "prediction.vllm_kv_cache_tokens" if vllm else "prediction.kv_pool_tokens"
    pred_pool = pred.vllm_kv_cache_tokens if vllm else pred.kv_pool_tokens
    if meas_pool is None or pool_src is None:
        why = f"{run.name}: no pool line in the server log"
        rp.out.append(fnd.not_available(pre("kv_pool_tokens"), "tokens", "no_kv_pool_line", why))
    else:
        source = pred.kv_pool_source
        rp.row("kv_pool_tokens", "tokens", (pred_pool, pkey), (meas_pool, pool_src), pool_source=source)
        rp.out.append(
            fnd.measured(
                pre("kv_pool_tokens"),
                meas_pool,
                "tokens",
                [pool_src, rp.cite(pkey)],
                theory=float(pred_pool),
                tolerance_pct=tol_pool,
                pool_source=source,
                detail="the server's pool (vLLM: logged size; llama.cpp: slots × n_ctx_slot) vs the "
                "prediction (given pool: exact; estimated pool: ±10 %)",
            )
        )
    meas_c, c_src = max_concurrency_measured(run)
    ckey = "prediction.max_concurrency_vllm" if vllm else "prediction.max_concurrency"
    pred_c = pred.max_concurrency_vllm if vllm else pred.max_concurrency
    if meas_c is None or c_src is None:
        why = f"{run.name}: no concurrency line in the server log"
        rp.out.append(fnd.not_available(pre("max_concurrency"), "requests", "no_kv_pool_line", why))
        return
    tol_c = tol_pool + (0.005 / pred_c * 100 if vllm else 0.0)
    rp.row("max_concurrency", "requests", (pred_c, ckey), (meas_c, c_src))
    rp.out.append(
        fnd.measured(
            pre("max_concurrency"),
            meas_c,
            "requests",
            [c_src, rp.cite(ckey)],
            theory=float(pred_c),
            tolerance_pct=tol_c,
            detail="vLLM: logged maximum concurrency; llama.cpp: slots — vs pool ÷ max_model_len",
        )
    )


def _weights(rp: _RunPrediction) -> None:
    """llama.cpp's model buffers (MiB, from its log) vs the GGUF recipe's predicted weight bytes."""
    run, pred = rp.run, rp.pred
    rel, log = run.server_log
    if run.engine != "llamacpp" or rel is None or log is None or not pred.weight_bytes:
        return
    mib = model_buffer_mib(log)
    if mib is None:
        return
    wp = pred.weight_bytes / MIB
    wkey = "prediction.weight_bytes"
    rp.row("weight_mib", "MiB", (wp, wkey), (mib, run.cite(rel)), weight_format=pred.weight_format)
    rp.out.append(
        fnd.measured(
            rp.pre("weight_mib"),
            mib,
            "MiB",
            [run.cite(rel), rp.cite(wkey)],
            theory=wp,
            tolerance_pct=WEIGHT_BYTES_TOLERANCE_PCT,
            predicted_weight_format=pred.weight_format,
            detail="Σ llama.cpp 'model buffer size' lines vs the GGUF recipe's tensor bytes",
        )
    )


def run(s: SectionInput) -> Section:
    campaign, th = s.campaign, s.th
    rows: list[dict[str, Any]] = []
    findings: list[fnd.Finding] = []
    for r in campaign.runs:
        if r.own and r.points:
            rr, ff = _rows_for_run(r, th)
            rows += rr
            findings += ff
    cols = [
        "run",
        "engine",
        "quantity",
        "unit",
        "predicted",
        "measured",
        "ratio",
        "predicted_source",
        "measured_source",
    ]
    return Section(
        name="prediction",
        tables={"prediction_vs_measured": pd.DataFrame(rows, columns=None if rows else cols)},
        findings=findings,
    )
