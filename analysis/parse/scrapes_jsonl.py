"""``scrapes.jsonl`` → ``ScrapeRecord`` per line (the format: ``collector.raw.records.ScrapeRecord``), and the
samples of a /metrics scrape.

The Prometheus text is turned into samples only with the project's one Prometheus parser (``metric_samples``).
"""

from __future__ import annotations

from pathlib import Path

from analysis.parse.prometheus import parse_prometheus_text
from collector.raw.errors import ParseError
from collector.raw.jsonl import iter_json_lines
from collector.raw.records import ScrapeRecord


def parse_scrapes_jsonl(path: str | Path, allow_torn_tail: bool = False) -> list[ScrapeRecord]:
    return [ScrapeRecord.from_obj(obj, path, i) for i, obj in iter_json_lines(path, allow_torn_tail)]


def metric_samples(rec: ScrapeRecord, path: str | Path = "scrapes.jsonl") -> dict[tuple[str, tuple], float]:
    """A /metrics scrape's samples: {(sample name, sorted label items): value}."""
    if rec.source != "metrics" or rec.text is None:
        raise ParseError(path, rec.line, "not a successful /metrics scrape")
    snap = parse_prometheus_text(rec.text, f"{path}:{rec.line} (embedded scrape)")
    return {(s.name, tuple(sorted(s.labels.items()))): float(s.value) for s in snap.samples}


def parsed_samples(
    rec: ScrapeRecord, path: str | Path = "scrapes.jsonl"
) -> dict[tuple[str, tuple], float] | None:
    """``metric_samples``, or None for a scrape whose body is not Prometheus text (a server that answered
    /metrics with garbage): counted as a failed scrape, so its counters are n/a there and the run is still
    read."""
    try:
        return metric_samples(rec, path)
    except ParseError:
        return None


def counter_total(samples: dict[tuple[str, tuple], float], name: str) -> float | None:
    """Sum over label sets of one sample name (e.g. ``vllm:num_preemptions_total``); None when absent."""
    vals = [v for (n, _), v in samples.items() if n == name]
    return sum(vals) if vals else None
