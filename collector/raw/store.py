"""The raw store: append-only run folders that never lose or silently change a byte.

Layout ``<root>/<campaign>/<run>/``:

- ``run.json``      written first, when the run is created: who, when, what (kind, meta, tool version). The
                    run folder is built under a temp name (``<campaign>/.tmp-<run>.<pid>``) with run.json
                    inside and renamed into place, so a run folder never exists without its run.json; a
                    leftover temp folder is reported by ``verify`` as abandoned.
- data files        create-only, written atomically (temp file in the same folder, fsync, rename).
- streams           create-only, opened for append; every write is flushed so a crash keeps what arrived.
- ``journal.jsonl`` one line per finished file (size, sha256, source, time): an interrupted run can
                    still prove its already-written files.
- ``manifest.json`` written at the seal: every file with size and sha256, the run's status, and (runs sealed
                    since the trust chain, issue #12) ``bookkeeping``: size and sha256 of run.json and
                    journal.jsonl, so neither can change unseen.
- ``SEALED``        written last; holds the sha256 of manifest.json. Absent = interrupted run.

A run's state (``RUN_STATES``): ``sealed-complete``, ``sealed-failed`` (the manifest's status) or
``unsealed``. ``recover_seal`` finishes a seal that was interrupted after measuring ended (the run's events
end in ``run_end``, or the manifest was already written), never otherwise.

Nothing here deletes or rewrites a file under the root. A leftover temp file of an interrupted atomic write
is reported by ``verify`` and kept.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, BinaryIO

from collector import __version__
from collector.raw.errors import StoreError
from collector.raw.jsonl import iter_json_lines
from collector.raw.secrets import scrub_bytes, scrub_obj

RUN_FILE = "run.json"
JOURNAL = "journal.jsonl"
MANIFEST = "manifest.json"
SEAL = "SEALED"
BOOKKEEPING = frozenset({RUN_FILE, JOURNAL, MANIFEST, SEAL})
HASHED_BOOKKEEPING = (RUN_FILE, JOURNAL)  # in the manifest's ``bookkeeping`` (runs sealed since issue #12)
EVENTS_FILE = "events.jsonl"  # the collector's event stream: its ``run_end`` line says measuring ended
TMP_PREFIX = ".tmp-"
SEAL_STATUSES = ("complete", "failed")
RUN_STATES = ("sealed-complete", "sealed-failed", "unsealed")
# run.json: the fields every run has, and their JSON types
_RUN_FIELDS: dict[str, type] = {"campaign": str, "run": str, "kind": str, "meta": dict, "created": dict}
_TYPE_NAMES = {str: "string", dict: "object", int: "integer"}
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
_TMP_FILE = re.compile(
    rf"^{re.escape(TMP_PREFIX)}.+\.\d+$"
)  # _create_exclusive's temp name: .tmp-<name>.<pid>
_CHUNK = 1 << 20


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(_CHUNK):
            h.update(block)
    return h.hexdigest()


def text_name(name: str) -> str:
    """A file name as UTF-8 text (to cite, print or store in a table): bytes that are not UTF-8 (held by
    Python as surrogates) shown as ``\\xNN``; a UTF-8 name unchanged."""
    try:
        return name.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    except UnicodeEncodeError:  # a surrogate that is no escaped byte (a JSON "\\ud800")
        return name.encode("utf-8", "backslashreplace").decode("utf-8")


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


def _create_exclusive(path: Path, data: bytes | Iterable[bytes]) -> None:
    """Write ``data`` (bytes, or blocks of them) to a new file ``path``: temp + fsync + link, so the name
    appears only when complete (an error while writing leaves only the temp file, which verify notes).

    ``os.link`` fails if the target exists, which makes the final step create-only even against a racing
    writer (``os.rename`` would silently replace).
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.exists():
        raise StoreError(f"{path}: already exists; raw files are create-only")
    tmp = path.parent / f"{TMP_PREFIX}{path.name}.{os.getpid()}"
    try:
        with open(tmp, "xb") as f:
            for block in [data] if isinstance(data, bytes) else data:
                f.write(block)
            f.flush()
            os.fsync(f.fileno())
    except BaseException:
        os.unlink(tmp)  # our own temp file of a write that did not finish (its source failed)
        raise
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
        self._fh.write(scrub_bytes(data, self._run.secrets) if self._run.secrets else data)
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

    def __init__(self, path: Path, campaign: str, name: str, secrets: tuple[str, ...] = ()):
        self.path = path
        self.campaign = campaign
        self.name = name
        # the run's secrets (collector.raw.secrets): scrubbed from every byte written through this run
        self.secrets = tuple(secrets)
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
        _create_exclusive(target, scrub_bytes(data, self.secrets) if self.secrets else data)
        self._journal_file(rel, source)
        return target

    def write_text(self, rel: str, text: str, source: str | None = None) -> Path:
        return self.write_bytes(rel, text.encode("utf-8"), source)

    def write_json(self, rel: str, obj: Any, source: str | None = None) -> Path:
        text = json.dumps(scrub_obj(obj, self.secrets), ensure_ascii=False, indent=2, sort_keys=True) + "\n"
        return self.write_text(rel, text, source)

    def copy_file(self, rel: str, src: Path, source: str | None = None) -> Path:
        """Copy ``src`` byte for byte (the run's secrets scrubbed); the copy is hashed and compared with what
        was meant to be written before it counts."""
        data = Path(src).read_bytes()
        target = self.write_bytes(rel, data, source or str(src))
        want = scrub_bytes(data, self.secrets) if self.secrets else data
        if sha256_file(target) != hashlib.sha256(want).hexdigest():  # pragma: no cover - disk corruption
            raise StoreError(f"{target}: copy does not match {src}")
        return target

    def write_blocks(self, rel: str, blocks: Iterable[bytes], source: str | None = None) -> tuple[str, int]:
        """A data file written from ``blocks`` (a large file in bounded memory), create-only and atomic as
        ``write_bytes``, the run's secrets scrubbed per block; (sha256, size) of what was written."""
        self._ensure_open()
        target = _check_rel(self.path, rel)
        h, size = hashlib.sha256(), 0

        def scrubbed() -> Iterator[bytes]:
            nonlocal size
            for block in blocks:
                out = scrub_bytes(block, self.secrets) if self.secrets else block
                h.update(out)
                size += len(out)
                yield out

        _create_exclusive(target, scrubbed())
        self._journal_file(rel, source)
        return h.hexdigest(), size

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
    def seal(
        self, status: str = "complete", note: str | None = None, extra: dict[str, Any] | None = None
    ) -> Path:
        """Close streams and the journal, hash every file into manifest.json, then write SEALED (last)."""
        self._ensure_open()
        if status not in SEAL_STATUSES:
            raise StoreError(f"{self.path}: seal status must be 'complete' or 'failed', not {status!r}")
        for s in self._streams:
            s.close()
        self._journal.close()  # final from here on: the manifest hashes it
        note, extra = scrub_obj(note, self.secrets), scrub_obj(extra, self.secrets)
        return _write_seal(self.path, self.campaign, self.name, status, note, extra)

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

    @property
    def state(self) -> str:
        """One of ``RUN_STATES``: what a finding from this run says about where its numbers come from."""
        return run_state(self.path)


