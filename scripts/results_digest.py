"""The digest of every analysis output (findings, tables, figures, indexes) of the committed campaigns and
the reference: one sha256 per file in tests/data/results_digest.json. tests/test_results_identity.py
recomputes it and fails on any byte that moved, so a refactor proves it changed no number.

A commit that means to change an output (a new finding, a corrected formula, reworded prose) regenerates it:

    python scripts/results_digest.py --write      # analyse raw/ + the reference, write the digest
    python scripts/results_digest.py              # analyse and compare; exit 1 naming every file that moved
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from analysis.pipeline.analyze import analyze  # noqa: E402
from collector.protocol.importer import import_results  # noqa: E402

DIGEST = ROOT / "tests" / "data" / "results_digest.json"
SEED = ROOT.parent / "shared" / "seed-runs" / "rtx4090-qwen2.5-7b"
REFERENCE = "rtx4090-qwen2.5-7b"


def digest_tree(results: Path) -> dict[str, str]:
    """{relative path: sha256 hex} of every file under ``results``."""
    return {
        p.relative_to(results).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(results.rglob("*"))
        if p.is_file()
    }


def compute(work: Path, raw: Path = ROOT / "raw", seed: Path = SEED) -> dict[str, str]:
    """Analyse ``raw`` and the reference (imported under ``work``) into ``work/results``; their digest."""
    imported = work / "imported-raw"
    list(import_results(seed, REFERENCE, imported))
    out = work / "results"
    list(analyze([raw, imported], out, None))
    return digest_tree(out)


def differences(expected: dict[str, str], actual: dict[str, str]) -> list[str]:
    """One line per file added, removed or changed."""
    lines = [f"changed: {k}" for k in sorted(expected.keys() & actual.keys()) if expected[k] != actual[k]]
    lines += [f"missing: {k}" for k in sorted(expected.keys() - actual.keys())]
    lines += [f"new: {k}" for k in sorted(actual.keys() - expected.keys())]
    return lines


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--write", action="store_true", help="write the digest instead of comparing")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        actual = compute(Path(tmp))
    if args.write:
        DIGEST.write_text(json.dumps(actual, indent=1, sort_keys=True) + "\n", encoding="utf-8")
        print(f"{DIGEST.relative_to(ROOT)}: {len(actual)} files")
        return 0
    lines = differences(json.loads(DIGEST.read_text(encoding="utf-8")), actual)
    print("\n".join(lines) or f"identical: {len(actual)} files")
    return 1 if lines else 0


if __name__ == "__main__":
    sys.exit(main())
