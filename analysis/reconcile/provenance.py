"""Provenance: every run of a campaign in the raw store and every file in it — size, sha256, where it came
from — as two tables of the analysis results (``raw_runs``, ``raw_files``), so the report's raw-data index and
its citations are built from results alone and never read raw/.

Sizes and hashes come from each run's manifest.json (written at the seal); an unsealed run is listed from its
journal and marked as such — it is never hidden. Provenance is what the run recorded about itself: for an
imported run the original relative path of each file and the source folder's name, for a collected run the
tool version and clocks. Runs the analysis does not load (an imported campaign's documents) are listed too.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pandas as pd

from analysis.reconcile import Section, SectionInput
from collector.raw.store import RawStore, read_journal, text_name

RUN_COLUMNS = (
    "run",
    "kind",
    "status",
    "sealed",
    "test_kind",
    "engine",
    "round",
    "imported",
    "origin",
    "tool_version",
    "created_wall",
    "gpu",
    "description",
)
# No per-file write time: for an import it is the moment of the import, not of the measurement, so it would
# make two imports of the same source analyse differently; a collected run's time is its run's created_wall.
FILE_COLUMNS = ("run", "rel", "size", "sha256", "source")


def _wall(stamp: Any) -> str | None:
    if isinstance(stamp, dict):
        return stamp.get("wall")
    return str(stamp) if stamp else None


def origin(meta: dict[str, Any], provenance: dict[str, Any]) -> str:
    """Where an imported run came from — its source folder's name and the run's folder in it — without
    machine-local absolute paths; "" for a collected run."""
    source = meta.get("source") or {}
    folder = provenance.get("imported_from") or source.get("folder")
    rel = provenance.get("relative_dir") or source.get("relative_dir")
    if not folder:
        return ""
    name = Path(str(folder)).name
    return f"{name}/{rel}" if rel and rel != "." else name


def run(s: SectionInput) -> Section:
    return section(s.campaign.name, s.raw_roots)


def section(campaign_name: str, raw_roots: Iterable[Path]) -> Section:
    """Every run folder of ``campaign_name`` under ``raw_roots``: its state, seal and files (the raw-data
    page's tables)."""
    runs: list[dict[str, Any]] = []
    files: list[dict[str, Any]] = []
    for root in raw_roots:
        for info in RawStore(Path(root)).iter_runs(campaign_name):
            manifest = info.manifest() if info.sealed else None
            if manifest is not None:
                entries = manifest.get("files", {})
                status = str(manifest.get("status", "complete"))
                provenance = manifest.get("provenance") or {}
                tool = (manifest.get("tool") or {}).get("version")
            else:
                entries, status, provenance, tool = read_journal(info.path), "unsealed", {}, None
            meta = dict(info.meta or {})
            runs.append(
                {
                    "run": info.name,
                    "kind": info.kind,
                    "status": status,
                    "sealed": info.sealed,
                    "test_kind": meta.get("test_kind"),
                    "engine": meta.get("engine"),
                    "round": meta.get("round"),
                    "imported": bool(meta.get("imported")),
                    "origin": origin(meta, provenance),
                    "tool_version": tool,
                    # when our collector wrote the run; an import's creation time is the import's, not the
                    # data's
                    "created_wall": None if meta.get("imported") else _wall(info.created),
                    "gpu": meta.get("gpu"),
                    "description": meta.get("description"),
                }
            )
            for rel, e in sorted(entries.items()):
                files.append(
                    {
                        "run": info.name,
                        "rel": text_name(rel),
                        "size": e.get("size"),
                        "sha256": e.get("sha256"),
                        "source": text_name(e["source"]) if isinstance(e.get("source"), str) else None,
                    }
                )
    tables = {
        "raw_runs": pd.DataFrame(runs, columns=list(RUN_COLUMNS)),
        "raw_files": pd.DataFrame(files, columns=list(FILE_COLUMNS)),
    }
    return Section(name="provenance", tables=tables)