def run_state(run_dir: Path) -> str:
    """``unsealed`` without SEALED, else ``sealed-<status>`` from manifest.json (one-line StoreError when the
    manifest cannot say)."""
    run_dir = Path(run_dir)
    if not (run_dir / SEAL).exists():
        return "unsealed"
    p = run_dir / MANIFEST
    try:
        status = json.loads(p.read_bytes()).get("status")
    except (OSError, ValueError, AttributeError) as err:
        raise StoreError(f"{p}: cannot tell the run's status ({type(err).__name__})") from err
    if status not in SEAL_STATUSES:
        raise StoreError(f"{p}: status {status!r} is not one of {SEAL_STATUSES}")
    return f"sealed-{status}"


def _run_json_problem(run_dir: Path) -> dict[str, Any] | str:
    """run.json parsed and checked for shape: its fields, or a string saying what is wrong with it."""
    p = run_dir / RUN_FILE
    try:
        data = p.read_bytes()
    except OSError as err:
        return f"cannot read ({err.strerror or err})"
    try:
        info = json.loads(data.decode("utf-8"))
    except UnicodeDecodeError:
        return "not UTF-8 text"
    except json.JSONDecodeError as err:
        return f"not valid JSON ({err.msg} at line {err.lineno})"
    if not isinstance(info, dict):
        return "not a JSON object"
    for name, typ in _RUN_FIELDS.items():
        if name not in info:
            return f"field {name!r} missing"
        if not isinstance(info[name], typ):
            return f"field {name!r} is not a {_TYPE_NAMES[typ]}"
    unix_ns = info["created"].get("unix_ns")
    if not isinstance(unix_ns, int) or isinstance(unix_ns, bool):
        return "field 'created.unix_ns' is not an integer"
    if "tool" in info and not isinstance(info["tool"], dict):
        return "field 'tool' is not an object"
    return info


