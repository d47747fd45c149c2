"""Time the site build as ``nox -s site`` does it (goal: < 30 s on these 2-core machines, installs excluded).

The site is built from every campaign: the reference campaign (``--seed``, imported into a temporary raw
store; the import is not timed) and the repository's own ``raw/`` (``--no-repo-raw`` leaves it out).
Run: ``python benchmarks/bench_site.py [--repeat N] [--seed DIR] [--no-repo-raw]``. Each repeat times
analyze → render → ``mkdocs build --strict`` into fresh temporary folders, in process (figures are converted
afresh every time: no cache), and prints the steps, the campaigns and figures, and the best total against the
goal.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CAMPAIGN = "rtx4090-qwen2.5-7b"
DEFAULT_SEED = ROOT.parent / "shared" / "seed-runs" / CAMPAIGN
GOAL_S = 30.0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=Path, default=DEFAULT_SEED)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--no-repo-raw", action="store_true", help="leave the repository's raw/ out")
    args = ap.parse_args()
    repo_raw = ROOT / "raw"
    roots_extra = [] if args.no_repo_raw or not repo_raw.is_dir() else [repo_raw]
    if not args.seed.is_dir() and not roots_extra:
        print(f"bench_site: {args.seed} not found and no raw/; nothing to build", file=sys.stderr)
        return 0
    from analysis.report.build import build_site
    from collector.protocol.importer import import_results

    best = float("inf")
    with tempfile.TemporaryDirectory(prefix="bench-site-") as tmp:
        raw = Path(tmp) / "raw"
        raw.mkdir()
        if args.seed.is_dir():
            list(import_results(args.seed, CAMPAIGN, raw))
        for i in range(args.repeat):
            work = Path(tmp) / f"run{i}"
            times = build_site([raw, *roots_extra], work / "results", work / "docs", work / "public")
            steps = "  ".join(f"{k} {v:.2f}" for k, v in times.steps.items() if k != "import")
            total = times.total_s - times.steps.get("import", 0.0)
            best = min(best, total)
            campaigns = sorted(p.parent.name for p in (work / "results").glob("*/findings.json"))
            n_svg = len(list((work / "docs").rglob("*.svg")))
            print(
                f"site build #{i + 1}: {steps}  total {total:.2f} s  ({len(campaigns)} campaigns: "
                f"{', '.join(campaigns)}; {n_svg} figures)"
            )
    verdict = "within" if best < GOAL_S else "OVER"
    print(f"site build best: {best:.2f} s ({verdict} the {GOAL_S:.0f} s goal)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
