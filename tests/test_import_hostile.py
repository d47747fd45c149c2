"""`collector import` of a hostile source folder: links never followed (a file swapped for a link after the
scan must not bring /etc/passwd into raw/), hard links, FIFOs and names that are not UTF-8 refused in one
line, run names distinct and stable (non-ASCII included), collisions refused before anything is written,
large files copied in bounded memory."""

from __future__ import annotations

import os
import tracemalloc
from pathlib import Path

import pytest

from collector.protocol.importer import import_results
from collector.raw.errors import ImportSourceError
from collector.raw.store import RawStore, verify
from tests.cli import collector_cli


def _folder(root: Path, rel: str, **files: bytes) -> Path:
    """``root/rel`` holding ``files`` (a vLLM concurrency sweep by its file names)."""
    d = root / rel
    d.mkdir(parents=True)
    for name, data in (files or {"c001.json": b"{}"}).items():
        (d / name).write_bytes(data)
    return d


def test_a_file_swapped_for_a_link_after_the_scan_is_refused_not_followed(tmp_path):
    """Before: the link was followed and /etc/passwd sealed into raw/."""
    src, raw = tmp_path / "src", tmp_path / "raw"
    _folder(src, "a")
    victim = _folder(src, "b") / "c001.json"
    lines = import_results(src, "c", raw)
    assert next(lines).startswith("imported   c/a")  # the scan is over: every file was seen as a file
    victim.unlink()
    victim.symlink_to("/etc/passwd")
    with pytest.raises(ImportSourceError, match=rf"^{victim}: cannot open it as the file scanned"):
        next(lines)
    secret = Path("/etc/passwd").read_bytes()
    assert not any(secret in p.read_bytes() for p in raw.rglob("*") if p.is_file() and not p.is_symlink())


@pytest.mark.parametrize("kind", ["hard link", "fifo", "symlink", "not utf-8"])
def test_entries_that_are_not_plain_files_are_refused_in_one_line(tmp_path, kind):
    """Before: hard links were followed, FIFOs skipped silently, a non-UTF-8 name imported (and analyze
    then crashed on it)."""
    src = tmp_path / "src"
    d = _folder(src, "a")
    bad = d / "c002.json"
    if kind == "hard link":
        os.link(d / "c001.json", bad)
        want = rf"{d / 'c001.json'}: a hard link \(2 names for one file\); copy it to a file of its own"
    elif kind == "fifo":
        os.mkfifo(bad)
        want = rf"{bad}: a FIFO, not a regular file; only files are imported"
    elif kind == "symlink":
        bad.symlink_to(d / "c001.json")
        want = rf"{bad}: a symbolic link; links are not imported"
    else:
        Path(os.fsdecode(bytes(d) + b"/\xff.json")).write_bytes(b"{}")
        want = rf"{d}/\\xff.json: the name is not UTF-8 text; rename it"
    with pytest.raises(ImportSourceError, match=f"^{want}") as err:
        list(import_results(src, "c", tmp_path / "raw"))
    assert "\n" not in str(err.value) and not (tmp_path / "raw").exists()


def test_run_names_are_distinct_and_stable_and_collisions_refused_up_front(tmp_path):
    """Before: `Round1/中文` silently became `round1`, and two folders mapping to one run were dropped or
    refused after the first was written."""
    src = tmp_path / "src"
    _folder(src, "Round1/01-perf-test")
    _folder(src, "Round1/中文")
    _folder(src, "Round1/中 文")
    raw = tmp_path / "raw"
    names = sorted(line.split()[1] for line in import_results(src, "c", raw))
    assert names[0] == "c/round1-01-perf-test" and len(set(names)) == 3
    assert all(n.startswith("c/round1-") and len(n) == len("c/round1-") + 8 for n in names[1:]), names
    again = sorted(line.split()[1] for line in import_results(src, "c", tmp_path / "raw2"))
    assert again == names  # stable: the same folders, the same runs
    _folder(src, "round1/01-PERF-test")
    r = collector_cli("import", src, "--campaign", "c", "--raw", tmp_path / "raw3")
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert r.stderr.strip() == (
        "Error: 'Round1/01-perf-test' and 'round1/01-PERF-test' would both become run 'round1-01-perf-test'; "
        "rename one of the folders"
    )
    assert not (tmp_path / "raw3").exists()


def test_a_large_file_is_copied_in_bounded_memory(tmp_path):
    """Before: read whole (a 2 GB file took 2 GB of memory, twice)."""
    src = tmp_path / "src"
    d = _folder(src, "a")
    size = 64 << 20
    with open(d / "c002.json", "wb") as f:
        f.truncate(size)  # sparse: cheap to make, read as 64 MiB of zeros
    tracemalloc.start()
    try:
        list(import_results(src, "c", tmp_path / "raw"))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 8 << 20, f"peak {peak / 2**20:.1f} MiB while copying 64 MiB"
    (run,) = RawStore(tmp_path / "raw").iter_runs("c")
    assert (run.path / "c002.json").stat().st_size == size and verify(tmp_path / "raw").ok
