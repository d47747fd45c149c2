"""The 1 Hz sampler CSV (``metrics.csv`` round 1, ``metrics_sweep.csv`` round 2): /metrics + nvidia-smi per
row.

Header ``ts,running,waiting,kv_usage,preemptions,queue_sum,queue_cnt,…,power_w,temp_c``. Both rounds' scripts
write this header; round 1 ran without ``--enable-mfu-metrics`` in tests 01/02, so ``flops``/``read_bytes``
are 0 there, and a sampler without those columns is read the same way (absent columns are None). Counters
(``preemptions``, histogram ``_sum``/``_cnt``, ``flops``, ``read_bytes``) stay cumulative over the server's
life: difference them within a window, never per file. Columns this parser does not know are kept in
``extra``. Every value must be a finite number (NaN and inf are refused: a gap is nvidia-smi's ``[N/A]``, kept
as None), and every known column is a count, a fraction, a sum of seconds or a reading that cannot be
negative.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from analysis.parse.text import split_lines
from collector.raw.errors import ParseError
from collector.raw.jsonl import clip, read_bytes

# CSV column -> field name with units. "ts" is handled apart (exact ns kept).
COLUMNS: dict[str, str] = {
    "running": "running_reqs",
    "waiting": "waiting_reqs",
    "kv_usage": "kv_usage_frac",  # 0-1 fraction (vllm:kv_cache_usage_perc is a fraction despite its name)
    "preemptions": "preemptions_total",
    "queue_sum": "queue_time_sum_s",
    "queue_cnt": "queue_time_count",
    "prefill_sum": "prefill_time_sum_s",
    "prefill_cnt": "prefill_time_count",
    "decode_sum": "decode_time_sum_s",
    "decode_cnt": "decode_time_count",
    "iter_tok_sum": "iteration_tokens_sum",
    "iter_tok_cnt": "iteration_tokens_count",
    "flops": "flops_total",
    "read_bytes": "read_bytes_total",
    "gpu_mem_used_mib": "gpu_mem_used_mib",
    "gpu_util": "gpu_util_pct",
    "power_w": "power_w",
    "temp_c": "temp_c",
}
CUMULATIVE = (
    "preemptions_total",
    "queue_time_sum_s",
    "queue_time_count",
    "prefill_time_sum_s",
    "prefill_time_count",
    "decode_time_sum_s",
    "decode_time_count",
    "iteration_tokens_sum",
    "iteration_tokens_count",
    "flops_total",
    "read_bytes_total",
)
_NOT_AVAILABLE = ("[N/A]", "N/A", "[Not Supported]")  # nvidia-smi's own words for "no reading"


@dataclass
class SamplerRow:
    line: int
    ts_ns: int  # exact, from the "seconds.nanoseconds" text
    ts_s: float
    running_reqs: float | None = None
    waiting_reqs: float | None = None
    kv_usage_frac: float | None = None
    preemptions_total: float | None = None
    queue_time_sum_s: float | None = None
    queue_time_count: float | None = None
    prefill_time_sum_s: float | None = None
    prefill_time_count: float | None = None
    decode_time_sum_s: float | None = None
    decode_time_count: float | None = None
    iteration_tokens_sum: float | None = None
    iteration_tokens_count: float | None = None
    flops_total: float | None = None
    read_bytes_total: float | None = None
    gpu_mem_used_mib: float | None = None
    gpu_util_pct: float | None = None
    power_w: float | None = None
    temp_c: float | None = None
    extra: dict[str, float | None] = field(default_factory=dict)  # unknown columns by CSV name


@dataclass
class SamplerTable:
    path: str
    columns: list[str]  # CSV header as written
    rows: list[SamplerRow]

    def column(self, name: str) -> list[float | None]:
        """Values of one field (``"kv_usage_frac"``) or unknown CSV column, in row order."""
        if name in COLUMNS.values() or name in ("ts_s", "ts_ns", "line"):
            return [getattr(r, name) for r in self.rows]
        return [r.extra.get(name) for r in self.rows]

    def to_frame(self) -> Any:
        """A pandas DataFrame, one row per sample, float columns (None -> NaN), ``ts_ns`` as int64."""
        import pandas as pd

        data: dict[str, Any] = {"line": [r.line for r in self.rows], "ts_ns": [r.ts_ns for r in self.rows]}
        data["ts_s"] = [r.ts_s for r in self.rows]
        for csv_name in self.columns[1:]:
            name = COLUMNS.get(csv_name, csv_name)
            data[name] = [math.nan if v is None else v for v in self.column(name)]
        return pd.DataFrame(data)


def _ts_ns(text: str) -> int:
    """``1787692641.557021565`` -> 1787692641557021565 exactly (float64 would lose the last digits)."""
    sec, dot, frac = text.partition(".")
    if not sec.isdigit() or (dot and not frac.isdigit()) or len(frac) > 9:
        raise ValueError(text)
    return int(sec) * 1_000_000_000 + int(frac.ljust(9, "0") if frac else 0)


def _value(text: str) -> float | None:
    t = text.strip()
    if t in _NOT_AVAILABLE:
        return None
    return float(t)  # ValueError on anything else, including ""


def _cell(path: str, no: int, name: str, cell: str) -> float | None:
    """One cell's number (None: not available); not a finite number, or negative in a known column, is an
    error naming the column."""
    try:
        v = _value(cell)
    except ValueError:
        raise ParseError(path, no, f"column {name!r}: {cell!r} is not a number") from None
    if v is not None and not math.isfinite(v):
        raise ParseError(path, no, f"column {name!r}: {cell.strip()!r} is not a finite number")
    if v is not None and v < 0 and name in COLUMNS:
        raise ParseError(path, no, f"column {name!r}: {cell.strip()} is negative ({COLUMNS[name]} cannot be)")
    return v


def parse_sampler_csv_bytes(data: bytes, path: str | Path = "<bytes>") -> SamplerTable:
    path = str(path)
    lines = split_lines(data, path)
    header = [h.strip() for h in lines[0].split(",")]
    if header[0] != "ts":
        raise ParseError(path, 1, f"first column should be 'ts', got {clip(lines[0])}")
    if len(set(header)) != len(header) or any(not h for h in header):
        raise ParseError(path, 1, f"empty or repeated column name in header: {clip(lines[0])}")
    if not any(h in COLUMNS for h in header[1:]):
        raise ParseError(path, 1, f"no known sampler column in header: {clip(lines[0])}")
    rows: list[SamplerRow] = []
    for no, text in enumerate(lines[1:], 2):
        if not text.strip():
            raise ParseError(path, no, "empty line inside the CSV")
        cells = text.split(",")
        if len(cells) != len(header):
            raise ParseError(path, no, f"{len(cells)} fields, header has {len(header)}: {clip(text)}")
        try:
            ts_ns = _ts_ns(cells[0].strip())
        except ValueError:
            raise ParseError(path, no, f"ts {cells[0]!r} is not epoch seconds") from None
        row = SamplerRow(line=no, ts_ns=ts_ns, ts_s=ts_ns / 1e9)
        for name, cell in zip(header[1:], cells[1:], strict=True):
            v = _cell(path, no, name, cell)
            if name in COLUMNS:
                setattr(row, COLUMNS[name], v)
            else:
                row.extra[name] = v
        rows.append(row)
    return SamplerTable(path=path, columns=header, rows=rows)


def parse_sampler_csv(path: str | Path) -> SamplerTable:
    return parse_sampler_csv_bytes(read_bytes(path), path)
