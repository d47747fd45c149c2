"""The /metrics families analysis reads, and the bounded form a scrape is stored in (part of the raw contract:
the collector writes it, analysis reads it, both from this one list).

A scrape whose body is at most ``SCRAPE_STORED_MAX_BYTES`` (a plan's ``[sampling] scrape_stored_max_bytes``)
is stored verbatim. A larger one (a server with per-adapter or per-tenant labels, or a broken exporter) is
stored as only the lines of the families in ``KEPT_FAMILIES`` — each kept whole: every label set, every
histogram bucket, its ``# HELP``/``# TYPE`` — and the rest is counted, not kept: the record's
``dropped_series`` (sample lines) and ``dropped_bytes`` (every byte not stored). A scrape whose kept
families alone pass the bound is a failed scrape, as one whose page passes the read bound is.
"""

from __future__ import annotations

SCRAPE_STORED_MAX_BYTES = 1 << 20  # vLLM's whole page with every histogram is a few hundred KB
# read at most (the page is stored bounded as it arrives, so this bounds the time a scrape takes, not memory)
SCRAPE_READ_MAX_BYTES = 256 << 20

# column -> sample name (summed over label sets), as analysis.loading.scrape_series reads them: counters
# and histogram parts (cumulative), then the running/waiting/KV gauges.
VLLM_COUNTERS = {
    "preemptions": "vllm:num_preemptions_total",
    "queue_sum": "vllm:request_queue_time_seconds_sum",
    "queue_cnt": "vllm:request_queue_time_seconds_count",
    "prefill_sum": "vllm:request_prefill_time_seconds_sum",
    "prefill_cnt": "vllm:request_prefill_time_seconds_count",
    "decode_sum": "vllm:request_decode_time_seconds_sum",
    "decode_cnt": "vllm:request_decode_time_seconds_count",
    "iter_tok_sum": "vllm:iteration_tokens_total_sum",
    "iter_tok_cnt": "vllm:iteration_tokens_total_count",
    "flops": "vllm:estimated_flops_per_gpu_total",
    "read_bytes": "vllm:estimated_read_bytes_per_gpu_total",
    "prefix_hits": "vllm:prefix_cache_hits_total",
}
VLLM_GAUGES = {
    "running": "vllm:num_requests_running",
    "waiting": "vllm:num_requests_waiting",
    "kv_usage": "vllm:kv_cache_usage_perc",
}
LLAMACPP_COUNTERS = {
    "prompt_tokens": "llamacpp:prompt_tokens_total",
    "prompt_s": "llamacpp:prompt_seconds_total",
    "predicted_tokens": "llamacpp:tokens_predicted_total",
    "predicted_s": "llamacpp:tokens_predicted_seconds_total",
    "n_decode": "llamacpp:n_decode_total",
}
LLAMACPP_GAUGES = {
    "running": "llamacpp:requests_processing",
    "waiting": "llamacpp:requests_deferred",
    "kv_usage": "llamacpp:kv_cache_usage_ratio",
}
# read by name elsewhere: the KV pool (capacity), the prefix cache, speculative decoding
VLLM_CACHE_CONFIG = "vllm:cache_config_info"
VLLM_PREFIX_QUERIES = "vllm:prefix_cache_queries_total"
LLAMACPP_PROMPT_CACHED = "llamacpp:prompt_tokens_cached_total"
LLAMACPP_SPEC_DRAFTS = "llamacpp:spec_decode_num_drafts_total"
LLAMACPP_SPEC_DRAFTED = "llamacpp:spec_decode_num_draft_tokens_total"
LLAMACPP_SPEC_ACCEPTED = "llamacpp:spec_decode_num_accepted_tokens_total"
# what names the engine when nothing else does (analysis.parse.prometheus: PromSnapshot.engine)
ENGINE_MARKERS = ("sglang:num_running_reqs", "tgi_batch_current_size")

# a family's samples: its name, or its name with one of these (histograms, summaries, counters, info)
_SUFFIXES = ("_total", "_sum", "_count", "_bucket", "_created", "_info")


