"""``analysis.core.metrics``' canonical per-request and per-point numbers, computed vectorised over a run's
``RequestColumns`` (no Python object per chunk). The definitions are metrics.py's — each function here names
the one it computes — and the values are bit-identical to them: every latency is the same integer difference
of nanoseconds divided the same way (exact below 2^53 ns), the samples keep the records' order (so numpy's
mean and std sum them alike), and token totals are exact integers (Python's where int64 could overflow: a
server claiming 2^62 tokens). tests/test_metrics_columns.py holds them against the per-record functions.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from analysis.core import metrics
from analysis.core.metrics import NS_PER_MS, NS_PER_S, PERCENTILES
from analysis.parse.bench_json import BenchResult
from analysis.parse.request_columns import RequestColumns

_SAFE = 2**31  # a chunk count this small summed over ≤ 2^32 chunks cannot overflow int64


@dataclass(frozen=True)
class TokenChunks:
    """The chunks that carried at least one token (``metrics._token_chunks``), flat, with per request the
    first and last of them (valid where ``has``)."""

    pos: np.ndarray  # flat chunk positions
    req: np.ndarray  # the request each belongs to
    first: np.ndarray  # per request: index into pos of its first token chunk
    last: np.ndarray
    has: np.ndarray  # per request: carried a token at all


def _memo(c: RequestColumns, key: str, make: Callable[[], Any]) -> Any:
    """``make()`` once per columns (a point's columns are kept by its log: each derived array once)."""
    if key not in c.memo:
        c.memo[key] = make()
    return c.memo[key]


def token_chunks(c: RequestColumns) -> TokenChunks:
    return _memo(c, "token_chunks", lambda: _token_chunks(c))


def _token_chunks(c: RequestColumns) -> TokenChunks:
    counts = np.diff(c.offsets)
    owner = np.repeat(np.arange(len(c), dtype=np.int64), counts)
    pos = np.flatnonzero(c.chunk_tokens > 0)
    req = owner[pos]
    ids = np.arange(len(c), dtype=np.int64)
    first = np.searchsorted(req, ids, side="left")
    last = np.searchsorted(req, ids, side="right") - 1
    return TokenChunks(pos, req, first, last, last >= first)


def sums_per_request(values: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """Σ of each request's slice of a flat integer array, exact: int64, or Python ints (object) for the
    requests whose values could overflow it."""
    cum = np.zeros(len(values) + 1, dtype=np.int64)
    if not len(values) or (values.max() < _SAFE and values.min() > -_SAFE):
        np.cumsum(values, out=cum[1:])
        return cum[offsets[1:]] - cum[offsets[:-1]]
    small = np.abs(values) < _SAFE
    np.cumsum(np.where(small, values, 0), out=cum[1:])
    obj = (cum[offsets[1:]] - cum[offsets[:-1]]).astype(object)
    for i in np.unique(np.searchsorted(offsets, np.flatnonzero(~small), side="right") - 1):
        obj[i] = sum(values[offsets[i] : offsets[i + 1]].tolist())
    return obj


def exact_total(values: np.ndarray) -> int:
    """Σ of integers, exact (Python's sum where int64 could overflow)."""
    if values.dtype == object or (len(values) and np.abs(values).max() >= 2**62 // max(len(values), 1)):
        return int(sum(int(v) for v in values))
    return int(values.sum())


def _optional_ints(c: RequestColumns, outer: str, key: str) -> tuple[np.ndarray, np.ndarray]:
    """(values, present) of an integer inside an object field (``usage.completion_tokens``), as
    ``RequestRecord.completion_tokens`` reads it: present when it is an int."""
    raw = [(f.get(outer) or {}).get(key) for f in c.fields]
    present = np.fromiter((isinstance(v, int) for v in raw), dtype=bool, count=len(raw))
    vals = [int(v) if isinstance(v, int) else 0 for v in raw]
    try:
        return np.asarray(vals, dtype=np.int64), present
    except OverflowError:
        return np.asarray(vals, dtype=object), present


def ttft_ms(c: RequestColumns) -> np.ndarray:
    """``metrics.ttft_ms`` per request (NaN where None: no chunk carried a token)."""

    def make() -> np.ndarray:
        tc = token_chunks(c)
        out = np.full(len(c), np.nan)
        first = c.chunk_mono_ns[tc.pos[tc.first[tc.has]]]
        out[tc.has] = (first - c.ints("send_mono_ns")[tc.has]) / NS_PER_MS
        return out

    return _memo(c, "ttft_ms", make)


def e2el_ms(c: RequestColumns) -> np.ndarray:
    """``metrics.e2el_ms`` per request."""
    return (c.ints("end_mono_ns") - c.ints("send_mono_ns")) / NS_PER_MS


def tpot_ms(c: RequestColumns) -> np.ndarray:
    """``metrics.tpot_ms`` per request (NaN where None: fewer than 2 tokens)."""

    def make() -> np.ndarray:
        tc = token_chunks(c)
        n = sums_per_request_tokens(c)
        out = np.full(len(c), np.nan)
        many = tc.has & _gt(n, 1)
        span = c.chunk_mono_ns[tc.pos[tc.last[many]]] - c.chunk_mono_ns[tc.pos[tc.first[many]]]
        out[many] = span / NS_PER_MS / (n[many] - 1)
        return out

    return _memo(c, "tpot_ms", make)


def _gt(a: np.ndarray, k: int) -> np.ndarray:
    return np.asarray(a > k, dtype=bool)


def sums_per_request_tokens(c: RequestColumns) -> np.ndarray:
    """Σ of the token-carrying chunks' counts per request (what ``metrics.tpot_ms`` divides by); the same as
    ``streamed`` where no chunk is negative."""

    def make() -> np.ndarray:
        if not len(c.chunk_tokens) or c.chunk_tokens.min() >= 0:
            return streamed(c)
        return sums_per_request(np.where(c.chunk_tokens > 0, c.chunk_tokens, 0), c.offsets)

    return _memo(c, "positive_tokens", make)


def streamed(c: RequestColumns) -> np.ndarray:
    """Σ chunk_tokens per request (``sum(r.chunk_tokens)``): the tokens the stream carried."""
    return _memo(c, "streamed", lambda: sums_per_request(c.chunk_tokens, c.offsets))


def negative_chunk(c: RequestColumns) -> np.ndarray:
    """Per request: some chunk's token count is below 0 (a cumulative counter that went back)."""
    neg = np.zeros(len(c), dtype=bool)
    neg[np.searchsorted(c.offsets, np.flatnonzero(c.chunk_tokens < 0), side="right") - 1] = True
    return neg


def plausible(c: RequestColumns, streamed: np.ndarray) -> np.ndarray:
    """``metrics.token_counts_plausible`` per request."""
    neg = negative_chunk(c)
    ct, has_ct = _optional_ints(c, "usage", "completion_tokens")
    max_tokens = c.ints("max_tokens")
    ct_ok = ~has_ct | ((ct >= 0) & (ct <= max_tokens))
    return np.asarray(~neg & (streamed <= max_tokens) & ct_ok, dtype=bool)


def itls_ms(c: RequestColumns, tc: TokenChunks, keep: np.ndarray) -> np.ndarray:
    """``metrics.itls_ms`` of the requests ``keep`` (bool per request), concatenated in request order; the
    requests whose counts are not plausible give none (the caller leaves them out of ``keep``)."""
    sel = keep[tc.req]
    pos, req = tc.pos[sel], tc.req[sel]
    if not len(pos):
        return np.zeros(0)
    is_first = np.ones(len(pos), dtype=bool)
    is_first[1:] = req[1:] != req[:-1]
    n = c.chunk_tokens[pos]
    t = c.chunk_mono_ns[pos]
    gap = np.zeros(len(pos), dtype=np.int64)
    gap[1:] = t[1:] - t[:-1]
    vals = np.where(is_first, 0.0, gap / NS_PER_MS / n)
    if (n == 1).all():  # one token a chunk (the usual stream): the same values as the repeat below
        return vals[~is_first]
    return np.repeat(vals, np.where(is_first, n - 1, n))


def output_tokens(c: RequestColumns, streamed_all: np.ndarray) -> np.ndarray:
    """``metrics.output_tokens`` per request (``streamed_all``: Σ chunk_tokens, negatives included)."""
    ct, has_ct = _optional_ints(c, "usage", "completion_tokens")
    exact = np.fromiter(
        (
            f.get("token_count_source") in metrics.EXACT_TOKEN_SOURCES
            and f.get("token_count_problem") is None
            for f in c.fields
        ),
        dtype=bool,
        count=len(c),
    )
    use_streamed = ~has_ct | exact
    if streamed_all.dtype == object or ct.dtype == object:
        return np.asarray(
            [s if u else v for s, v, u in zip(streamed_all, ct, use_streamed, strict=True)], object
        )
    return np.where(use_streamed, streamed_all, ct)


def input_tokens(c: RequestColumns) -> np.ndarray:
    """``metrics.input_tokens`` per request."""
    pt, has_pt = _optional_ints(c, "usage", "prompt_tokens")
    il = c.ints("input_len")
    if pt.dtype == object:
        return np.asarray([p if h else i for p, i, h in zip(pt, il, has_pt, strict=True)], object)
    return np.where(has_pt, pt, il)


def duration_s(c: RequestColumns) -> float:
    """``metrics.duration_s``."""
    return (int(c.ints("end_mono_ns").max()) - int(c.ints("send_mono_ns").min())) / NS_PER_S


def point_result(
    c: RequestColumns,
    path: str,
    model_id: str | None = None,
    percentiles: Sequence[float] = metrics.DEFAULT_PERCENTILES,
) -> BenchResult:
    """``metrics.point_result`` of one point's requests in columns (failed ones included)."""
    if not len(c):
        raise ValueError(f"{path}: a point without requests has no summary")
    ok = c.ok
    tc = token_chunks(c)
    out_total = exact_total(output_tokens(c, streamed(c))[ok])
    in_total = exact_total(input_tokens(c)[ok])
    done = int(ok.sum())
    dur = duration_s(c)
    ttft, tpot = ttft_ms(c), tpot_ms(c)
    qs = tuple(sorted({*PERCENTILES, *percentiles}))
    return BenchResult(
        path=path,
        completed=done,
        duration_s=dur,
        date=metrics.end_date_utc_ns(int(c.ints("end_unix_ns").max())),
        model_id=model_id,
        num_prompts=len(c),
        max_concurrency=int(c.ints("concurrency").max()),
        failed=len(c) - done,
        total_input_tokens=in_total,
        total_output_tokens=out_total,
        request_throughput_req_s=metrics.request_throughput_req_s(done, dur),
        output_throughput_tok_s=metrics.output_throughput_tok_s(out_total, dur),
        total_token_throughput_tok_s=metrics.total_token_throughput_tok_s(in_total, out_total, dur),
        latency={
            "ttft": metrics.stats(ttft[ok & ~np.isnan(ttft)], qs),
            "tpot": metrics.stats(tpot[ok & ~np.isnan(tpot)], qs),
            "itl": metrics.stats(itls_ms(c, tc, ok & plausible(c, streamed(c))), qs),
            "e2el": metrics.stats(e2el_ms(c)[ok], qs),
        },
    )


def good_requests(c: RequestColumns, slos_ms: dict[str, float]) -> int:
    """``metrics.good_requests``: the requests meeting every SLO (``metrics.meets_slos``), count."""
    ttft, tpot = ttft_ms(c), tpot_ms(c)
    vals = {"ttft_ms": ttft, "tpot_ms": tpot, "itl_ms": tpot, "e2e_ms": e2el_ms(c)}
    good = c.ok
    for name, limit in slos_ms.items():
        if name not in vals:
            raise ValueError(f"unknown SLO metric {name!r}; known: {', '.join(metrics.SLO_METRICS)}")
        v = vals[name]
        if name in ("tpot_ms", "itl_ms"):  # one token: no gap to miss
            v = np.where(np.isnan(v) & ~np.isnan(ttft), 0.0, v)
        good = good & ~np.isnan(v) & (v <= limit)
    return int(good.sum())


def stream_counts(c: RequestColumns) -> tuple[np.ndarray, np.ndarray]:
    """Per request: (Σ chunk_tokens as streamed, ``plausible``) — what the stream-count gate compares."""
    return streamed(c), plausible(c, streamed(c))


def completion_tokens(c: RequestColumns) -> tuple[np.ndarray, np.ndarray]:
    """(``usage.completion_tokens``, present) per request, as ``RequestRecord.completion_tokens``."""
    return _optional_ints(c, "usage", "completion_tokens")


def _scheduled(c: RequestColumns) -> tuple[np.ndarray, np.ndarray]:
    """(``scheduled_mono_ns``, present) per request: open-loop requests have one."""
    raw = [f.get("scheduled_mono_ns") for f in c.fields]
    present = np.fromiter((v is not None for v in raw), dtype=bool, count=len(raw))
    vals = np.asarray([0 if v is None else v for v in raw], dtype=np.int64)
    return vals, present


def send_lateness_ms(c: RequestColumns) -> np.ndarray:
    """``metrics.send_lateness_ms`` of the scheduled requests, in file order (closed-loop ones have none)."""
    sched, present = _scheduled(c)
    return (c.ints("send_mono_ns")[present] - sched[present]) / NS_PER_MS


def offered_rate_req_s(c: RequestColumns) -> float | None:
    """``metrics.offered_rate_req_s``."""
    sched, present = _scheduled(c)
    return metrics.rate_of_events_req_s(sched[present].tolist())


def achieved_rate_req_s(c: RequestColumns) -> float | None:
    """``metrics.achieved_rate_req_s``."""
    return metrics.rate_of_events_req_s(c.ints("end_mono_ns")[c.ok].tolist())
