"""``requests.jsonl`` → ``RequestRecord`` per line (the format: ``collector.raw.records.RequestRecord``).

A torn last line (the collector was killed mid-write) is a ParseError unless ``allow_torn_tail=True``, which
reading an unsealed run wants. Beyond the record's shape, its times must be able to make latencies: every
``*_mono_ns`` is a reading of one monotonic clock, so the headers, every chunk and the end come no earlier
than the send, and the end no earlier than the last chunk — a record that breaks this would yield a negative
TTFT, ITL or E2E, and is refused naming the key.
"""

from __future__ import annotations

from pathlib import Path

from collector.raw.errors import ParseError
from collector.raw.jsonl import iter_json_lines
from collector.raw.records import RequestRecord


def check_times(rec: RequestRecord, path: str | Path, line: int | None) -> RequestRecord:
    """The record, or ParseError ``file:line: key …`` when its monotonic times cannot be in this order."""
    send = rec.send_mono_ns

    def bad(key: str, value: int, than: str) -> ParseError:
        return ParseError(
            path,
            line,
            f"key {key!r} ({value}) is earlier than {than}: the times would give a negative latency",
        )

    if send < 0:
        raise ParseError(path, line, f"key 'send_mono_ns' is negative ({send})")
    if rec.headers_mono_ns is not None and rec.headers_mono_ns < send:
        raise bad("headers_mono_ns", rec.headers_mono_ns, "send_mono_ns")
    if rec.chunk_mono_ns and rec.chunk_mono_ns[0] < send:
        raise bad("chunk_mono_ns", rec.chunk_mono_ns[0], "send_mono_ns")
    if rec.end_mono_ns < send:
        raise bad("end_mono_ns", rec.end_mono_ns, "send_mono_ns")
    if rec.chunk_mono_ns and rec.end_mono_ns < rec.chunk_mono_ns[-1]:
        raise bad("end_mono_ns", rec.end_mono_ns, "the last chunk_mono_ns")
    return rec


def parse_requests_jsonl(path: str | Path, allow_torn_tail: bool = False) -> list[RequestRecord]:
    return [
        check_times(RequestRecord.from_obj(obj, path, i), path, i)
        for i, obj in iter_json_lines(path, allow_torn_tail)
    ]