def family_of(sample_name: str) -> str:
    """The family a sample name belongs to: the name less one ``_SUFFIXES`` ending
    (``vllm:iteration_tokens_total_sum`` → ``vllm:iteration_tokens_total``)."""
    for suf in _SUFFIXES:
        if sample_name.endswith(suf):
            return sample_name[: -len(suf)]
    return sample_name


KEPT_SAMPLE_NAMES = frozenset(
    (
        *VLLM_COUNTERS.values(),
        *VLLM_GAUGES.values(),
        *LLAMACPP_COUNTERS.values(),
        *LLAMACPP_GAUGES.values(),
        VLLM_CACHE_CONFIG,
        VLLM_PREFIX_QUERIES,
        LLAMACPP_PROMPT_CACHED,
        LLAMACPP_SPEC_DRAFTS,
        LLAMACPP_SPEC_DRAFTED,
        LLAMACPP_SPEC_ACCEPTED,
        *ENGINE_MARKERS,
    )
)
# the families kept whole in a bounded scrape: each name as written and as its family
KEPT_FAMILIES = frozenset(KEPT_SAMPLE_NAMES | {family_of(n) for n in KEPT_SAMPLE_NAMES})


def kept(name: str) -> bool:
    """Whether a sample or family name (``# TYPE``'s) belongs to a kept family."""
    return name in KEPT_FAMILIES or family_of(name) in KEPT_FAMILIES


def line_name(line: bytes) -> str | None:
    """The metric a line of Prometheus text is about: a sample's name, or a ``# HELP``/``# TYPE`` line's
    family; None for other comments and blank lines."""
    if line.startswith(b"#"):
        parts = line.split(None, 3)
        if len(parts) >= 3 and parts[1] in (b"HELP", b"TYPE"):
            return parts[2].decode("utf-8", "replace")
        return None
    name = line.split(b"{", 1)[0].split(None, 1)
    return name[0].decode("utf-8", "replace") if name else None


_PREFILTER = (b"# HELP ", b"# TYPE ", b"vllm:", b"llamacpp:", b"sglang:", b"tgi_")


class BoundedPage:
    """A /metrics body fed as it arrives (``feed``), held at most ``stored_max_bytes``: verbatim while the
    page fits, then only the kept families' lines; ``dropped_series`` / ``dropped_bytes`` count what was not
    kept (both None while nothing was dropped). ``OverflowError`` when the kept lines alone pass the bound."""

    def __init__(self, stored_max_bytes: int = SCRAPE_STORED_MAX_BYTES):
        self.stored_max_bytes = stored_max_bytes
        self.buf = bytearray()
        self.received_bytes = 0
        self.filtering = False
        self._tail = b""  # a line not yet ended (filtering)
        self.dropped_series = 0

    def feed(self, chunk: bytes) -> None:
        self.received_bytes += len(chunk)
        if not self.filtering:
            self.buf += chunk
            if len(self.buf) <= self.stored_max_bytes:
                return
            self.filtering = True  # from here on only kept lines are held: the verbatim part is filtered too
            data, self.buf = bytes(self.buf), bytearray()
        else:
            data = self._tail + chunk
        lines = data.split(b"\n")
        self._tail = lines.pop()
        for line in lines:
            self._line(line)
        if len(self._tail) > self.stored_max_bytes:  # one line longer than the bound: kept it cannot be
            self._drop(self._tail)
            self._tail = b""

    def _line(self, line: bytes) -> None:
        name = line_name(line) if line.startswith(_PREFILTER) else None
        if name is not None and kept(name):
            self.buf += line + b"\n"
            if len(self.buf) > self.stored_max_bytes:
                raise OverflowError(
                    f"the kept metric families alone are larger than {self.stored_max_bytes} bytes"
                )
        else:
            self._drop(line)

    def _drop(self, line: bytes) -> None:
        if line.strip() and not line.startswith(b"#"):
            self.dropped_series += 1

    def value(self) -> bytes:
        """The stored body (the last unended line handled as a line)."""
        if self.filtering and self._tail:
            self._line(self._tail)
            self._tail = b""
        return bytes(self.buf)

    @property
    def dropped_bytes(self) -> int | None:
        """Bytes of the page not stored, None when it was stored verbatim."""
        return self.received_bytes - len(self.buf) if self.filtering else None
