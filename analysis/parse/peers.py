"""Result files the peers write, read by content into the ``vllm bench serve`` record (``BenchResult``).

- **vllm bench serve** ``--save-result``: any name (its default is
  ``{label}-{rate}qps[-concurrency{N}]-{model}-{date}.json``); ``analysis.parse.bench_json``.
- **AIPerf** ``profile_export_aiperf.json`` (schema 1.x): one run's aggregate per metric, ``{"unit", "avg",
  "p50", "p90", "p99", "std", ...}``. Its ``inter_token_latency`` is the per-request mean gap after the first
  token, vllm bench's TPOT; its ``inter_chunk_latency`` the per-chunk gaps, vllm bench's ITL.
- **GuideLLM** ``benchmarks.json`` (``guidellm run``'s default output, 0.8): one entry per benchmark (a
  concurrency level or a rate), each with ``metrics`` of per-status distributions (``successful``: ``mean``,
  ``median``, ``std_dev``, ``percentiles.p50``...). One file holds several points: ``parse_guidellm_json``
  returns one record per benchmark.

``sniff(obj)`` tells them apart by their keys, never by the file name.
"""

from __future__ import annotations

import json
import math
from datetime import datetime
from pathlib import Path
from typing import Any

from analysis.parse import bench_json
from analysis.parse.bench_json import BenchResult, LatencyStats
from analysis.parse.text import decode_text
from collector.raw.errors import ParseError
from collector.raw.jsonl import read_bytes

BENCH_DATE_FORMAT = "%Y%m%d-%H%M%S"  # vllm bench serve's `date`
VLLM_BENCH, AIPERF, GUIDELLM = "vllm-bench-serve", "aiperf", "guidellm"
# AIPerf metric -> our latency key (module docstring: the meanings)
_AIPERF_LATENCY = {
    "time_to_first_token": "ttft",
    "inter_token_latency": "tpot",
    "inter_chunk_latency": "itl",
    "request_latency": "e2el",
}
# GuideLLM metric -> our latency key: its inter_token_latency_ms is per request ((last - first token) /
# (tokens - 1)), vllm bench's TPOT; it keeps no per-chunk gaps (no ITL); request_latency is in seconds
_GUIDELLM_LATENCY = {"time_to_first_token_ms": "ttft", "inter_token_latency_ms": "tpot"}
# GuideLLM's percentile keys: p001 is the 0.1th, p01 the 1st, p999 the 99.9th
_GUIDELLM_PCT = {
    "p001": 0.1,
    "p01": 1.0,
    "p05": 5.0,
    "p10": 10.0,
    "p25": 25.0,
    "p50": 50.0,
    "p75": 75.0,
    "p90": 90.0,
    "p95": 95.0,
    "p99": 99.0,
    "p999": 99.9,
}


def sniff(obj: Any) -> str | None:
    """Which tool wrote this JSON document, from its keys; None when none of ours."""
    if not isinstance(obj, dict):
        return None
    if "aiperf_version" in obj and "time_to_first_token" in obj:
        return AIPERF
    benches = obj.get("benchmarks")
    if isinstance(benches, list) and benches and all(isinstance(b, dict) and "metrics" in b for b in benches):
        return GUIDELLM
    if all(k in obj for k in ("completed", "duration")):
        return VLLM_BENCH
    return None


def sniff_file(path: str | Path) -> str | None:
    """``sniff`` of a file; None for a file that is not JSON (or cannot be read)."""
    try:
        return sniff(json.loads(Path(path).read_bytes()))
    except (OSError, ValueError, RecursionError):
        return None


def _load(path: str | Path) -> dict[str, Any]:
    text = decode_text(read_bytes(path), str(path))
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as err:
        raise ParseError(str(path), err.lineno, f"not valid JSON: {err.msg} (column {err.colno})") from None
    if not isinstance(obj, dict):
        raise ParseError(str(path), 1, f"expected a JSON object, got {type(obj).__name__}")
    return obj


def _num(v: Any) -> float | None:
    ok = isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) and v >= 0
    return float(v) if ok else None


