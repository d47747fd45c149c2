"""The collector's memory over an hour-long open-loop run (issue #25: RSS drift ≤ 10 % from minute 5 to minute
60, records streamed to disk). Not a test: a benchmark.

    nice python benchmarks/bench_soak.py [--minutes 60] [--rate 4] [--cache .engines] [--out FILE]

``collector run`` of one open-loop point (``kind = "rate"``, Poisson arrivals, ``duration_s`` = the soak)
against llama-server on CPU serving the tiny random-weight model. Every ``--sample-s`` seconds it records the
resident memory (``VmRSS`` from ``/proc``) of the collector's process tree — the ``collector run`` process and
its load shards, never the llama-server it started — and the size of the run's ``requests.jsonl``, to a CSV
beside the result. The result: RSS at minute 5 and at the soak's end, the drift between them, and
requests.jsonl's lines at minutes 5, 30 and the end (records are on disk as they end, not held for the end).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from lab.engines import engine_paths  # noqa: E402

PAGE_KIB = 1  # /proc/<pid>/status reports VmRSS in kB (KiB)
PHASE = "soak"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def soak_plan(cache: Path, port: int, minutes: float, rate: float, input_len: int, output_len: int) -> str:
    """The soak's plan: llama-server on CPU (the shipped CPU plan's flags), a warm-up, one rate point."""
    p = engine_paths(cache)
    return f"""description = "soak: one open-loop point of {minutes:g} min at {rate:g} req/s"
campaign = "soak"
run = "llamacpp-soak"

[server]
engine = "llamacpp"
binary = "{p.llama_server}"
model = "{p.tiny_gguf}"
served_model_name = "tiny-qwen2"
port = {port}
args = ["-np", "8", "-c", "8192", "-t", "1", "--cache-ram", "0", "--slot-prompt-similarity", "0"]
startup_timeout_s = 120

[model]
config = "{p.tiny_config_json}"
gpu = "cpu"
kv_dtype = "fp16"
weight_format = "f16"
max_model_len = 1024
token_id_range = [32, 127]

[sampling]
interval_s = 1.0

[load]
drain_s = 0.0
request_timeout_s = 300
read_timeout_s = 120

[[phase]]
name = "warmup"
kind = "warmup"
concurrency = 4
requests = 4
input_len = 32
output_len = 16
seed = 0

