"""``vllm bench serve --save-result`` JSON (also what llama.cpp runs of the same client wrote).

Every version's keys are accepted: the known ones become typed fields named with their units, any other key
is kept in ``extra`` untouched. Only ``completed`` and ``duration`` are required (every version writes them).
A wrong type on a known key is a ParseError naming the key and its line, and so is a value no such field can
hold: every known number here is a count, a duration, a rate or a latency — never negative, never NaN, and
infinite only for ``request_rate`` ("send all at once"). Python's JSON reader accepts ``NaN`` and
``Infinity``; a NaN throughput would silently move a peak, a negative latency become a finding.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from analysis.parse.text import decode_text
from collector.raw.errors import ParseError
from collector.raw.jsonl import clip, read_bytes

LATENCY_METRICS = ("ttft", "tpot", "itl", "e2el")

# json key -> (field name, kind). kind: "int", "float", "str", "float_or_str" (request_rate may be "inf").
_SCALARS: dict[str, tuple[str, str]] = {
    "date": ("date", "str"),
    "endpoint_type": ("endpoint_type", "str"),
    "backend": ("backend", "str"),
    "label": ("label", "str"),
    "model_id": ("model_id", "str"),
    "tokenizer_id": ("tokenizer_id", "str"),
    "num_prompts": ("num_prompts", "int"),
    "request_rate": ("request_rate_req_s", "rate"),
    "burstiness": ("burstiness", "float"),
    "max_concurrency": ("max_concurrency", "int"),
    "duration": ("duration_s", "float"),
    "completed": ("completed", "int"),
    "failed": ("failed", "int"),
    "total_input_tokens": ("total_input_tokens", "int"),
    "total_output_tokens": ("total_output_tokens", "int"),
    "request_throughput": ("request_throughput_req_s", "float"),
    "request_goodput": ("request_goodput_req_s", "float"),
    "output_throughput": ("output_throughput_tok_s", "float"),
    "total_token_throughput": ("total_token_throughput_tok_s", "float"),
    "max_output_tokens_per_s": ("max_output_tokens_per_s", "float"),
    "max_concurrent_requests": ("max_concurrent_requests", "int"),
    "rtfx": ("rtfx", "float"),
}

# Per-request arrays written with --save-detailed; vLLM stores ttfts/itls in seconds.
_ARRAYS: dict[str, tuple[str, str]] = {
    "input_lens": ("input_lens", "int"),
    "output_lens": ("output_lens", "int"),
    "ttfts": ("ttfts_s", "float"),
    "itls": ("itls_s", "float_list"),
    "generated_texts": ("generated_texts", "str"),
    "errors": ("errors", "str"),
}

_REQUIRED = ("completed", "duration")
_STAT_KEY = re.compile(r"^(mean|median|std|p(\d+(?:\.\d+)?))_(ttft|tpot|itl|e2el)_ms$")


@dataclass
class LatencyStats:
    """One latency metric's summary as the client computed it (all ms)."""

    mean_ms: float | None = None
    median_ms: float | None = None
    std_ms: float | None = None
    percentiles_ms: dict[float, float] = field(default_factory=dict)  # {50.0: ..., 90.0: ..., 99.0: ...}

    # The percentiles the pages read, by name: ``result.itl.p99_ms``. A name this class lacks is an
    # AttributeError (and a mypy error), where a string key used to return None silently.
    @property
    def p50_ms(self) -> float | None:
        return self.percentiles_ms.get(50.0)

    @property
    def p75_ms(self) -> float | None:
        return self.percentiles_ms.get(75.0)

    @property
    def p90_ms(self) -> float | None:
        return self.percentiles_ms.get(90.0)

    @property
    def p95_ms(self) -> float | None:
        return self.percentiles_ms.get(95.0)

    @property
    def p99_ms(self) -> float | None:
        return self.percentiles_ms.get(99.0)

    @property
    def p999_ms(self) -> float | None:
        return self.percentiles_ms.get(99.9)