def _aiperf_value(obj: dict[str, Any], key: str, stat: str = "avg") -> float | None:
    m = obj.get(key)
    return _num(m.get(stat)) if isinstance(m, dict) else None


def _aiperf_stats(m: Any) -> LatencyStats:
    if not isinstance(m, dict):
        return LatencyStats()
    pcts = {float(k[1:]): v for k in m if k.startswith("p") and (v := _num(m[k])) is not None}
    return LatencyStats(
        mean_ms=_num(m.get("avg")),
        median_ms=_num(m.get("p50")),
        std_ms=_num(m.get("std")),
        percentiles_ms=pcts,
    )


def _bench_date(iso: Any) -> str | None:
    """AIPerf's ISO ``end_time`` in vllm bench serve's ``date`` form (``%Y%m%d-%H%M%S``, naive as both)."""
    try:
        return datetime.fromisoformat(str(iso)).strftime(BENCH_DATE_FORMAT) if iso else None
    except ValueError:
        return None


def _int(v: float | None) -> int | None:
    return None if v is None else round(v)


def _aiperf_phase(obj: dict[str, Any]) -> dict[str, Any]:
    phases = (obj.get("input_config") or {}).get("phases") or []
    return next((p for p in phases if isinstance(p, dict) and p.get("kind") == "profiling"), {})


def parse_aiperf_json(path: str | Path) -> BenchResult:
    """AIPerf's ``profile_export_aiperf.json`` as one point (``BenchResult``, vllm bench serve's names)."""
    obj = _load(path)
    if sniff(obj) != AIPERF:
        raise ParseError(str(path), 1, "not an AIPerf profile_export_aiperf.json (no aiperf_version)")
    completed = _int(_aiperf_value(obj, "completed_request_count") or _aiperf_value(obj, "request_count"))
    duration = _aiperf_value(obj, "benchmark_duration")
    if completed is None or duration is None:
        raise ParseError(str(path), 1, "keys 'request_count' and 'benchmark_duration' must hold numbers")
    phase = _aiperf_phase(obj)
    rate = _num(phase.get("request_rate"))
    errors = _aiperf_value(obj, "error_request_count")
    cfg = obj.get("input_config") or {}
    models = ((cfg.get("models") or {}).get("items") or [{}])[0]
    return BenchResult(
        path=str(path),
        completed=completed,
        duration_s=duration,
        date=_bench_date(obj.get("end_time")),
        backend=AIPERF,
        label=f"AIPerf {obj.get('aiperf_version')}",
        model_id=models.get("name") if isinstance(models, dict) else None,
        num_prompts=_int(_num(phase.get("requests"))),
        request_rate_req_s=rate if rate is not None else math.inf,
        max_concurrency=_int(_num(phase.get("concurrency"))),
        failed=_int(errors) or 0,
        total_input_tokens=_int(_aiperf_value(obj, "total_isl")),
        total_output_tokens=_int(
            _aiperf_value(obj, "total_osl") or _aiperf_value(obj, "total_output_tokens")
        ),
        request_throughput_req_s=_aiperf_value(obj, "request_throughput"),
        output_throughput_tok_s=_aiperf_value(obj, "output_token_throughput"),
        total_token_throughput_tok_s=_aiperf_value(obj, "total_token_throughput"),
        latency={ours: _aiperf_stats(obj.get(theirs)) for theirs, ours in _AIPERF_LATENCY.items()},
        extra={"tool": AIPERF, "aiperf_version": obj.get("aiperf_version")},
    )


def _gl_stats(metric: Any, scale: float = 1.0) -> LatencyStats:
    d = metric.get("successful") if isinstance(metric, dict) else None
    if not isinstance(d, dict):
        return LatencyStats()
    pct = d.get("percentiles") or {}

    def s(v: Any) -> float | None:
        x = _num(v)
        return None if x is None else x * scale

    pcts = {_GUIDELLM_PCT[k]: x for k, v in pct.items() if k in _GUIDELLM_PCT and (x := s(v)) is not None}
    return LatencyStats(
        mean_ms=s(d.get("mean")),
        median_ms=s(d.get("median")),
        std_ms=s(d.get("std_dev")),
        percentiles_ms=pcts,
    )


