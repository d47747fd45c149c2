"""Reading the collector's append-only JSONL streams back, line by line, with the torn-tail rule.

Also the two helpers every reader of a raw file needs: ``read_bytes`` (the OS problem as a ParseError) and
``clip`` (a printable excerpt of an offending value for the one-line message).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from collector.raw.errors import ParseError


def read_bytes(path: str | Path) -> bytes:
    """The file's bytes, or ParseError naming the OS problem (missing file, directory, permissions)."""
    try:
        return Path(path).read_bytes()
    except OSError as err:
        raise ParseError(path, None, f"cannot read file ({err.strerror or err})") from None


def clip(text: str, limit: int = 80) -> str:
    """A short, printable excerpt of an offending line for error messages."""
    text = text.replace("\r", "\\r").replace("\t", "\\t")
    return text if len(text) <= limit else text[: limit - 1] + "…"


def iter_json_lines(path: str | Path, allow_torn_tail: bool = False) -> list[tuple[int, Any]]:
    """(line number, decoded object) for each line of a JSONL file written by the collector.

    A last line without newline is a torn append (the writer was killed mid-write): an error, unless
    ``allow_torn_tail`` (reading an unsealed run), in which case it is dropped.
    """
    data = read_bytes(path)
    if not data:
        return []
    lines = data.split(b"\n")
    torn = lines[-1] != b""
    if torn and not allow_torn_tail:
        raise ParseError(path, len(lines), "last line has no newline: the file was cut mid-write")
    out = []
    for i, raw in enumerate(lines[:-1], 1):
        try:
            out.append((i, json.loads(raw)))
        except (json.JSONDecodeError, UnicodeDecodeError) as err:
            raise ParseError(path, i, f"not JSON: {err}") from None
    return out
