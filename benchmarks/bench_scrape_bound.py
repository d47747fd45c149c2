"""What a huge /metrics page costs a run and its analysis (issue #25: scrapes stored at a bounded size). Not a
test: a benchmark.

    python benchmarks/bench_scrape_bound.py [--page-mb 100] [--seconds 30] [--out FILE]

``collector run`` against tests/fault_server.py posing as llama-server, its /metrics padded to ``--page-mb``
MB (series of a family analysis does not read), scraped every second for one point of about ``--seconds``;
then ``collector analyze`` of that run. Prints (and writes to ``--out`` when given) scrapes.jsonl's size,
the scrapes that kept text, the analyze wall time, and whether the run's counters reached the analysis.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.conftest import _fake_plan  # noqa: E402

TOKEN_MS = 20  # 16 tokens a request: about a third of a second each, one stream


def measure(work: Path, page_bytes: int, seconds: float) -> dict:
    """One run with a ``page_bytes`` /metrics, then its analysis: sizes, times, what the analysis saw."""
    requests = max(2, round(seconds / (16 * TOKEN_MS / 1000)))
    plan = _fake_plan(
        work,
        ["--metrics-bytes", str(page_bytes), "--token-ms", str(TOKEN_MS), "--partial-log-line"],
        points=f"[{{concurrency = 1, requests = {requests}, seed = 3}}]",
        sampling="interval_s = 1.0",
    )
    raw, out = work / "raw", work / "results"
    t0 = time.monotonic()
    run = subprocess.run(
        [sys.executable, "-m", "collector.cli", "run", str(plan), "--raw", str(raw)],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    run_s = time.monotonic() - t0
    scrapes = next(raw.glob("fake/*/scrapes.jsonl"))
    lines = [json.loads(x) for x in scrapes.read_bytes().splitlines()]
    t0 = time.monotonic()
    ana = subprocess.run(
        [sys.executable, "-m", "collector.cli", "analyze", "--raw", str(raw), "--out", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    analyze_s = time.monotonic() - t0
    findings = json.loads((out / "fake" / "findings.json").read_text()) if ana.returncode == 0 else {}
    # the windows are cut from the run's scrapes only when their counters parsed (analyze.align_own)
    counters = [
        k for k, f in findings.items() if k.endswith("windows.client_clock_offset_s") and f["status"] == "ok"
    ]
    return {
        "page_bytes": page_bytes,
        "run_s": round(run_s, 1),
        "collector_exit": run.returncode,
        "metrics_scrapes": sum(x["source"] == "metrics" for x in lines),
        "scrapes_with_text": sum(x["source"] == "metrics" and x["text"] is not None for x in lines),
        "scrapes_bounded": sum("dropped_bytes" in x for x in lines),
        "scrapes_jsonl_bytes": scrapes.stat().st_size,
        "analyze_s": round(analyze_s, 1),
        "analyze_exit": ana.returncode,
        "counter_windows_found": bool(counters),
        "bounded_flag": any(k.endswith("trust.metrics_bounded_scrapes") for k in findings),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--page-mb", type=float, default=100.0)
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="scrape-bound-") as tmp:
        doc = measure(Path(tmp), round(args.page_mb * 1e6), args.seconds)
    doc["note"] = "shared 2-core machine: times are noisy"
    print(json.dumps(doc, indent=2))
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(doc, indent=2) + "\n")


if __name__ == "__main__":
    main()
