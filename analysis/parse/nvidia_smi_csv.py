"""The sampler's ``nvidia-smi --query-gpu=… --format=csv,nounits`` text (``scrapes.jsonl`` records of source
``nvidia-smi``) → one ``GpuReading`` per device line.

nvidia-smi prints one line per GPU it sees, so a scrape on a machine of several GPUs carries several lines,
told apart by ``index`` and ``uuid`` (both in collector.protocol.sampler's query). The header keeps the units
in
brackets even with ``nounits`` (``memory.used [MiB]``), and clocks come back under their long names
(``clocks.current.sm [MHz]`` for the query's ``clocks.sm``), so columns are matched on the name before the
bracket, with either spelling. A reading nvidia-smi cannot give is ``[N/A]`` / ``[Not Supported]`` → None.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from collector.raw.errors import ParseError
from collector.raw.jsonl import clip

# column name (before " [unit]") -> field; clocks under both the query's and nvidia-smi's header names
_NUMERIC: dict[str, str] = {
    "memory.used": "memory_used_mib",
    "memory.total": "memory_total_mib",
    "utilization.gpu": "util_gpu_pct",
    "utilization.memory": "util_memory_pct",
    "power.draw": "power_w",
    "temperature.gpu": "temperature_c",
    "clocks.sm": "clock_sm_mhz",
    "clocks.current.sm": "clock_sm_mhz",
    "clocks.mem": "clock_mem_mhz",
    "clocks.current.memory": "clock_mem_mhz",
}
_NOT_AVAILABLE = ("[N/A]", "N/A", "[Not Supported]")


@dataclass(frozen=True)
class GpuReading:
    """One GPU's line of one nvidia-smi scrape (units in the field names; None = nvidia-smi had none)."""

    index: int
    uuid: str | None
    timestamp: str | None
    memory_used_mib: float | None = None
    memory_total_mib: float | None = None
    util_gpu_pct: float | None = None
    util_memory_pct: float | None = None
    power_w: float | None = None
    temperature_c: float | None = None
    clock_sm_mhz: float | None = None
    clock_mem_mhz: float | None = None
    pstate: str | None = None


def _column(name: str) -> str:
    return name.split("[", 1)[0].strip()


def _number(text: str, where: str, column: str) -> float | None:
    if text in _NOT_AVAILABLE:
        return None
    try:
        value = float(text)
    except ValueError:
        raise ParseError(where, None, f"{column}: not a number: {clip(text)}") from None
    if not math.isfinite(value) or value < 0:
        raise ParseError(where, None, f"{column}: {text} is not a reading (finite, ≥ 0)")
    return value


def parse_nvidia_smi_csv(text: str, where: str | Path = "nvidia-smi") -> list[GpuReading]:
    """Every device line of one scrape, in nvidia-smi's order; ``where`` names the record in errors."""
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if not lines:
        return []
    header = [_column(c) for c in lines[0].split(",")]
    if "index" not in header:
        raise ParseError(where, None, f"nvidia-smi CSV header has no 'index' column: {clip(lines[0])}")
    out = []
    for line in lines[1:]:
        cells = [c.strip() for c in line.split(",")]
        if len(cells) != len(header):
            raise ParseError(where, None, f"{len(cells)} cells for {len(header)} columns: {clip(line)}")
        row = dict(zip(header, cells, strict=True))
        values = {field: _number(row[col], str(where), col) for col, field in _NUMERIC.items() if col in row}
        try:
            index = int(row["index"])
        except ValueError:
            raise ParseError(where, None, f"index: not a device number: {clip(row['index'])}") from None
        out.append(
            GpuReading(
                index=index,
                uuid=row.get("uuid"),
                timestamp=row.get("timestamp"),
                pstate=row.get("pstate"),
                **values,
            )
        )
    return out
