"""The Finding record (a named quantity the report states, with where it came from) and the writers
that make the analysis output byte-identical for the same raw input.

A finding: ``{"value", "unit", "sources", "theory", "error_pct", "tolerance_pct", "status", "reason",
"detail"}``. `sources` are citations `path/relative/to/campaign:line` or `path:field`; `status` is
``ok`` (measured and, where there is a theory, within tolerance), ``mismatch`` (outside tolerance,
shown as a failed reconciliation) or ``n/a`` (not computable from this campaign; `reason` is a code that
`labels_zh.REASONS` turns into prose and `detail` says which file is missing, in English).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

STATUSES = ("ok", "mismatch", "n/a")
KEY_RE = re.compile(r"^[a-z0-9_]+(\.[a-z0-9_]+)*$")
# Fixed float formatting: ten significant digits survive every platform's last-bit differences.
FLOAT_DIGITS = 10

Value = float | int | str | bool | None | list


@dataclass(frozen=True)
class Finding:
    key: str
    value: Value
    unit: str
    sources: tuple[str, ...] = ()
    theory: float | None = None
    error_pct: float | None = None
    tolerance_pct: float | None = None
    status: str = "ok"
    reason: str | None = None
    detail: str | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not KEY_RE.match(self.key):
            raise ValueError(f"finding key {self.key!r} is not dotted snake_case")
        if self.status not in STATUSES:
            raise ValueError(f"finding {self.key}: status {self.status!r} not in {STATUSES}")
        if self.status == "n/a" and not self.reason:
            raise ValueError(f"finding {self.key}: status n/a needs a reason")

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "value": self.value,
            "unit": self.unit,
            "sources": sorted(set(self.sources)),
            "theory": self.theory,
            "error_pct": self.error_pct,
            "tolerance_pct": self.tolerance_pct,
            "status": self.status,
            "reason": self.reason,
            "detail": self.detail,
        }
        for k, v in self.extra.items():
            out[k] = v
        return normalize(out)


def measured(
    key: str,
    value: Value,
    unit: str,
    sources: Iterable[str],
    theory: float | None = None,
    tolerance_pct: float | None = None,
    detail: str | None = None,
    **extra: Any,
) -> Finding:
    """A measured finding; with a theory value (and its tolerance), error_pct = (value − theory)/theory · 100
    and the status is `mismatch` when |error_pct| > tolerance_pct."""
    err = None
    status = "ok"
    if value is None or (isinstance(value, float) and math.isnan(value)):
        raise ValueError(f"finding {key}: measured value missing; use not_available()")
    if theory is not None and tolerance_pct is None:
        # a theory without a tolerance would read as "reconciled" whatever the gap; a mere reference
        # value (a floor, a ceiling) goes into `extra` under its own name instead
        raise ValueError(f"finding {key}: a theory value needs a tolerance_pct")
    if theory is not None and isinstance(value, int | float) and not isinstance(value, bool) and theory != 0:
        err = (float(value) - theory) / theory * 100.0
        if tolerance_pct is not None and abs(err) > tolerance_pct:
            status = "mismatch"
    return Finding(
        key=key,
        value=value,
        unit=unit,
        sources=tuple(sources),
        theory=theory,
        error_pct=err,
        tolerance_pct=tolerance_pct,
        status=status,
        detail=detail,
        extra=dict(extra),
    )


def not_available(
    key: str, unit: str, reason: str, detail: str, sources: Iterable[str] = (), **extra: Any
) -> Finding:
    """A finding the campaign cannot support: value null, status n/a, reason code + English detail."""
    return Finding(
        key=key,
        value=None,
        unit=unit,
        sources=tuple(sources),
        status="n/a",
        reason=reason,
        detail=detail,
        extra=dict(extra),
    )


def checked(key: str, ok: bool, sources: Iterable[str], detail: str | None = None, **extra: Any) -> Finding:
    """A yes/no check: value = ok; status mismatch when the check fails."""
    return Finding(
        key=key,
        value=bool(ok),
        unit="bool",
        sources=tuple(sources),
        status="ok" if ok else "mismatch",
        detail=detail,
        extra=dict(extra),
    )


def fmt_float(x: float) -> float | int | None:
    """Round to FLOAT_DIGITS significant digits; NaN/inf become None (JSON has neither)."""
    if math.isnan(x) or math.isinf(x):
        return None
    return float(f"{x:.{FLOAT_DIGITS}g}")


def normalize(obj: Any) -> Any:
    """Recursively: floats rounded (fmt_float), numpy scalars to Python, tuples to lists, keys to str."""
    if isinstance(obj, bool) or obj is None or isinstance(obj, str):
        return obj
    if isinstance(obj, int):
        return obj
    if isinstance(obj, float):
        return fmt_float(obj)
    if hasattr(obj, "item") and not isinstance(obj, list | tuple | dict):
        return normalize(obj.item())
    if isinstance(obj, Mapping):
        return {str(k): normalize(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [normalize(v) for v in obj]
    if isinstance(obj, Path):
        return obj.as_posix()
    raise TypeError(f"cannot serialise {type(obj).__name__} in a finding")


def dumps(obj: Any) -> str:
    """Deterministic JSON: normalised numbers, sorted keys, two-space indent, UTF-8 kept, newline at end."""
    return json.dumps(normalize(obj), sort_keys=True, indent=2, ensure_ascii=False, allow_nan=False) + "\n"


class FindingSet:
    """Findings collected across the sections; a duplicate key is a bug and raises."""

    def __init__(self) -> None:
        self._by_key: dict[str, Finding] = {}

    def add(self, *findings: Finding) -> None:
        for f in findings:
            if f.key in self._by_key:
                raise ValueError(f"finding {f.key} written twice")
            self._by_key[f.key] = f

    def extend(self, findings: Iterable[Finding]) -> None:
        self.add(*findings)

    def __getitem__(self, key: str) -> Finding:
        return self._by_key[key]

    def __contains__(self, key: str) -> bool:
        return key in self._by_key

    def keys(self) -> list[str]:
        return sorted(self._by_key)

    def __len__(self) -> int:
        return len(self._by_key)

    def to_json(self) -> dict[str, Any]:
        return {k: self._by_key[k].to_json() for k in sorted(self._by_key)}


def write_findings(path: Path, findings: FindingSet) -> None:
    path.write_text(dumps(findings.to_json()), encoding="utf-8")


def write_table(path: Path, frame: pd.DataFrame, sort_by: Sequence[str] | None = None) -> None:
    """CSV with fixed float formatting, LF line ends, rows in a stable order and no index."""
    df = frame.copy()
    if sort_by:
        df = df.sort_values(list(sort_by), kind="mergesort").reset_index(drop=True)
    text = df.to_csv(index=False, float_format=f"%.{FLOAT_DIGITS}g", lineterminator="\n")
    path.write_text(text, encoding="utf-8")
