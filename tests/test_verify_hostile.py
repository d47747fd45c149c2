"""`collector verify` on a store someone tampered with: every problem one line naming the path, nothing read
through a link or out of the run, no read that blocks (before: a manifest path leaving the run was hashed and
passed, a data file replaced by a link, the run folder a link and a FIFO passed, a `.tmp-` file added after
the seal was a note)."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from collector.raw.store import MANIFEST, SEAL, RawStore
from tests.cli import collector_cli


def _sealed(raw: Path, name: str) -> Path:
    run = RawStore(raw).create_run("c", name, kind="test")
    run.write_text("data.txt", "measured\n")
    run.seal("complete")
    return run.path


def _reseal(run: Path, edit) -> None:
    """Change manifest.json and write the SEALED that matches it (a forger who knows the format)."""
    manifest = json.loads((run / MANIFEST).read_text())
    edit(manifest)
    (run / MANIFEST).unlink()
    (run / MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    (run / SEAL).unlink()
    (run / SEAL).write_text(hashlib.sha256((run / MANIFEST).read_bytes()).hexdigest() + "\n")


def test_tampered_runs_are_each_reported_in_one_line(tmp_path):
    raw = tmp_path / "raw"
    hostname = Path("/etc/hostname").read_bytes()
    escape = "../../../../../../../../etc/hostname"
    entry = {"size": len(hostname), "sha256": hashlib.sha256(hostname).hexdigest()}
    _reseal(_sealed(raw, "outside"), lambda m: m["files"].__setitem__(escape, entry))
    linked = _sealed(raw, "linked") / "data.txt"
    (tmp_path / "same.txt").write_bytes(linked.read_bytes())  # the same bytes, elsewhere
    linked.unlink()
    linked.symlink_to(tmp_path / "same.txt")
    elsewhere = _sealed(tmp_path / "elsewhere", "moved")
    (raw / "c" / "moved").symlink_to(elsewhere)  # the run folder itself a link
    fifo = _sealed(raw, "fifo") / "extra"
    os.mkfifo(fifo)  # hashing it would block verify for ever
    dotted = _sealed(raw, "dotted")
    (dotted / ".hidden").write_text("added")
    (dotted / ".tmp-added").write_text("added")
    (dotted / ".tmp-data.txt.123").write_text("a leftover of an interrupted write")  # a temp name: a note
    r = collector_cli("verify", "--raw", raw, timeout=60)
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
    problems = sorted(line for line in r.stdout.splitlines() if line.startswith("PROBLEM"))
    c = raw / "c"
    assert problems == sorted([
        f"PROBLEM: {c}/dotted/.hidden: unexpected: not in the manifest",
        f"PROBLEM: {c}/dotted/.tmp-added: unexpected: not a temp name the store writes, not in the manifest",
        f"PROBLEM: {fifo}: a FIFO: a run holds regular files only",
        f"PROBLEM: {linked}: a symbolic link (to {tmp_path / 'same.txt'}): a run holds regular files only",
        f"PROBLEM: {c}/moved: a symbolic link (to {elsewhere}): a run folder must be a folder of the store "
        "itself (not read)",
        f"PROBLEM: {c}/outside/manifest.json: names '{escape}', a path outside the run (not read)",
    ])  # fmt: skip
    assert f"NOTE: {c}/dotted/.tmp-data.txt.123: leftover of an interrupted write" in r.stdout
