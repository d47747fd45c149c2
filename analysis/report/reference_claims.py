"""The ledger of the reference study's quantitative claims (``reference_claims.tsv`` beside this module):
every claim of its README and reports, one per line, with where this project accounts for it.

Columns (tab-separated, ``#`` lines are comments):

- ``id``, ``source`` (README, STRUCT — the structure page —, R1-01 … R2-06: the round and report number),
  ``section`` (the report's section), ``claim`` (a short quote of the claim);
- ``status``: ``shown`` — the same quantity is on our ``page``; ``corrected`` — we state another number and
  the differences page 「与参考研究不同之处」 explains it (``anchor``: its id there); ``na`` — the claim needs
  ``missing_file``, which the data we hold lacks (``reason``: a code of ``labels_zh.REASONS`` or
  ``labels_zh.REFERENCE_NA_REASONS``), said on ``page``; ``todo`` — computable, not computed yet;
- ``page``: the page of the reference campaign a reader would look at (``PAGES``);
- ``ref``: where the number is — ``f:<finding key>``; ``t:<table>:<column>:<col=value,…>`` (a cell of a
  results table, shown on the page); ``n:<text>`` (text the page states);
- ``note``: what differs in the definition or the value (English, for the maintainers).

``check(claims, results_dir, docs_dir)`` says which claims do not resolve on a built site (tests/
test_reference_claims.py; the counts before and after a change).
"""

from __future__ import annotations

import csv
import json
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from analysis.core import labels_zh
from analysis.report.markdown import anchor_of
from collector.raw.errors import AnatomyError

LEDGER = Path(__file__).with_name("reference_claims.tsv")
STATUSES = ("shown", "corrected", "na", "todo")
COLUMNS = (
    "id",
    "source",
    "section",
    "claim",
    "status",
    "page",
    "ref",
    "anchor",
    "missing_file",
    "reason",
    "note",
)
# page key -> path of the reference campaign's page, relative to docs_dir ({c}: the campaign)
PAGES = {
    "overview": "campaigns/{c}/index.md",
    **{
        k: f"campaigns/{{c}}/{k}.md"
        for k in (
            "concurrency",
            "ttft",
            "lengths",
            "kv",
            "overload",
            "engines",
            "selection",
            "slo",
            "reproducibility",
            "gates",
        )
    },
    "structure": "structure/{c}.md",
    "differences": "",  # the differences page (another page's work): found by its title
}
DIFFERENCES_TITLE = "与参考研究不同之处"


class LedgerError(AnatomyError):
    """A malformed ledger line: one line naming the file, the line and the problem."""


@dataclass(frozen=True)
class Claim:
    id: str
    source: str
    section: str
    claim: str
    status: str
    page: str
    ref: str
    anchor: str
    missing_file: str
    reason: str
    note: str
    line: int

    @property
    def ref_kind(self) -> str:
        return self.ref[:1] if self.ref else ""

    @property
    def finding_key(self) -> str | None:
        return self.ref[2:] if self.ref_kind == "f" else None


def _claim(row: list[str], no: int, path: Path) -> Claim:
    if len(row) != len(COLUMNS):
        raise LedgerError(f"{path}:{no}: {len(row)} columns, expected {len(COLUMNS)} ({', '.join(COLUMNS)})")
    c = Claim(*[x.strip() for x in row], line=no)  # type: ignore[arg-type,misc]
    problem = _problem(c)
    if problem:
        raise LedgerError(f"{path}:{no}: claim {c.id}: {problem}")
    return c


def _problem(c: Claim) -> str | None:
    if c.status not in STATUSES:
        return f"status {c.status!r} is not one of {', '.join(STATUSES)}"
    if c.page not in PAGES:
        return f"page {c.page!r} is not one of {', '.join(PAGES)}"
    if c.ref and not re.match(r"^(f:[a-z0-9_.]+|t:[a-z0-9_]+:[a-z0-9_.]+:.+|n:.+)$", c.ref):
        return f"ref {c.ref!r} is not f:<key>, t:<table>:<column>:<filters> or n:<text>"
    if c.status in ("shown", "corrected") and not c.ref:
        return f"a {c.status} claim needs a ref"
    if c.status == "corrected" and not c.anchor:
        return "a corrected claim needs the anchor of its paragraph on the differences page"
    if c.status == "na" and not (c.missing_file and c.reason):
        return "an n/a claim needs the missing file and the reason"
    if (
        c.status == "na"
        and c.reason not in labels_zh.REASONS
        and c.reason not in labels_zh.REFERENCE_NA_REASONS
    ):
        return f"reason {c.reason!r} has no Chinese text in analysis/core/labels_zh.py"
    return None


