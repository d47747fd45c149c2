"""Bring raw runs packed on the device (scripts/h200/campaign.sh) home into the raw store, byte for byte.

    python scripts/h200/unpack.py /work/.device/.../llamacpp-q4km.tar.gz [more .tar.gz / .tar.gzNN parts] \
        [--raw raw] [--campaign h200-qwen2.5-7b-random] [--allow-unsealed]

Each archive holds exactly one run folder ``<campaign>/<run>/`` written by ``collector run`` (or
``collector.protocol.ceilings``) with the store on the device, so its manifest and seal travel with it. Parts
``X.tar.gz.part00``, ``X.tar.gz.part01`` ... are joined in order. For each run, nothing is written under
the raw root until the whole archive has been read, extracted beside it and verified: every file against
the run's manifest (``collector.raw.store.verify``), and the run must be sealed. A run folder that exists
already is never touched: the archive is refused. Only then is the verified folder renamed into place.
"""

from __future__ import annotations

import argparse
import io
import os
import re
import shutil
import sys
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from collector.raw.errors import StoreError  # noqa: E402
from collector.raw.store import SEAL, verify  # noqa: E402

DEFAULT_CAMPAIGN = "h200-qwen2.5-7b-random"
_PART = re.compile(r"^(?P<base>.+\.tar\.gz)\.part(?P<n>\d+)$")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


@dataclass
class Archive:
    name: str  # X.tar.gz
    parts: list[Path]  # one file, or the parts in order

    def read(self) -> bytes:
        return b"".join(p.read_bytes() for p in self.parts)


def group_archives(paths: list[Path]) -> list[Archive]:
    """Whole archives and complete, gap-free part sets; anything else is a StoreError naming the file."""
    whole: dict[str, Path] = {}
    parts: dict[str, dict[int, Path]] = {}
    for p in paths:
        if not p.is_file():
            raise StoreError(f"{p}: no such file")
        m = _PART.match(p.name)
        if m:
            base, n = m["base"], int(m["n"])
            if n in parts.setdefault(base, {}):
                raise StoreError(f"{p}: part {n} given twice")
            parts[base][n] = p
        elif p.name.endswith(".tar.gz"):
            if p.name in whole:
                raise StoreError(f"{p}: {p.name} given twice")
            whole[p.name] = p
        else:
            raise StoreError(f"{p}: not a .tar.gz nor a .tar.gz.partNN")
    out = [Archive(name, [p]) for name, p in sorted(whole.items())]
    for base, by_n in sorted(parts.items()):
        if base in whole:
            raise StoreError(f"{whole[base]}: given both whole and in parts")
        missing = sorted(set(range(max(by_n) + 1)) - set(by_n))
        if missing:
            raise StoreError(f"{base}: part {missing[0]:02d} missing (have {sorted(by_n)})")
        out.append(Archive(base, [by_n[n] for n in sorted(by_n)]))
    return out


def _run_of(tf: tarfile.TarFile, archive: str) -> tuple[str, str]:
    """The one ``<campaign>/<run>`` every member lies in; plain files and folders only."""
    runs: set[tuple[str, str]] = set()
    for m in tf.getmembers():
        parts = PurePosixPath(m.name).parts
        if not parts or m.name.startswith("/") or ".." in parts:
            raise StoreError(f"{archive}: member {m.name!r} leaves the archive's folder")
        if not (m.isfile() or m.isdir()):
            raise StoreError(f"{archive}: member {m.name!r} is not a plain file or folder")
        if len(parts) == 1 and m.isdir():
            continue  # the campaign folder itself
        if len(parts) < 2 or not all(_NAME.match(x) for x in parts[:2]):
            raise StoreError(f"{archive}: member {m.name!r} is not inside <campaign>/<run>/")
        runs.add((parts[0], parts[1]))
    if len(runs) != 1:
        raise StoreError(f"{archive}: expected one run folder, found {len(runs)}: {sorted(runs)}")
    return runs.pop()


def unpack(
    archives: list[Archive], raw_root: Path, campaign: str | None, allow_unsealed: bool = False
) -> list[str]:
    """Check every archive, then move each verified run into ``raw_root``; returns lines to print."""
    raw_root = Path(raw_root)
    raw_root.mkdir(parents=True, exist_ok=True)
    loaded: list[tuple[Archive, bytes, str, str]] = []
    seen: dict[tuple[str, str], str] = {}
    for a in archives:  # first read and check all of them: a bad set writes nothing
        data = a.read()
        try:
            with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tf:
                camp, run = _run_of(tf, a.name)
        except (tarfile.TarError, EOFError, OSError) as err:
            raise StoreError(f"{a.parts[0]}: not a readable .tar.gz ({err})") from err
        if campaign is not None and camp != campaign:
            raise StoreError(f"{a.name}: holds campaign {camp!r}, expected {campaign!r}")
        if (camp, run) in seen:
            raise StoreError(f"{a.name}: run {camp}/{run} is also in {seen[(camp, run)]}")
        seen[(camp, run)] = a.name
        if (raw_root / camp / run).exists():
            raise StoreError(f"{raw_root / camp / run}: exists already; refusing to overwrite a run")
        loaded.append((a, data, camp, run))

    lines = []
    for a, data, camp, run in loaded:
        tmp = Path(tempfile.mkdtemp(prefix=".unpack-", dir=raw_root.resolve().parent))
        try:
            with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tf:
                tf.extractall(tmp, filter="data")
            src = tmp / camp / run
            report = verify(tmp)
            if not report.ok:
                raise StoreError(f"{a.name}: the run does not verify: " + "; ".join(report.lines()[:3]))
            if not (src / SEAL).exists() and not allow_unsealed:
                raise StoreError(
                    f"{a.name}: {camp}/{run} is not sealed (an interrupted run); --allow-unsealed takes it"
                )
            target = raw_root / camp / run
            target.parent.mkdir(parents=True, exist_ok=True)
            if target.exists():  # appeared meanwhile
                raise StoreError(f"{target}: exists already; refusing to overwrite a run")
            os.rename(src, target)
            lines.append(
                f"{target}: {report.files} files verified, {'sealed' if report.sealed else 'UNSEALED'}"
                f" (from {', '.join(p.name for p in a.parts)})"
            )
        finally:
            shutil.rmtree(tmp)  # our own extraction folder, outside the raw root
    return lines


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="scripts/h200/unpack.py", description=__doc__.splitlines()[0])
    p.add_argument("files", nargs="+", type=Path, help="X.tar.gz files and/or X.tar.gz.partNN parts")
    p.add_argument("--raw", type=Path, default=Path("raw"), help="root of the raw store (default: raw)")
    p.add_argument(
        "--campaign",
        default=DEFAULT_CAMPAIGN,
        help=f"campaign the runs must belong to (default {DEFAULT_CAMPAIGN}; '' accepts any)",
    )
    p.add_argument("--allow-unsealed", action="store_true", help="accept runs without SEALED (interrupted)")
    a = p.parse_args(argv)
    try:
        for line in unpack(group_archives(a.files), a.raw, a.campaign or None, a.allow_unsealed):
            print(line)
    except StoreError as err:
        print(f"unpack: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
