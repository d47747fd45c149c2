"""Text helpers the line-oriented parsers share: decode strictly, split into numbered lines.

Reading bytes and clipping an excerpt for a message live with the raw contract (``collector.raw.jsonl``).
"""

from __future__ import annotations

from pathlib import Path

from collector.raw.errors import ParseError


def decode_text(data: bytes, path: str | Path, *, errors: str = "strict") -> str:
    """UTF-8 text; an invalid byte is a ParseError on the line that holds it (never a silent U+FFFD)."""
    try:
        return data.decode("utf-8", errors=errors)
    except UnicodeDecodeError as err:
        line = data[: err.start].count(b"\n") + 1
        raise ParseError(
            path, line, f"invalid UTF-8 byte 0x{data[err.start]:02x} at byte {err.start}"
        ) from None


def split_lines(
    data: bytes, path: str | Path, *, errors: str = "strict", allow_empty: bool = False
) -> list[str]:
    """Lines split on ``\\n`` only (``\\r`` stays inside a line: tqdm bars are one line with many ``\\r``).

    A text file written by a process that finished ends with a newline; a last line without one means the
    file was cut (copy interrupted, disk full), so it is refused rather than half-read.
    """
    if not data:
        if allow_empty:
            return []
        raise ParseError(path, None, "empty file")
    text = decode_text(data, path, errors=errors)
    if not text.endswith("\n"):
        n = text.count("\n") + 1
        raise ParseError(path, n, "last line has no newline: the file looks truncated")
    return text[:-1].split("\n")
