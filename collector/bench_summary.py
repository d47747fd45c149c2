"""One point's requests → a summary in the ``vllm bench serve --save-result`` schema (same keys), so the
existing tooling and ``analysis/parse/bench_json.py`` read our points like the reference campaign's.

This is the one place these summary formulas live: the collector calls ``bench_summary`` when a point ends
(the file is a convenience copy; ``requests.jsonl`` stays the observation), and the analysis may call the same
functions on parsed records. The per-request definitions follow vLLM's ``calculate_metrics`` on purpose,
including its quirks, so numbers are comparable with files that tool wrote:

- a "chunk" is a streamed event carrying ``choices`` (even with empty text); vLLM counts each one as one token
  in ``max_output_tokens_per_s`` and as one inter-token gap in ITL, whatever it carried;
- a request counts as completed when it ended without error; failed ones are left out of every latency.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import numpy as np

from analysis.metrics import stats
from analysis.parse.requests_jsonl import RequestRecord

PERCENTILES = (50, 90, 99)  # the keys vLLM writes: p50, p90, p99
NS_PER_S = 1e9


def ttft_s(r: RequestRecord) -> float:
    """Time to first token, s = (first chunk receive − send) [ns] / 1e9."""
    return (r.chunk_mono_ns[0] - r.send_mono_ns) / NS_PER_S


def e2el_s(r: RequestRecord) -> float:
    """End-to-end latency, s = (last chunk receive − send) [ns] / 1e9 (vLLM's ``latency``; the trailing usage
    chunk and ``[DONE]`` are not part of it)."""
    return (r.chunk_mono_ns[-1] - r.send_mono_ns) / NS_PER_S


def itls_s(r: RequestRecord) -> list[float]:
    """Inter-chunk gaps, s: [(chunk[i] − chunk[i−1]) [ns] / 1e9 for i ≥ 1]."""
    c = r.chunk_mono_ns
    return [(b - a) / NS_PER_S for a, b in zip(c, c[1:], strict=False)]


def output_tokens(r: RequestRecord) -> int:
    """Generated tokens: the server's ``usage.completion_tokens``; without usage, the sum of chunk tokens."""
    return r.completion_tokens if r.completion_tokens is not None else sum(r.chunk_tokens)


def tpot_s(r: RequestRecord) -> float | None:
    """Time per output token after the first, s = (e2el − ttft) [s] / (output tokens − 1); None for ≤ 1 token."""
    n = output_tokens(r)
    return (e2el_s(r) - ttft_s(r)) / (n - 1) if n > 1 else None


def completed(records: Sequence[RequestRecord]) -> list[RequestRecord]:
    """Requests that ended without error and streamed at least one chunk."""
    return [r for r in records if r.ok and r.chunk_mono_ns]


def duration_s(records: Sequence[RequestRecord]) -> float:
    """Point duration, s = (last stream end − first send) [ns] / 1e9, over every request sent."""
    return (max(r.end_mono_ns for r in records) - min(r.send_mono_ns for r in records)) / NS_PER_S


def per_second_peaks(done: Sequence[RequestRecord]) -> tuple[float, int]:
    """(max chunks received in one 1-s bucket, max requests active in one bucket), buckets counted from the
    first send of a completed request — vLLM's ``max_output_tokens_per_s`` / ``max_concurrent_requests``."""
    if not done:
        return 0.0, 0
    t0 = min(r.send_mono_ns for r in done)
    t_end = max(r.chunk_mono_ns[-1] for r in done)
    n = int(np.ceil((t_end - t0) / NS_PER_S)) + 1
    chunks = np.zeros(n)
    active = np.zeros(n)
    for r in done:
        for t in r.chunk_mono_ns:
            chunks[int((t - t0) / NS_PER_S)] += 1
        first, last = int((r.send_mono_ns - t0) / NS_PER_S), int((r.chunk_mono_ns[-1] - t0) / NS_PER_S)
        active[first : last + 1] += 1
    return float(chunks.max()), int(active.max())


def stats_ms(name: str, values_s: Sequence[float]) -> dict[str, float]:
    """mean/median/std (population)/p50/p90/p99 of ``values_s`` in ms, by the analysis' one ``stats``; 0 when
    empty, as vLLM writes."""
    st = stats([v * 1000.0 for v in values_s] or [0.0])
    out = {f"mean_{name}_ms": st.mean_ms, f"median_{name}_ms": st.median_ms, f"std_{name}_ms": st.std_ms}
    for p in PERCENTILES:
        out[f"p{p}_{name}_ms"] = st.percentiles_ms[p]
    return out


def bench_summary(
    records: Sequence[RequestRecord],
    *,
    model_id: str,
    max_concurrency: int,
    num_prompts: int,
    label: str | None,
) -> dict[str, Any]:
    """The whole summary dict for one point (keys and order as ``vllm bench serve`` writes them)."""
    if not records:
        raise ValueError("no requests: a point without requests has no summary")
    done = completed(records)
    dur = duration_s(records)
    total_in = sum(r.input_len for r in done)
    total_out = sum(output_tokens(r) for r in done)
    peak_tok, peak_active = per_second_peaks(done)
    end_unix = max(r.end_unix_ns for r in records)
    out: dict[str, Any] = {
        "date": datetime.fromtimestamp(end_unix / NS_PER_S, UTC).strftime("%Y%m%d-%H%M%S"),
        "endpoint_type": "openai",
        "backend": "openai",
        "label": label,
        "model_id": model_id,
        "tokenizer_id": model_id,
        "num_prompts": num_prompts,
        "request_rate": "inf",
        "burstiness": 1.0,
        "max_concurrency": max_concurrency,
        "duration": dur,
        "completed": len(done),
        "failed": len(records) - len(done),
        "total_input_tokens": total_in,
        "total_output_tokens": total_out,
        "request_throughput": len(done) / dur,
        "request_goodput": None,
        "output_throughput": total_out / dur,
        "total_token_throughput": (total_in + total_out) / dur,
        "max_output_tokens_per_s": peak_tok,
        "max_concurrent_requests": peak_active,
        "rtfx": 0.0,
    }
    out |= stats_ms("ttft", [ttft_s(r) for r in done])
    out |= stats_ms("tpot", [t for r in done if (t := tpot_s(r)) is not None])
    out |= stats_ms("itl", [g for r in done for g in itls_s(r)])
    out |= stats_ms("e2el", [e2el_s(r) for r in done])
    return out
