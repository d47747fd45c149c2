"""The Finding type — a named quantity the report states, with where it came from — used both to write
findings.json (analysis/reconcile, the pipeline) and to read it back (analysis/report); and the writers that
make the analysis output byte-identical for the same raw input.

A finding is addressed by structured fields (`analysis.core.keys.At`: campaign, round, engine, weight format,
run,
series, topic, metric …); readers select findings by those fields, and its key is only an id. It carries
``value``, ``unit``, ``sources`` (citations `path/relative/to/campaign:line` or `path:field`), ``theory``,
``error_pct``, ``tolerance_pct``, ``status`` — ``ok`` (measured and, where there is a theory, within
tolerance), ``mismatch`` (outside tolerance, shown as a failed reconciliation) or ``n/a`` (not computable from
this campaign: ``value`` is null, ``reason`` a code that `labels_zh.REASONS` turns into prose and ``detail``
says which file is missing, in English) — and any further named numbers in ``extra``.

findings.json maps each key to ``{value, unit, …, <address fields>, <extra>}``, flat.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pandas as pd

from analysis.core.keys import ADDRESS_FIELDS, At, matches
from collector.raw.errors import AnatomyError
from collector.raw.store import RUN_STATES

STATUSES = ("ok", "mismatch", "n/a")
# Fixed float formatting: ten significant digits survive every platform's last-bit differences.
FLOAT_DIGITS = 10
MEASUREMENT_FIELDS = (
    "value",
    "unit",
    "sources",
    "theory",
    "error_pct",
    "tolerance_pct",
    "status",
    "reason",
    "detail",
    "run_state",
)
RESERVED = frozenset(MEASUREMENT_FIELDS) | frozenset(ADDRESS_FIELDS)

Value = float | int | str | bool | None | list


class NonFiniteValue(AnatomyError, ValueError):
    """A finding about to carry NaN or an infinity as a stated number (a bug upstream: inputs are refused by
    the parsers when they hold one). One line naming the finding instead of a number that is not one."""


def _non_finite(x: Any) -> bool:
    return isinstance(x, float) and not math.isfinite(x)


@dataclass(frozen=True)
class Finding:
    at: At
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
    # the state of the run(s) the finding comes from (collector.raw.store.RUN_STATES: sealed-complete,
    # sealed-failed, unsealed; the least trusted when several); None: from no run (theory only)
    run_state: str | None = None

    def __post_init__(self) -> None:
        key = self.at.key  # raises on a malformed address
        if self.status not in STATUSES:
            raise ValueError(f"finding {key}: status {self.status!r} not in {STATUSES}")
        if self.status == "n/a" and not self.reason:
            raise ValueError(f"finding {key}: status n/a needs a reason")
        if self.status != "n/a" and self.value is None:
            raise ValueError(f"finding {key}: no value; a missing value is an n/a finding with its reason")
        for name in ("value", "theory", "error_pct", "tolerance_pct"):
            if _non_finite(getattr(self, name)):
                raise NonFiniteValue(f"finding {key}: {name} is {getattr(self, name)!r}, not a finite number")
        if self.run_state is not None and self.run_state not in RUN_STATES:
            raise ValueError(f"finding {key}: run_state {self.run_state!r} not in {RUN_STATES}")
        clash = RESERVED & set(self.extra)
        if clash:
            raise ValueError(f"finding {key}: extra field(s) {sorted(clash)} collide with the record's own")

    # the address, field by field (templates select and label by these)
    @property
    def key(self) -> str:
        return self.at.key

    @property
    def metric(self) -> str:
        return self.at.metric

    @property
    def topic(self) -> str | None:
        return self.at.topic

    @property
    def level(self) -> str:
        return self.at.level

    @property
    def campaign(self) -> str | None:
        return self.at.campaign

    @property
    def versus(self) -> str | None:
        return self.at.versus

    @property
    def round(self) -> str | None:
        return self.at.round

    @property
    def engine(self) -> str | None:
        return self.at.engine

    @property
    def weight_format(self) -> str | None:
        return self.at.weight_format

    @property
    def run(self) -> str | None:
        return self.at.run

    @property
    def series(self) -> str | None:
        return self.at.series

    @property
    def test(self) -> str | None:
        return self.at.test

    @property
    def formats(self) -> tuple[str, ...]:
        return self.at.formats

    # the verdict
    @property
    def available(self) -> bool:
        return self.status != "n/a"

    @property
    def failed(self) -> bool:
        return self.status == "mismatch"

    def with_campaign(self, campaign: str) -> Finding:
        return replace(self, at=self.at.with_(campaign=campaign))

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
            "run_state": self.run_state,
        }
        out.update(self.at.to_json())
        for k, v in self.extra.items():
            out[k] = v
        return normalize(out)

    @classmethod
    def from_json(cls, key: str, obj: Mapping[str, Any]) -> Finding:
        """A finding as findings.json holds it. Raises ValueError (the reader names the file) when the entry
        is not a finding or its fields do not make its key."""
        if not isinstance(obj, Mapping) or "value" not in obj:
            raise ValueError(f"finding {key!r} has no 'value'")
        at = At.from_json({k: v for k, v in obj.items() if k in ADDRESS_FIELDS})
        if at.key != key:
            raise ValueError(f"finding {key!r}: its fields make the key {at.key!r}")
        sources = obj.get("sources") or ()
        return cls(
            at=at,
            value=obj["value"],
            unit=str(obj.get("unit") or ""),
            sources=tuple(str(s) for s in sources),
            theory=obj.get("theory"),
            error_pct=obj.get("error_pct"),
            tolerance_pct=obj.get("tolerance_pct"),
            status=str(obj.get("status") or "ok"),
            reason=obj.get("reason"),
            detail=obj.get("detail"),
            run_state=obj.get("run_state"),
            extra={k: v for k, v in obj.items() if k not in RESERVED},
        )


def measured(
    at: At,
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
    if value is None:
        raise ValueError(f"finding {at.key}: measured value missing; use not_available()")
    if _non_finite(value) or _non_finite(theory):
        # NaN/inf never reaches a stated number: the finding is n/a, saying which input was not a number
        what = "value" if _non_finite(value) else "theory"
        got = value if what == "value" else theory
        return not_available(
            at,
            unit,
            "unknown",
            f"the computed {what} is {got!r}, not a finite number" + (f" ({detail})" if detail else ""),
            sources,
            **extra,
        )
    if theory is not None and tolerance_pct is None:
        # a theory without a tolerance would read as "reconciled" whatever the gap; a mere reference
        # value (a floor, a ceiling) goes into `extra` under its own name instead
        raise ValueError(f"finding {at.key}: a theory value needs a tolerance_pct")
    if theory is not None and isinstance(value, int | float) and not isinstance(value, bool) and theory != 0:
        err = (float(value) - theory) / theory * 100.0
        if tolerance_pct is not None and abs(err) > tolerance_pct:
            status = "mismatch"
    return Finding(
        at=at,
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
    at: At, unit: str, reason: str, detail: str, sources: Iterable[str] = (), **extra: Any
) -> Finding:
    """A finding the campaign cannot support: value null, status n/a, reason code + English detail."""
    return Finding(
        at=at,
        value=None,
        unit=unit,
        sources=tuple(sources),
        status="n/a",
        reason=reason,
        detail=detail,
        extra=dict(extra),
    )


def checked(at: At, ok: bool, sources: Iterable[str], detail: str | None = None, **extra: Any) -> Finding:
    """A yes/no check: value = ok; status mismatch when the check fails."""
    return Finding(
        at=at,
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
    """Findings collected across the sections (or read back from findings.json), by key; a duplicate key is a
    bug and raises. Select by fields with `find` / `select`, never by taking keys apart."""

    def __init__(self, findings: Iterable[Finding] = ()) -> None:
        self._by_key: dict[str, Finding] = {}
        # by metric, each list in key order: built on the first select (the pages select ~2,000 times)
        self._by_metric: dict[str, list[Finding]] | None = None
        self.extend(findings)

    def add(self, *findings: Finding) -> None:
        for f in findings:
            if f.key in self._by_key:
                raise ValueError(f"finding {f.key} written twice")
            self._by_key[f.key] = f
        self._by_metric = None

    def extend(self, findings: Iterable[Finding]) -> None:
        self.add(*findings)

    def __getitem__(self, key: str) -> Finding:
        return self._by_key[key]

    def __contains__(self, key: object) -> bool:
        return key in self._by_key

    def __iter__(self) -> Iterator[Finding]:
        return iter(self._by_key[k] for k in sorted(self._by_key))

    def get(self, key: str) -> Finding | None:
        return self._by_key.get(key)

    def keys(self) -> list[str]:
        return sorted(self._by_key)

    def __len__(self) -> int:
        return len(self._by_key)

    def select(self, **query: Any) -> list[Finding]:
        """Every finding whose fields equal the query's (``topic`` always counts: see keys.matches), in key
        order."""
        metric = query.get("metric")
        pool = self._metric_index().get(metric, []) if isinstance(metric, str) else self
        return [f for f in pool if matches(f.at, query)]

    def _metric_index(self) -> dict[str, list[Finding]]:
        if self._by_metric is None:
            self._by_metric = {}
            for f in self:
                self._by_metric.setdefault(f.at.metric, []).append(f)
        return self._by_metric

    def find(self, **query: Any) -> Finding | None:
        """The one finding the query names, None when there is none; two is an ambiguous query and raises."""
        hits = self.select(**query)
        if len(hits) > 1:
            raise LookupError(f"{query} names {len(hits)} findings: {[f.key for f in hits]}")
        return hits[0] if hits else None

    def to_json(self) -> dict[str, Any]:
        return {k: self._by_key[k].to_json() for k in sorted(self._by_key)}

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> FindingSet:
        return cls(Finding.from_json(k, v) for k, v in obj.items())


def write_findings(path: Path, findings: FindingSet) -> None:
    path.write_text(dumps(findings.to_json()), encoding="utf-8")


def write_table(path: Path, frame: pd.DataFrame, sort_by: Sequence[str] | None = None) -> None:
    """CSV with fixed float formatting, LF line ends, rows in a stable order and no index."""
    df = frame.copy()
    if sort_by:
        df = df.sort_values(list(sort_by), kind="mergesort").reset_index(drop=True)
    text = df.to_csv(index=False, float_format=f"%.{FLOAT_DIGITS}g", lineterminator="\n")
    path.write_text(text, encoding="utf-8")