def load(path: Path = LEDGER) -> list[Claim]:
    """Every claim of the ledger, in file order; a malformed line raises LedgerError naming it."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as err:
        raise LedgerError(f"{path}: cannot read the ledger ({err.strerror})") from err
    lines = [(no, ln) for no, ln in enumerate(text.splitlines(), 1) if ln.strip() and not ln.startswith("#")]
    if not lines or lines[0][1].split("\t") != list(COLUMNS):
        raise LedgerError(
            f"{path}: the first line that is not a comment must be the header {'|'.join(COLUMNS)}"
        )
    claims = [
        _claim(row, no, path)
        for (no, _), row in zip(
            lines[1:],
            csv.reader([ln for _, ln in lines[1:]], delimiter="\t", quoting=csv.QUOTE_NONE),
            strict=True,
        )
    ]
    dup = [k for k, n in Counter(c.id for c in claims).items() if n > 1]
    if dup:
        raise LedgerError(f"{path}: claim ids used twice: {', '.join(sorted(dup))}")
    return claims


def counts(claims: list[Claim]) -> dict[str, int]:
    """How many claims have each status (every status present, zero when none)."""
    n = Counter(c.status for c in claims)
    return {s: n.get(s, 0) for s in STATUSES}


def _value(text: str) -> object:
    """A CSV cell as the pipeline wrote it: bool, int, float or text."""
    if text in ("True", "False"):
        return text == "True"
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def _matches(cell: str, want: str) -> bool:
    a, b = _value(cell), _value(want)
    if isinstance(a, int | float) and isinstance(b, int | float) and not isinstance(a, bool):
        return float(a) == float(b)
    return cell == want


class _Site:
    """The built site and results the checks read (files loaded once)."""

    def __init__(self, results_dir: Path, docs_dir: Path, campaign: str):
        self.results, self.docs, self.campaign = results_dir / campaign, docs_dir, campaign
        self.findings = json.loads((self.results / "findings.json").read_text(encoding="utf-8"))
        self._pages: dict[str, str] = {}
        self._tables: dict[str, list[dict[str, str]]] = {}
        self.all_text = "\n".join(p.read_text(encoding="utf-8") for p in docs_dir.rglob("*.md"))
        self.differences = next(
            (
                p.read_text(encoding="utf-8")
                for p in docs_dir.rglob("*.md")
                if DIFFERENCES_TITLE in p.read_text(encoding="utf-8").split("\n", 1)[0]
            ),
            None,
        )

    def page(self, key: str) -> str:
        if key not in self._pages:
            p = self.docs / PAGES[key].format(c=self.campaign)
            self._pages[key] = p.read_text(encoding="utf-8") if PAGES[key] and p.is_file() else ""
        return self._pages[key]

    def cell(self, ref: str) -> tuple[str | None, str]:
        """The text a ``t:`` ref's cell is shown as (None and why when it does not resolve)."""
        _, table, column, filters = ref.split(":", 3)
        if table not in self._tables:
            path = self.results / "tables" / f"{table}.csv"
            self._tables[table] = list(csv.DictReader(path.open(encoding="utf-8"))) if path.is_file() else []
        want = dict(kv.split("=", 1) for kv in filters.split(","))
        rows = [r for r in self._tables[table] if all(_matches(r.get(k, ""), v) for k, v in want.items())]
        if not rows or column not in rows[0] or rows[0][column] == "":
            return None, f"table {table}: no row {filters} with a {column}"
        return labels_zh.cell_text(column, _value(rows[0][column])), ""


def _finding_shown(text: str, key: str) -> bool:
    a = anchor_of(key)
    return f'id="{a}"' in text or f"#{a})" in text


def _has_anchor(page_text: str, anchor: str) -> bool:
    """The page sets the anchor: a heading's attribute list in the generated Markdown (``{ #anchor }``) or an
    HTML id."""
    return (
        f'id="{anchor}"' in page_text
        or re.search(r"\{\s*#" + re.escape(anchor) + r"\s*\}", page_text) is not None
    )


def _unresolved(c: Claim, site: _Site) -> str | None:
    if c.status == "todo":
        return "todo"
    text = site.page(c.page) if c.page != "differences" else (site.differences or "")
    key = c.finding_key
    if c.status == "na":
        if key and site.findings.get(key, {}).get("status") != "n/a":
            return f"finding {key} is not n/a"
        return None if c.id in text and c.missing_file in text else f"no n/a line naming {c.missing_file}"
    if key is not None:
        if key not in site.findings or site.findings[key].get("status") == "n/a":
            return f"finding {key} missing or n/a"
        if c.status == "corrected":
            if site.differences is not None and not _has_anchor(site.differences, c.anchor):
                return f"no #{c.anchor} on the differences page"
            return None if _finding_shown(site.all_text, key) else f"finding {key} on no page"
        return None if _finding_shown(text, key) else f"finding {key} not on page {c.page}"
    if c.ref_kind == "t":
        shown, why = site.cell(c.ref)
        return why if shown is None else (None if shown in text else f"{shown!r} not on page {c.page}")
    return None if c.ref[2:] in text else f"{c.ref[2:]!r} not on page {c.page}"


def check(claims: list[Claim], results_dir: Path, docs_dir: Path, campaign: str) -> list[tuple[Claim, str]]:
    """The claims that do not resolve on a built site, with why (``todo`` claims always: not computed)."""
    site = _Site(Path(results_dir), Path(docs_dir), campaign)
    return [(c, why) for c in claims if (why := _unresolved(c, site)) is not None]
