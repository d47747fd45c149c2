"""``requests.jsonl`` → ``RequestRecord`` per line (the format: ``collector.raw.records.RequestRecord``).

A torn last line (the collector was killed mid-write) is a ParseError unless ``allow_torn_tail=True``, which
reading an unsealed run wants.
"""

from __future__ import annotations

from pathlib import Path

from collector.raw.jsonl import iter_json_lines
from collector.raw.records import RequestRecord


def parse_requests_jsonl(path: str | Path, allow_torn_tail: bool = False) -> list[RequestRecord]:
    return [RequestRecord.from_obj(obj, path, i) for i, obj in iter_json_lines(path, allow_torn_tail)]
