"""Import an existing results folder (hand-run bash campaigns) into the raw store.

Every folder of SRC that holds files becomes one run; files are copied byte for byte under their original
names, the source path and sha256 of each recorded. Importing the same source again changes nothing: a run
that already holds exactly those bytes is skipped, one that differs is an error (the store is never altered).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from collector.raw.errors import ImportSourceError, StoreError
from collector.raw.store import RawStore, open_run, sha256_file

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


def run_name_for(rel_dir: str) -> str:
    if not rel_dir or rel_dir == ".":
        return DOCS_RUN
    return re.sub(r"[^a-z0-9._-]+", "-", rel_dir.lower().replace("/", "-")).strip("-")


def _groups(src: Path) -> dict[str, list[Path]]:
    groups: dict[str, list[Path]] = {}
    for p in sorted(src.rglob("*")):
        if p.is_symlink():
            raise ImportSourceError(f"{p}: symbolic links are not imported (copy the target instead)")
        if p.is_file():
            rel_dir = p.parent.relative_to(src).as_posix()
            groups.setdefault(rel_dir, []).append(p)
    return groups


def import_results(src: Path, campaign: str, raw_root: Path) -> Iterator[str]:
    src = Path(src).resolve()
    if not src.is_dir():
        raise ImportSourceError(f"{src}: not a folder")
    groups = _groups(src)
    if not groups:
        raise ImportSourceError(f"{src}: holds no files to import")
    store = RawStore(raw_root)
    for rel_dir, files in groups.items():
        cls = classify(rel_dir, [f.name for f in files])
        name = run_name_for(rel_dir)
        yield _import_group(store, campaign, name, src, rel_dir, files, cls)


def _import_group(
    store: RawStore, campaign: str, name: str, src: Path, rel_dir: str, files: list[Path], cls: Classification
) -> str:
    wanted = {f.name: sha256_file(f) for f in files}
    existing = store.root / campaign / name
    if existing.exists():
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
        return f"unchanged  {campaign}/{name}  ({len(files)} files already imported)"
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
        data = f.read_bytes()
        if hashlib.sha256(data).hexdigest() != wanted[f.name]:
            raise ImportSourceError(f"{f}: changed while being imported")
        run.write_bytes(f.name, data, source=f.relative_to(src).as_posix())
        total += len(data)
    run.seal("complete", extra={"provenance": {"imported_from": str(src), "relative_dir": rel_dir, **meta}})
    kind = f"{cls.engine or '-'} {cls.test_kind}"
    return f"imported   {campaign}/{name}  {kind}  ({len(files)} files, {total:,} bytes)"
