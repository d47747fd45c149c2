"""Peak memory of parsing a large server log (goal: well under 2x the file; issue #12 measured 7x before the
parsers streamed).

    python benchmarks/bench_log_memory.py [--mib 200] [--engine llamacpp|vllm|vllm-stats|all] [--tmp DIR]

Builds a synthetic log of about ``--mib`` MiB in a temporary folder by repeating the lines of a committed
server log, then parses it in a fresh process and prints the file size, the parse time and the process's peak
RSS (``ru_maxrss``) minus the peak RSS of the same process before parsing (imports included in both):

- ``llamacpp``: ``raw/h200-qwen2.5-7b-random/llamacpp-q4km/server.log``, repeated whole (timing blocks,
  progress and release lines: what a long sweep's log holds);
- ``vllm``: ``raw/cpu-tiny-qwen2/vllm/server.log``, start-up once, then its serving part (access lines, engine
  stats, warnings) repeated;
- ``vllm-stats``: the worst case, nothing but engine-stats lines after start-up (each becomes a record the
  parsed log keeps, so memory grows with them by design).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SOURCES = {
    "llamacpp": REPO / "raw" / "h200-qwen2.5-7b-random" / "llamacpp-q4km" / "server.log",
    "vllm": REPO / "raw" / "cpu-tiny-qwen2" / "vllm" / "server.log",
    "vllm-stats": REPO / "raw" / "cpu-tiny-qwen2" / "vllm" / "server.log",
}
_CHILD = """
import json, resource, sys, time
sys.path.insert(0, sys.argv[3])
from analysis.parse import llamacpp_log, vllm_log
parse = llamacpp_log.parse_llamacpp_log if sys.argv[1] == "llamacpp" else vllm_log.parse_vllm_log
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
t0 = time.perf_counter()
log = parse(sys.argv[2])
dt = time.perf_counter() - t0
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"base_kib": base, "peak_kib": peak, "seconds": dt, "lines": log.line_count}))
"""


def build_log(engine: str, target_bytes: int, out: Path) -> int:
    """A log of about ``target_bytes``: the source once, then its repeatable part until the size is
    reached."""
    data = SOURCES[engine].read_bytes()
    lines = data.splitlines(keepends=True)
    if engine == "vllm":  # start-up facts once, then what a serving server keeps printing
        start = next(i for i, ln in enumerate(lines) if b"Application startup complete" in ln) + 1
        body = b"".join(lines[start:])
    elif engine == "vllm-stats":
        body = b"".join(ln for ln in lines if b"Avg prompt throughput" in ln)
    else:
        body = data
    with open(out, "wb") as f:
        f.write(data)
        size = len(data)
        while size < target_bytes:
            f.write(body)
            size += len(body)
    return size


def measure(engine: str, path: Path) -> dict:
    p = subprocess.run([sys.executable, "-c", _CHILD, engine, str(path), str(REPO)], capture_output=True,
                       text=True, check=True)  # fmt: skip
    return json.loads(p.stdout)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--mib", type=float, default=200.0)
    ap.add_argument("--engine", choices=(*SOURCES, "all"), default="all")
    ap.add_argument("--tmp", type=Path, default=None)
    args = ap.parse_args()
    engines = tuple(SOURCES) if args.engine == "all" else (args.engine,)
    with tempfile.TemporaryDirectory(dir=args.tmp) as tmp:
        for engine in engines:
            path = Path(tmp) / f"{engine}-server.log"
            size = build_log(engine, int(args.mib * 2**20), path)
            r = measure(engine, path)
            extra = (r["peak_kib"] - r["base_kib"]) * 1024
            print(f"{engine}: {size / 2**20:.0f} MiB, {r['lines']:,} lines, {r['seconds']:.1f} s; peak RSS "
                  f"{r['peak_kib'] / 1024:.0f} MiB ({r['base_kib'] / 1024:.0f} MiB before parsing): parsing "
                  f"added {extra / 2**20:.0f} MiB = {extra / size:.2f}x the file")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