@dataclass
class BenchResult:
    path: str
    completed: int
    duration_s: float
    date: str | None = None
    endpoint_type: str | None = None
    backend: str | None = None
    label: str | None = None
    model_id: str | None = None
    tokenizer_id: str | None = None
    num_prompts: int | None = None
    request_rate_req_s: float | None = None  # inf for "send all at once"
    burstiness: float | None = None
    max_concurrency: int | None = None
    failed: int | None = None
    total_input_tokens: int | None = None
    total_output_tokens: int | None = None
    request_throughput_req_s: float | None = None
    request_goodput_req_s: float | None = None
    output_throughput_tok_s: float | None = None
    total_token_throughput_tok_s: float | None = None
    max_output_tokens_per_s: float | None = None
    max_concurrent_requests: int | None = None  # client-side in flight; may exceed max_concurrency
    rtfx: float | None = None
    latency: dict[str, LatencyStats] = field(default_factory=dict)  # "ttft" | "tpot" | "itl" | "e2el"
    input_lens: list[int] | None = None
    output_lens: list[int] | None = None
    ttfts_s: list[float] | None = None
    itls_s: list[list[float]] | None = None
    generated_texts: list[str] | None = None
    errors: list[str] | None = None
    extra: dict[str, Any] = field(default_factory=dict)  # every key this parser does not know, verbatim

    # Typed accessors: ``result.ttft.p99_ms``, ``result.itl.mean_ms`` (an empty LatencyStats, every value
    # None, when the file lacks the metric).
    @property
    def ttft(self) -> LatencyStats:
        return self.latency.get("ttft") or LatencyStats()

    @property
    def tpot(self) -> LatencyStats:
        return self.latency.get("tpot") or LatencyStats()

    @property
    def itl(self) -> LatencyStats:
        return self.latency.get("itl") or LatencyStats()

    @property
    def e2el(self) -> LatencyStats:
        return self.latency.get("e2el") or LatencyStats()

    def stat_ms(self, stat: str, metric: str) -> float | None:
        """A statistic chosen at run time (a loop over percentiles or metrics): ``ttft.p99_ms``;
        None when the file lacks it. A name known when writing the code reads better as ``ttft.p99_ms``."""
        s = self.latency.get(metric)
        if s is None:
            return None
        if stat == "mean":
            return s.mean_ms
        if stat == "median":
            return s.median_ms
        if stat == "std":
            return s.std_ms
        if stat.startswith("p"):
            return s.percentiles_ms.get(float(stat[1:]))
        raise KeyError(stat)

    @property
    def mean_ttft_ms(self) -> float | None:
        return self.ttft.mean_ms

    @property
    def median_ttft_ms(self) -> float | None:
        return self.ttft.median_ms

    @property
    def p99_ttft_ms(self) -> float | None:
        return self.ttft.p99_ms

    @property
    def mean_tpot_ms(self) -> float | None:
        return self.tpot.mean_ms

    @property
    def median_tpot_ms(self) -> float | None:
        return self.tpot.median_ms

    @property
    def mean_itl_ms(self) -> float | None:
        return self.itl.mean_ms

    @property
    def mean_e2el_ms(self) -> float | None:
        return self.e2el.mean_ms


def _key_line(text: str, key: str) -> int:
    """Line of ``"key":`` in the source text (1 for the one-line files vLLM writes)."""
    i = text.find(json.dumps(key) + ":")
    return text.count("\n", 0, i) + 1 if i >= 0 else 1


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_num(v: Any) -> bool:
    return (isinstance(v, int | float)) and not isinstance(v, bool)


def _value_ok(v: float, inf_ok: bool = False) -> bool:
    """A count, duration, rate or latency: >= 0, not NaN, finite unless ``inf_ok``."""
    return v >= 0 and not math.isnan(v) and (inf_ok or not math.isinf(v))


def _scalar(key: str, kind: str, v: Any, path: str, text: str) -> Any:
    def bad(expected: str) -> ParseError:
        return ParseError(
            path, _key_line(text, key), f"key {key!r} should be {expected}, got {clip(repr(v), 60)}"
        )

    out = _typed_scalar(kind, v, bad)
    if (
        isinstance(out, float | int)
        and not isinstance(out, bool)
        and not _value_ok(out, inf_ok=kind == "rate")
    ):
        raise bad("a finite number >= 0" if kind != "rate" else 'a number >= 0 or "inf"')
    return out


