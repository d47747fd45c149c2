"""Prediction vs measurement for our own runs: what `collector plan` wrote into prediction.json BEFORE the
first request, set against what the run then measured — decode step floor vs the measured single-stream
p50 ITL, KV pool tokens, maximum concurrency, and the weights the server loaded.

The prediction is never recomputed here: it is read as recorded, so a later change of the theory cannot
quietly improve an old prediction. A run whose prediction is empty (`collector plan` refused, e.g. a GPU
with no datasheet) gets n/a findings that quote the recorded error.
"""

from __future__ import annotations

import pandas as pd

from analysis import findings as fnd
from analysis.campaign import RunData
from analysis.reconcile import Section, SectionInput, run_at
from analysis.reconcile.capacity import max_concurrency_measured, pool_tokens_measured
from analysis.reconcile.concurrency import run_sweep_points
from analysis.reconcile.theoryctx import TheoryCtx

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


def model_buffer_mib(log) -> float | None:
    """The weights llama.cpp loaded, MiB: Σ of its `model buffer size` lines over devices."""
    bufs = [b.mib for b in getattr(log, "buffers", []) if b.kind == "model"]
    return sum(bufs) if bufs else None


def _rows_for_run(run: RunData, th: TheoryCtx) -> tuple[list[dict], list[fnd.Finding]]:
    pre = run_at(run, th.weight_format_for(run), topic="prediction")
    doc = run.docs.prediction
    keys = (("decode_step_ms", "ms"), ("kv_pool_tokens", "tokens"), ("max_concurrency", "requests"))
    if doc is None or doc.prediction is None:
        why = (
            "no prediction.json in the run"
            if doc is None
            else f"{run.cite(run.docs.files['prediction'], 'error')}: {doc.error}"
        )
        srcs = [run.cite(run.docs.files["prediction"])] if doc is not None else []
        return [], [fnd.not_available(pre(k), u, "no_prediction", why, srcs) for k, u in keys]
    pred = doc.prediction
    prel = run.docs.files["prediction"]
    rows: list[dict] = []
    out: list[fnd.Finding] = []

    def row(
        quantity: str,
        unit: str,
        predicted: float | None,
        pkey: str,
        measured: float | None,
        msrc: str | None,
        **extra,
    ) -> None:
        rows.append(
            {
                "run": run.name,
                "engine": run.engine,
                "quantity": quantity,
                "unit": unit,
                "predicted": predicted,
                "measured": measured,
                "ratio": ratio(measured, predicted) if measured is not None and predicted else None,
                "predicted_source": run.cite(prel, pkey),
                "measured_source": msrc or "",
                **extra,
            }
        )

    sweep = run_sweep_points(run)
    c1 = min(sweep, key=lambda p: p.concurrency) if sweep else None
    floor = pred.get("decode_step_floor_ms")
    if c1 is None:
        out.append(
            fnd.not_available(
                pre("decode_step_ms"),
                "ms",
                "no_concurrency_1",
                f"{run.name}: no sweep point to set against the floor",
            )
        )
    elif floor is None:
        out.append(
            fnd.not_available(
                pre("decode_step_ms"),
                "ms",
                "no_gpu_datasheet",
                f"{run.cite(prel, 'prediction.decode_step_floor_ms')}: no floor predicted "
                f"(device {pred.get('gpu')!r} has no datasheet bandwidth)",
                [c1.cite("p50_itl_ms"), run.cite(prel, "prediction.decode_step_floor_ms")],
                p50_itl_ms=c1.result.itl.p50_ms,
                concurrency=c1.concurrency,
            )
        )
    elif (itl := c1.result.itl.p50_ms) is None:
        out.append(
            fnd.not_available(
                pre("decode_step_ms"),
                "ms",
                "point_cut",
                f"{c1.key}: no request completed with a second token, so no ITL to set against the floor",
                [c1.cite("p50_itl_ms")],
                concurrency=c1.concurrency,
            )
        )
    else:
        row(
            "decode_step_ms",
            "ms",
            floor,
            "prediction.decode_step_floor_ms",
            itl,
            c1.cite("p50_itl_ms"),
            concurrency=c1.concurrency,
            context_tokens_predicted=pred.get("decode_context_tokens"),
        )
        out.append(
            fnd.measured(
                pre("decode_step_ms"),
                itl,
                "ms",
                [c1.cite("p50_itl_ms"), run.cite(prel, "prediction.decode_step_floor_ms")],
                predicted_floor_ms=floor,
                floor_achievement_pct=floor_achievement_pct(floor, itl),
                concurrency=c1.concurrency,
                predicted_context_tokens=pred.get("decode_context_tokens"),
                gpu=pred.get("gpu"),
                detail="measured p50 ITL at the lowest concurrency; the prediction is a floor "
                "(bytes read per step ÷ datasheet bandwidth), so measured ≥ predicted",
            )
        )
        out.append(
            fnd.checked(
                pre("decode_step_above_floor"),
                itl >= floor,
                [c1.cite("p50_itl_ms"), run.cite(prel, "prediction.decode_step_floor_ms")],
                detail="a step faster than its memory floor would mean the byte ledger or the "
                "bandwidth is wrong",
                floor_ms=floor,
                measured_ms=itl,
            )
        )
        tps = pred.get("decode_tokens_per_s_single_stream")
        if c1.concurrency == 1 and tps:
            row(
                "decode_tokens_per_s_single_stream",
                "tokens/s",
                tps,
                "prediction.decode_tokens_per_s_single_stream",
                c1.result.output_throughput_tok_s,
                c1.cite("output_throughput"),
                concurrency=1,
            )

    given = pred.get("kv_pool_source") == "given"
    tol_pool = 0.0 if given else ESTIMATED_POOL_TOLERANCE_PCT
    meas_pool, pool_src = pool_tokens_measured(run)
    pkey = "prediction.vllm_kv_cache_tokens" if run.engine == "vllm" else "prediction.kv_pool_tokens"
    pred_pool = pred.get(pkey.split(".", 1)[1])
    if meas_pool is None or pred_pool is None:
        out.append(
            fnd.not_available(
                pre("kv_pool_tokens"),
                "tokens",
                "no_kv_pool_line",
                f"{run.name}: no pool line in the server log",
            )
        )
    else:
        row(
            "kv_pool_tokens",
            "tokens",
            pred_pool,
            pkey,
            meas_pool,
            pool_src,
            pool_source=pred.get("kv_pool_source"),
        )
        out.append(
            fnd.measured(
                pre("kv_pool_tokens"),
                meas_pool,
                "tokens",
                [pool_src, run.cite(prel, pkey)],
                theory=float(pred_pool),
                tolerance_pct=tol_pool,
                pool_source=pred.get("kv_pool_source"),
                detail="the server's pool (vLLM: logged size; llama.cpp: slots × n_ctx_slot) vs the "
                "prediction (given pool: exact; estimated pool: ±10 %)",
            )
        )
    meas_c, c_src = max_concurrency_measured(run)
    ckey = "prediction.max_concurrency_vllm" if run.engine == "vllm" else "prediction.max_concurrency"
    pred_c = pred.get(ckey.split(".", 1)[1])
    if meas_c is None or pred_c is None:
        out.append(
            fnd.not_available(
                pre("max_concurrency"),
                "requests",
                "no_kv_pool_line",
                f"{run.name}: no concurrency line in the server log",
            )
        )
    else:
        tol_c = tol_pool + (0.005 / pred_c * 100 if run.engine == "vllm" else 0.0)
        row("max_concurrency", "requests", pred_c, ckey, meas_c, c_src)
        out.append(
            fnd.measured(
                pre("max_concurrency"),
                meas_c,
                "requests",
                [c_src, run.cite(prel, ckey)],
                theory=float(pred_c),
                tolerance_pct=tol_c,
                detail="vLLM: logged maximum concurrency; llama.cpp: slots — vs pool ÷ max_model_len",
            )
        )
    rel, log = run.server_log
    if run.engine == "llamacpp" and log is not None and pred.get("weight_bytes"):
        mib = model_buffer_mib(log)
        if mib is not None:
            wp = pred["weight_bytes"] / MIB
            row(
                "weight_mib",
                "MiB",
                wp,
                "prediction.weight_bytes",
                mib,
                run.cite(rel),
                weight_format=pred.get("weight_format"),
            )
            out.append(
                fnd.measured(
                    pre("weight_mib"),
                    mib,
                    "MiB",
                    [run.cite(rel), run.cite(prel, "prediction.weight_bytes")],
                    theory=wp,
                    tolerance_pct=WEIGHT_BYTES_TOLERANCE_PCT,
                    predicted_weight_format=pred.get("weight_format"),
                    detail="Σ llama.cpp 'model buffer size' lines vs the GGUF recipe's tensor bytes",
                )
            )
    return rows, out


def run(s: SectionInput) -> Section:
    campaign, th = s.campaign, s.th
    rows: list[dict] = []
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
