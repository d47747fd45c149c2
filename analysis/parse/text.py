"""Text helpers the line-oriented parsers share: decode strictly, split into numbered lines — all at once
(``split_lines``, small files) or streamed from a file or bytes line by line (``iter_lines``, server logs that
grow to hundreds of MB: memory then holds one line, not the file three times over).

Reading bytes and clipping an excerpt for a message live with the raw contract (``collector.raw.jsonl``).
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

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


def iter_lines(
    source: str | Path | bytes, path: str | Path, *, errors: str = "strict", drop_cut_tail: bool = False
) -> Iterator[tuple[int, str]]:
    """``(line number, text)`` for each line of a file (or of ``bytes``), read one line at a time, with
    ``split_lines``' rules: ``\\n`` ends a line, ``\\r`` stays inside it; an empty file, an invalid UTF-8 byte
    (unless ``errors="replace"``) and a last line without newline are ParseErrors. The cut last line is
    refused before it is yielded, so a parser never reads half a line; with ``drop_cut_tail`` it is left
    out instead (a server log: a server stopped or killed while it printed leaves half a line, and the
    lines before it are whole)."""
    if isinstance(source, bytes):
        yield from _iter_lines(io.BytesIO(source), path, errors, drop_cut_tail)
        return
    try:
        f = open(source, "rb")  # closed by the with below, once the lines are read
    except OSError as err:
        raise ParseError(path, None, f"cannot read file ({err.strerror or err})") from None
    with f:
        yield from _iter_lines(f, path, errors, drop_cut_tail)


def _iter_lines(
    f: BinaryIO, path: str | Path, errors: str, drop_cut_tail: bool = False
) -> Iterator[tuple[int, str]]:
    no, offset = 0, 0
    try:
        for raw in f:
            no += 1
            if not raw.endswith(b"\n"):
                if drop_cut_tail and no > 1:
                    return
                raise ParseError(path, no, "last line has no newline: the file looks truncated")
            try:
                text = raw[:-1].decode("utf-8", errors=errors)
            except UnicodeDecodeError as err:
                at = offset + err.start
                raise ParseError(
                    path, no, f"invalid UTF-8 byte 0x{raw[err.start]:02x} at byte {at}"
                ) from None
            offset += len(raw)
            yield no, text
    except OSError as err:
        raise ParseError(path, no or None, f"cannot read file ({err.strerror or err})") from None
    if no == 0:
        raise ParseError(path, None, "empty file")
