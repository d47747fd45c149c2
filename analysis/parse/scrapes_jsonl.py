"""``scrapes.jsonl``: the sampler's raw observations, one JSON object per scrape, verbatim.

Every line: ``v`` (1), ``source`` (``metrics``: the server's Prometheus text; ``nvidia-smi``: CSV of
``nvidia-smi --query-gpu=<query> --format=csv,nounits``), ``start_mono_ns``/``start_unix_ns`` (request sent /
command started), ``end_mono_ns``/``end_unix_ns``, ``status`` (HTTP status or exit code; null when there was no
answer), ``error`` (null or text), ``text`` (verbatim body or stdout; null when there was no answer), ``tag``
(``tick``: the periodic sampler, tick number ``k`` due at ``due_mono_ns``; ``point_start``/``point_end``: the
collector's own scrapes at point boundaries, with ``point``), ``url`` or ``query``.

The Prometheus text is turned into samples only with ``prometheus_client``'s parser (``metric_samples``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from analysis.parse.prometheus import parse_prometheus_text
from analysis.parse.requests_jsonl import iter_json_lines
from collector.raw.errors import ParseError

SOURCES = ("metrics", "nvidia-smi")


@dataclass(frozen=True)
class ScrapeRecord:
    source: str
    tag: str
    k: int | None
    point: str | None
    start_mono_ns: int
    start_unix_ns: int
    end_mono_ns: int
    end_unix_ns: int
    status: int | None
    error: str | None
    text: str | None
    line: int

    @property
    def ok(self) -> bool:
        return self.error is None and self.text is not None and self.status in (200, 0)


def _int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def parse_scrapes_jsonl(path: str | Path, allow_torn_tail: bool = False) -> list[ScrapeRecord]:
    out = []
    for i, obj in iter_json_lines(path, allow_torn_tail):
        if not isinstance(obj, dict) or obj.get("v") != 1:
            raise ParseError(path, i, "expected a scrape object of version 1")
        if obj.get("source") not in SOURCES:
            raise ParseError(path, i, f"unknown source {obj.get('source')!r}")
        for k in ("start_mono_ns", "start_unix_ns", "end_mono_ns", "end_unix_ns"):
            if not _int(obj.get(k)):
                raise ParseError(path, i, f"key {k!r} should be an integer")
        for k, kinds in (("status", int), ("error", str), ("text", str), ("k", int), ("point", str)):
            if obj.get(k) is not None and not isinstance(obj[k], kinds):
                raise ParseError(path, i, f"key {k!r} should be {kinds.__name__} or null")
        if not isinstance(obj.get("tag"), str):
            raise ParseError(path, i, "key 'tag' should be a string")
        out.append(
            ScrapeRecord(
                source=obj["source"],
                tag=obj["tag"],
                k=obj.get("k"),
                point=obj.get("point"),
                start_mono_ns=obj["start_mono_ns"],
                start_unix_ns=obj["start_unix_ns"],
                end_mono_ns=obj["end_mono_ns"],
                end_unix_ns=obj["end_unix_ns"],
                status=obj.get("status"),
                error=obj.get("error"),
                text=obj.get("text"),
                line=i,
            )  # fmt: skip
        )
    return out


def metric_samples(rec: ScrapeRecord, path: str | Path = "scrapes.jsonl") -> dict[tuple[str, tuple], float]:
    """A /metrics scrape's samples: {(sample name, sorted label items): value}."""
    if rec.source != "metrics" or rec.text is None:
        raise ParseError(path, rec.line, "not a successful /metrics scrape")
    snap = parse_prometheus_text(rec.text, f"{path}:{rec.line} (embedded scrape)")
    return {(s.name, tuple(sorted(s.labels.items()))): float(s.value) for s in snap.samples}


def counter_total(samples: dict[tuple[str, tuple], float], name: str) -> float | None:
    """Sum over label sets of one sample name (e.g. ``vllm:num_preemptions_total``); None when absent."""
    vals = [v for (n, _), v in samples.items() if n == name]
    return sum(vals) if vals else None
