"""Time `analyze` on the reference campaign imported into a temporary store (goal: < 5 s on 2 cores).

Run: `python benchmarks/bench_analyze.py [--repeat N] [--seed DIR]`. Prints one line per repeat and the best,
in seconds. The import is not timed; `collector analyze` (a fresh process, imports included) is timed as a
user would run it, and so is the in-process call.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

DEFAULT_SEED = Path(__file__).resolve().parents[1].parent / "shared" / "seed-runs" / "rtx4090-qwen2.5-7b"
CAMPAIGN = "rtx4090-qwen2.5-7b"
GOAL_S = 5.0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--seed", type=Path, default=DEFAULT_SEED)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    from collector.protocol.importer import import_results

    with tempfile.TemporaryDirectory() as tmp:
        raw = Path(tmp) / "raw"
        list(import_results(args.seed, CAMPAIGN, raw))
        cli = Path(sys.executable).with_name("collector")
        best_cli = float("inf")
        for i in range(args.repeat):
            out = Path(tmp) / f"out-cli-{i}"
            t0 = time.perf_counter()
            subprocess.run(
                [str(cli), "analyze", "--raw", str(raw), "--out", str(out), CAMPAIGN],
                check=True,
                stdout=subprocess.DEVNULL,
            )
            dt = time.perf_counter() - t0
            best_cli = min(best_cli, dt)
            print(f"collector analyze (process) run {i + 1}: {dt:.2f} s")
        from analysis.pipeline.analyze import analyze

        best_call = float("inf")
        for i in range(args.repeat):
            out = Path(tmp) / f"out-call-{i}"
            t0 = time.perf_counter()
            list(analyze([raw], out, [CAMPAIGN]))
            dt = time.perf_counter() - t0
            best_call = min(best_call, dt)
            print(f"analyze() in process run {i + 1}: {dt:.2f} s")
    print(f"best: process {best_cli:.2f} s, in-process {best_call:.2f} s (goal < {GOAL_S:.0f} s)")
    return 0 if best_cli < GOAL_S else 1


if __name__ == "__main__":
    sys.exit(main())
