"""Time the site build on the reference campaign (goal: < 30 s on these 2-core machines, installs excluded).

Run: ``python benchmarks/bench_site.py [--repeat N] [--seed DIR]``. The import into a temporary raw store is not
timed; each repeat times analyze → render → ``mkdocs build --strict`` into fresh temporary folders, in process,
and prints the steps and the total in seconds, then the best total against the goal.
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
    args = ap.parse_args()
    if not args.seed.is_dir():
        print(f"bench_site: {args.seed} not found; nothing to build", file=sys.stderr)
        return 0
    from analysis.report.build import build_site
    from collector.importer import import_results

    best = float("inf")
    with tempfile.TemporaryDirectory(prefix="bench-site-") as tmp:
        raw = Path(tmp) / "raw"
        list(import_results(args.seed, CAMPAIGN, raw))
        for i in range(args.repeat):
            work = Path(tmp) / f"run{i}"
            times = build_site([raw], work / "results", work / "docs", work / "public")
            steps = "  ".join(f"{k} {v:.2f}" for k, v in times.steps.items() if k != "import")
            total = times.total_s - times.steps.get("import", 0.0)
            best = min(best, total)
            print(f"site build #{i + 1}: {steps}  total {total:.2f} s")
    verdict = "within" if best < GOAL_S else "OVER"
    print(f"site build best: {best:.2f} s ({verdict} the {GOAL_S:.0f} s goal)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