def read_run_json(run_dir: Path) -> dict[str, Any]:
    """The run's run.json, checked for shape; one-line StoreError naming the file otherwise."""
    run_dir = Path(run_dir)
    if not (run_dir / RUN_FILE).exists():
        raise StoreError(f"{run_dir}: not a run (no {RUN_FILE})")
    info = _run_json_problem(run_dir)
    if isinstance(info, str):
        raise StoreError(f"{run_dir / RUN_FILE}: {info}")
    return info


def open_run(path: Path) -> RunInfo:
    path = Path(path)
    info = read_run_json(path)
    return RunInfo(
        campaign=info["campaign"],
        name=info["run"],
        path=path,
        sealed=(path / SEAL).exists(),
        kind=info["kind"],
        meta=info["meta"],
        created=info["created"],
    )


def _entries(run_dir: Path) -> Iterator[Path]:
    """Every entry under a run folder but folders, links never followed (a link to a folder is an entry, its
    contents are not)."""
    for dirpath, dirnames, filenames in os.walk(run_dir):
        for name in filenames + [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]:
            yield Path(dirpath) / name


def entry_kind(p: Path, folder: bool = False) -> str | None:
    """None for a regular file (a real folder with ``folder``; or nothing there); else what the entry is
    instead: a link (and its target), a FIFO, a socket, a device. Raw files are regular files: anything else
    could change what a reader gets (a link swapped to another file) or block a reader (a FIFO)."""
    try:
        mode = p.lstat().st_mode
    except OSError:
        return None
    if stat.S_ISLNK(mode):
        return f"a symbolic link (to {os.readlink(p)})"
    if stat.S_ISDIR(mode) if folder else stat.S_ISREG(mode):
        return None
    kinds = (
        (stat.S_ISDIR, "a folder"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
    )
    return next((what for test, what in kinds if test(mode)), "not a regular file")


def _data_files(run_dir: Path) -> list[str]:
    """The run's data files: regular files but the bookkeeping and temp files of interrupted writes (links
    and special files are not data: ``verify`` reports them)."""
    out = []
    for p in sorted(_entries(run_dir)):
        rel = p.relative_to(run_dir).as_posix()
        if entry_kind(p) is None and rel not in BOOKKEEPING and not p.name.startswith(TMP_PREFIX):
            out.append(rel)
    return out


def read_journal(run_dir: Path) -> dict[str, dict[str, Any]]:
    """Last journal entry per path; a torn last line (crash mid-append) is ignored, earlier ones must
    parse."""
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
        except (json.JSONDecodeError, UnicodeDecodeError) as err:
            if i == len(lines):  # torn tail: the write that was interrupted
                break
            raise StoreError(f"{p}:{i}: journal line is not JSON") from err
        if not (isinstance(entry, dict) and isinstance(entry.get("path"), str) and "sha256" in entry):
            raise StoreError(f"{p}:{i}: journal line is not an entry (no path/sha256)")
        out[entry["path"]] = entry
    return out


class RawStore:
    def __init__(self, root: Path):
        self.root = Path(root)

    def create_run(
        self,
        campaign: str,
        run: str,
        kind: str,
        meta: dict[str, Any] | None = None,
        secrets: tuple[str, ...] = (),
    ) -> Run:
        """A new run folder with its run.json, appearing under its name all at once (see ``_stage_run``);
        ``secrets`` are scrubbed from everything written into it (``collector.raw.secrets``)."""
        path = self.root / campaign / run
        staged = self._stage_run(campaign, run, kind, scrub_obj(meta, secrets))
        self._publish_run(staged, path)
        return Run(path, campaign, run, secrets)

    def _stage_run(self, campaign: str, run: str, kind: str, meta: dict[str, Any] | None) -> Path:
        """Step 1 of creating a run: a temp folder ``<campaign>/.tmp-<run>.<pid>-<n>`` holding the finished,
        fsynced run.json. A kill here leaves only that temp folder, which ``verify`` reports as abandoned."""
        _check_name("campaign", campaign)
        _check_name("run", run)
        path = self.root / campaign / run
        new_campaign = not path.parent.exists()
        path.parent.mkdir(parents=True, exist_ok=True)
        if new_campaign:
            _fsync_dir(path.parent.parent)
        if path.exists():
            raise StoreError(f"{path}: run already exists; a new run needs a new name")
        info = {
            "campaign": campaign,
            "run": run,
            "kind": kind,
            "meta": meta or {},
            "tool": {"name": "inference-anatomy", "version": __version__},
            "created": _now(),
        }
        n = 0
        while True:  # a leftover of an earlier process with the same pid keeps its name
            staged = path.parent / f"{TMP_PREFIX}{run}.{os.getpid()}-{n}"
            try:
                staged.mkdir()
                break
            except FileExistsError:
                n += 1
        _create_exclusive(staged / RUN_FILE, (json.dumps(info, indent=2, sort_keys=True) + "\n").encode())
        return staged

    def _publish_run(self, staged: Path, path: Path) -> None:
        """Step 2: rename the staged folder to the run's name (atomic), then fsync the campaign folder."""
        try:
            # rename(2) fails when ``path`` is a non-empty folder (every run holds run.json): create-only
            os.rename(staged, path)
        except OSError as err:
            # our own staging folder, never a run: removed so a lost race leaves nothing behind
            (staged / RUN_FILE).unlink()
            staged.rmdir()
            raise StoreError(f"{path}: run already exists; a new run needs a new name") from err
        _fsync_dir(path.parent)

    def run_dirs(self, campaign: str | None = None) -> list[Path]:
        """Run folders (those holding run.json), by campaign then name, without reading them; temp
        folders of an interrupted run creation are left out."""
        if not self.root.is_dir():
            return []
        return [
            p.parent
            for p in sorted(self.root.glob(f"{campaign or '*'}/*/{RUN_FILE}"))
            if not p.parent.name.startswith(TMP_PREFIX) and not p.parent.parent.name.startswith(TMP_PREFIX)
        ]

    def iter_runs(self, campaign: str | None = None) -> Iterator[RunInfo]:
        for run_dir in self.run_dirs(campaign):
            yield open_run(run_dir)

    def campaigns(self) -> list[str]:
        """Campaign folders holding at least one run (by folder name: a bad run.json does not hide one)."""
        return sorted({p.parent.name for p in self.run_dirs()})

    def unique_run_name(self, campaign: str, stem: str) -> str:
        """``stem``, or ``stem-2``, ``stem-3`` ... whichever does not exist yet (runs are never reused)."""
        n, name = 1, stem
        while (self.root / campaign / name).exists():
            n += 1
            name = f"{stem}-{n}"
        return name


# -- seal ---------------------------------------------------------------------------------------------


def _write_seal(
    run_dir: Path, campaign: str, name: str, status: str, note: str | None, extra: dict[str, Any] | None
) -> Path:
    """Hash every data file (checked against the journal) and the bookkeeping into manifest.json, then
    write SEALED. The journal must be final (nothing appends to it any more)."""
    if status not in SEAL_STATUSES:
        raise StoreError(f"{run_dir}: seal status must be 'complete' or 'failed', not {status!r}")
    journal = read_journal(run_dir)
    for p in _entries(run_dir):
        if (kind := entry_kind(p)) is not None:
            raise StoreError(f"{p}: {kind}; a run holds regular files only: not sealed")
    files: dict[str, dict[str, Any]] = {}
    for rel in _data_files(run_dir):
        entry = journal.get(rel, {})
        files[rel] = {
            "size": (run_dir / rel).stat().st_size,
            "sha256": sha256_file(run_dir / rel),
            "source": entry.get("source"),
            "written_at": entry.get("written_at"),
        }
        if entry and entry["sha256"] != files[rel]["sha256"]:
            raise StoreError(f"{run_dir / rel}: changed after it was written (journal hash differs)")
    run_meta = read_run_json(run_dir)
    manifest = {
        "campaign": campaign,
        "run": name,
        "status": status,
        "note": note,
        "tool": {"name": "inference-anatomy", "version": __version__},
        "created": run_meta.get("created"),
        "sealed": _now(),
        "files": files,
        **(extra or {}),
        # run.json and the journal are not data files (readers of ``files`` never see them), but a change
        # to either must not pass unseen
        "bookkeeping": {
            rel: {"size": (run_dir / rel).stat().st_size, "sha256": sha256_file(run_dir / rel)}
            for rel in HASHED_BOOKKEEPING
            if (run_dir / rel).exists()
        },
    }
    _create_exclusive(run_dir / MANIFEST, (json.dumps(manifest, indent=2, sort_keys=True) + "\n").encode())
    _create_exclusive(run_dir / SEAL, (sha256_file(run_dir / MANIFEST) + "\n").encode())
    return run_dir / SEAL


def recover_seal(run_dir: Path) -> str:
    """Finish a seal that was interrupted after measuring ended; refuse (one line, why) otherwise.

    Measuring ended when the seal had already written manifest.json (then only SEALED is added, after the
    manifest is checked against the files), or when the run's events.jsonl ends in a complete ``run_end``
    line (then manifest.json + SEALED are written with that event's status and reason). Every file must
    still match its journal entry. No existing file is modified; nothing is appended to the journal.
    """
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise StoreError(f"{run_dir}: no such run folder")
    info = read_run_json(run_dir)
    if (run_dir / SEAL).exists():
        raise StoreError(f"{run_dir}: already sealed; nothing to recover")
    report = verify_run(run_dir)
    if not report.ok:
        raise StoreError(
            f"{run_dir}: refusing to seal a run that does not verify: {report.problems[0].line()}"
        )
    if (run_dir / MANIFEST).exists():
        manifest = _load_manifest(run_dir, report)
        if manifest is not None:
            _check_against_manifest(run_dir, manifest, report)
        if manifest is None or not report.ok:  # a manifest that does not load is a problem in the report
            raise StoreError(
                f"{run_dir}: refusing to seal: the interrupted seal's manifest does not match the files: "
                f"{report.problems[0].line()}"
            )
        _create_exclusive(run_dir / SEAL, (sha256_file(run_dir / MANIFEST) + "\n").encode())
        return (
            f"{run_dir}: sealed-{manifest['status']} (the interrupted seal had written "
            "manifest.json; SEALED added)"
        )
    line_no, end, points_done = _measuring_ended(run_dir)
    status: str = end["status"]  # _measuring_ended checked it is one of SEAL_STATUSES
    extra = {
        "checks_failed": end.get("checks_failed") or [],
        "points_done": points_done,
        "recovered": {
            "by": "collector seal --recover",
            "at": _now(),
            "evidence": f"{EVENTS_FILE}:{line_no} run_end",
        },
    }
    _write_seal(run_dir, info["campaign"], info["run"], status, end.get("reason"), extra)
    return f"{run_dir}: sealed-{status} (recovered: {EVENTS_FILE}:{line_no} shows measuring ended)"


def _measuring_ended(run_dir: Path) -> tuple[int, dict[str, Any], int]:
    """(line, fields of the run_end event, points that ended without an abort) when events.jsonl ends in a
    complete ``run_end`` line; a one-line StoreError saying why not otherwise."""
    ev = run_dir / EVENTS_FILE
    stays = "the run stays unsealed"
    if not ev.exists():
        raise StoreError(
            f"{run_dir}: refusing to seal: no {EVENTS_FILE}, so nothing shows measuring ended; {stays}"
        )
    data = ev.read_bytes()
    if data and not data.endswith(b"\n"):
        raise StoreError(f"{ev}: refusing to seal: the last event line is cut (no newline); {stays}")
    lines = iter_json_lines(ev)
    if not lines:
        raise StoreError(f"{ev}: refusing to seal: no events, so nothing shows measuring ended; {stays}")
    line_no, end = lines[-1]
    kind = end.get("kind") if isinstance(end, dict) else None
    if kind != "run_end":
        raise StoreError(
            f"{ev}:{line_no}: refusing to seal: the last event is {kind!r}, not 'run_end' "
            f"(measuring did not end); {stays}"
        )
    if end.get("status") not in SEAL_STATUSES:
        raise StoreError(f"{ev}:{line_no}: refusing to seal: run_end status {end.get('status')!r} unknown")
    points_done = sum(
        1 for _, e in lines if isinstance(e, dict) and e.get("kind") == "point_end" and not e.get("aborted")
    )
    return line_no, end, points_done


# -- verify -------------------------------------------------------------------------------------------

# levels of a verify line: "problem" fails verify; "unsealed" and "abandoned" are states, reported as such;
# "note" informs
LEVELS = ("problem", "unsealed", "abandoned", "note")


@dataclass
class VerifyProblem:
    level: str
    path: str
    what: str

    def line(self) -> str:
        """The one line ``collector verify`` prints (and ``analyze`` refuses with)."""
        return f"{self.level.upper()}: {self.path}: {self.what}"


@dataclass
class VerifyReport:
    runs: int = 0
    sealed: int = 0
    failed: int = 0  # sealed runs whose manifest says status failed
    abandoned: int = 0  # folders of a run creation that never finished (no run.json): not runs
    files: int = 0
    findings: list[VerifyProblem] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    @property
    def unsealed(self) -> int:
        return self.runs - self.sealed

    @property
    def problems(self) -> list[VerifyProblem]:
        return [f for f in self.findings if f.level == "problem"]

    def add(self, level: str, path: Path | str, what: str) -> None:
        self.findings.append(VerifyProblem(level, str(path), what))

    def problem(self, path: Path | str, what: str) -> None:
        self.add("problem", path, what)

    def note(self, path: Path | str, what: str) -> None:
        self.add("note", path, what)

    def lines(self) -> list[str]:
        out = [f.line() for f in self.findings]
        verdict = "FAILED" if not self.ok else "UNSEALED" if self.unsealed else "OK"
        counts = (
            f"{self.runs} runs ({self.sealed - self.failed} sealed-complete, {self.failed} sealed-failed, "
            f"{self.unsealed} unsealed)"
        )
        if self.abandoned:
            counts += f", {self.abandoned} abandoned folders"
        out.append(f"{verdict}: {counts}, {self.files} files checked, {len(self.problems)} problems")
        return out


def verify(raw_root: Path) -> VerifyReport:
    """Re-hash every file of every run; report changed, missing and unexpected files, unsealed runs and
    abandoned folders."""
    root = Path(raw_root)
    if not root.is_dir():
        raise StoreError(f"{root}: no raw store here (not a directory)")
    report = VerifyReport()
    for campaign_dir in sorted(p for p in root.iterdir() if p.is_dir()):
        if (kind := entry_kind(campaign_dir, folder=True)) is not None:
            report.problem(
                campaign_dir, f"{kind}: a campaign must be a folder of the store itself (not read)"
            )
            continue
        for run_dir in sorted(p for p in campaign_dir.iterdir() if p.is_dir()):
            _verify_run(run_dir, report)
    return report


def verify_run(run_dir: Path, report: VerifyReport | None = None) -> VerifyReport:
    """What ``verify`` says about one run folder (added to ``report`` when given)."""
    report = report if report is not None else VerifyReport()
    _verify_run(Path(run_dir), report)
    return report


def _holds_no_data(folder: Path) -> bool:
    """Nothing in it but empty folders and temp files of interrupted writes."""
    return all(p.is_dir() or p.name.startswith(TMP_PREFIX) for p in folder.rglob("*"))


def _verify_run(run_dir: Path, report: VerifyReport) -> None:
    if (kind := entry_kind(run_dir, folder=True)) is not None:
        report.problem(run_dir, f"{kind}: a run folder must be a folder of the store itself (not read)")
        return
    if run_dir.name.startswith(TMP_PREFIX) or (not (run_dir / RUN_FILE).exists() and _holds_no_data(run_dir)):
        report.abandoned += 1
        report.add(
            "abandoned",
            run_dir,
            "a run creation interrupted before the run got its run.json (no data; kept, not a run)",
        )
        return
    if not (run_dir / RUN_FILE).exists():
        report.problem(run_dir, f"not a run: holds files but no {RUN_FILE}")
        return
    report.runs += 1
    _check_entries(run_dir, report)
    _check_leftovers(run_dir, report)
    got = _run_json_problem(run_dir)
    info: dict[str, Any] | None = None
    if isinstance(got, str):
        report.problem(run_dir / RUN_FILE, got)
    else:
        info = got
        for fieldname, folder in (("campaign", run_dir.parent.name), ("run", run_dir.name)):
            if got[fieldname] != folder:
                report.problem(
                    run_dir / RUN_FILE,
                    f"changed: {fieldname} {got[fieldname]!r} but the folder is {folder!r}",
                )
                info = None  # one line per file: said already
                break
    if (run_dir / SEAL).exists():
        report.sealed += 1
        _verify_sealed(run_dir, report, info)
    else:
        _verify_unsealed(run_dir, report)


def _check_entries(run_dir: Path, report: VerifyReport) -> None:
    """Every link and special file inside the run is a problem (``entry_kind``): never hashed through."""
    for p in sorted(_entries(run_dir)):
        if (kind := entry_kind(p)) is not None:
            report.problem(p, f"{kind}: a run holds regular files only")


def _check_leftovers(run_dir: Path, report: VerifyReport) -> None:
    """Temp files of interrupted writes (``.tmp-<name>.<pid>``, the only temp names the store writes) are
    kept and noted; any other ``.tmp-`` name was written by no write of the store: a problem, as an
    unexpected file is."""
    for tmp in sorted(p for p in _entries(run_dir) if p.name.startswith(TMP_PREFIX)):
        if _TMP_FILE.match(tmp.name):
            report.note(tmp, "leftover of an interrupted write (kept, not part of the run)")
        else:
            report.problem(tmp, "unexpected: not a temp name the store writes, not in the manifest")


def _load_manifest(run_dir: Path, report: VerifyReport) -> dict[str, Any] | None:
    manifest_path = run_dir / MANIFEST
    try:
        manifest = json.loads(manifest_path.read_bytes())
    except (OSError, ValueError):
        report.problem(manifest_path, "not a manifest (not readable JSON)")
        return None
    if not isinstance(manifest, dict) or not isinstance(manifest.get("files"), dict):
        report.problem(manifest_path, "not a manifest (no 'files')")
        return None
    if manifest.get("status") not in SEAL_STATUSES:
        report.problem(manifest_path, f"status {manifest.get('status')!r} is not one of {SEAL_STATUSES}")
        return None
    return manifest


def _check_file(report: VerifyReport, p: Path, entry: Any, against: str = "the manifest") -> None:
    report.files += 1
    if not isinstance(entry, dict) or "size" not in entry or "sha256" not in entry:
        report.problem(p, f"{against} has no size/sha256 for it")
    elif entry_kind(p) is not None:
        pass  # a link or a special file: reported by _check_entries, never read through
    elif not p.exists():
        report.problem(p, "missing")
    elif p.stat().st_size != entry["size"]:
        report.problem(p, f"changed: size {p.stat().st_size} bytes, {against} says {entry['size']}")
    elif sha256_file(p) != entry["sha256"]:
        report.problem(p, f"changed: sha256 differs from {against}")


def _inside(rel: str) -> bool:
    """A manifest's path names a file inside the run: relative, no ``..``."""
    parts = Path(rel).parts
    return bool(parts) and not Path(rel).is_absolute() and ".." not in parts


def _check_against_manifest(run_dir: Path, manifest: dict[str, Any], report: VerifyReport) -> None:
    files = manifest["files"]
    for rel, entry in sorted(files.items()):
        if not _inside(rel):
            report.problem(run_dir / MANIFEST, f"names {rel!r}, a path outside the run (not read)")
            continue
        _check_file(report, run_dir / rel, entry)
    for rel in sorted(set(_data_files(run_dir)) - set(files)):
        report.problem(run_dir / rel, "unexpected: not in the manifest")
    bookkeeping = manifest.get("bookkeeping")
    if isinstance(bookkeeping, dict):
        for rel in HASHED_BOOKKEEPING:
            if rel in bookkeeping or (run_dir / rel).exists():
                _check_file(report, run_dir / rel, bookkeeping.get(rel))


def _verify_sealed(run_dir: Path, report: VerifyReport, info: dict[str, Any] | None) -> None:
    manifest_path = run_dir / MANIFEST
    if not manifest_path.exists():
        report.problem(manifest_path, "missing (the run is sealed)")
        return
    want = (run_dir / SEAL).read_text(errors="replace").strip()
    if sha256_file(manifest_path) != want:
        report.problem(manifest_path, "changed after the seal (sha256 differs from SEALED)")
        return
    manifest = _load_manifest(run_dir, report)
    if manifest is None:
        return
    if manifest["status"] == "failed":
        report.failed += 1
    _check_against_manifest(run_dir, manifest, report)
    if "bookkeeping" not in manifest:
        _verify_legacy_bookkeeping(run_dir, manifest, info, report)


def _verify_legacy_bookkeeping(
    run_dir: Path, manifest: dict[str, Any], info: dict[str, Any] | None, report: VerifyReport
) -> None:
    """A run sealed before run.json and the journal were hashed: what the manifest says about them is
    checked field by field (run.json's campaign, run and created; every journal entry's path, size, sha256,
    source and written_at). Not covered: run.json's kind, meta and tool, and the journal's formatting and
    superseded entries."""
    report.note(
        run_dir,
        f"sealed before {RUN_FILE} and {JOURNAL} were hashed: checked field by field against the manifest "
        f"({RUN_FILE}: campaign, run, created; {JOURNAL}: every entry)",
    )
    if info is not None:
        for k in ("campaign", "run", "created"):
            if k in manifest and info.get(k) != manifest[k]:
                report.problem(run_dir / RUN_FILE, f"changed: {k} differs from the manifest")
    journal = _journal_or_problem(run_dir, report)
    if journal is None:
        return
    files = manifest["files"]
    for rel, entry in sorted(journal.items()):
        if rel not in files:
            report.problem(run_dir / JOURNAL, f"changed: names {rel}, which the manifest does not hold")
            continue
        for k in ("sha256", "size", "source", "written_at"):
            if entry.get(k) != files[rel].get(k):
                report.problem(
                    run_dir / JOURNAL, f"changed: the entry for {rel} differs from the manifest ({k})"
                )
                break


def _journal_or_problem(run_dir: Path, report: VerifyReport) -> dict[str, dict[str, Any]] | None:
    """The journal, or None with the problem reported as ``journal.jsonl: changed: line N: …``."""
    try:
        return read_journal(run_dir)
    except StoreError as err:
        where = f"{run_dir / JOURNAL}:"
        report.problem(run_dir / JOURNAL, f"changed: line {str(err).removeprefix(where)}")
        return None


def _verify_unsealed(run_dir: Path, report: VerifyReport) -> None:
    if (run_dir / MANIFEST).exists():
        what = "the seal was interrupted after writing manifest.json; `collector seal --recover` finishes it"
    else:
        what = (
            "interrupted or still being written (analysed, marked unsealed); `collector seal --recover` "
            "seals it if its events show measuring ended"
        )
    report.add("unsealed", run_dir, what)
    journal = _journal_or_problem(run_dir, report)
    if journal is None:
        return
    for rel, entry in sorted(journal.items()):
        report.files += 1
        p = run_dir / rel
        if entry_kind(p) is not None:
            continue  # reported by _check_entries
        if not p.exists():
            report.problem(p, "missing (journaled as written)")
        elif sha256_file(p) != entry["sha256"]:
            report.problem(p, "changed: sha256 differs from the journal")
    for rel in sorted(set(_data_files(run_dir)) - set(journal)):
        report.note(run_dir / rel, "open stream or unfinished file of an unsealed run (not hashed yet)")
