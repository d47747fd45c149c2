"""Per-campaign analysis results kept between builds: a campaign whose inputs and analysis code did not change
is not analysed again, its earlier output is copied into the results.

The key of an entry (``<cache>/<campaign>/<key>/``) is the sha256 of three things:

- the campaign's inputs (``inputs_digest``): per run folder, its SEALED line — the sha256 of manifest.json,
  which holds the size and sha256 of every file of the run; `collector verify` (run by ``analyze`` before
  any lookup) has just checked every file against it — and run.json (runs sealed before it was hashed); an
  unsealed run's every file, hashed; every file beside the runs (decisions.jsonl); and the files outside the
  store the analysis may read: the plan file a run was started from and the model config its plan names;
- the identity of the analysis code (``code_identity``): every file of the floors the analysis runs on
  (collector/raw … analysis/pipeline, tests/test_layers.py's map), the Python version and the versions of
  the libraries that compute or write the outputs;
- the analysis options (SLOs, percentiles).

An entry is written whole into a temporary folder, ``ENTRY.json`` (the sha256 of every file in it) last,
then renamed into place; it is used only when every file still matches ``ENTRY.json`` — anything else is
said in one line and the campaign analysed afresh. Only the newest entry of a campaign is kept.

The digests catch a damaged or hand-edited entry, not a forger: the cache folder (build/cache/ by default)
is trusted like the checkout it sits in (an entry's summary is a pickle; whoever can write there can write
the code too).
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import pickle
import shutil
import sys
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from collector.raw.store import RUN_FILE, SEAL, TMP_PREFIX, sha256_file

ENTRY_FILE = "ENTRY.json"
OUT_DIR = "out"  # the campaign's results folder, as analyze wrote it
SUMMARY_FILE = "summary.pickle"  # what the comparison needs (CampaignSummary), the printed lines, the state
# The floors the analysis runs on (tests/test_layers.py's LAYERS, L0–L4): a change to any file there may
# change an output. The report (L5) and the CLI (L6) only read the results.
CODE_PATHS = (
    "collector/__init__.py",
    "collector/raw",
    "analysis/__init__.py",
    "analysis/core",
    "analysis/parse",
    "collector/protocol",
    "analysis/loading",
    "analysis/reconcile",
    "analysis/pipeline",
)
# The libraries whose version may change an output (numbers, CSV formatting, the Vega-Lite specs).
DISTRIBUTIONS = ("numpy", "pandas", "altair", "prometheus-client", "orjson", "pyarrow")
CODE_ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Cached:
    """A campaign's analysis as an entry holds it: the output folder, and what ``analyze`` keeps in memory."""

    out: Path
    lines: list[str]
    summary: Any  # comparison.CampaignSummary (not imported here: the cache knows no reconcile module)
    state: str | None


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@functools.cache
def code_identity(root: Path = CODE_ROOT) -> str:
    """sha256 over every file of CODE_PATHS (path and content), the Python version and DISTRIBUTIONS'
    versions ("absent" when one is not installed)."""
    h = hashlib.sha256()
    for rel in CODE_PATHS:
        p = root / rel
        files = [p] if p.is_file() else sorted(p.rglob("*"))
        for f in files:
            if f.is_file() and "__pycache__" not in f.parts and f.suffix != ".pyc":
                h.update(f"{f.relative_to(root).as_posix()}\0{sha256_file(f)}\n".encode())
    h.update(versions_text(DISTRIBUTIONS).encode())
    return h.hexdigest()


def versions_text(distributions: Sequence[str]) -> str:
    """The Python version and each distribution's version ("absent" when one is not installed), a line
    each: the part of a cache key that says which libraries made the output."""
    lines = [f"python {sys.version_info[:3]}"]
    for dist in distributions:
        try:
            lines.append(f"{dist} {metadata.version(dist)}")
        except metadata.PackageNotFoundError:
            lines.append(f"{dist} absent")
    return "\n".join(lines) + "\n"


def _run_lines(root_no: int, run_dir: Path) -> list[str]:
    """What stands for one run folder in the key: its seal and run.json, or (unsealed) every file."""
    tag = f"{root_no}/{run_dir.name}"
    if (run_dir / SEAL).is_file():
        lines = [f"{tag} sealed {(run_dir / SEAL).read_text(errors='replace').strip()}"]
        if (run_dir / RUN_FILE).is_file():
            lines.append(f"{tag}/{RUN_FILE} {sha256_file(run_dir / RUN_FILE)}")
        return lines
    files = sorted(p for p in run_dir.rglob("*") if p.is_file() and not p.is_symlink())
    return [f"{tag} unsealed"] + [
        f"{tag}/{p.relative_to(run_dir).as_posix()} {sha256_file(p)}" for p in files
    ]


