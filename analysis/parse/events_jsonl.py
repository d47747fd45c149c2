"""``events.jsonl`` → ``EventRecord`` per line, and the run's checks (the format:
``collector.raw.records.EventRecord``)."""

from __future__ import annotations

from pathlib import Path

from collector.raw.jsonl import iter_json_lines
from collector.raw.records import CheckResult, EventRecord


def parse_events_jsonl(path: str | Path, allow_torn_tail: bool = False) -> list[EventRecord]:
    return [EventRecord.from_obj(obj, path, i) for i, obj in iter_json_lines(path, allow_torn_tail)]


def checks(events: list[EventRecord]) -> list[CheckResult]:
    """Every recorded check, in order."""
    return [CheckResult.from_event(e) for e in events if e.kind == "check"]
