"""Import an existing results folder into the raw store: hand-run bash campaigns (told by their file names),
and what the peers write (told by content, ``analysis.parse.peers.sniff``): ``vllm bench serve --save-result``
files under any name (its default ``openai-infqps-concurrency8-<model>-<date>.json`` included), AIPerf's
artifact folder (``profile_export_aiperf.json`` and companions), GuideLLM's benchmarks JSON.

Every folder of SRC that holds files becomes one run (``run_name_for``: distinct and stable names, a
collision refused up front); files are copied byte for byte under their original names, in blocks (bounded
memory), the source path and sha256 of each recorded. Links are never followed, hard links, FIFOs, sockets,
devices and names that are not UTF-8 are refused, and a file is copied only if it is still the one the scan
saw (a file swapped for a link after the scan is refused, not followed). Importing the same source again
changes nothing: a run that already holds exactly those bytes is skipped, one that differs is an error (the
store is never altered).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from analysis.parse.peers import VLLM_BENCH, sniff_file
from collector.raw.errors import ImportSourceError, StoreError
from collector.raw.store import RawStore, open_run, text_name

DOCS_RUN = "campaign-docs"


@dataclass(frozen=True)
class Classification:
    engine: str  # "vllm" | "llamacpp" | "" (documents)
    test_kind: str  # concurrency_sweep | length_sweep | overload | engine_comparison | documents
    round: str | None


def classify(rel_dir: str, names: list[str]) -> Classification:
    """Tell what a legacy test folder holds from its file names (the only thing the bash scripts fixed)."""
    rnd = next((p for p in Path(rel_dir).parts if re.fullmatch(r"(?i)round\d+", p)), None)
    if not rel_dir or rel_dir == ".":
        return Classification("", "documents", None)
    if any("llamacpp" in n for n in names):
        return Classification("llamacpp", "engine_comparison", rnd)
    engine = "vllm"
    if any(n.startswith("stress") and n.endswith(".json") for n in names):
        return Classification(engine, "overload", rnd)
    if any(re.fullmatch(r"len_\d+\.json", n) for n in names):
        return Classification(engine, "length_sweep", rnd)
    if any(re.fullmatch(r"(vllm_)?c\d+\.json", n) for n in names):
        return Classification(engine, "concurrency_sweep", rnd)
    raise ImportSourceError(f"{rel_dir}: cannot tell what this test folder holds (files: {', '.join(names)})")


def peer_classification(rel_dir: str, files: list[Path], engine: str | None) -> Classification | None:
    """A folder holding results a peer wrote (by content), or None. Open-loop results (a finite request rate)
    make a rate sweep, closed-loop ones a concurrency sweep; the engine is the one given (the tools do not
    record which server answered), else vLLM when vllm bench serve says its backend was vllm, else
    "unknown"."""
    rnd = next((p for p in Path(rel_dir).parts if re.fullmatch(r"(?i)round\d+", p)), None)
    kinds = {f: k for f in files if f.suffix == ".json" and (k := sniff_file(f))}
    if not kinds:
        return None
    docs = [json.loads(f.read_bytes()) for f, k in kinds.items() if k == VLLM_BENCH]
    open_loop = any(
        str(d.get("request_rate", "inf")).lower() not in ("inf", "infinity", "none") for d in docs
    )
    backends = {str(d.get("backend")) for d in docs}
    guess = "vllm" if backends == {"vllm"} else "unknown"
    return Classification(engine or guess, "rate_sweep" if open_loop else "concurrency_sweep", rnd)


def _classify_group(
    rel_dir: str, files: list[Path], engine: str | None
) -> tuple[Classification, bool] | None:
    """(classification, whether a peer's results told it) of one folder: the hand-run campaigns' file
    names first (their folders hold vllm bench files too, named by the bash scripts), then the content; None
    when neither tells."""
    top = not rel_dir or rel_dir == "."
    try:
        legacy = classify(rel_dir, [f.name for f in files])
    except ImportSourceError:
        legacy = None
    if legacy is not None and not (top and legacy.test_kind == "documents"):
        return legacy, False
    peer = peer_classification(rel_dir, files, engine)
    if peer is not None:
        return peer, True
    return (legacy, False) if legacy is not None else None


def run_name_for(rel_dir: str, src: Path | None = None, peer: bool = False) -> str:
    """The run a source folder becomes: its path lower-cased, ``/`` and anything outside ``[a-z0-9._-]``
    turned into ``-`` (``Round1/01-perf-test`` → ``round1-01-perf-test``); a path that held other characters
    (``Round1/中文``, ``a b``) also gets 8 hex digits of its sha256, so no two such folders share a name and
    the same folder always gets the same one. The top folder holding a peer's results is named after the
    source folder itself (it would otherwise be the campaign's documents)."""
    if (not rel_dir or rel_dir == ".") and peer and src is not None:
        rel_dir = src.name
    if not rel_dir or rel_dir == ".":
        return DOCS_RUN
    slug = re.sub(r"[^a-z0-9._-]+", "-", rel_dir.lower().replace("/", "-")).strip("-._")
    if re.fullmatch(r"[A-Za-z0-9._/-]+", rel_dir):
        return slug
    digest = hashlib.sha256(rel_dir.encode("utf-8", "surrogateescape")).hexdigest()[:8]
    return f"{slug}-{digest}" if slug else digest


@dataclass(frozen=True)
class SourceFile:
    """A file of the source as the scan saw it (``lstat``): the copy must find the very same file."""

    path: Path
    dev: int
    ino: int
    size: int
    mtime_ns: int


def _refusal(p: Path, mode: int, nlink: int) -> str | None:
    """Why an entry of the source cannot be imported (one line), or None for a plain file or folder."""
    if stat.S_ISLNK(mode):
        return f"{p}: a symbolic link; links are not imported (copy the target instead)"
    if stat.S_ISREG(mode) and nlink > 1:
        return f"{p}: a hard link ({nlink} names for one file); copy it to a file of its own"
    if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
        what = "a FIFO" if stat.S_ISFIFO(mode) else "a socket" if stat.S_ISSOCK(mode) else "a device"
        return f"{p}: {what}, not a regular file; only files are imported"
    if text_name(p.name) != p.name:
        return f"{p.parent / text_name(p.name)}: the name is not UTF-8 text; rename it"
    return None


def _groups(src: Path) -> dict[str, list[SourceFile]]:
    """The source's files by folder (relative to ``src``), each with what the scan saw; links are never
    followed and anything but plain files and folders is refused."""
    groups: dict[str, list[SourceFile]] = {}
    for dirpath, dirnames, filenames in os.walk(src):
        dirnames.sort()
        for name in sorted(filenames) + dirnames:
            p = Path(dirpath) / name
            st = p.lstat()
            why = _refusal(p, st.st_mode, st.st_nlink)
            if why:
                raise ImportSourceError(why)
            if stat.S_ISREG(st.st_mode):
                rel_dir = p.parent.relative_to(src).as_posix()
                groups.setdefault(rel_dir, []).append(
                    SourceFile(p, st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
                )
    return groups


def _run_names(groups: dict[str, list[SourceFile]], src: Path, peer_runs: set[str]) -> dict[str, str]:
    """Source folder → run name, every name distinct; two folders that would share a run are refused up
    front, naming both."""
    names: dict[str, str] = {}
    taken: dict[str, str] = {}
    for rel_dir in sorted(groups):
        name = run_name_for(rel_dir, src, peer=rel_dir in peer_runs)
        if name in taken:
            raise ImportSourceError(
                f"{taken[name]!r} and {rel_dir!r} would both become run {name!r}; rename one of the folders"
            )
        taken[name] = rel_dir
        names[rel_dir] = name
    return names


def import_results(src: Path, campaign: str, raw_root: Path, engine: str | None = None) -> Iterator[str]:
    """Import ``src`` into ``campaign``; ``engine``: the server a peer tool measured (it does not say)."""
    src = Path(src).resolve()
    if not src.is_dir():
        raise ImportSourceError(f"{src}: not a folder")
    groups = _groups(src)
    if not groups:
        raise ImportSourceError(f"{src}: holds no files to import")
    found = {rel: _classify_group(rel, [f.path for f in files], engine) for rel, files in groups.items()}
    peer_runs = {rel for rel, c in found.items() if c is not None and c[1]}
    classes: dict[str, Classification] = {}
    for rel_dir, files in groups.items():
        hit = found[rel_dir]
        if hit is None and not peer_runs:
            listed = ", ".join(f.path.name for f in files)
            raise ImportSourceError(f"{rel_dir}: cannot tell what this test folder holds (files: {listed})")
        # a folder beside a peer's results without any (AIPerf's logs/) is kept as documents
        classes[rel_dir] = hit[0] if hit is not None else Classification("", "documents", None)
    names = _run_names(groups, src, peer_runs)
    store = RawStore(raw_root)
    for rel_dir, files in sorted(groups.items()):
        yield _import_group(store, campaign, names[rel_dir], src, rel_dir, files, classes[rel_dir])


def _read_same(f: SourceFile) -> Iterator[bytes]:
    """The file's bytes in blocks of 1 MiB, opened without following a link and only when it is still the
    file the scan saw (same device, inode, size and mtime) and unchanged when the last block is read."""
    try:
        fd = os.open(f.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as err:
        raise ImportSourceError(f"{f.path}: cannot open it as the file scanned ({err.strerror})") from None
    with os.fdopen(fd, "rb") as fh:
        if _seen(os.fstat(fd)) != _seen_file(f):
            raise ImportSourceError(f"{f.path}: replaced or changed since the scan; nothing of it imported")
        while block := fh.read(1 << 20):
            yield block
        if _seen(os.fstat(fd)) != _seen_file(f):
            raise ImportSourceError(f"{f.path}: changed while being imported")


def _seen(st: os.stat_result) -> tuple[int, int, int, int, bool]:
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, stat.S_ISREG(st.st_mode)


def _seen_file(f: SourceFile) -> tuple[int, int, int, int, bool]:
    return f.dev, f.ino, f.size, f.mtime_ns, True


def _sha256(f: SourceFile) -> str:
    h = hashlib.sha256()
    for block in _read_same(f):
        h.update(block)
    return h.hexdigest()


def _import_group(
    store: RawStore,
    campaign: str,
    name: str,
    src: Path,
    rel_dir: str,
    files: list[SourceFile],
    cls: Classification,
) -> str:
    wanted = {f.path.name: _sha256(f) for f in files}
    existing = store.root / campaign / name
    if existing.exists():
        return _unchanged(existing, campaign, name, wanted)
    meta = {
        "engine": cls.engine,
        "round": cls.round,
        "test": Path(rel_dir).name if rel_dir != "." else None,
        "test_kind": cls.test_kind,
        "source": {"folder": str(src), "relative_dir": rel_dir},
        "imported": True,
    }
    run = store.create_run(campaign, name, kind="imported", meta=meta)
    total = 0
    for f in files:
        sha, size = run.write_blocks(f.path.name, _read_same(f), source=f.path.relative_to(src).as_posix())
        if sha != wanted[f.path.name]:
            raise ImportSourceError(f"{f.path}: changed while being imported")
        total += size
    run.seal("complete", extra={"provenance": {"imported_from": str(src), "relative_dir": rel_dir, **meta}})
    kind = f"{cls.engine or '-'} {cls.test_kind}"
    if cls.engine == "unknown":
        kind += " (the tool does not record the server: pass --engine vllm or llamacpp)"
    return f"imported   {campaign}/{name}  {kind}  ({len(files)} files, {total:,} bytes)"


def _unchanged(existing: Path, campaign: str, name: str, wanted: dict[str, str]) -> str:
    """An earlier import of the same folder: the same bytes (nothing to do), else a one-line refusal."""
    info = open_run(existing)
    manifest = info.manifest()
    if manifest is None:
        raise StoreError(
            f"{existing}: an earlier import was interrupted (run unsealed); it is kept as is — "
            f"import into a fresh --raw or another --campaign"
        )
    have = {rel: e["sha256"] for rel, e in manifest["files"].items()}
    if have != wanted:
        diff = sorted(set(have.items()) ^ set(wanted.items()))
        raise StoreError(
            f"{existing}: already imported with different content ({diff[0][0]} differs); nothing changed"
        )
    return f"unchanged  {campaign}/{name}  ({len(wanted)} files already imported)"
