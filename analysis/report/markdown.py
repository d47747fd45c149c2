"""Markdown pieces the pages are built from: tables (always a block of their own), stable HTML anchors, links
between pages. ASCII only; the words are the templates'."""

from __future__ import annotations

import os.path
import re
from collections.abc import Iterable
from dataclasses import dataclass

from analysis.report.results import RenderError

_H1 = re.compile(r"^# (.+?)\s*(\{[^}]*\})?\s*$", re.M)
_ANCHOR = re.compile(r"[^a-z0-9]+")


@dataclass
class Page:
    path: str  # relative to docs_dir, posix
    text: str

    @property
    def title(self) -> str:
        """The page's title: its first "# " line (MkDocs' nav shows it)."""
        m = _H1.search(self.text)
        if not m:
            raise RenderError(f"{self.path}: page has no '# title' line")
        return m.group(1)


def md_escape(text: object) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def markdown_table(headers: list[str], rows: Iterable[list[str]], align: list[str] | None = None) -> str:
    """A pipe table with a blank line before and after: Markdown reads a table only as a block of its own."""
    rows = list(rows)
    align = align or ["---"] + ["--:"] * (len(headers) - 1)
    lines = ["| " + " | ".join(md_escape(h) for h in headers) + " |", "|" + "|".join(align) + "|"]
    lines += ["| " + " | ".join(md_escape(c) for c in row) + " |" for row in rows]
    return "\n" + "\n".join(lines) + "\n\n"


def anchor_of(key: str) -> str:
    """The HTML id of a finding's row: its key as an id (stable, ASCII), never read back."""
    return "f-" + _ANCHOR.sub("-", key.lower()).strip("-")


def file_anchor(run: str, rel: str) -> str:
    """The HTML id of a raw file's row in the data index (stable, ASCII, no dots or slashes)."""
    return "raw-" + _ANCHOR.sub("-", f"{run}/{rel}".lower()).strip("-")


def relative_link(target: str, from_page: str) -> str:
    """A link from one page to another (both relative to docs_dir)."""
    here = os.path.dirname(from_page) or "."
    return os.path.relpath(target, here).replace(os.sep, "/")
