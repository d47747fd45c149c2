"""A raw Prometheus exposition scrape (vLLM ``vllm:*`` or llama.cpp ``llamacpp:*``) -> a typed snapshot.

All reading goes through ``prometheus_client.parser.text_string_to_metric_families`` (never grep/regex): once
over the whole text for families (type, help), and once per sample line so every sample keeps its line number
and a bad line is reported exactly. Two samples with the same name and labels make the scrape ambiguous and
are refused.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from analysis.parse.text import split_lines
from collector.raw.errors import ParseError
from collector.raw.jsonl import clip, read_bytes


@dataclass(frozen=True)
class PromSample:
    name: str  # the sample's own name: "vllm:request_queue_time_seconds_sum"
    labels: dict[str, str]
    value: float
    line: int
    family: str  # the family it belongs to ("vllm:request_queue_time_seconds"); == name when undeclared
    type: str  # "counter" | "gauge" | "histogram" | "summary" | "info" | "unknown" …
    timestamp_s: float | None = None


@dataclass(frozen=True)
class Histogram:
    sum: float
    count: float
    buckets: list[tuple[float, float]]  # (le, cumulative count), +Inf last
    line: int  # line of the _count sample


@dataclass(frozen=True)
class CacheConfigInfo:
    """Labels of ``vllm:cache_config_info``: vLLM's KV pool as configured. Absent labels read None."""

    line: int
    labels: dict[str, str]  # every label, verbatim
    num_gpu_blocks: int | None
    block_size: int | None
    kv_cache_size_tokens: int | None
    kv_cache_max_concurrency: float | None
    gpu_memory_utilization: float | None
    cache_dtype: str | None
    enable_prefix_caching: bool | None


@dataclass
class PromSnapshot:
    path: str
    samples: list[PromSample]
    families: dict[str, tuple[str, str]] = field(default_factory=dict)  # family -> (type, help)

    @property
    def engine(self) -> str | None:
        """The engine whose metric names these are: "vllm" (``vllm:*``), "llamacpp" (``llamacpp:*``),
        "sglang" (``sglang:*``, SGLang's docs/references/production_metrics.md), "tgi" (``tgi_*``, TGI's
        reference/metrics page); None when no known prefix is present."""
        names = {s.name.split(":", 1)[0] for s in self.samples if ":" in s.name}
        for engine in ("vllm", "llamacpp", "sglang"):
            if engine in names:
                return engine
        if any(s.name.startswith("tgi_") for s in self.samples):
            return "tgi"
        return None

    def find(self, name: str, **labels: str) -> list[PromSample]:
        """Samples with exactly this name whose labels include the given ones."""
        return [
            s for s in self.samples if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())
        ]

    def _one(self, name: str, labels: dict[str, str]) -> PromSample | None:
        found = self.find(name, **labels)
        if len(found) > 1:
            sets = "; ".join(str(s.labels) for s in found[:4])
            raise LookupError(
                f"{self.path}: {len(found)} samples named {name} match {labels or 'no labels'}: {sets}"
            )
        return found[0] if found else None

    def value(self, name: str, **labels: str) -> float | None:
        """The one sample's value (a gauge, or any sample by its full name); None when absent."""
        s = self._one(name, labels)
        return s.value if s else None

    def gauge(self, name: str, **labels: str) -> float | None:
        return self.value(name, **labels)

    def counter(self, name: str, **labels: str) -> float | None:
        """A counter by family or sample name (``vllm:num_preemptions`` or ``vllm:num_preemptions_total``)."""
        s = self._one(name if name.endswith("_total") else name + "_total", labels)
        if s is None:
            s = self._one(name, labels)
        return s.value if s else None

    def histogram(self, name: str, **labels: str) -> Histogram | None:
        """``_sum``, ``_count`` and buckets of a histogram family; None when the scrape lacks it."""
        count = self._one(name + "_count", labels)
        total = self._one(name + "_sum", labels)
        if count is None or total is None:
            return None
        buckets = []
        for s in self.find(name + "_bucket", **labels):
            if {k: v for k, v in s.labels.items() if k != "le"} == count.labels and "le" in s.labels:
                buckets.append((float(s.labels["le"]), s.value))
        buckets.sort(key=lambda b: b[0])
        return Histogram(sum=total.value, count=count.value, buckets=buckets, line=count.line)

    def with_prefix(self, prefix: str) -> list[PromSample]:
        """E.g. every ``llamacpp:`` sample."""
        return [s for s in self.samples if s.name.startswith(prefix)]

    def cache_config(self) -> CacheConfigInfo | None:
        s = self._one("vllm:cache_config_info", {})
        if s is None:
            return None
        lab = s.labels

        def get(key: str, conv):  # noqa: ANN001 - tiny local converter
            raw = lab.get(key)
            if raw is None or raw == "None":
                return None
            try:
                return conv(raw)
            except ValueError:
                raise ParseError(
                    self.path, s.line, f"cache_config_info label {key}={raw!r} is not valid"
                ) from None

        def as_bool(raw: str) -> bool:
            if raw not in ("True", "False", "true", "false"):
                raise ValueError(raw)
            return raw.lower() == "true"

        return CacheConfigInfo(
            line=s.line,
            labels=dict(lab),
            num_gpu_blocks=get("num_gpu_blocks", int),
            block_size=get("block_size", int),
            kv_cache_size_tokens=get("kv_cache_size_tokens", int),
            kv_cache_max_concurrency=get("kv_cache_max_concurrency", float),
            gpu_memory_utilization=get("gpu_memory_utilization", float),
            cache_dtype=get("cache_dtype", str),
            enable_prefix_caching=get("enable_prefix_caching", as_bool),
        )


