"""Where the report's own files are: the checkout's site/ folder, or the copy a wheel ships. A module of its
own, importing nothing heavy, so the MkDocs step (build.py) finds them without loading the renderer."""

from __future__ import annotations

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
# site/ of the checkout; after a plain (non-editable) `pip install`, the copy shipped as package data
# (pyproject: analysis.report.sitefiles)
SITE_DIR = next(
    (
        d
        for d in (REPO_ROOT / "site", Path(__file__).resolve().parent / "sitefiles")
        if (d / "templates").is_dir()
    ),
    REPO_ROOT / "site",
)
