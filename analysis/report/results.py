"""Reading the analysis output of one campaign: findings.json, tables (CSV) and figure specs (Vega-Lite).

The site states nothing that is not in these files. A finding is ``key → {value, unit, sources, theory,
error_pct, status}``; anything else the analysis adds to a finding is kept in ``extra``.
"""

from __future__ import annotations

import csv
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from analysis import labels_zh
from analysis.report import format as fmt
from collector.raw.errors import ParseError

FINDINGS_FILE = "findings.json"
FIGURE_SUFFIX = ".vl.json"
# The cross-campaign comparison (analysis.reconcile.comparison): a folder of the results beside the campaigns,
# with the same shape as a campaign's (tables/, figures/) but its findings in comparison.json.
COMPARISON_DIR = "_comparison"
COMPARISON_FINDINGS_FILE = "comparison.json"


class RenderError(ValueError):
    """A page cannot be rendered from the results as they are (missing key, table, figure)."""


@dataclass(frozen=True)
class Finding:
    key: str
    value: Any
    unit: str = ""
    sources: tuple[Any, ...] = ()
    theory: Any = None
    error_pct: float | None = None
    status: str = ""
    tolerance_pct: float | None = None
    reason: str | None = None  # why a finding is n/a: a code that labels_zh/the templates turn into prose
    detail: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    # The formatted pieces a template needs, so no template formats a number itself.
    # Values go through labels_zh.fmt_value, the formatter the figures use too, so a number reads the same
    # in a chart, a table and the prose.
    @property
    def text(self) -> str:
        if self.unit == "%" and isinstance(self.value, (int, float)) and not isinstance(self.value, bool):
            # small shares keep two significant digits (0.0145% must not read as 0.0%)
            return fmt.fmt_pct(self.value)
        return labels_zh.fmt_value(self.value, self.unit)

    @property
    def theory_text(self) -> str:
        if self.theory is None:
            return fmt.MISSING
        if isinstance(self.theory, dict):  # {value, unit} or {value, formula}
            return labels_zh.fmt_value(self.theory.get("value"), self.theory.get("unit", self.unit))
        return labels_zh.fmt_value(self.theory, self.unit)

    @property
    def status_text(self) -> str:
        return labels_zh.STATUS.get(self.status, self.status)

    @property
    def reason_text(self) -> str:
        if not self.reason:
            return ""
        return labels_zh.REASONS.get(self.reason, self.reason)

    @property
    def error_text(self) -> str:
        return fmt.fmt_signed_pct(self.error_pct)

    @property
    def tolerance_text(self) -> str:
        return fmt.MISSING if self.tolerance_pct is None else "±" + fmt.fmt_pct(self.tolerance_pct)

    @property
    def failed(self) -> bool:
        return status_class(self.status) == "fail"

    @property
    def available(self) -> bool:
        return status_class(self.status) != "na"

    @property
    def badge(self) -> str:
        return status_class(self.status)

    @property
    def source_paths(self) -> list[str]:
        return [source_path(s) for s in self.sources]

    @property
    def section(self) -> str:
        """The key without its round prefix, up to the first dot: ``round2.overload.x`` → ``overload``."""
        parts = self.key.split(".")
        if parts[0].startswith("round") and len(parts) > 1:
            parts = parts[1:]
        return parts[0] if len(parts) > 1 else ""

    @property
    def round(self) -> str | None:
        head = self.key.split(".")[0]
        return head if head.startswith("round") and "." in self.key else None


def status_class(status: object) -> str:
    """Map the analysis' status words onto three badge colours (unknown words stay visible as ``info``)."""
    s = str(status or "").strip().lower()
    if s in ("n/a", "na", "not_available", "unavailable"):
        return "na"
    if s in ("ok", "pass", "passed", "match", "agree", "agrees", "within", "consistent", "true"):
        return "pass"
    if s in ("fail", "failed", "mismatch", "disagree", "error", "outside", "inconsistent", "false"):
        return "fail"
    if s in ("warn", "warning", "marginal", "partial", "gated", "flagged"):
        return "warn"
    return "info"


def source_path(source: Any) -> str:
    """A finding's source as text: ``"run/file.json"``, or the ``file``/``path`` of a dict, plus its detail."""
    if isinstance(source, dict):
        path = source.get("file") or source.get("path") or ""
        detail = source.get("field") or source.get("line") or source.get("detail") or ""
        return f"{path}{'#' + str(detail) if detail not in ('', None) else ''}"
    return str(source)


def source_file(source: Any) -> str:
    """Only the file part of a source (``run/stress.json#ttft`` → ``run/stress.json``)."""
    if isinstance(source, dict):
        return str(source.get("file") or source.get("path") or "")
    # Citations are ``path:line`` or ``path:field`` (analysis.findings); paths never hold a colon.
    return str(source).split("#", 1)[0].split(":", 1)[0]


