"""``llama-bench -o jsonl`` output (one JSON object per test), as ``collector.protocol.stepcost`` stores it.

A test here is a prompt test (``n_gen`` 0): one batch of ``n_prompt`` tokens after ``n_depth`` tokens already
in the KV cache, timed ``len(samples_ns)`` times. Only the fields the analysis reads become typed fields; the
samples are kept as measured (ns). A test without samples, a negative or non-integer count, or a non-positive
sample is a ParseError naming the line.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from collector.raw.errors import ParseError
from collector.raw.jsonl import iter_json_lines


@dataclass(frozen=True)
class BenchTest:
    model_filename: str
    model_size_bytes: int
    n_prompt: int
    n_gen: int
    n_depth: int
    n_batch: int
    n_ubatch: int
    samples_ns: tuple[int, ...]
    build_commit: str
    gpu_info: str
    line: int


@dataclass(frozen=True)
class LlamaBenchLog:
    path: str
    tests: tuple[BenchTest, ...]


def _count(obj: dict[str, Any], key: str, path: Path, line: int) -> int:
    v = obj.get(key)
    if not isinstance(v, int) or isinstance(v, bool) or v < 0:
        raise ParseError(path, line, f"{key}: expected a count (integer >= 0), got {v!r}")
    return v


def _test(obj: Any, path: Path, line: int) -> BenchTest:
    if not isinstance(obj, dict):
        raise ParseError(path, line, "expected one JSON object per line")
    samples = obj.get("samples_ns")
    if not isinstance(samples, list) or not samples:
        raise ParseError(path, line, "samples_ns: expected a non-empty list")
    if not all(isinstance(s, int) and not isinstance(s, bool) and s > 0 for s in samples):
        raise ParseError(path, line, "samples_ns: every sample must be a positive integer (ns)")
    return BenchTest(
        model_filename=str(obj.get("model_filename", "")),
        model_size_bytes=_count(obj, "model_size", path, line),
        n_prompt=_count(obj, "n_prompt", path, line),
        n_gen=_count(obj, "n_gen", path, line),
        n_depth=_count(obj, "n_depth", path, line),
        n_batch=_count(obj, "n_batch", path, line),
        n_ubatch=_count(obj, "n_ubatch", path, line),
        samples_ns=tuple(samples),
        build_commit=str(obj.get("build_commit", "")),
        gpu_info=str(obj.get("gpu_info", "")),
        line=line,
    )


def parse_llama_bench_jsonl(path: str | Path) -> LlamaBenchLog:
    p = Path(path)
    return LlamaBenchLog(str(p), tuple(_test(obj, p, i) for i, obj in iter_json_lines(p)))
