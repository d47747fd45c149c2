"""The roofline's definitions, shared by every section that compares a decode step with its floor: the
sweep series (one concurrency sweep of one engine with one weight format: a (round, engine) of an imported
campaign, or one run of our own collector), the bytes a step reads, the floor, the ratios.

Floors (``roofline_floor_ms``): (weight bytes read per step + concurrency × mean KV bytes per
request) ÷ bandwidth, with bandwidth = the datasheet's, or the measured device-to-device copy rate
(``collector.protocol.ceilings``: bytes read + written per s — what the memory system really sustains).
"""

from __future__ import annotations

from typing import TypedDict

from analysis.core import theory
from analysis.loading.campaign import BenchPoint, Campaign
from analysis.reconcile.concurrency import run_sweep_points, sweep_points
from analysis.reconcile.theoryctx import TheoryCtx

ENGINES = ("vllm", "llamacpp")


class SweepSeries(TypedDict):
    """One concurrency sweep as the roofline reads it (``sweep_series``)."""

    series: str  # our run's name, else `<round>/<engine>` (or the engine alone without rounds)
    round: str  # "" for our own runs and campaigns without rounds
    run: str  # the run of the series' first point
    engine: str
    weight_format: str | None
    kv_dtype: str | None
    kv_bytes_per_token: float | None
    weight_bytes_per_step: float | None
    format_source: str  # citation of the weight format
    points: list[BenchPoint]  # the sweep's points, in order


def mean_context_tokens(input_len: float, output_len: float) -> float:
    """Average cached context of a request while it decodes, tokens: input + output ÷ 2."""
    return input_len + output_len / 2


def roofline_floor_ms(
    weight_bytes_per_step: float, concurrency: int, kv_bytes_per_request: float, bandwidth_bytes_per_s: float
) -> float:
    """Memory-bound floor of one decode step, ms:
    (weight bytes read per step + concurrency × mean KV bytes per request) ÷ bandwidth × 1000."""
    kv = theory.kv_bytes_read_per_step(kv_bytes_per_request, concurrency, 1)
    return theory.decode_step_floor_s(weight_bytes_per_step, kv, bandwidth_bytes_per_s) * 1000.0


def kv_bytes_per_request(s: SweepSeries, p: BenchPoint) -> float | None:
    """One request's mean KV bytes over its decode at a point, bytes: mean context (prompt + half the mean
    output) × the series' KV bytes per token; None without the lengths or the KV size."""
    r = p.result
    mean_out = r.total_output_tokens / r.completed if r.completed and r.total_output_tokens else None
    kvb = s["kv_bytes_per_token"]
    if kvb is None or not p.input_len_tokens or not mean_out:
        return None
    return mean_context_tokens(p.input_len_tokens, mean_out) * kvb


def step_bytes(s: SweepSeries, p: BenchPoint) -> float | None:
    """The bytes one decode step reads at a point, bytes: the series' weight bytes per step + concurrency ×
    kv_bytes_per_request — the roofline floor's numerator, and the one byte count every page's "bytes per
    step" ratio divides."""
    kv = kv_bytes_per_request(s, p)
    wb = s["weight_bytes_per_step"]
    if kv is None or wb is None or p.concurrency is None:
        return None
    return wb + p.concurrency * kv


def achievement_pct(floor_ms: float, measured_ms: float) -> float:
    """How close a measured step is to its floor, %: floor ÷ measured × 100 (100 = at the roofline)."""
    return floor_ms / measured_ms * 100.0


def server_token_ms(predicted_s_delta: float | None, predicted_tokens_delta: float | None) -> float | None:
    """llama.cpp's own mean time per generated token over a point, ms:
    Δtokens_predicted_seconds_total ÷ Δtokens_predicted_total × 1000 (each slot's generation wall time, so
    at concurrency c it approximates one decode step, not step ÷ c)."""
    if predicted_s_delta is None or not predicted_tokens_delta:
        return None
    return predicted_s_delta / predicted_tokens_delta * 1000.0


def step_ratio(heavy_ms: float, light_ms: float) -> float:
    """How many times faster the second series decodes, dimensionless: the first's step time (p50 ITL, ms) ÷
    the second's. The one step ratio: a lighter weight format's speed-up (heavy ÷ light), vLLM ÷ llama.cpp at
    one stream (engines), the faster series' single-stream advantage (selection)."""
    return heavy_ms / light_ms


def throughput_ratio(a_tokens_per_s: float, b_tokens_per_s: float) -> float:
    """How many times more output the first series delivers, dimensionless: a's output tokens/s ÷ b's. The one
    throughput ratio: vLLM ÷ llama.cpp at the highest common concurrency (engines, the home page), one format
    over another per concurrency (quantization), the peak-throughput advantage (selection)."""
    return a_tokens_per_s / b_tokens_per_s


def sweep_series(campaign: Campaign, th: TheoryCtx) -> list[SweepSeries]:
    """Every concurrency sweep as a series (engine × weight format; one per run of our own, one per round and
    engine of an imported campaign):
    [{series, round, run, engine, weight_format, kv_bytes_per_token, weight_bytes_per_step, points}]"""
    out: list[SweepSeries] = []
    if any(r.own for r in campaign.runs):
        for run in campaign.runs:
            pts = run_sweep_points(run) if run.own else []
            if not pts:
                continue
            fmt = th.run_formats.get(run.name)
            out.append(
                {
                    "series": run.name,
                    "round": "",
                    "run": run.name,
                    "engine": run.engine,
                    "weight_format": fmt[0] if fmt else None,
                    "kv_dtype": fmt[1] if fmt else None,
                    "kv_bytes_per_token": th.kv_bytes_per_token_for_run(run.name),
                    "weight_bytes_per_step": th.weight_bytes_per_step_for_run(run.name),
                    "format_source": fmt[2] if fmt else "",
                    "points": pts,
                }
            )
        return out
    for rnd in campaign.rounds:
        for engine in ENGINES:
            pts = sweep_points(campaign, rnd, engine)
            if not pts:
                continue
            out.append(
                {
                    "series": f"{rnd}/{engine}" if rnd else engine,
                    "round": rnd or "",
                    "run": pts[0].run.name,
                    "engine": engine,
                    "weight_format": th.weight_formats.get(engine),
                    "kv_dtype": th.kv_dtypes.get(engine),
                    "kv_bytes_per_token": th.kv_bytes_per_token_for(engine),
                    "weight_bytes_per_step": th.weight_bytes_per_step(engine),
                    "format_source": th.weight_format_source.get(engine, ""),
                    "points": pts,
                }
            )
    return out
