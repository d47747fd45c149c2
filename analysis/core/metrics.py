"""The one definition of every latency and throughput metric, from our collector's request records
(``requests.jsonl``, parsed into ``RequestRecord``). Times are the collector's monotonic clock, ns; results
carry their unit in the name.

Two views, both computed here and nowhere else; every number says which one it is (``metric_definition``):

- **canonical** (``CANONICAL``): chunk-aware, the numbers of every run of ours. A chunk carrying n tokens
  stands for n tokens (a server that batches tokens into chunks must not look faster per interval, nor show
  fewer, longer gaps); chunks carrying no token (llama.cpp's closing chunk) are not tokens; a request ends
  when its stream ends (``[DONE]``, or the error that cut it).
- **vllm-bench-compatible** (``VLLM_BENCH``, functions suffixed ``_vllm_bench``): vLLM's ``calculate_metrics``
  as ``vllm bench serve`` computes it, quirks included — every chunk carrying ``choices`` is one "token" and
  one inter-token gap whatever it carried, a request ends at its last such chunk, empty samples summarise to
  0. Used only where a number is compared with files written by that tool: the per-point summaries
  ``collector run --save-result`` writes in its schema (older runs hold them as ``bench/<point>.json``,
  which analysis never reads back). The reference
  campaign's files were written by that tool, so its numbers are of this definition too.

Both views share ``output_tokens``, ``duration_s``, the throughputs and ``stats``: there they agree.

Points imported from the other peers' result files keep their tool's own definitions, named after it
(``AIPERF_DEFINITION``, ``GUIDELLM_DEFINITION``; ``definition_of`` picks a result's): analysis reads their
summaries as written (analysis.parse.peers says how each maps onto vllm bench's names).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import numpy as np

from analysis.parse.bench_json import BenchResult, LatencyStats
from collector.raw import plan as plan_schema
from collector.raw.errors import AnatomyError
from collector.raw.records import RequestRecord

CANONICAL = "canonical"
VLLM_BENCH = "vllm-bench-compatible"
AIPERF_DEFINITION = "aiperf"
GUIDELLM_DEFINITION = "guidellm"
# the tool a peer result was written by (analysis.parse.peers: BenchResult.extra["tool"]) -> its definition
_PEER_DEFINITIONS = {"aiperf": AIPERF_DEFINITION, "guidellm": GUIDELLM_DEFINITION}
NS_PER_MS = 1_000_000
NS_PER_S = 1_000_000_000
PERCENTILES = (50.0, 90.0, 99.0)  # the ones vllm bench writes: p50, p90, p99
# the percentiles analysis reports per point unless `collector analyze --metric-percentiles` names others
# (issue #14 item 5); PERCENTILES are always computed too (the pages' p50/p99 answers, the knee's p90)
DEFAULT_PERCENTILES = (50.0, 90.0, 95.0, 99.0, 99.9)
BENCH_DATE_FORMAT = "%Y%m%d-%H%M%S"  # vllm bench's `date` field


def definition_of(result: BenchResult) -> str:
    """Which definitions an imported result's numbers follow: its tool's (AIPerf, GuideLLM), else vllm bench
    serve's (``VLLM_BENCH``: a file that tool wrote)."""
    return _PEER_DEFINITIONS.get(str(result.extra.get("tool")), VLLM_BENCH)


# --- canonical, per request ---------------------------------------------------------------------------------


def _token_chunks(r: RequestRecord) -> list[tuple[int, int]]:
    """(receive time ns, tokens) of the chunks that carried at least one token."""
    return [(t, n) for t, n in zip(r.chunk_mono_ns, r.chunk_tokens, strict=True) if n > 0]


def ttft_ms(r: RequestRecord) -> float | None:
    """Time to first token, ms = (receive of the first chunk carrying a token − send) [ns] / 1e6;
    None when no chunk carried a token."""
    toks = _token_chunks(r)
    return (toks[0][0] - r.send_mono_ns) / NS_PER_MS if toks else None