def _outside_files(root: Path, run_dir: Path) -> list[Path]:
    """Files outside the store the analysis may read for this run: the plan file it was started from
    (relative to the folder holding the store: analysis.reconcile.experiments.spec) and the model config its
    plan copy names (a path, as analysis.core.model_config.load_model_config resolves it)."""
    out: list[Path] = []
    try:
        meta = json.loads((run_dir / RUN_FILE).read_bytes()).get("meta") or {}
        if isinstance(meta.get("plan_file"), str):
            out.append(root.resolve().parent / meta["plan_file"])
    except (OSError, ValueError, AttributeError):
        pass  # a run.json that does not read: verify or the loader says so; nothing outside to add
    try:
        config = tomllib.loads((run_dir / "plan.toml").read_text(encoding="utf-8"))["model"]["config"]
        if isinstance(config, str):
            p = Path(config).expanduser()
            out.append(p / "config.json" if p.is_dir() else p)
    except (OSError, ValueError, KeyError, TypeError):
        pass  # no plan copy, or one without a model config path
    return [p for p in out if p.is_file()]


def inputs_digest(raw_roots: list[Path], campaign: str) -> str:
    """sha256 over what the campaign's analysis reads (see the module docstring)."""
    lines: list[str] = []
    outside: set[Path] = set()
    for no, root in enumerate(raw_roots):
        cdir = Path(root) / campaign
        if not cdir.is_dir():
            continue
        for p in sorted(cdir.iterdir()):
            if p.is_dir() and not p.is_symlink():
                lines += _run_lines(no, p)
                outside.update(_outside_files(Path(root), p))
            elif p.is_file():
                lines.append(f"{no}/{p.name} {sha256_file(p)}")
    lines += [f"outside {p} {sha256_file(p)}" for p in sorted(outside)]
    return _sha("\n".join(lines).encode())


def entry_key(raw_roots: list[Path], campaign: str, options: dict[str, Any]) -> str:
    """The entry's name: inputs, code identity and options together (64 hex digits)."""
    opts = json.dumps(options, sort_keys=True, default=str)
    return _sha(f"{inputs_digest(raw_roots, campaign)}\n{code_identity()}\n{opts}".encode())


def _file_digests(folder: Path) -> dict[str, str]:
    return {
        p.relative_to(folder).as_posix(): sha256_file(p)
        for p in sorted(folder.rglob("*"))
        if p.is_file() and p.name != ENTRY_FILE
    }


class FolderCache:
    """``<root>/<name>/<key>/``: ``out/`` (a copy of an output folder), the files given with it, and
    ``ENTRY.json`` (the sha256 of every other file, written last); the newest entry of a name only."""

    def __init__(self, root: Path):
        self.root = Path(root)

    def entry(self, name: str, key: str) -> Path:
        return self.root / name / key

    def problem(self, name: str, key: str) -> str | None:
        """Why the entry cannot be used (None: it can); "" when there is none at all."""
        where = self.entry(name, key)
        if not where.is_dir():
            return ""
        try:
            want = json.loads((where / ENTRY_FILE).read_bytes())["files"]
        except (OSError, ValueError, KeyError, TypeError):
            return f"{ENTRY_FILE} missing or unreadable"
        got = _file_digests(where)
        for rel in sorted(set(want) | set(got)):
            if rel not in got:
                return f"{rel}: missing"
            if rel not in want:
                return f"{rel}: not in {ENTRY_FILE}"
            if got[rel] != want[rel]:
                return f"{rel}: sha256 differs from {ENTRY_FILE}"
        return None

    def store(self, name: str, key: str, out_dir: Path, files: dict[str, bytes] | None = None) -> None:
        """Keep a copy of ``out_dir`` (and ``files``: name → bytes); the name's other entries go."""
        final = self.entry(name, key)
        tmp = final.with_name(f"{TMP_PREFIX}{key}.{os.getpid()}")
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.copytree(out_dir, tmp / OUT_DIR)
        for rel, data in (files or {}).items():
            (tmp / rel).write_bytes(data)
        entry = {"name": name, "key": key, "files": _file_digests(tmp)}
        (tmp / ENTRY_FILE).write_text(json.dumps(entry, indent=1, sort_keys=True) + "\n", encoding="utf-8")
        shutil.rmtree(final, ignore_errors=True)  # a corrupt entry of the same key
        try:
            tmp.rename(final)
        except OSError:  # another build wrote it at the same moment: theirs is as good
            shutil.rmtree(tmp, ignore_errors=True)
        for other in final.parent.iterdir():
            if other != final and not other.name.startswith(TMP_PREFIX):
                shutil.rmtree(other, ignore_errors=True)


class AnalysisCache(FolderCache):
    """Per campaign: ``out/`` (its results folder) and ``summary.pickle`` (what analyze keeps in memory)."""

    def load(self, campaign: str, key: str) -> Cached:
        """The entry (call ``problem`` first: only a checked entry is unpickled)."""
        where = self.entry(campaign, key)
        data = pickle.loads((where / SUMMARY_FILE).read_bytes())
        return Cached(where / OUT_DIR, data["lines"], data["summary"], data["state"])

    def keep(
        self, campaign: str, key: str, out_dir: Path, lines: list[str], summary: Any, state: str | None
    ) -> None:
        """Keep the campaign's results."""
        data = {"lines": lines, "summary": summary, "state": state}
        self.store(
            campaign, key, out_dir, {SUMMARY_FILE: pickle.dumps(data, protocol=pickle.HIGHEST_PROTOCOL)}
        )
