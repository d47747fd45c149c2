"""``requests.jsonl`` read once into columns: per-request scalars as numpy arrays, the chunk arrays as
flat int64 arrays with per-request offsets (request i's chunks are ``[offsets[i], offsets[i + 1])``),
and each line's other fields as it decoded them. No Python object per chunk survives the read (the file is
streamed line by line, never held whole), so a run of a million requests of 256 chunks fits in a few times
its file size, and every metric is computed vectorised from the columns (``analysis.core.metrics_columns``).

The checks are ``analysis.parse.requests_jsonl``'s, made on the columns: each line's fields by
``request_fields_problem``, the chunk arrays by type, length and order, the monotonic times by order. A
file that fails any of them (or that orjson reads differently from ``json``: NaN, lone surrogates) is read
again by the reference parser, which raises its exact one-line ParseError naming the file, the line and the
key — or, for JSON that only ``json`` accepts, returns records the columns are built from. Request i is
line i + 1 (every line of the file is one request; a torn last line is dropped only when
``allow_torn_tail``).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from analysis.parse.requests_jsonl import parse_requests_jsonl
from collector.raw.errors import AnatomyError, ParseError
from collector.raw.records import VERSION, RequestRecord, request_fields_problem

CHUNK_KEYS = ("chunk_mono_ns", "chunk_unix_ns", "chunk_tokens")
_EMPTY = np.zeros(0, dtype=np.int64)


@dataclass
class RequestColumns:
    """One run's requests in columns (see the module docstring); ``fields[i]`` is line i + 1's object
    without its chunk arrays, from which ``record(i)`` rebuilds the ``RequestRecord`` for readers that want
    one."""

    path: str
    fields: list[dict[str, Any]]
    offsets: np.ndarray  # int64, n + 1
    chunk_mono_ns: np.ndarray  # int64, flat
    chunk_unix_ns: np.ndarray
    chunk_tokens: np.ndarray
    _ints: dict[str, np.ndarray] = field(default_factory=dict, repr=False)
    # what analysis.core.metrics_columns derived from these columns once (token chunks, sums …), by name
    memo: dict[str, Any] = field(default_factory=dict, repr=False)

    def __len__(self) -> int:
        return len(self.fields)

    def ints(self, key: str) -> np.ndarray:
        """An integer field of every request (``send_mono_ns``, ``end_mono_ns``, ``concurrency`` …) as int64,
        built once."""
        col = self._ints.get(key)
        if col is None:
            col = self._ints[key] = _int64([f[key] for f in self.fields], self.path, key)
        return col

    def strs(self, key: str) -> list[Any]:
        """A field of every request as decoded (``point``, ``token_count_source`` …; None where absent)."""
        return [f.get(key) for f in self.fields]

    @property
    def ok(self) -> np.ndarray:
        """Ended without error (``RequestRecord.ok``), bool per request."""
        ok = self.memo.get("ok")
        if ok is None:
            ok = self.memo["ok"] = np.fromiter(
                (f.get("error") is None for f in self.fields), dtype=bool, count=len(self)
            )
        return ok

    def record(self, i: int) -> RequestRecord:
        """Request i as the ``RequestRecord`` the reference parser gives for its line."""
        a, b = int(self.offsets[i]), int(self.offsets[i + 1])
        return RequestRecord.from_checked(
            self.fields[i],
            tuple(self.chunk_mono_ns[a:b].tolist()),
            tuple(self.chunk_unix_ns[a:b].tolist()),
            tuple(self.chunk_tokens[a:b].tolist()),
        )

    def records(self, idx: Sequence[int] | np.ndarray | None = None) -> list[RequestRecord]:
        return [self.record(int(i)) for i in (range(len(self)) if idx is None else idx)]

    def groups(self, key: str = "point") -> dict[Any, np.ndarray]:
        """Request indices by the value of a field (by default the point id), in file order, the values in
        order of first appearance."""
        out: dict[Any, list[int]] = {}
        for i, f in enumerate(self.fields):
            out.setdefault(f[key], []).append(i)
        return {k: np.asarray(v, dtype=np.int64) for k, v in out.items()}

    def take(self, idx: np.ndarray) -> RequestColumns:
        """The requests ``idx`` (in that order) as columns of their own."""
        idx = np.asarray(idx, dtype=np.int64)
        if len(idx) and idx[-1] - idx[0] + 1 == len(idx) and (np.diff(idx) == 1).all():
            return self._slice(int(idx[0]), int(idx[-1]) + 1)
        starts, counts = self.offsets[idx], np.diff(self.offsets)[idx]
        offsets = np.zeros(len(idx) + 1, dtype=np.int64)
        np.cumsum(counts, out=offsets[1:])
        flat = np.repeat(starts - offsets[:-1], counts) + np.arange(offsets[-1], dtype=np.int64)
        sub = RequestColumns(
            self.path,
            [self.fields[int(i)] for i in idx],
            offsets,
            self.chunk_mono_ns[flat],
            self.chunk_unix_ns[flat],
            self.chunk_tokens[flat],
        )
        sub._ints = {k: v[idx] for k, v in self._ints.items()}
        return sub

    def _slice(self, a: int, b: int) -> RequestColumns:
        """Requests a … b − 1 (contiguous: views of the chunk arrays, no copy)."""
        lo, hi = int(self.offsets[a]), int(self.offsets[b])
        sub = RequestColumns(
            self.path,
            self.fields[a:b],
            self.offsets[a : b + 1] - lo,
            self.chunk_mono_ns[lo:hi],
            self.chunk_unix_ns[lo:hi],
            self.chunk_tokens[lo:hi],
        )
        sub._ints = {k: v[a:b] for k, v in self._ints.items()}
        return sub

    @classmethod
    def from_records(cls, records: Sequence[RequestRecord], path: str | Path = "<records>") -> RequestColumns:
        """Columns of records already built (a reference parse, a test's hand-made run)."""
        fields = [{k: v for k, v in r.to_obj().items() if k not in CHUNK_KEYS} for r in records]
        offsets = np.zeros(len(records) + 1, dtype=np.int64)
        np.cumsum([len(r.chunk_mono_ns) for r in records], out=offsets[1:])
        mono, unix, toks = (
            _int64([x for r in records for x in getattr(r, k)], path, k) if records else _EMPTY
            for k in CHUNK_KEYS
        )
        return cls(str(path), fields, offsets, mono, unix, toks)


def _int64(values: Sequence[int], path: str | Path, key: str, line: int | None = None) -> np.ndarray:
    """int64 array of integers; one beyond 64 bits is a ParseError naming the key (no timestamp or count of
    a real stream comes near 2^63)."""
    try:
        return np.asarray(values, dtype=np.int64)
    except OverflowError:
        raise ParseError(path, line, f"key {key!r} holds an integer beyond 64 bits") from None


class _Fallback(AnatomyError):
    """The fast read found something the reference parser must judge (caught in this module, never shown)."""


def parse_request_columns(path: str | Path, allow_torn_tail: bool = False) -> RequestColumns:
    """``requests.jsonl`` → ``RequestColumns``, with the reference parser's checks and messages (see the
    module docstring)."""
    try:
        return _read_columns(path, allow_torn_tail)
    except _Fallback:
        return RequestColumns.from_records(parse_requests_jsonl(path, allow_torn_tail), path)


class _Chunks:
    """The flat chunk arrays as they grow: each line's lists written straight into one int64 buffer per
    array (no per-line array, no joining), its capacity first guessed from the file size, doubled when
    short and cut to size at the end."""

    def __init__(self, capacity: int) -> None:
        self.bufs = [np.empty(max(capacity, 1024), dtype=np.int64) for _ in CHUNK_KEYS]
        self.size = 0

    def add(self, arrays: tuple[list[int], list[int], list[int]], path: str | Path, line: int) -> None:
        n = len(arrays[0])
        end = self.size + n
        if end > len(self.bufs[0]):
            for buf in self.bufs:
                buf.resize(max(2 * len(buf), end), refcheck=False)
        for k, buf, a in zip(CHUNK_KEYS, self.bufs, arrays, strict=True):
            try:
                buf[self.size : end] = a
            except OverflowError:
                raise ParseError(path, line, f"key {k!r} holds an integer beyond 64 bits") from None
        self.size = end

    def joined(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        for buf in self.bufs:
            buf.resize(self.size, refcheck=False)  # gives the unused capacity back
        mono, unix, toks = self.bufs
        return mono, unix, toks


# bytes of JSON one chunk takes in a line at least (a mono time, a wall time, a count and their commas)
_BYTES_PER_CHUNK = 36


def _line(raw: bytes) -> tuple[dict[str, Any], tuple[list[int], list[int], list[int]]]:
    """One line's fields (its chunk arrays taken out) and chunk arrays; _Fallback on anything the reference
    parser would refuse or read otherwise."""
    try:
        obj = orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise _Fallback from None
    if not isinstance(obj, dict) or obj.get("v") != VERSION or request_fields_problem(obj):
        raise _Fallback
    arrays = tuple(obj.pop(k, None) for k in CHUNK_KEYS)
    mono, unix, toks = arrays
    if not (type(mono) is list and type(unix) is list and type(toks) is list):
        raise _Fallback
    if not len(mono) == len(unix) == len(toks):
        raise _Fallback
    types = set(map(type, mono))
    types.update(map(type, unix))
    types.update(map(type, toks))
    if types - {int}:  # bool is no int here, as in the reference's check
        raise _Fallback
    return obj, (mono, unix, toks)


def _read_columns(path: str | Path, allow_torn_tail: bool) -> RequestColumns:
    fields: list[dict[str, Any]] = []
    counts: list[int] = []
    try:
        with open(path, "rb") as fh:
            chunks = _Chunks(os.fstat(fh.fileno()).st_size // _BYTES_PER_CHUNK)
            for i, raw in enumerate(fh, 1):
                if not raw.endswith(b"\n"):  # torn: the reference names it, or drops it when allowed
                    if allow_torn_tail:
                        break
                    raise _Fallback
                obj, arrays = _line(raw)
                fields.append(obj)
                counts.append(len(arrays[0]))
                chunks.add(arrays, path, i)
    except OSError:
        raise _Fallback from None  # the reference names the OS problem
    offsets = np.zeros(len(fields) + 1, dtype=np.int64)
    np.cumsum(counts, out=offsets[1:])
    cols = RequestColumns(str(path), fields, offsets, *chunks.joined())
    if _order_problem(cols):
        raise _Fallback
    return cols


def _order_problem(c: RequestColumns) -> bool:
    """Chunk times going back within a request, or monotonic times a latency cannot be made of
    (``requests_jsonl.check_times``): the reference parser then names the first such line."""
    mono, off = c.chunk_mono_ns, c.offsets
    if len(c) == 0:
        return False
    back = np.diff(mono) < 0
    if back.any():
        starts = off[1:-1]
        starts = starts[(starts > 0) & (starts < len(mono))]
        back[starts - 1] = False  # the step from one request's last chunk to the next's first
        if back.any():
            return True
    send, end = c.ints("send_mono_ns"), c.ints("end_mono_ns")
    headers = [f.get("headers_mono_ns") for f in c.fields]
    has_h = np.fromiter((h is not None for h in headers), dtype=bool, count=len(c))
    h = _int64([x if x is not None else 0 for x in headers], c.path, "headers_mono_ns")
    n = np.diff(off)
    has = n > 0
    first = mono[off[:-1][has]]
    last = mono[off[1:][has] - 1]
    return bool(
        (send < 0).any()
        or (has_h & (h < send)).any()
        or (first < send[has]).any()
        or (end < send).any()
        or (end[has] < last).any()
    )