def e2el_ms(r: RequestRecord) -> float:
    """End-to-end latency, ms = (stream end − send) [ns] / 1e6; the stream ends at ``[DONE]`` (the usage
    chunk and any closing chunk included) or at the error that ended it."""
    return (r.end_mono_ns - r.send_mono_ns) / NS_PER_MS


def token_counts_plausible(r: RequestRecord) -> bool:
    """The request's token counts fit what it asked for: the tokens its chunks carried and the server's
    ``usage.completion_tokens`` each ≤ ``max_tokens`` (an engine stops there), no chunk negative. A server
    that claims 2^62 tokens fails this; its request gives no ITL and fails the stream-count gate."""
    streamed = sum(r.chunk_tokens)
    return (
        all(n >= 0 for n in r.chunk_tokens)
        and streamed <= r.max_tokens
        and (r.completion_tokens is None or 0 <= r.completion_tokens <= r.max_tokens)
    )


def itls_ms(r: RequestRecord) -> list[float]:
    """Inter-token latencies, ms, chunk-aware: a chunk carrying n tokens after a gap g [ns] from the
    previous token-carrying chunk gives n intervals of g / n / 1e6 each; the first chunk's extra tokens
    arrived with the first token and give n − 1 intervals of 0. One value per token after the first
    (output tokens − 1 of them when the stream and the server agree on the count); none for a request whose
    counts are not plausible (``token_counts_plausible``: a list of 2^62 values would not fit in memory)."""
    toks = _token_chunks(r)
    if not toks or not token_counts_plausible(r):
        return []
    out = [0.0] * (toks[0][1] - 1)
    for (t0, _), (t1, n) in zip(toks, toks[1:], strict=False):
        out.extend([(t1 - t0) / NS_PER_MS / n] * n)
    return out


EXACT_TOKEN_SOURCES = frozenset({"token_ids", "usage", "timings"})  # counts the stream itself carried


def output_tokens(r: RequestRecord) -> int:
    """Generated tokens, count: the server's ``usage.completion_tokens``; without usage (a cut stream), the
    sum of the tokens the chunks carried. Both views (vLLM counts the same way). Where the client counted
    every chunk exactly (``EXACT_TOKEN_SOURCES``, no ``token_count_problem``) and usage claims another
    number, what was streamed: a usage of 256 after 10 streamed tokens would make ~25x the throughput
    (the stream_token_counts gate flags such a point)."""
    streamed = sum(r.chunk_tokens)
    if r.completion_tokens is None:
        return streamed
    if r.token_count_source in EXACT_TOKEN_SOURCES and r.token_count_problem is None:
        return streamed
    return r.completion_tokens


def input_tokens(r: RequestRecord) -> int:
    """Prompt tokens, count: the server's ``usage.prompt_tokens``; without usage, the prompt ids sent."""
    return r.prompt_tokens if r.prompt_tokens is not None else r.input_len


def tpot_ms(r: RequestRecord) -> float | None:
    """Time per output token after the first, ms = (receive of the last token-carrying chunk − receive of the
    first) [ns] / 1e6 / (tokens the chunks carried − 1) — the mean of the request's ``itls_ms``. The stream's
    tail after the last token (closing chunk, usage chunk, ``[DONE]``) is in E2E, not here: it is no decode
    step, and on a fast model it would swamp the per-token time. None for fewer than 2 tokens."""
    toks = _token_chunks(r)
    n = sum(k for _, k in toks)
    return (toks[-1][0] - toks[0][0]) / NS_PER_MS / (n - 1) if n > 1 else None


# --- canonical, per point -----------------------------------------------------------------------------------


def completed(records: Sequence[RequestRecord]) -> list[RequestRecord]:
    """The requests that ended without error (failed ones are in no latency, no token total)."""
    return [r for r in records if r.ok]


