"""Console logs of ``vllm bench serve`` sweeps (``sweep.log``, ``sweep_vllm.log``, ``sweep_llamacpp.log``).

A point starts at a marker line (``=========== concurrency=N ===========`` in round 1,
``=========== TAG concurrency=N seed=S ===========`` in round 2) or, in logs written without markers, at the
``Namespace(...)`` line. It holds the client's arguments, warnings, error dumps and the fixed-width result
block. tqdm progress (``\\r``-separated segments) is skipped. One record per point, in file order.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from analysis.parse.text import split_lines
from collector.raw.errors import ParseError
from collector.raw.jsonl import clip, read_bytes

_MARKER = re.compile(r"^=+ (?:(?P<tag>\S+) )?concurrency=(?P<c>\d+)(?: seed=(?P<seed>-?\d+))? =+$")
_RESULT_HEAD = re.compile(r"^=+ Serving Benchmark Result =+$")
_RESULT_END = re.compile(r"^=+$")
_RESULT_SECTION = re.compile(r"^-+[^-].*-+$")
_RESULT_ROW = re.compile(r"^(?P<label>[A-Za-z][^:]*?):\s+(?P<value>\S+)\s*$")
_TQDM = re.compile(r"^\s*\d+%\|")
_PHASE = re.compile(r"^>>> (?P<what>.*)$")

# Result-block labels -> field names with units (bench JSON names where they exist). Unknown labels are
# kept under a slug of their own label, never dropped.
_RESULT_NAMES = {
    "Successful requests": "completed",
    "Failed requests": "failed",
    "Maximum request concurrency": "max_concurrency",
    "Request rate configured (RPS)": "request_rate_req_s",
    "Benchmark duration (s)": "duration_s",
    "Total input tokens": "total_input_tokens",
    "Total generated tokens": "total_output_tokens",
    "Request throughput (req/s)": "request_throughput_req_s",
    "Request goodput (req/s)": "request_goodput_req_s",
    "Output token throughput (tok/s)": "output_throughput_tok_s",
    "Peak output token throughput (tok/s)": "max_output_tokens_per_s",
    "Peak concurrent requests": "max_concurrent_requests",
    "Total token throughput (tok/s)": "total_token_throughput_tok_s",
}
_STAT_LABEL = re.compile(r"^(Mean|Median|Std|P(\d+(?:\.\d+)?)) (TTFT|TPOT|ITL|E2EL) \(ms\)$")


@dataclass
class SweepPoint:
    index: int  # 0-based position in the file
    line: int  # first line of the point (marker, or Namespace when there is no marker)
    tag: str | None = None  # "vllm" / "llamacpp" in round 2 markers
    concurrency: int | None = None  # from the marker
    seed: int | None = None  # from the marker
    phase: str | None = None  # a ">>> X" line right before the point (e.g. "WARMUP")
    namespace: dict[str, Any] = field(default_factory=dict)  # parsed client arguments
    namespace_line: int | None = None
    warnings: list[tuple[int, str]] = field(default_factory=list)  # (line, text)
    errors: list[tuple[int, str]] = field(default_factory=list)  # failed-request dumps, tracebacks
    notes: list[tuple[int, str]] = field(default_factory=list)  # other console lines (INFO, "Traffic ...")
    result: dict[str, float] | None = None  # {"completed": 40.0, "mean_ttft_ms": 104.9, ...}
    result_labels: dict[str, str] = field(default_factory=dict)  # field name -> label as printed
    result_line: int | None = None
    result_lines: dict[str, int] = field(default_factory=dict)  # field name -> line

    @property
    def result_filename(self) -> str | None:
        v = self.namespace.get("result_filename")
        return v if isinstance(v, str) else None


@dataclass
class SweepLog:
    path: str
    points: list[SweepPoint]
    phases: list[tuple[int, str]]  # (line, ">>> text")


# --- Python repr of keyword arguments ------------------------------------------------------------------

_OPEN = {"(": ")", "[": "]", "{": "}"}
_CLOSE = {")", "]", "}"}


def split_kwargs(body: str) -> list[tuple[str, str]]:
    """``a=1, b='x, y', c={(1, 2): 0.5}`` -> [("a", "1"), ("b", "'x, y'"), ("c", "{(1, 2): 0.5}")].

    Splits on commas outside quotes, brackets and ``<...>`` reprs (``<function f at 0x..>``).
    Raises ValueError on unbalanced text.
    """
    out: list[tuple[str, str]] = []
    for part in _top_level_parts(body):
        key, eq, value = part.strip().partition("=")
        if not eq or not key.isidentifier():
            raise ValueError(f"not a key=value pair: {clip(part.strip(), 60)}")
        out.append((key, value.strip()))
    return out


def _top_level_parts(body: str) -> list[str]:
    """``body`` cut at the commas outside quotes, brackets and ``<...>`` reprs (an empty tail dropped)."""
    parts: list[str] = []
    depth: list[str] = []
    start = i = 0
    n = len(body)
    while i < n:
        ch = body[i]
        if ch in ("'", '"'):
            i = _quoted_end(body, i)
            continue
        if ch == "<" and (i == 0 or body[i - 1] == "="):
            i = _angle_end(body, i)
            continue
        if ch in _OPEN:
            depth.append(_OPEN[ch])
        elif ch in _CLOSE:
            if not depth or depth.pop() != ch:
                raise ValueError(f"unbalanced {ch!r} at offset {i}")
        elif ch == "," and not depth:
            parts.append(body[start:i])
            start = i + 1
        i += 1
    if depth:
        raise ValueError("unterminated quote or bracket")
    tail = body[start:]
    if tail.strip():
        parts.append(tail)
    return parts


def _quoted_end(body: str, i: int) -> int:
    """Just past the string literal whose quote is at ``body[i]`` (backslash escapes skipped)."""
    quote = body[i]
    i += 1
    while i < len(body):
        if body[i] == "\\":
            i += 2
            continue
        if body[i] == quote:
            return i + 1
        i += 1
    raise ValueError("unterminated quote or bracket")


def _angle_end(body: str, i: int) -> int:
    """Just past the ``<...>`` repr that opens at ``body[i]`` (nested ``<>`` counted)."""
    depth = 0
    while i < len(body):
        if body[i] == "<":
            depth += 1
        elif body[i] == ">":
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    raise ValueError("unterminated quote or bracket")


def literal(value: str) -> Any:
    """A Python literal from its repr; ``inf``/``nan`` as floats; anything else (``<function ...>``,
    ``torch.bfloat16``, enum reprs) kept as the original string."""
    if value in ("inf", "-inf", "nan"):
        return float(value)
    if value.startswith("<"):
        return value
    try:
        return ast.literal_eval(value)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return value


def parse_kwargs(body: str) -> dict[str, Any]:
    return {k: literal(v) for k, v in split_kwargs(body)}


# --- the log -------------------------------------------------------------------------------------------


def _result_name(label: str) -> str:
    if label in _RESULT_NAMES:
        return _RESULT_NAMES[label]
    m = _STAT_LABEL.match(label)
    if m:
        stat = m.group(1).lower()
        return f"{stat}_{m.group(3).lower()}_ms"
    slug = re.sub(r"[^a-z0-9]+", "_", label.lower()).strip("_")
    return slug


def _segments(raw: str) -> list[str]:
    """The parts of one line that are not tqdm progress: tqdm redraws with ``\\r``."""
    return [s for s in raw.split("\r") if s.strip() and not _TQDM.match(s)]


class _SweepReader:
    """The state of reading a sweep log line by line (``parse_sweep_log_bytes``)."""

    def __init__(self, path: str):
        self.path = path
        self.points: list[SweepPoint] = []
        self.phases: list[tuple[int, str]] = []
        self.phase: str | None = None  # a ">>> X" line labels the one point that follows it
        self.cur: SweepPoint | None = None
        self.in_result = False
        self.in_errors = False

    def new_point(self, line_no: int) -> SweepPoint:
        self.cur = SweepPoint(index=len(self.points), line=line_no, phase=self.phase)
        self.phase = None
        self.points.append(self.cur)
        return self.cur

    def line(self, no: int, text: str) -> None:
        """One segment of line ``no``: a result row inside a result block, else a line that starts something
        (a phase, a marker, a Namespace, a result block), else a point's warning, error or note."""
        if self.in_result:
            self._result_line(no, text)
            return
        if not self._start_line(no, text):
            self._point_line(no, text)

    def _result_line(self, no: int, text: str) -> None:
        if _RESULT_END.match(text):
            self.in_result = False
            return
        if _RESULT_SECTION.match(text):
            return
        m = _RESULT_ROW.match(text)
        if not m:
            raise ParseError(self.path, no, f"unexpected line in the result block: {clip(text)}")
        try:
            value = float(m.group("value"))
        except ValueError:
            raise ParseError(
                self.path, no, f"{m.group('label')!r}: {m.group('value')!r} is not a number"
            ) from None
        cur = self.cur
        assert cur is not None and cur.result is not None
        name = _result_name(m.group("label"))
        if name in cur.result:
            raise ParseError(self.path, no, f"{m.group('label')!r} appears twice in one result block")
        cur.result[name] = value
        cur.result_labels[name] = m.group("label")
        cur.result_lines[name] = no

    def _start_line(self, no: int, text: str) -> bool:
        """A phase line, a point's marker, its Namespace or its result block's head: True when it was one."""
        if m := _PHASE.match(text):
            self.phase = m.group("what")
            self.phases.append((no, text))
        elif m := _MARKER.match(text):
            p = self.new_point(no)
            p.tag = m.group("tag")
            p.concurrency = int(m.group("c"))
            p.seed = int(m.group("seed")) if m.group("seed") is not None else None
        elif text.startswith("Namespace("):
            self._namespace(no, text)
        elif _RESULT_HEAD.match(text):
            self._result_head(no)
        else:
            return False
        self.in_errors = False
        return True

    def _namespace(self, no: int, text: str) -> None:
        cur = self.cur
        if cur is None or cur.namespace_line is not None or cur.result is not None:
            cur = self.new_point(no)
        if not text.endswith(")"):
            raise ParseError(self.path, no, "Namespace(...) line is cut short (no closing parenthesis)")
        try:
            cur.namespace = parse_kwargs(text[len("Namespace(") : -1])
        except ValueError as err:
            raise ParseError(self.path, no, f"cannot read the Namespace arguments: {err}") from None
        cur.namespace_line = no

    def _result_head(self, no: int) -> None:
        cur = self.cur
        if cur is None:
            raise ParseError(self.path, no, "result block before any marker or Namespace line")
        if cur.result is not None:
            raise ParseError(self.path, no, f"second result block for the point at line {cur.line}")
        cur.result = {}
        cur.result_line = no
        self.in_result = True

    def _point_line(self, no: int, text: str) -> None:
        cur = self.cur
        if cur is None:
            return  # preamble before the first point (shell noise)
        if text.startswith("WARNING"):
            cur.warnings.append((no, text))
        elif text.startswith("Failed requests during benchmark") or text.startswith("Error "):
            cur.errors.append((no, text))
            self.in_errors = True
        elif self.in_errors and not text.startswith("tip:"):
            # The dump of failed requests (tracebacks) runs until the client's closing "tip:" line.
            cur.errors.append((no, text))
        else:
            self.in_errors = False
            cur.notes.append((no, text))

    def finish(self, n_lines: int) -> SweepLog:
        """The log, once every point is whole: a closed result block with its Namespace and the two rows every
        result has."""
        path, points = self.path, self.points
        if self.in_result:
            assert self.cur is not None
            raise ParseError(
                path, n_lines, f"result block of the point at line {self.cur.line} never closed (truncated?)"
            )
        for p in points:
            if p.namespace_line is None and p.result is not None:
                raise ParseError(
                    path, p.result_line, f"point at line {p.line} has a result but no Namespace line"
                )
        if points and points[-1].result is None:
            raise ParseError(path, points[-1].line, "the last point has no result block (file truncated?)")
        for p in points:
            if p.result is not None and not {"completed", "duration_s"} <= set(p.result):
                raise ParseError(
                    path, p.result_line, "result block lacks 'Successful requests' or 'Benchmark duration'"
                )
        return SweepLog(path=path, points=points, phases=self.phases)


def parse_sweep_log_bytes(data: bytes, path: str | Path = "<bytes>") -> SweepLog:
    path = str(path)
    lines = split_lines(data, path)
    reader = _SweepReader(path)
    for no, raw in enumerate(lines, 1):
        for seg in _segments(raw):
            reader.line(no, seg.rstrip())
    return reader.finish(len(lines))


def parse_sweep_log(path: str | Path) -> SweepLog:
    return parse_sweep_log_bytes(read_bytes(path), path)