[[phase]]
name = "{PHASE}"
kind = "rate"
request_rates = [{rate:g}]
arrival = "poisson"
seed = 501
input_len = {input_len}
output_len = {output_len}
duration_s = {minutes * 60:g}
"""


def _children(pid: int) -> list[int]:
    out: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            out += [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            continue
    return out


def _status(pid: int) -> dict[str, str]:
    try:
        lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    except OSError:
        return {}
    return dict(line.split(":\t", 1) for line in lines if ":\t" in line)


def tree_rss_kib(root: int) -> tuple[int, int]:
    """(RSS of ``root`` and its descendants, KiB; how many processes): the collector's tree, the
    llama-server it started (and anything under it) left out."""
    total, n, todo = 0, 0, [root]
    while todo:
        pid = todo.pop()
        st = _status(pid)
        if not st or st.get("Name", "").strip().startswith("llama-server"):
            continue
        total += int(st.get("VmRSS", "0 kB").split()[0]) * PAGE_KIB
        n += 1
        todo += _children(pid)
    return total, n


def _run_dir(raw: Path) -> Path | None:
    runs = sorted((raw / "soak").glob("*/requests.jsonl")) if (raw / "soak").is_dir() else []
    return runs[-1].parent if runs else None


def _soak_start_mono_s(run: Path | None) -> float | None:
    """When the soak point started (its ``point_start`` event), s on the monotonic clock."""
    if run is None or not (run / "events.jsonl").exists():
        return None
    for line in (run / "events.jsonl").read_text().splitlines():
        try:
            e = json.loads(line)
        except json.JSONDecodeError:
            continue
        if e.get("kind") == "point_start" and e.get("phase") == PHASE:
            return e["mono_ns"] / 1e9
    return None


def _lines(path: Path) -> int:
    with open(path, "rb") as fh:
        return sum(chunk.count(b"\n") for chunk in iter(lambda: fh.read(1 << 20), b""))


def sample_loop(proc: subprocess.Popen, raw: Path, csv_path: Path, every_s: float) -> list[dict[str, float]]:
    """Samples until the collector exits: t_s (since the soak point started; negative before), RSS, lines."""
    rows: list[dict[str, float]] = []
    t0: float | None = None
    with open(csv_path, "w", newline="") as fh:
        w = csv.DictWriter(fh, ["t_s", "rss_kib", "processes", "requests_lines", "requests_bytes"])
        w.writeheader()
        while proc.poll() is None:
            run = _run_dir(raw)
            t0 = t0 if t0 is not None else _soak_start_mono_s(run)
            rss, n = tree_rss_kib(proc.pid)
            req = run / "requests.jsonl" if run else None
            row = {
                "t_s": round(time.monotonic() - t0, 1) if t0 is not None else -1.0,
                "rss_kib": rss,
                "processes": n,
                "requests_lines": _lines(req) if req and req.exists() else 0,
                "requests_bytes": req.stat().st_size if req and req.exists() else 0,
            }
            if t0 is not None and rss:
                rows.append(row)
                w.writerow(row)
                fh.flush()
            time.sleep(every_s)
    return rows


def at_minute(rows: list[dict[str, float]], minute: float) -> dict[str, float]:
    """The first sample at or after ``minute`` of the soak point (the last one when it ended earlier)."""
    return next((r for r in rows if r["t_s"] >= minute * 60), rows[-1])


def drift_pct(rss_a_kib: float, rss_b_kib: float) -> float:
    """RSS drift, % = (RSS at the end − RSS at minute 5) ÷ RSS at minute 5 × 100."""
    return (rss_b_kib - rss_a_kib) / rss_a_kib * 100


def summary(rows: list[dict[str, float]], minutes: float, args: argparse.Namespace, rc: int) -> dict:
    inside = [r for r in rows if r["t_s"] <= minutes * 60]
    a, mid, b = at_minute(inside, min(5, minutes / 2)), at_minute(inside, minutes / 2), inside[-1]
    return {
        "minutes": minutes,
        "rate_req_s": args.rate,
        "input_len": args.input_len,
        "output_len": args.output_len,
        "collector_exit": rc,
        "sample_s": args.sample_s,
        "rss_mib_at_5min": round(a["rss_kib"] / 1024, 1),
        "rss_mib_at_end": round(b["rss_kib"] / 1024, 1),
        "rss_mib_max_in_point": round(max(r["rss_kib"] for r in inside) / 1024, 1),
        "rss_mib_max_whole_run": round(max(r["rss_kib"] for r in rows) / 1024, 1),
        "drift_pct": round(drift_pct(a["rss_kib"], b["rss_kib"]), 1),
        "end_t_s": b["t_s"],
        "requests_lines": {
            "5min": a["requests_lines"],
            "mid": mid["requests_lines"],
            "end": b["requests_lines"],
        },
        "requests_bytes_end": b["requests_bytes"],
        "note": "shared 2-core machine, run under nice; the collector and llama-server share the cores",
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--minutes", type=float, default=60.0)
    ap.add_argument("--rate", type=float, default=4.0, help="offered requests per second")
    ap.add_argument("--input-len", type=int, default=32)
    ap.add_argument("--output-len", type=int, default=16)
    ap.add_argument("--sample-s", type=float, default=5.0)
    ap.add_argument("--cache", type=Path, default=Path(os.environ.get("ENGINES_CACHE", ROOT / ".engines")))
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "soak.json")
    ap.add_argument("--keep", type=Path, default=None, help="folder for the raw run and the RSS samples")
    args = ap.parse_args()
    work = args.keep or Path(tempfile.mkdtemp(prefix="soak-"))
    work.mkdir(parents=True, exist_ok=True)
    plan = work / "soak.toml"
    plan.write_text(
        soak_plan(args.cache, _free_port(), args.minutes, args.rate, args.input_len, args.output_len)
    )
    raw = work / "raw"
    cmd = [sys.executable, "-m", "collector.cli", "run", str(plan), "--raw", str(raw)]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    with open(work / "collector.log", "w") as log:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
        rows = sample_loop(proc, raw, work / "rss.csv", args.sample_s)
    if not rows:
        sys.exit(f"bench_soak: no samples (collector exit {proc.returncode}; see {work / 'collector.log'})")
    doc = summary(rows, args.minutes, args, proc.returncode)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=2) + "\n")
    print(json.dumps(doc, indent=2))
    print(f"samples: {work / 'rss.csv'}", file=sys.stderr)


if __name__ == "__main__":
    main()
