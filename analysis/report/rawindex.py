"""The raw-data index as the analysis wrote it (tables ``raw_runs`` and ``raw_files``, from each run's
manifest: analysis/reconcile/provenance.py), and which findings cite which file. Nothing here reads raw/."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from analysis.core.findings import FindingSet
from analysis.report.results import CampaignResults, source_file


@dataclass
class RawFile:
    campaign: str
    run: str
    rel: str
    size: int | None
    sha256: str | None
    source: str | None  # the file's original path (imports) or its writer (collected runs)
    used_by: list[str] = field(default_factory=list)  # finding keys

    @property
    def run_rel(self) -> str:
        return f"{self.run}/{self.rel}"


@dataclass
class RawRun:
    campaign: str
    name: str
    kind: str
    status: str  # complete | failed | unsealed
    meta: dict[str, Any]  # test_kind, engine, round, imported, gpu, description (as the run recorded them)
    origin: str  # an imported run's source folder/run folder; "" for a collected run
    created_wall: str | None
    tool_version: str | None
    files: list[RawFile] = field(default_factory=list)


def runs_of(c: CampaignResults) -> list[RawRun]:
    """The campaign's runs and files from its results (empty when the analysis wrote no provenance)."""
    runs: dict[str, RawRun] = {}
    if "raw_runs" in c.tables:
        for r in c.tables["raw_runs"].rows:
            meta = {k: r.get(k) for k in ("test_kind", "engine", "round", "imported", "gpu", "description")}
            runs[str(r["run"])] = RawRun(
                campaign=c.name,
                name=str(r["run"]),
                kind=str(r.get("kind") or ""),
                status=str(r.get("status") or ""),
                meta={k: v for k, v in meta.items() if v is not None},
                origin=str(r.get("origin") or ""),
                created_wall=r.get("created_wall"),
                tool_version=None if r.get("tool_version") is None else str(r["tool_version"]),
            )
    if "raw_files" in c.tables:
        for f in c.tables["raw_files"].rows:
            run = runs.get(str(f["run"]))
            if run is None:
                continue
            run.files.append(
                RawFile(
                    campaign=c.name,
                    run=run.name,
                    rel=str(f["rel"]),
                    size=f.get("size"),
                    sha256=f.get("sha256"),
                    source=f.get("source"),
                )
            )
    return list(runs.values())


class FileLookup:
    """Resolve a finding's cited path to a raw file.

    The analysis cites imported files by their original path (``Round2/04-perf-test/stress.json``, kept in the
    manifest as each file's ``source``) and collected files by ``<run>/<file>``; either may sit under a longer
    prefix (campaign, store root). The longest matching suffix wins.
    """

    def __init__(self, runs: list[RawRun]):
        self.by_suffix: dict[str, RawFile] = {}
        for run in runs:
            for f in run.files:
                self.by_suffix[f"{f.run}/{f.rel}"] = f
                if f.source and not f.source.startswith("/"):
                    self.by_suffix.setdefault(f.source.replace("\\", "/"), f)

    def find(self, cited: str) -> RawFile | None:
        parts = cited.replace("\\", "/").split("/")
        # A bare file name ("stress.json") would be ambiguous across runs: keep at least folder + file.
        for i in range(max(1, len(parts) - 1)):
            hit = self.by_suffix.get("/".join(parts[i:]))
            if hit is not None:
                return hit
        return None


def link_findings(runs: list[RawRun], findings: FindingSet) -> list[str]:
    """Fill ``used_by`` of every raw file a finding cites; return the cited files that match no raw file."""
    lookup = FileLookup(runs)
    unmatched: set[str] = set()
    for finding in findings:
        for src in finding.sources:
            path = source_file(src)
            if not path:
                continue
            hit = lookup.find(path)
            if hit is None:
                unmatched.add(path)
            elif finding.key not in hit.used_by:
                hit.used_by.append(finding.key)
    return sorted(unmatched)
