"""Reading the analysis output of one campaign: findings.json, tables (CSV) and figure specs (Vega-Lite).

The site states nothing that is not in these files. Findings are read into the analysis' own Finding type
(analysis.core.findings) and selected by their fields.
"""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from analysis.core.findings import FindingSet
from collector.raw.errors import AnatomyError, ParseError

FINDINGS_FILE = "findings.json"
FIGURE_SUFFIX = ".vl.json"
INDEX_FILE = "index.json"
# The cross-campaign comparison (analysis.reconcile.comparison): a folder of the results beside the campaigns,
# with the same shape as a campaign's (tables/, figures/) but its findings in comparison.json.
COMPARISON_DIR = "_comparison"
COMPARISON_FINDINGS_FILE = "comparison.json"


class RenderError(AnatomyError):
    """A page cannot be rendered from the results as they are (missing finding, table, figure)."""


def source_path(source: str) -> str:
    """A finding's citation as text (``run/file.json:field``)."""
    return str(source)


def source_file(source: str) -> str:
    """Only the file part of a citation (``run/stress.json:ttft`` → ``run/stress.json``): citations are
    ``path:line`` or ``path:field`` (analysis.core.findings) and paths never hold a colon."""
    return str(source).split("#", 1)[0].split(":", 1)[0]


def load_findings(path: Path) -> FindingSet:
    try:
        raw = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError as err:
        raise RenderError(f"{path}: missing (run `collector analyze` first)") from err
    except json.JSONDecodeError as err:
        raise ParseError(path, err.lineno, f"findings are not JSON ({err.msg})") from err
    if not isinstance(raw, dict):
        raise ParseError(path, 1, "findings.json is not a JSON object")
    try:
        return FindingSet.from_json(raw)
    except (ValueError, TypeError) as err:
        raise ParseError(path, 1, str(err)) from err


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
    findings: FindingSet
    tables: dict[str, Table]
    figures: dict[str, Path]  # name → spec file
    index: dict[str, Any] = field(default_factory=dict)  # index.json: what the analysis wrote, the profile

    @property
    def rounds(self) -> list[str]:
        return sorted({f.round for f in self.findings if f.round})

    @property
    def latest_round(self) -> str | None:
        """The newest round (``round2``), None for a campaign without rounds."""
        return self.rounds[-1] if self.rounds else None

    def has_rows(self, table: str) -> bool:
        """The analysis wrote ``table`` and it has rows (a page that draws only from it has something)."""
        t = self.tables.get(table)
        return t is not None and len(t) > 0


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
    index_path = path / INDEX_FILE
    index = json.loads(index_path.read_text(encoding="utf-8")) if index_path.is_file() else {}
    return CampaignResults(
        name=path.name,
        path=path,
        findings=load_findings(path / findings_file),
        tables=tables,
        figures=figures,
        index=index,
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
