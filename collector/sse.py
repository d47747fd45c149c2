"""Server-sent events: bytes as they arrive off the socket → complete events → JSON payloads.

Follows the WHATWG event-stream rules that matter for OpenAI-style streams (lines end in LF, CRLF or CR;
a blank line dispatches; ``:`` starts a comment; ``data`` lines of one event join with LF). Strict where the
payload is concerned: a ``data`` payload that is neither ``[DONE]`` nor a JSON object is an error, never
skipped, because a silently dropped event is a silently dropped token.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from collector.raw.errors import AnatomyError

DONE = "[DONE]"


class SSEError(AnatomyError):
    """The byte stream was not a well-formed event stream of JSON objects."""


class SSEServerError(SSEError):
    """The stream was well formed but the server reported an error inside it."""


@dataclass(frozen=True)
class SSEEvent:
    data: str
    event: str | None = None


class SSEDecoder:
    """Incremental decoder: ``feed(bytes) -> [SSEEvent]``; ``close()`` checks nothing is left half-sent."""

    def __init__(self) -> None:
        self._buf = b""
        self._data: list[str] = []
        self._event: str | None = None
        self._pending_cr = False

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        if self._pending_cr and chunk.startswith(b"\n"):
            chunk = chunk[1:]  # the LF of a CRLF split across two reads
        self._pending_cr = False
        self._buf += chunk
        out: list[SSEEvent] = []
        while True:
            i_lf, i_cr = self._buf.find(b"\n"), self._buf.find(b"\r")
            ends = [i for i in (i_lf, i_cr) if i >= 0]
            if not ends:
                break
            i = min(ends)
            line = self._buf[:i]
            skip = 1
            if self._buf[i : i + 1] == b"\r":
                if i + 1 < len(self._buf):
                    skip = 2 if self._buf[i + 1 : i + 2] == b"\n" else 1
                else:
                    self._pending_cr = True
            self._buf = self._buf[i + skip :]
            ev = self._line(line)
            if ev is not None:
                out.append(ev)
        return out

    def _line(self, raw: bytes) -> SSEEvent | None:
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as err:
            raise SSEError(f"event-stream line is not UTF-8: {raw[:80]!r}") from err
        if line == "":
            if not self._data:
                self._event = None
                return None
            ev = SSEEvent("\n".join(self._data), self._event)
            self._data, self._event = [], None
            return ev
        if line.startswith(":"):
            return None
        name, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if name == "data":
            self._data.append(value)
        elif name == "event":
            self._event = value
        return None  # id / retry / unknown fields carry nothing we record

    def close(self) -> None:
        """Call at end of stream: bytes or data lines without their closing blank line mean a cut stream."""
        if self._buf.strip() or self._data:
            raise SSEError("stream ended in the middle of an event")


def event_json(ev: SSEEvent) -> dict[str, Any] | None:
    """The event's JSON object, or None for the ``[DONE]`` sentinel; anything else raises SSEError."""
    if ev.data.strip() == DONE:
        return None
    try:
        obj = json.loads(ev.data)
    except json.JSONDecodeError as err:
        raise SSEError(f"malformed JSON in event: {err.msg} at char {err.pos}: {ev.data[:120]!r}") from err
    if not isinstance(obj, dict):
        raise SSEError(f"event payload is not a JSON object: {ev.data[:120]!r}")
    if "error" in obj and "choices" not in obj:
        raise SSEServerError(f"server sent an error event: {json.dumps(obj['error'])[:200]}")
    return obj