def duration_s(records: Sequence[RequestRecord]) -> float:
    """Point duration, s = (last stream end − first send) [ns] / 1e9, over every request sent (failed ones
    included: they took part in the load). Both views."""
    return (max(r.end_mono_ns for r in records) - min(r.send_mono_ns for r in records)) / NS_PER_S


def request_throughput_req_s(completed_requests: int, duration_s: float) -> float | None:
    """Completed requests per second = completed ÷ duration [s]; None for a zero duration. Both views."""
    return completed_requests / duration_s if duration_s > 0 else None


def output_throughput_tok_s(output_tokens_total: int, duration_s: float) -> float | None:
    """Output tokens per second = output tokens of the completed requests ÷ duration [s]. Both views."""
    return output_tokens_total / duration_s if duration_s > 0 else None


def total_token_throughput_tok_s(
    input_tokens_total: int, output_tokens_total: int, duration_s: float
) -> float | None:
    """(Prompt + output) tokens per second = (input + output tokens of the completed requests) ÷ duration [s].
    Both views."""
    return (input_tokens_total + output_tokens_total) / duration_s if duration_s > 0 else None


class PercentileError(AnatomyError, ValueError):
    """A malformed ``--metric-percentiles`` (one line saying which item and why)."""


def percentile_name(q: float) -> str:
    """A percentile's name as vllm bench serve writes it in its keys: ``p99``, ``p99.9`` (``p{q:g}``)."""
    return f"p{q:g}"


def parse_percentiles(text: str) -> tuple[float, ...]:
    """``"50,90,99.9"`` (vllm bench serve's ``--metric-percentiles`` form) → (50.0, 90.0, 99.9), sorted,
    each in (0, 100]; ``PercentileError`` naming the bad item otherwise."""
    out: set[float] = set()
    for item in text.split(","):
        try:
            q = float(item.strip().removeprefix("p"))
        except ValueError:
            raise PercentileError(
                f"--metric-percentiles {text!r}: {item.strip()!r} is not a number (want e.g. 50,90,99.9)"
            ) from None
        if not 0 < q <= 100:
            raise PercentileError(f"--metric-percentiles {text!r}: {q:g} is not in (0, 100]")
        out.add(q)
    return tuple(sorted(out))


def stats(
    values_ms: Sequence[float] | np.ndarray, percentiles: Sequence[float] = PERCENTILES
) -> LatencyStats:
    """mean, median, std (population, numpy's and vllm bench's) and the ``percentiles`` (default p50/p90/p99;
    linear interpolation between order statistics, numpy's default, as vllm bench's ``np.percentile``) of a
    sample, ms; an empty sample → every field None. Both views."""
    if len(values_ms) == 0:
        return LatencyStats()
    a = np.asarray(values_ms, dtype=float)
    qs = list(percentiles)
    at = np.percentile(a, qs) if qs else []  # one partition for all (the same values as one call each)
    return LatencyStats(
        mean_ms=float(a.mean()),
        median_ms=float(np.median(a)),
        std_ms=float(a.std()),
        percentiles_ms={p: float(v) for p, v in zip(qs, at, strict=True)},
    )


def end_date_utc(records: Sequence[RequestRecord]) -> str:
    """The wall clock of the last stream end, UTC, truncated to the second, as vllm bench's ``date``
    (``20260825-212205``)."""
    return end_date_utc_ns(max(r.end_unix_ns for r in records))