def _gl_total(metric: Any, status: str = "successful") -> float | None:
    d = metric.get(status) if isinstance(metric, dict) else None
    return _num(d.get("total_sum")) if isinstance(d, dict) else None


def _gl_mean(metric: Any) -> float | None:
    d = metric.get("successful") if isinstance(metric, dict) else None
    return _num(d.get("mean")) if isinstance(d, dict) else None


def _gl_streams(b: dict[str, Any]) -> int | None:
    for holder in (b.get("config") or {}, b.get("args") or {}, b):
        strat = holder.get("strategy") if isinstance(holder, dict) else None
        if isinstance(strat, dict) and isinstance(strat.get("streams"), int):
            return int(strat["streams"])
    return None


def _gl_rate(b: dict[str, Any]) -> float:
    for holder in (b.get("config") or {}, b.get("args") or {}, b):
        strat = holder.get("strategy") if isinstance(holder, dict) else None
        if isinstance(strat, dict) and _num(strat.get("rate")) is not None:
            return float(strat["rate"])
    return math.inf


def _gl_counts(b: dict[str, Any]) -> tuple[int, int]:
    m = b.get("metrics") or {}
    totals = (m.get("request_totals") or (b.get("request_totals") or {})) if isinstance(m, dict) else {}
    if isinstance(totals, dict) and "successful" in totals:
        return int(totals.get("successful") or 0), int(totals.get("errored") or 0)
    reqs = b.get("requests") or {}
    return len(reqs.get("successful") or []), len(reqs.get("errored") or [])


def parse_guidellm_json(path: str | Path) -> list[BenchResult]:
    """GuideLLM's benchmarks JSON: one ``BenchResult`` per benchmark, in file order."""
    obj = _load(path)
    if sniff(obj) != GUIDELLM:
        raise ParseError(
            str(path), 1, "not a GuideLLM benchmarks report (no 'benchmarks' list with 'metrics')"
        )
    out = []
    for i, b in enumerate(obj["benchmarks"]):
        m = b["metrics"]
        ok, failed = _gl_counts(b)
        dur = _num(b.get("duration")) or _num((b.get("run_stats") or {}).get("duration"))
        if dur is None:
            start, end = _num(b.get("start_time")), _num(b.get("end_time"))
            dur = end - start if start is not None and end is not None else None
        if dur is None:
            raise ParseError(str(path), 1, f"benchmark {i}: no duration (start_time/end_time)")
        latency = {ours: _gl_stats(m.get(theirs)) for theirs, ours in _GUIDELLM_LATENCY.items()}
        latency["e2el"] = _gl_stats(m.get("request_latency"), scale=1000.0)
        out.append(
            BenchResult(
                path=f"{path}#{i}",
                completed=ok,
                duration_s=dur,
                backend=GUIDELLM,
                label=f"GuideLLM benchmark {i}",
                request_rate_req_s=_gl_rate(b),
                max_concurrency=_gl_streams(b),
                failed=failed,
                total_input_tokens=_int(_gl_total(m.get("prompt_token_count"))),
                total_output_tokens=_int(_gl_total(m.get("output_token_count"))),
                request_throughput_req_s=_gl_mean(m.get("requests_per_second")),
                output_throughput_tok_s=_gl_mean(m.get("output_tokens_per_second")),
                total_token_throughput_tok_s=_gl_mean(m.get("tokens_per_second")),
                latency=latency,
                extra={"tool": GUIDELLM, "benchmark_index": i},
            )
        )
    return out


def parse_result_json(path: str | Path) -> BenchResult | list[BenchResult]:
    """A ``*.json`` result by its content: AIPerf's or GuideLLM's report, else vllm bench serve's."""
    data = read_bytes(path)
    try:
        kind = sniff(json.loads(data))
    except (ValueError, RecursionError):
        kind = None
    if kind == AIPERF:
        return parse_aiperf_json(path)
    if kind == GUIDELLM:
        return parse_guidellm_json(path)
    return bench_json.parse_bench_json_bytes(data, path)
