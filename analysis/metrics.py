"""Per-request latency metrics from our own collector's request records (requests.jsonl), chunk-aware,
and a point summary in the `vllm bench serve` schema so our runs flow through the same reconciliations.

Definitions (all from the collector's monotonic clock, ns → ms):
- TTFT = first chunk with tokens − send;  E2E = end − send;
- ITL: the gaps between consecutive token-carrying chunks; a chunk carrying n > 1 tokens stands for n
  intervals of gap ÷ n each (otherwise a server that batches tokens into chunks would look faster per
  interval and show fewer, longer gaps);
- TPOT = (E2E − TTFT) ÷ (output tokens − 1), per request with ≥ 2 tokens;
- percentiles: linear interpolation between order statistics (numpy's default, as vllm bench uses).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

import numpy as np

from analysis.parse.bench_json import BenchResult, LatencyStats

NS_PER_MS = 1_000_000
PERCENTILES = (50.0, 90.0, 99.0)


@dataclass(frozen=True)
class RequestTiming:
    ttft_ms: float | None
    e2el_ms: float
    itls_ms: tuple[float, ...]
    output_tokens: int
    tpot_ms: float | None


def request_timing(
    send_ns: int, end_ns: int, chunk_ns: Sequence[int], chunk_tokens: Sequence[int]
) -> RequestTiming:
    """One request's TTFT, E2E, chunk-aware ITLs and TPOT (ms) from its send/chunk/end times (ns)."""
    toks = [(t, n) for t, n in zip(chunk_ns, chunk_tokens, strict=True) if n > 0]
    out_tokens = sum(n for _, n in toks)
    e2el = (end_ns - send_ns) / NS_PER_MS
    if not toks:
        return RequestTiming(None, e2el, (), 0, None)
    ttft = (toks[0][0] - send_ns) / NS_PER_MS
    itls: list[float] = []
    # the first chunk's extra tokens arrived with the first token: they add zero-length intervals
    itls.extend([0.0] * (toks[0][1] - 1))
    for (t0, _), (t1, n) in zip(toks, toks[1:], strict=False):
        gap = (t1 - t0) / NS_PER_MS
        itls.extend([gap / n] * n)
    tpot = (e2el - ttft) / (out_tokens - 1) if out_tokens > 1 else None
    return RequestTiming(ttft, e2el, tuple(itls), out_tokens, tpot)


def stats(values: Sequence[float]) -> LatencyStats:
    """mean, median, std (population, as numpy) and p50/p90/p99 of a sample (ms); empty → all None."""
    if not values:
        return LatencyStats()
    a = np.asarray(values, dtype=float)
    return LatencyStats(
        mean_ms=float(a.mean()),
        median_ms=float(np.median(a)),
        std_ms=float(a.std()),
        percentiles_ms={p: float(np.percentile(a, p)) for p in PERCENTILES},
    )


def bench_result(records: Sequence, path: str, model_id: str | None = None) -> BenchResult:
    """A point's summary in the bench schema from its request records (analysis.parse.requests_jsonl).

    duration = last end − first send (monotonic); throughput = tokens ÷ duration; `date` = the wall clock
    of the last end, UTC, to the second (the same truncation as vllm bench's field)."""
    ok = [r for r in records if r.ok]
    timings = [request_timing(r.send_mono_ns, r.end_mono_ns, r.chunk_mono_ns, r.chunk_tokens) for r in ok]
    t0 = min(r.send_mono_ns for r in records)
    t1 = max(r.end_mono_ns for r in records)
    duration_s = (t1 - t0) / 1e9
    out_tokens = sum(t.output_tokens for t in timings)
    in_tokens = sum(r.prompt_tokens if r.prompt_tokens is not None else r.input_len for r in ok)
    end_wall = max(r.end_unix_ns for r in records) / 1e9
    date = datetime.fromtimestamp(math.floor(end_wall), tz=UTC).strftime("%Y%m%d-%H%M%S")
    latency = {
        "ttft": stats([t.ttft_ms for t in timings if t.ttft_ms is not None]),
        "tpot": stats([t.tpot_ms for t in timings if t.tpot_ms is not None]),
        "itl": stats([x for t in timings for x in t.itls_ms]),
        "e2el": stats([t.e2el_ms for t in timings]),
    }
    return BenchResult(
        path=path,
        completed=len(ok),
        duration_s=duration_s,
        date=date,
        model_id=model_id,
        num_prompts=len(records),
        max_concurrency=max(r.concurrency for r in records),
        failed=len(records) - len(ok),
        total_input_tokens=in_tokens,
        total_output_tokens=out_tokens,
        request_throughput_req_s=len(ok) / duration_s if duration_s > 0 else None,
        output_throughput_tok_s=out_tokens / duration_s if duration_s > 0 else None,
        total_token_throughput_tok_s=(in_tokens + out_tokens) / duration_s if duration_s > 0 else None,
        latency=latency,
    )