def load_findings(path: Path) -> dict[str, Finding]:
    try:
        raw = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError as err:
        raise RenderError(f"{path}: missing (run `collector analyze` first)") from err
    except json.JSONDecodeError as err:
        raise ParseError(path, err.lineno, f"findings are not JSON ({err.msg})") from err
    if not isinstance(raw, dict):
        raise ParseError(path, 1, "findings.json is not a JSON object")
    out = {}
    for key, entry in raw.items():
        if not isinstance(entry, dict) or "value" not in entry:
            raise ParseError(path, 1, f"finding {key!r} has no 'value'")
        known = {
            "value",
            "unit",
            "sources",
            "theory",
            "error_pct",
            "status",
            "tolerance_pct",
            "reason",
            "detail",
        }
        sources = entry.get("sources") or ()
        if isinstance(sources, (str, dict)):
            sources = (sources,)
        err_pct = entry.get("error_pct")
        out[key] = Finding(
            key=key,
            value=entry["value"],
            unit=str(entry.get("unit") or ""),
            sources=tuple(sources),
            theory=entry.get("theory"),
            error_pct=None
            if err_pct is None or (isinstance(err_pct, float) and math.isnan(err_pct))
            else err_pct,
            status=str(entry.get("status") or ""),
            tolerance_pct=entry.get("tolerance_pct"),
            reason=entry.get("reason"),
            detail=entry.get("detail"),
            extra={k: v for k, v in entry.items() if k not in known},
        )
    return out


def _cell(text: str) -> Any:
    """CSV text → int, float, bool or str (empty → None), so tables can be formatted."""
    if text == "":
        return None
    low = text.lower()
    if low in ("true", "false"):
        return low == "true"
    try:
        return int(text)
    except ValueError:
        pass
    try:
        return float(text)
    except ValueError:
        return text


@dataclass(frozen=True)
class Table:
    name: str
    path: Path
    columns: list[str]
    rows: list[dict[str, Any]]

    def where(self, **equals: Any) -> Table:
        rows = [r for r in self.rows if all(r.get(k) == v for k, v in equals.items())]
        return Table(self.name, self.path, self.columns, rows)

    def column(self, name: str) -> list[Any]:
        if name not in self.columns:
            raise RenderError(f"{self.path}: no column {name!r} (has: {', '.join(self.columns)})")
        return [r[name] for r in self.rows]

    def __len__(self) -> int:
        return len(self.rows)


def load_table(path: Path) -> Table:
    with open(path, newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        columns = list(reader.fieldnames or [])
        rows = [{k: _cell(v) for k, v in row.items()} for row in reader]
    return Table(name=_name_of(path, ".csv"), path=Path(path), columns=columns, rows=rows)


def _name_of(path: Path, suffix: str) -> str:
    return path.name[: -len(suffix)] if path.name.endswith(suffix) else path.stem


@dataclass
class CampaignResults:
    name: str
    path: Path
    findings: dict[str, Finding]
    tables: dict[str, Table]
    figures: dict[str, Path]  # name → spec file

    @property
    def rounds(self) -> list[str]:
        return sorted({f.round for f in self.findings.values() if f.round})

    @property
    def latest_prefix(self) -> str:
        """The key prefix of the newest round (``round2.``), or ``""`` for a campaign without rounds."""
        return self.rounds[-1] + "." if self.rounds else ""


def _short_name(path: Path, campaign_dir: Path, suffix: str, folder: str) -> str:
    """``tables/points.csv`` → ``points``: names relative to the analysis' tables/ or figures/ folder."""
    rel = path.relative_to(campaign_dir)
    if rel.parts[0] == folder:
        rel = rel.relative_to(folder)
    text = rel.as_posix()
    return text[: -len(suffix)] if text.endswith(suffix) else text


def load_campaign(path: Path, findings_file: str = FINDINGS_FILE) -> CampaignResults:
    """findings.json, every table (CSV) and figure spec (``*.vl.json``) under the campaign's folder."""
    path = Path(path)
    tables = {}
    for p in sorted(path.rglob("*.csv")):
        t = load_table(p)
        name = _short_name(p, path, ".csv", "tables")
        tables[name] = Table(name, t.path, t.columns, t.rows)
    figures = {
        _short_name(p, path, FIGURE_SUFFIX, "figures"): p for p in sorted(path.rglob(f"*{FIGURE_SUFFIX}"))
    }
    return CampaignResults(
        name=path.name,
        path=path,
        findings=load_findings(path / findings_file),
        tables=tables,
        figures=figures,
    )


def discover_campaigns(results_dir: Path) -> list[Path]:
    results_dir = Path(results_dir)
    if not results_dir.is_dir():
        raise RenderError(f"{results_dir}: no analysis results here (run `collector analyze` first)")
    return sorted(p.parent for p in results_dir.glob(f"*/{FINDINGS_FILE}") if p.parent.name != COMPARISON_DIR)


def load_comparison(results_dir: Path) -> CampaignResults | None:
    """The cross-campaign comparison, when the analysis wrote one (two or more campaigns), else None."""
    path = Path(results_dir) / COMPARISON_DIR
    if not (path / COMPARISON_FINDINGS_FILE).is_file():
        return None
    return load_campaign(path, COMPARISON_FINDINGS_FILE)