def end_date_utc_ns(end_unix_ns: int) -> str:
    """``end_date_utc`` of the last stream end's wall clock, ns."""
    return datetime.fromtimestamp(end_unix_ns // NS_PER_S, UTC).strftime(BENCH_DATE_FORMAT)


def point_result(
    records: Sequence[RequestRecord],
    path: str,
    model_id: str | None = None,
    percentiles: Sequence[float] = DEFAULT_PERCENTILES,
) -> BenchResult:
    """One point's canonical summary (the fields the reconciliations read, in the bench schema's record) from
    all its request records, failed ones included. Latencies over the completed requests; TPOT over those with
    ≥ 2 tokens; ITL over every token interval of every completed request. Percentiles: the analysis-time
    ``percentiles`` and ``PERCENTILES`` (which the pages' p50/p99 answers read) at once."""
    if not records:
        raise ValueError(f"{path}: a point without requests has no summary")
    done = completed(records)
    dur = duration_s(records)
    out_total = sum(output_tokens(r) for r in done)
    in_total = sum(input_tokens(r) for r in done)
    ttfts = [t for r in done if (t := ttft_ms(r)) is not None]
    tpots = [t for r in done if (t := tpot_ms(r)) is not None]
    qs = tuple(sorted({*PERCENTILES, *percentiles}))
    return BenchResult(
        path=path,
        completed=len(done),
        duration_s=dur,
        date=end_date_utc(records),
        model_id=model_id,
        num_prompts=len(records),
        max_concurrency=max(r.concurrency for r in records),
        failed=len(records) - len(done),
        total_input_tokens=in_total,
        total_output_tokens=out_total,
        request_throughput_req_s=request_throughput_req_s(len(done), dur),
        output_throughput_tok_s=output_throughput_tok_s(out_total, dur),
        total_token_throughput_tok_s=total_token_throughput_tok_s(in_total, out_total, dur),
        latency={
            "ttft": stats(ttfts, qs),
            "tpot": stats(tpots, qs),
            "itl": stats([x for r in done for x in itls_ms(r)], qs),
            "e2el": stats([e2el_ms(r) for r in done], qs),
        },
    )


# --- goodput against SLOs (canonical view) ------------------------------------------------------------------

# The per-request SLO metrics (ms), as `vllm bench serve --goodput KEY:VALUE` names them, with ours beside:
# vLLM's ``ttft``, ``tpot``, ``e2el`` are our ``ttft_ms``, ``tpot_ms``, ``e2e_ms``; ``itl_ms`` is AIPerf's
# per-request ``inter_token_latency`` (the request's mean gap after the first token): the same number as TPOT.
# The names are the plan schema's (collector.raw.plan.SLO_METRICS: a plan's [slo] table takes the same).
SLO_METRICS = plan_schema.SLO_METRICS


# vllm bench serve's --goodput names -> ours (AIPerf's itl beside)
GOODPUT_NAMES = {"ttft": "ttft_ms", "tpot": "tpot_ms", "e2el": "e2e_ms", "itl": "itl_ms"}


class GoodputError(AnatomyError, ValueError):
    """A malformed ``--goodput`` pair (one line saying which and why)."""


def parse_key_ms(
    pairs: Sequence[str], flag: str, names: dict[str, str], what: str, error: type[AnatomyError]
) -> dict[str, float]:
    """``KEY:MS`` pairs (a pair may also hold several space-separated ones) -> ``{names[KEY]: ms}``; a key
    not in ``names``, a value that is not a finite number > 0 raise ``error`` naming ``flag`` and the pair
    (``what``: what the value is, for that line)."""
    out: dict[str, float] = {}
    for pair in (p for item in pairs for p in item.split()):
        name, sep, value = pair.partition(":")
        if not sep or name not in names:
            raise error(f"{flag} {pair!r}: want KEY:MS with KEY one of {', '.join(names)}")
        try:
            ms = float(value)
        except ValueError:
            raise error(f"{flag} {pair!r}: {value!r} is not a number of ms") from None
        if not 0 < ms < float("inf"):
            raise error(f"{flag} {pair!r}: {what} is a positive number of ms")
        out[names[name]] = ms
    return out


def parse_goodput(pairs: Sequence[str]) -> dict[str, float]:
    """``["ttft:730", "tpot:50"]`` (``vllm bench serve --goodput KEY:VALUE``, ms; a pair may also hold several
    space-separated ones) -> ``{"ttft_ms": 730.0, "tpot_ms": 50.0}`` in ``SLO_METRICS`` names."""
    return parse_key_ms(pairs, "--goodput", GOODPUT_NAMES, "an SLO", GoodputError)


def slo_values_ms(r: RequestRecord) -> dict[str, float | None]:
    """One request's values of every SLO metric, ms: ``ttft_ms`` (``ttft_ms``), ``tpot_ms`` and ``itl_ms``
    (both ``tpot_ms``: AIPerf's per-request ITL is (last token − first token) ÷ (tokens − 1), the same mean
    gap), ``e2e_ms`` (``e2el_ms``). None where the request has no such value (no token; fewer than 2)."""
    tpot = tpot_ms(r)
    return {"ttft_ms": ttft_ms(r), "tpot_ms": tpot, "itl_ms": tpot, "e2e_ms": e2el_ms(r)}


def meets_slos(r: RequestRecord, slos_ms: dict[str, float]) -> bool:
    """Whether one request is "good": it completed and, for every SLO given, its own value ≤ the threshold
    [ms] — per request, all SLOs at once, ``≤`` inclusive, as ``vllm bench serve --goodput`` counts a good
    request (``calculate_metrics``: ``all(s >= r for s, r in zip(slo_values, req_metric))``; AIPerf's
    ``--goodput`` counts completed requests meeting every constraint the same way). As vLLM's ``all_tpots``
    does, a request with one output token has TPOT (and ITL) 0: no gap to miss. A request with no token has no
    TTFT: not good."""
    if not r.ok:
        return False
    vals = slo_values_ms(r)
    for name, limit in slos_ms.items():
        if name not in vals:
            raise ValueError(f"unknown SLO metric {name!r}; known: {', '.join(SLO_METRICS)}")
        v = vals[name]
        if v is None and name in ("tpot_ms", "itl_ms") and vals["ttft_ms"] is not None:
            v = 0.0
        if v is None or v > limit:
            return False
    return True


def good_requests(records: Sequence[RequestRecord], slos_ms: dict[str, float]) -> int:
    """Requests meeting all SLOs (``meets_slos``), count."""
    return sum(1 for r in records if meets_slos(r, slos_ms))


def goodput_req_s(good_requests_: int, duration_s: float) -> float | None:
    """Goodput, requests/s = requests meeting all SLOs ÷ point duration [s] (``duration_s``: first send to
    last stream end, the same denominator as ``request_throughput_req_s``, as vllm bench's
    ``request_goodput``); None for a zero duration."""
    return good_requests_ / duration_s if duration_s > 0 else None


# --- open loop: the schedule against what happened (canonical view) ----------------------------------------


def send_lateness_ms(r: RequestRecord) -> float | None:
    """How late the client sent a scheduled (open-loop) request, ms = (send − scheduled send) [ns] / 1e6:
    its event loop's delay, plus any wait for a ``max_concurrency`` slot; None for a closed-loop request (it
    has no schedule). The send is the last attempt's (``retries``)."""
    if r.scheduled_mono_ns is None:
        return None
    return (r.send_mono_ns - r.scheduled_mono_ns) / NS_PER_MS


def rate_of_events_req_s(times_ns: Sequence[int]) -> float | None:
    """The rate of a train of events, req/s = (n − 1) ÷ (last − first) [ns → s]: the n − 1 gaps between them
    over their span (the estimate of a renewal process's rate from its event times); None for fewer than 2
    events or a zero span."""
    if len(times_ns) < 2:
        return None
    span_s = (max(times_ns) - min(times_ns)) / NS_PER_S
    return (len(times_ns) - 1) / span_s if span_s > 0 else None


def offered_rate_req_s(records: Sequence[RequestRecord]) -> float | None:
    """The rate the point's schedule offered, req/s: ``rate_of_events_req_s`` of its scheduled send times
    (every scheduled request, failed ones included); None for a closed-loop point."""
    return rate_of_events_req_s([r.scheduled_mono_ns for r in records if r.scheduled_mono_ns is not None])


def achieved_rate_req_s(records: Sequence[RequestRecord]) -> float | None:
    """The rate the server completed the point's requests at, req/s: ``rate_of_events_req_s`` of the stream
    ends of the completed requests — the same estimate as ``offered_rate_req_s``, so the two compare: a server
    that keeps up completes at the rate it is offered; one that cannot falls behind."""
    return rate_of_events_req_s([r.end_mono_ns for r in completed(records)])


# --- vllm-bench-compatible view (only to compare with files `vllm bench serve` wrote) ----------------------


def completed_vllm_bench(records: Sequence[RequestRecord]) -> list[RequestRecord]:
    """vllm bench's successful requests: ended without error and received at least one chunk."""
    return [r for r in records if r.ok and r.chunk_mono_ns]


def ttft_ms_vllm_bench(r: RequestRecord) -> float:
    """vllm bench's TTFT, ms = (receive of the first chunk carrying ``choices``, even an empty one − send)
    [ns] / 1e6. Needs a chunk (``completed_vllm_bench``)."""
    return (r.chunk_mono_ns[0] - r.send_mono_ns) / NS_PER_MS


def e2el_ms_vllm_bench(r: RequestRecord) -> float:
    """vllm bench's ``latency``, ms = (last chunk carrying ``choices`` − send) [ns] / 1e6: the usage chunk
    and ``[DONE]`` after it are not in it."""
    return (r.chunk_mono_ns[-1] - r.send_mono_ns) / NS_PER_MS


def itls_ms_vllm_bench(r: RequestRecord) -> list[float]:
    """vllm bench's ITLs, ms: one gap per chunk after the first, (chunk[i] − chunk[i−1]) [ns] / 1e6, whatever
    the chunk carried (several tokens, or none)."""
    c = r.chunk_mono_ns
    return [(b - a) / NS_PER_MS for a, b in zip(c, c[1:], strict=False)]


def tpot_ms_vllm_bench(r: RequestRecord) -> float | None:
    """vllm bench's TPOT, ms = (e2el_ms_vllm_bench − ttft_ms_vllm_bench) / (output tokens − 1); None for < 2
    tokens."""
    n = output_tokens(r)
    return (e2el_ms_vllm_bench(r) - ttft_ms_vllm_bench(r)) / (n - 1) if n > 1 else None


def input_tokens_vllm_bench(r: RequestRecord) -> int:
    """vllm bench's prompt length, count: the prompt the client built (our ``input_len``), not the server's
    count."""
    return r.input_len


def peaks_vllm_bench(done: Sequence[RequestRecord]) -> tuple[float, int]:
    """vllm bench's (``max_output_tokens_per_s``, ``max_concurrent_requests``): in 1-s buckets counted from
    the first send of a completed request, the most chunks received in one bucket (each chunk one "token")
    and the most requests active (send … last chunk) in one bucket; (0, 0) for no request."""
    if not done:
        return 0.0, 0
    t0 = min(r.send_mono_ns for r in done)
    t_end = max(r.chunk_mono_ns[-1] for r in done)
    n = int(np.ceil((t_end - t0) / NS_PER_S)) + 1
    chunks = np.zeros(n)
    active = np.zeros(n)
    for r in done:
        for t in r.chunk_mono_ns:
            chunks[(t - t0) // NS_PER_S] += 1
        first, last = (r.send_mono_ns - t0) // NS_PER_S, (r.chunk_mono_ns[-1] - t0) // NS_PER_S
        active[first : last + 1] += 1
    return float(chunks.max()), int(active.max())


def _stats_keys_vllm_bench(name: str, values_ms: Sequence[float]) -> dict[str, float | None]:
    """``mean_<name>_ms`` … ``p99_<name>_ms`` by ``stats``; an empty sample summarises to 0, as vllm bench
    writes."""
    st = stats(list(values_ms) or [0.0])
    out = {f"mean_{name}_ms": st.mean_ms, f"median_{name}_ms": st.median_ms, f"std_{name}_ms": st.std_ms}
    for p in PERCENTILES:
        out[f"p{p:g}_{name}_ms"] = st.percentiles_ms[p]
    return out


def point_summary_vllm_bench(
    records: Sequence[RequestRecord],
    *,
    model_id: str,
    max_concurrency: int | None,
    num_prompts: int,
    label: str | None,
    request_rate: float | str = "inf",
    burstiness: float = 1.0,
) -> dict[str, Any]:
    """One point in the ``vllm bench serve --save-result`` schema (its keys, in its order), by the
    vllm-bench-compatible view: what that tool would have written for the same requests (a closed-loop
    point: ``request_rate`` "inf"; an open-loop one: its offered rate, req/s, and gamma shape)."""
    if not records:
        raise ValueError("no requests: a point without requests has no summary")
    done = completed_vllm_bench(records)
    dur = duration_s(records)
    in_total = sum(input_tokens_vllm_bench(r) for r in done)
    out_total = sum(output_tokens(r) for r in done)
    peak_tok, peak_active = peaks_vllm_bench(done)
    out: dict[str, Any] = {
        "date": end_date_utc(records),
        "endpoint_type": "openai",
        "backend": "openai",
        "label": label,
        "model_id": model_id,
        "tokenizer_id": model_id,
        "num_prompts": num_prompts,
        "request_rate": request_rate,
        "burstiness": burstiness,
        "max_concurrency": max_concurrency,
        "duration": dur,
        "completed": len(done),
        "failed": len(records) - len(done),
        "total_input_tokens": in_total,
        "total_output_tokens": out_total,
        "request_throughput": request_throughput_req_s(len(done), dur),
        "request_goodput": None,
        "output_throughput": output_throughput_tok_s(out_total, dur),
        "total_token_throughput": total_token_throughput_tok_s(in_total, out_total, dur),
        "max_output_tokens_per_s": peak_tok,
        "max_concurrent_requests": peak_active,
        "rtfx": 0.0,
    }
    out |= _stats_keys_vllm_bench("ttft", [ttft_ms_vllm_bench(r) for r in done])
    out |= _stats_keys_vllm_bench("tpot", [t for r in done if (t := tpot_ms_vllm_bench(r)) is not None])
    out |= _stats_keys_vllm_bench("itl", [g for r in done for g in itls_ms_vllm_bench(r)])
    out |= _stats_keys_vllm_bench("e2el", [e2el_ms_vllm_bench(r) for r in done])
    return out


# --- the load client's own fidelity
# ---------------------------------------------------------------------------

# A client whose event loop runs 1 % of its wake-ups more than this late adds that much to the chunk times
# it records: the ITLs and TTFTs of the point describe the client as much as the server.
CLIENT_LOOP_LAG_LIMIT_MS = 5.0


def client_loop_lag_p99_ms(lag_ns: Sequence[int]) -> float | None:
    """p99 of the client's event-loop lag, ms: the ``client_probe`` event's ``lag_ns`` (how late a task
    sleeping to a deadline woke, each probe period) / 1e6, numpy's linear percentile; None without samples."""
    return float(np.percentile(np.asarray(lag_ns, dtype=float), 99)) / NS_PER_MS if len(lag_ns) else None


def client_saturated(lag_ns: Sequence[int]) -> bool | None:
    """The client set the pace: its loop-lag p99 (``client_loop_lag_p99_ms``) > ``CLIENT_LOOP_LAG_LIMIT_MS``;
    None without samples."""
    p99 = client_loop_lag_p99_ms(lag_ns)
    return None if p99 is None else p99 > CLIENT_LOOP_LAG_LIMIT_MS


def client_cpu_ms_per_1k_tokens(cpu_ns: int, tokens: int) -> float | None:
    """The client's own cost, CPU ms per 1,000 received tokens = cpu_ns / 1e6 / tokens × 1000."""
    return cpu_ns / NS_PER_MS / tokens * 1000 if tokens else None
