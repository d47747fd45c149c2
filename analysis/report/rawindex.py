"""The raw-data index: every file of every run with size, sha256 and provenance, and the findings using it.

Sizes and hashes come from each run's manifest.json (written at the seal); an unsealed run is listed from its
journal and marked as such — it is never hidden. Provenance is what the run recorded about itself: for an
imported run the original relative path of each file and the source folder's name, for a collected run the
tool version and clocks.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from analysis.findings import FindingSet
from analysis.report.results import source_file
from collector.raw.store import RawStore, read_journal


@dataclass
class RawFile:
    campaign: str
    run: str
    rel: str
    size: int | None
    sha256: str | None
    source: str | None  # the file's original path (imports) or its writer (collected runs)
    written_wall: str | None
    used_by: list[str] = field(default_factory=list)  # finding keys
    path: Path | None = None  # the file on disk (for the few files a page reads: the model config)

    @property
    def run_rel(self) -> str:
        return f"{self.run}/{self.rel}"


@dataclass
class RawRun:
    campaign: str
    name: str
    sealed: bool
    status: str  # complete | failed | unsealed
    kind: str
    meta: dict[str, Any]
    provenance: dict[str, Any]
    created_wall: str | None
    tool_version: str | None
    files: list[RawFile]

    @property
    def origin(self) -> str:
        """Where the run came from, without machine-local absolute paths."""
        prov = self.provenance or {}
        folder = prov.get("imported_from") or (self.meta.get("source") or {}).get("folder")
        rel = prov.get("relative_dir") or (self.meta.get("source") or {}).get("relative_dir")
        if folder:
            return f"{Path(str(folder)).name}/{rel}" if rel and rel != "." else Path(str(folder)).name
        return ""


def _wall(stamp: Any) -> str | None:
    if isinstance(stamp, dict):
        return stamp.get("wall")
    return str(stamp) if stamp else None


def index_runs(raw_roots: list[Path], campaign: str | None = None) -> list[RawRun]:
    runs = []
    for root in raw_roots:
        for info in RawStore(Path(root)).iter_runs(campaign):
            manifest = info.manifest() if info.sealed else None
            if manifest is not None:
                entries = manifest.get("files", {})
                status = str(manifest.get("status", "complete"))
                provenance = manifest.get("provenance") or {}
                tool = (manifest.get("tool") or {}).get("version")
            else:
                entries = read_journal(info.path)
                status = "unsealed"
                provenance = {}
                tool = None
            files = [
                RawFile(
                    campaign=info.campaign,
                    run=info.name,
                    rel=rel,
                    size=e.get("size"),
                    sha256=e.get("sha256"),
                    source=e.get("source"),
                    written_wall=_wall(e.get("written_at")),
                    path=info.path / rel,
                )
                for rel, e in sorted(entries.items())
            ]
            runs.append(
                RawRun(
                    campaign=info.campaign,
                    name=info.name,
                    sealed=info.sealed,
                    status=status,
                    kind=info.kind,
                    meta=dict(info.meta),
                    provenance=dict(provenance),
                    created_wall=_wall(info.created),
                    tool_version=tool,
                    files=files,
                )
            )
    return runs


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
        key = finding.key
        for src in finding.sources:
            path = source_file(src)
            if not path:
                continue
            hit = lookup.find(path)
            if hit is None:
                unmatched.add(path)
            elif key not in hit.used_by:
                hit.used_by.append(key)
    return sorted(unmatched)
