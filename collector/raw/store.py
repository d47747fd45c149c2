"""The raw store: append-only run folders that never lose or silently change a byte.

Layout ``<root>/<campaign>/<run>/``:

- ``run.json``      written first, when the run is created: who, when, what (kind, meta, tool version).
- data files        create-only, written atomically (temp file in the same folder, fsync, rename).
- streams           create-only, opened for append; every write is flushed so a crash keeps what arrived.
- ``journal.jsonl`` one line per finished file (size, sha256, source, time): an interrupted run can
                    still prove its already-written files.
- ``manifest.json`` written at the seal: every file with size and sha256, the run's status.
- ``SEALED``        written last; holds the sha256 of manifest.json. Absent = interrupted run.

Nothing here deletes or rewrites a file under the root. A leftover temp file of an interrupted atomic write
is reported by ``verify`` and kept.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, BinaryIO

from collector import __version__
from collector.raw.errors import StoreError

RUN_FILE = "run.json"
JOURNAL = "journal.jsonl"
MANIFEST = "manifest.json"
SEAL = "SEALED"
BOOKKEEPING = frozenset({RUN_FILE, JOURNAL, MANIFEST, SEAL})
TMP_PREFIX = ".tmp-"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
_CHUNK = 1 << 20


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(_CHUNK):
            h.update(block)
    return h.hexdigest()


def _now() -> dict[str, Any]:
    return {"unix_ns": time.time_ns(), "wall": datetime.now(UTC).isoformat(timespec="milliseconds")}


def _check_name(what: str, name: str) -> None:
    if not _NAME.match(name):
        raise StoreError(f"invalid {what} name {name!r}: use letters, digits, '.', '_' and '-'")


def _check_rel(run_dir: Path, rel: str) -> Path:
    parts = Path(rel).parts
    if not parts or Path(rel).is_absolute() or ".." in parts:
        raise StoreError(f"{run_dir / rel}: file path must be relative and stay inside the run")
    if parts[0] in BOOKKEEPING or any(p.startswith(TMP_PREFIX) for p in parts):
        raise StoreError(f"{run_dir / rel}: name is reserved by the store")
    return run_dir / rel


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _create_exclusive(path: Path, data: bytes) -> None:
    """Write ``data`` to a new file ``path``: temp + fsync + link, so the name appears only when complete.

    ``os.link`` fails if the target exists, which makes the final step create-only even against a racing
    writer (``os.rename`` would silently replace).
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.exists():
        raise StoreError(f"{path}: already exists; raw files are create-only")
    tmp = path.parent / f"{TMP_PREFIX}{path.name}.{os.getpid()}"
    with open(tmp, "xb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    try:
        os.link(tmp, path)
    except FileExistsError as err:
        raise StoreError(f"{path}: already exists; raw files are create-only") from err
    finally:
        os.unlink(tmp)  # the temp name only; the data lives on under ``path``
    _fsync_dir(path.parent)


def json_line(obj: Any) -> str:
    """One line of a JSONL stream (no newline): compact, sorted keys, UTF-8 text kept as is."""
    return json.dumps(obj, ensure_ascii=False, sort_keys=True, separators=(",", ":"))


class Stream:
    """An append-only file inside a run; each write is flushed to the OS at once."""

    def __init__(self, run: Run, rel: str, fh: BinaryIO):
        self._run = run
        self.rel = rel
        self._fh = fh

    def write(self, data: bytes) -> None:
        self._fh.write(data)
        self._fh.flush()

    def write_line(self, line: str) -> None:
        self.write(line.rstrip("\n").encode() + b"\n")

    def write_json(self, obj: Any) -> None:
        self.write_line(json_line(obj))

    def fileno(self) -> int:
        return self._fh.fileno()

    @property
    def closed(self) -> bool:
        return self._fh.closed

    def close(self) -> None:
        if not self._fh.closed:
            self._fh.flush()
            os.fsync(self._fh.fileno())
            self._fh.close()
            self._run._journal_file(self.rel, source="stream")

    def __enter__(self) -> Stream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Run:
    """A run being written. Obtain it from ``RawStore.create_run``."""

    def __init__(self, path: Path, campaign: str, name: str):
        self.path = path
        self.campaign = campaign
        self.name = name
        self._streams: list[Stream] = []
        self._journal = open(path / JOURNAL, "ab")

    # -- files -------------------------------------------------------------------------------------
    def _journal_file(self, rel: str, source: str | None) -> None:
        target = self.path / rel
        entry = {"path": rel, "size": target.stat().st_size, "sha256": sha256_file(target), "source": source}
        entry["written_at"] = _now()
        self._journal.write(json.dumps(entry, sort_keys=True).encode() + b"\n")
        self._journal.flush()
        os.fsync(self._journal.fileno())

    def _ensure_open(self) -> None:
        if (self.path / SEAL).exists():
            raise StoreError(f"{self.path}: run is sealed; nothing more can be written")

    def write_bytes(self, rel: str, data: bytes, source: str | None = None) -> Path:
        self._ensure_open()
        target = _check_rel(self.path, rel)
        _create_exclusive(target, data)
        self._journal_file(rel, source)
        return target

    def write_text(self, rel: str, text: str, source: str | None = None) -> Path:
        return self.write_bytes(rel, text.encode("utf-8"), source)

    def write_json(self, rel: str, obj: Any, source: str | None = None) -> Path:
        text = json.dumps(obj, ensure_ascii=False, indent=2, sort_keys=True) + "\n"
        return self.write_text(rel, text, source)

    def copy_file(self, rel: str, src: Path, source: str | None = None) -> Path:
        """Copy ``src`` byte for byte; the copy is hashed and compared with the source before it counts."""
        data = Path(src).read_bytes()
        target = self.write_bytes(rel, data, source or str(src))
        if sha256_file(target) != hashlib.sha256(data).hexdigest():  # pragma: no cover - disk corruption
            raise StoreError(f"{target}: copy does not match {src}")
        return target

    def open_stream(self, rel: str) -> Stream:
        self._ensure_open()
        target = _check_rel(self.path, rel)
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            fh = open(target, "xb")
        except FileExistsError as err:
            raise StoreError(f"{target}: already exists; raw files are create-only") from err
        stream = Stream(self, rel, fh)
        self._streams.append(stream)
        return stream

    # -- seal ----------------------------------------------------------------------------------------
    def seal(self, status: str = "complete", note: str | None = None, extra: dict | None = None) -> Path:
        """Close streams, hash every file into manifest.json, then write SEALED (last)."""
        self._ensure_open()
        if status not in ("complete", "failed"):
            raise StoreError(f"{self.path}: seal status must be 'complete' or 'failed', not {status!r}")
        for s in self._streams:
            s.close()
        journal = read_journal(self.path)
        files: dict[str, dict[str, Any]] = {}
        for rel in _data_files(self.path):
            entry = journal.get(rel, {})
            files[rel] = {
                "size": (self.path / rel).stat().st_size,
                "sha256": sha256_file(self.path / rel),
                "source": entry.get("source"),
                "written_at": entry.get("written_at"),
            }
            if entry and entry["sha256"] != files[rel]["sha256"]:
                raise StoreError(f"{self.path / rel}: changed after it was written (journal hash differs)")
        run_meta = json.loads((self.path / RUN_FILE).read_text())
        manifest = {
            "campaign": self.campaign,
            "run": self.name,
            "status": status,
            "note": note,
            "tool": {"name": "inference-anatomy", "version": __version__},
            "created": run_meta.get("created"),
            "sealed": _now(),
            "files": files,
            **(extra or {}),
        }
        _create_exclusive(
            self.path / MANIFEST, (json.dumps(manifest, indent=2, sort_keys=True) + "\n").encode()
        )
        self._journal.close()
        _create_exclusive(self.path / SEAL, (sha256_file(self.path / MANIFEST) + "\n").encode())
        return self.path / SEAL

    def close_unsealed(self) -> None:
        """Close streams and the journal without sealing (the run stays visibly interrupted)."""
        for s in self._streams:
            s.close()
        self._journal.close()


@dataclass(frozen=True)
class RunInfo:
    campaign: str
    name: str
    path: Path
    sealed: bool
    kind: str
    meta: dict[str, Any] = field(default_factory=dict)
    created: dict[str, Any] = field(default_factory=dict)

    def data_files(self) -> list[str]:
        return _data_files(self.path)

    def manifest(self) -> dict[str, Any] | None:
        p = self.path / MANIFEST
        return json.loads(p.read_text()) if p.exists() else None


def open_run(path: Path) -> RunInfo:
    path = Path(path)
    try:
        info = json.loads((path / RUN_FILE).read_text())
    except FileNotFoundError as err:
        raise StoreError(f"{path}: not a run (no {RUN_FILE})") from err
    except json.JSONDecodeError as err:
        raise StoreError(f"{path / RUN_FILE}: not valid JSON ({err.msg} at line {err.lineno})") from err
    return RunInfo(
        campaign=info["campaign"],
        name=info["run"],
        path=path,
        sealed=(path / SEAL).exists(),
        kind=info.get("kind", ""),
        meta=info.get("meta", {}),
        created=info.get("created", {}),
    )


def _data_files(run_dir: Path) -> list[str]:
    out = []
    for p in sorted(run_dir.rglob("*")):
        if not p.is_file():
            continue
        rel = p.relative_to(run_dir).as_posix()
        if rel in BOOKKEEPING or p.name.startswith(TMP_PREFIX):
            continue
        out.append(rel)
    return out


def read_journal(run_dir: Path) -> dict[str, dict[str, Any]]:
    """Last journal entry per path; a torn last line (crash mid-append) is ignored, earlier ones must parse."""
    out: dict[str, dict[str, Any]] = {}
    p = run_dir / JOURNAL
    if not p.exists():
        return out
    lines = p.read_bytes().split(b"\n")
    for i, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            entry = json.loads(line)
        except json.JSONDecodeError as err:
            if i == len(lines):  # torn tail: the write that was interrupted
                break
            raise StoreError(f"{p}:{i}: journal line is not JSON") from err
        out[entry["path"]] = entry
    return out


class RawStore:
    def __init__(self, root: Path):
        self.root = Path(root)

    def create_run(self, campaign: str, run: str, kind: str, meta: dict[str, Any] | None = None) -> Run:
        _check_name("campaign", campaign)
        _check_name("run", run)
        path = self.root / campaign / run
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            path.mkdir()
        except FileExistsError as err:
            raise StoreError(f"{path}: run already exists; a new run needs a new name") from err
        info = {
            "campaign": campaign,
            "run": run,
            "kind": kind,
            "meta": meta or {},
            "tool": {"name": "inference-anatomy", "version": __version__},
            "created": _now(),
        }
        _create_exclusive(path / RUN_FILE, (json.dumps(info, indent=2, sort_keys=True) + "\n").encode())
        return Run(path, campaign, run)

    def iter_runs(self, campaign: str | None = None) -> Iterator[RunInfo]:
        if not self.root.is_dir():
            return
        for run_json in sorted(self.root.glob(f"{campaign or '*'}/*/{RUN_FILE}")):
            yield open_run(run_json.parent)

    def campaigns(self) -> list[str]:
        return sorted({r.campaign for r in self.iter_runs()})

    def unique_run_name(self, campaign: str, stem: str) -> str:
        """``stem``, or ``stem-2``, ``stem-3`` ... whichever does not exist yet (runs are never reused)."""
        n, name = 1, stem
        while (self.root / campaign / name).exists():
            n += 1
            name = f"{stem}-{n}"
        return name


# -- verify -------------------------------------------------------------------------------------------


@dataclass
class Finding:
    level: str  # "problem" fails verify; "note" informs
    path: str
    what: str


@dataclass
class VerifyReport:
    runs: int = 0
    sealed: int = 0
    files: int = 0
    findings: list[Finding] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not any(f.level == "problem" for f in self.findings)

    def problem(self, path: Path | str, what: str) -> None:
        self.findings.append(Finding("problem", str(path), what))

    def note(self, path: Path | str, what: str) -> None:
        self.findings.append(Finding("note", str(path), what))

    def lines(self) -> list[str]:
        out = [f"{f.level.upper()}: {f.path}: {f.what}" for f in self.findings]
        problems = sum(f.level == "problem" for f in self.findings)
        unsealed = self.runs - self.sealed
        out.append(
            f"{'OK' if self.ok else 'FAILED'}: {self.runs} runs ({self.sealed} sealed, {unsealed} unsealed), "
            f"{self.files} files checked, {problems} problems"
        )
        return out


def verify(raw_root: Path) -> VerifyReport:
    """Re-hash every file of every run; report changed, missing and unexpected files."""
    root = Path(raw_root)
    if not root.is_dir():
        raise StoreError(f"{root}: no raw store here (not a directory)")
    report = VerifyReport()
    for campaign_dir in sorted(p for p in root.iterdir() if p.is_dir()):
        for run_dir in sorted(p for p in campaign_dir.iterdir() if p.is_dir()):
            _verify_run(run_dir, report)
    return report


def _verify_run(run_dir: Path, report: VerifyReport) -> None:
    if not (run_dir / RUN_FILE).exists():
        report.problem(run_dir, f"unexpected folder: not a run (no {RUN_FILE})")
        return
    report.runs += 1
    for tmp in sorted(run_dir.rglob(f"{TMP_PREFIX}*")):
        report.note(tmp, "leftover of an interrupted write (kept, not part of the run)")
    if (run_dir / SEAL).exists():
        report.sealed += 1
        _verify_sealed(run_dir, report)
    else:
        _verify_unsealed(run_dir, report)


def _verify_sealed(run_dir: Path, report: VerifyReport) -> None:
    manifest_path = run_dir / MANIFEST
    if not manifest_path.exists():
        report.problem(manifest_path, "missing (the run is sealed)")
        return
    want = (run_dir / SEAL).read_text().strip()
    if sha256_file(manifest_path) != want:
        report.problem(manifest_path, "changed after the seal (sha256 differs from SEALED)")
        return
    try:
        files = json.loads(manifest_path.read_text())["files"]
    except (json.JSONDecodeError, KeyError):
        report.problem(manifest_path, "not a manifest (no 'files')")
        return
    on_disk = set(_data_files(run_dir))
    for rel, entry in sorted(files.items()):
        report.files += 1
        p = run_dir / rel
        if not p.exists():
            report.problem(p, "missing")
        elif p.stat().st_size != entry["size"]:
            report.problem(p, f"changed: size {p.stat().st_size} bytes, manifest says {entry['size']}")
        elif sha256_file(p) != entry["sha256"]:
            report.problem(p, "changed: sha256 differs from the manifest")
    for rel in sorted(on_disk - set(files)):
        report.problem(run_dir / rel, "unexpected: not in the manifest")


def _verify_unsealed(run_dir: Path, report: VerifyReport) -> None:
    report.note(run_dir, "unsealed: the run was interrupted or is still being written (kept as is)")
    journal = read_journal(run_dir)
    for rel, entry in sorted(journal.items()):
        report.files += 1
        p = run_dir / rel
        if not p.exists():
            report.problem(p, "missing (journaled as written)")
        elif sha256_file(p) != entry["sha256"]:
            report.problem(p, "changed: sha256 differs from the journal")
    for rel in sorted(set(_data_files(run_dir)) - set(journal)):
        report.note(run_dir / rel, "open stream or unfinished file of an unsealed run (not hashed yet)")