def _families(text: str, path: str, first_line: int) -> Iterable:
    try:
        return list(text_string_to_metric_families(text))
    except Exception as err:  # noqa: BLE001 - the library raises ValueError/IndexError/KeyError…
        reason = str(err) or type(err).__name__
    # Sample lines were all read one by one already, so a HELP/TYPE comment is at fault: find which.
    for i, line in enumerate(text.split("\n")):
        if line.startswith("#"):
            try:
                list(text_string_to_metric_families(line + "\n"))
            except Exception as err:  # noqa: BLE001
                raise ParseError(
                    path, first_line + i, f"bad comment line ({err or type(err).__name__}): {clip(line)}"
                ) from None
    raise ParseError(path, None, f"not Prometheus text: {reason}")


def parse_prometheus_text(text: str, path: str | Path = "<text>", first_line: int = 1) -> PromSnapshot:
    """Parse exposition text already in memory (``first_line`` offsets line numbers, for embedded scrapes)."""
    path = str(path)
    if not text.strip():
        raise ParseError(path, first_line, "empty scrape")
    samples: list[PromSample] = []
    seen: dict[tuple[str, tuple[tuple[str, str], ...]], int] = {}
    for i, line in enumerate(text.split("\n")):
        no = first_line + i
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        s = _line_sample(path, no, line, stripped)
        key = (s.name, tuple(sorted(s.labels.items())))
        if key in seen:
            raise ParseError(path, no, f"sample {s.name}{dict(key[1])} repeats line {seen[key]}")
        seen[key] = no
        samples.append(s)
    if not samples:
        raise ParseError(path, first_line, "scrape holds no samples")
    families: dict[str, tuple[str, str]] = {}
    owner: dict[tuple[str, tuple[tuple[str, str], ...]], tuple[str, str]] = {}
    for f in _families(text, path, first_line):
        families[f.name] = (f.type, f.documentation or "")
        for fs in f.samples:
            owner[(fs.name, tuple(sorted(fs.labels.items())))] = (f.name, f.type)
    typed = [
        _typed(path, ps, *owner.get((ps.name, tuple(sorted(ps.labels.items()))), (ps.name, "unknown")))
        for ps in samples
    ]
    return PromSnapshot(path=path, samples=typed, families=families)


def _line_sample(path: str, no: int, line: str, stripped: str) -> PromSample:
    """The one sample on a line (its family not known yet: typed ``unknown``)."""
    try:
        fams = list(text_string_to_metric_families(line + "\n"))
    except Exception as err:  # noqa: BLE001 - any library failure on one line is that line's fault
        raise ParseError(path, no, f"not a Prometheus sample ({err}): {clip(stripped)}") from None
    got = [s for f in fams for s in f.samples]
    if len(got) != 1:
        raise ParseError(path, no, f"expected one sample on the line: {clip(stripped)}")
    s = got[0]
    ts = None
    if s.timestamp is not None:
        try:
            ts = float(s.timestamp)
        except (TypeError, ValueError):
            raise ParseError(path, no, f"bad timestamp on sample {s.name}") from None
    return PromSample(s.name, dict(s.labels), float(s.value), no, s.name, "unknown", ts)


def _typed(path: str, ps: PromSample, fam: str, typ: str) -> PromSample:
    """The sample with its family and type; a NaN counter or a bucket without a numeric ``le`` is an error."""
    if math.isnan(ps.value) and typ == "counter":
        raise ParseError(path, ps.line, f"counter {ps.name} is NaN")
    if typ == "histogram" and ps.name.endswith("_bucket"):
        try:
            float(ps.labels["le"])
        except (KeyError, ValueError):
            raise ParseError(path, ps.line, f"histogram bucket {ps.name} has no valid 'le' label") from None
    return PromSample(ps.name, ps.labels, ps.value, ps.line, fam, typ, ps.timestamp_s)


def parse_prometheus_bytes(data: bytes, path: str | Path = "<bytes>") -> PromSnapshot:
    lines = split_lines(data, path)
    return parse_prometheus_text("\n".join(lines) + "\n", path)


def parse_prometheus(path: str | Path) -> PromSnapshot:
    return parse_prometheus_bytes(read_bytes(path), path)
