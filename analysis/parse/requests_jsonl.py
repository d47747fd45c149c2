"""``requests.jsonl``: one line per request the collector sent, written when the request ended.

Format (version 1), one JSON object per line:

- identity: ``request_id``, ``phase``, ``phase_kind`` (warmup|concurrency|length|overload), ``point`` (point id),
  ``point_index``, ``index`` (within the point), ``worker``, ``concurrency``, ``seed``, ``input_len`` (prompt ids
  sent), ``max_tokens``;
- times (integer ns; ``*_mono_ns`` CLOCK_MONOTONIC of the collector, ``*_unix_ns`` wall clock):
  ``send_*`` just before the request was written, ``headers_mono_ns`` when the response headers arrived,
  ``chunk_mono_ns`` / ``chunk_unix_ns`` the receive time of each chunk carrying ``choices``, ``end_*`` when the
  stream ended; ``chunk_tokens`` tokens in each chunk (how counted: ``token_count_source``);
- outcome: ``http_status``, ``done`` (``[DONE]`` seen), ``usage`` (last usage object), ``finish_reason``,
  ``engine_timings`` (llama.cpp's last ``timings``), ``response_id``, ``error`` (null, or ``{kind, message}``;
  kinds: http, timeout, connect, stream_cut, protocol, server_error_event, http_other, aborted).

A torn last line (the collector was killed mid-write) is reported by ``parse_requests_jsonl`` as a ParseError
unless ``allow_torn_tail=True``, which reading an unsealed run wants.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from analysis.parse import clip, read_bytes
from collector.raw.errors import ParseError

ERROR_KINDS = frozenset(
    {"http", "timeout", "connect", "stream_cut", "protocol", "server_error_event", "http_other", "aborted"}
)


@dataclass(frozen=True)
class RequestRecord:
    request_id: str
    phase: str
    phase_kind: str
    point: str
    point_index: int
    index: int
    worker: int
    concurrency: int
    seed: int
    input_len: int
    max_tokens: int
    send_mono_ns: int
    send_unix_ns: int
    headers_mono_ns: int | None
    end_mono_ns: int
    end_unix_ns: int
    http_status: int | None
    chunk_mono_ns: tuple[int, ...]
    chunk_unix_ns: tuple[int, ...]
    chunk_tokens: tuple[int, ...]
    token_count_source: str | None
    done: bool
    usage: dict[str, Any] | None
    finish_reason: str | None
    engine_timings: dict[str, Any] | None
    response_id: str | None
    error_kind: str | None
    error_message: str | None

    @property
    def ok(self) -> bool:
        return self.error_kind is None

    @property
    def prompt_tokens(self) -> int | None:
        """Prompt tokens as the server counted them (usage), None when it sent no usage."""
        v = (self.usage or {}).get("prompt_tokens")
        return v if isinstance(v, int) else None

    @property
    def completion_tokens(self) -> int | None:
        """Generated tokens as the server counted them (usage), None when it sent no usage."""
        v = (self.usage or {}).get("completion_tokens")
        return v if isinstance(v, int) else None


_INT = ("point_index", "index", "worker", "concurrency", "seed", "input_len", "max_tokens",
        "send_mono_ns", "send_unix_ns", "end_mono_ns", "end_unix_ns")  # fmt: skip
_STR = ("request_id", "phase", "phase_kind", "point")


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def record_from_obj(obj: Any, path: str | Path = "<record>", line: int | None = None) -> RequestRecord:
    """One decoded line → RequestRecord; every shape problem is a ParseError naming the key."""

    def bad(what: str) -> ParseError:
        return ParseError(path, line, what)

    if not isinstance(obj, dict):
        raise bad("expected a JSON object")
    if obj.get("v") != 1:
        raise bad(f"unknown record version {obj.get('v')!r} (this parser reads version 1)")
    for k in _INT:
        if not _is_int(obj.get(k)):
            raise bad(f"key {k!r} should be an integer, got {clip(repr(obj.get(k)), 40)}")
    for k in _STR:
        if not isinstance(obj.get(k), str):
            raise bad(f"key {k!r} should be a string, got {clip(repr(obj.get(k)), 40)}")
    arrays = {}
    for k in ("chunk_mono_ns", "chunk_unix_ns", "chunk_tokens"):
        v = obj.get(k)
        if not isinstance(v, list) or not all(_is_int(x) for x in v):
            raise bad(f"key {k!r} should be a list of integers")
        arrays[k] = tuple(v)
    if not len(arrays["chunk_mono_ns"]) == len(arrays["chunk_unix_ns"]) == len(arrays["chunk_tokens"]):
        raise bad("chunk_mono_ns, chunk_unix_ns and chunk_tokens differ in length")
    if any(b < a for a, b in zip(arrays["chunk_mono_ns"], arrays["chunk_mono_ns"][1:], strict=False)):
        raise bad("chunk_mono_ns goes backwards")
    for k in ("headers_mono_ns", "http_status"):
        if obj.get(k) is not None and not _is_int(obj[k]):
            raise bad(f"key {k!r} should be an integer or null")
    for k in ("usage", "engine_timings"):
        if obj.get(k) is not None and not isinstance(obj[k], dict):
            raise bad(f"key {k!r} should be an object or null")
    if not isinstance(obj.get("done"), bool):
        raise bad("key 'done' should be true or false")
    err = obj.get("error")
    if err is not None:
        if (
            not isinstance(err, dict)
            or err.get("kind") not in ERROR_KINDS
            or not isinstance(err.get("message"), str)
        ):
            raise bad(
                f"key 'error' should be null or {{kind, message}} with a known kind, got {clip(repr(err), 60)}"
            )
    return RequestRecord(
        **{k: obj[k] for k in _INT + _STR},
        headers_mono_ns=obj.get("headers_mono_ns"),
        http_status=obj.get("http_status"),
        **arrays,
        token_count_source=obj.get("token_count_source"),
        done=obj["done"],
        usage=obj.get("usage"),
        finish_reason=obj.get("finish_reason"),
        engine_timings=obj.get("engine_timings"),
        response_id=obj.get("response_id"),
        error_kind=err["kind"] if err else None,
        error_message=err["message"] if err else None,
    )


def iter_json_lines(path: str | Path, allow_torn_tail: bool = False) -> list[tuple[int, Any]]:
    """(line number, decoded object) for each line of a JSONL file written by the collector.

    A last line without newline is a torn append (the writer was killed): an error, unless
    ``allow_torn_tail``, in which case it is dropped.
    """
    data = read_bytes(path)
    if not data:
        return []
    lines = data.split(b"\n")
    torn = lines[-1] != b""
    if torn and not allow_torn_tail:
        raise ParseError(path, len(lines), "last line has no newline: the file was cut mid-write")
    body = lines[:-1]
    out = []
    for i, raw in enumerate(body, 1):
        try:
            out.append((i, json.loads(raw)))
        except (json.JSONDecodeError, UnicodeDecodeError) as err:
            raise ParseError(path, i, f"not JSON: {err}") from None
    return out


def parse_requests_jsonl(path: str | Path, allow_torn_tail: bool = False) -> list[RequestRecord]:
    return [record_from_obj(obj, path, i) for i, obj in iter_json_lines(path, allow_torn_tail)]