def _typed_scalar(kind: str, v: Any, bad: Any) -> Any:
    if v is None:
        return None
    if kind == "str":
        if not isinstance(v, str):
            raise bad("a string")
        return v
    if kind == "int":
        # Some versions write integral counts as 40.0; accept only exactly integral floats.
        if _is_int(v):
            return v
        if isinstance(v, float) and v.is_integer():
            return int(v)
        raise bad("an integer")
    if kind == "float":
        if not _is_num(v):
            raise bad("a number")
        return float(v)
    if kind == "rate":
        if _is_num(v):
            return float(v)
        if isinstance(v, str) and v.strip().lower() in ("inf", "infinity"):
            return math.inf
        raise bad('a number or "inf"')
    raise AssertionError(kind)


def _array(key: str, kind: str, v: Any, path: str, text: str) -> list[Any]:
    line = _key_line(text, key)
    if not isinstance(v, list):
        raise ParseError(path, line, f"key {key!r} should be a list, got {clip(repr(v), 60)}")
    out: list[Any] = []
    for i, item in enumerate(v):
        if kind == "int" and _is_int(item):
            out.append(item)
        elif kind == "float" and _is_num(item):
            out.append(float(item))
        elif kind == "str" and isinstance(item, str):
            out.append(item)
        elif kind == "float_list" and isinstance(item, list) and all(_is_num(x) for x in item):
            out.append([float(x) for x in item])
        else:
            raise ParseError(path, line, f"key {key!r} item {i} has the wrong type: {clip(repr(item), 60)}")
        nums = out[-1] if kind == "float_list" else [out[-1]] if kind != "str" else []
        if not all(_value_ok(x) for x in nums):
            raise ParseError(
                path,
                line,
                f"key {key!r} item {i} should hold finite numbers >= 0, got {clip(repr(item), 60)}",
            )
    return out


def _json_object(data: bytes, path: str) -> tuple[str, dict[str, Any]]:
    """The file's text and its JSON object, holding every key a `vllm bench serve` result must have."""
    if not data.strip():
        raise ParseError(path, None, "empty file")
    text = decode_text(data, path)
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as err:
        raise ParseError(path, err.lineno, f"not valid JSON: {err.msg} (column {err.colno})") from None
    except RecursionError:
        raise ParseError(path, 1, "JSON nested too deeply") from None
    if not isinstance(obj, dict):
        raise ParseError(path, 1, f"expected a JSON object, got {type(obj).__name__}")
    for key in _REQUIRED:
        if key not in obj:
            raise ParseError(path, 1, f"missing key {key!r}: not a `vllm bench serve` result")
    return text, obj


def _latency_value(latency: dict[str, LatencyStats], m: re.Match[str], v: Any, path: str, text: str) -> None:
    """One ``<stat>_<metric>_ms`` key (mean, median, std or a percentile) into its metric's statistics."""
    stat, pct, metric = m.group(1), m.group(2), m.group(3)
    if v is None:
        return
    if not _is_num(v) or not _value_ok(v):
        want = "a finite number >= 0" if _is_num(v) else "a number"
        key = m.group(0)
        raise ParseError(path, _key_line(text, key), f"key {key!r} should be {want}, got {clip(repr(v), 60)}")
    s = latency.setdefault(metric, LatencyStats())
    if pct is not None:
        s.percentiles_ms[float(pct)] = float(v)
    elif stat == "mean":
        s.mean_ms = float(v)
    elif stat == "median":
        s.median_ms = float(v)
    else:
        s.std_ms = float(v)


def parse_bench_json_bytes(data: bytes, path: str | Path = "<bytes>") -> BenchResult:
    path = str(path)
    text, obj = _json_object(data, path)
    values: dict[str, Any] = {}
    latency: dict[str, LatencyStats] = {}
    extra: dict[str, Any] = {}
    for key, v in obj.items():
        if key in _SCALARS:
            name, kind = _SCALARS[key]
            values[name] = _scalar(key, kind, v, path, text)
        elif key in _ARRAYS:
            name, kind = _ARRAYS[key]
            values[name] = _array(key, kind, v, path, text)
        elif m := _STAT_KEY.match(key):
            _latency_value(latency, m, v, path, text)
        else:
            extra[key] = v
    if values.get("completed") is None or values.get("duration_s") is None:
        raise ParseError(path, 1, "keys 'completed' and 'duration' must not be null")
    return BenchResult(path=path, latency=latency, extra=extra, **values)


def parse_bench_json(path: str | Path) -> BenchResult:
    return parse_bench_json_bytes(read_bytes(path), path)
