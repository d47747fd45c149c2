"""How `collector analyze` scales with the request count (issue #25 item 1): wall time and peak memory of
analysing one sealed run of 10k / 100k / 1M requests of 256 chunks each, beside the FLOOR — reading the same
requests.jsonl with orjson and building its chunk-time arrays, nothing else.

Run: `python benchmarks/bench_scale.py [--sizes 10000,100000] [--code DIR --label before] [--publish]`.
The runs are synthetic but written as the collector writes them (``RawStore.create_run``, the stream's sorted
compact lines, ``Run.seal``) under build/bench/scale/, never raw/; a size already written is reused. Each
measurement is a fresh process (imports included); its peak RSS comes from ``os.wait4``. ``--code DIR`` runs
the analysis from another checkout (e.g. main's, for the before numbers) and ``--label`` names that series.
Writes benchmarks/results/scale.json (series by label, rows by size: a size measured again replaces its
row); ``--publish`` also rewrites the methodology page's table between its ``scale-analysis`` markers.

Targets: time ≤ 5 × floor (CPU seconds: steadier than the wall clock on a shared machine; both are kept),
peak RSS ≤ 3 × the requests.jsonl size, both linear in the request count.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import orjson

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "build" / "bench" / "scale"
RESULTS = ROOT / "benchmarks" / "results" / "scale.json"
PAGE = ROOT / "site" / "docs" / "methodology.md"
CAMPAIGN = "bench-scale"
CHUNKS = 256
CONCURRENCIES = (1, 8, 32, 128)  # one closed-loop point each, the requests split evenly
CPU_X_FLOOR, RSS_X_FILE = 5.0, 3.0  # the targets

FLOOR = """
import sys, numpy as np, orjson
offsets, mono = [0], []
with open(sys.argv[1], 'rb') as fh:
    for line in fh:
        c = orjson.loads(line)['chunk_mono_ns']
        mono.append(np.array(c, dtype=np.int64))
        offsets.append(offsets[-1] + len(c))
flat = np.concatenate(mono) if mono else np.zeros(0, np.int64)
off = np.asarray(offsets, dtype=np.int64)
print(len(off) - 1, int(flat.size))
"""


IMPORTS = "import collector.cli, analysis.pipeline.analyze"  # what analyze loads before reading a line


def _request(
    point: dict[str, Any], i: int, t_send: int, rng: np.random.Generator
) -> tuple[dict[str, Any], int]:
    """One request line of a closed-loop point (1 token a chunk, ~40 ms TTFT, ~10 ms a gap) and its end."""
    gaps = rng.gamma(4.0, 2_500_000, CHUNKS).astype(np.int64) + 1
    gaps[0] = int(rng.gamma(4.0, 10_000_000)) + 1
    chunks = t_send + np.cumsum(gaps)
    end = int(chunks[-1]) + 200_000
    mono = chunks.tolist()
    unix_off = 1_795_947_000_000_000_000
    return {
        "chunk_mono_ns": mono,
        "chunk_tokens": [1] * CHUNKS,
        "chunk_unix_ns": [t + unix_off for t in mono],
        "concurrency": point["c"],
        "done": True,
        "end_mono_ns": end,
        "end_unix_ns": end + unix_off,
        "engine_timings": None,
        "error": None,
        "finish_reason": "length",
        "headers_mono_ns": t_send + 1_000_000,
        "http_status": 200,
        "index": i,
        "input_len": 128,
        "max_tokens": CHUNKS,
        "phase": "sweep",
        "phase_kind": "concurrency",
        "point": point["id"],
        "point_index": point["index"],
        "request_id": f"{point['id']}-r{i:07d}",
        "response_id": f"cmpl-{point['index']}-{i}",
        "seed": 0,
        "send_mono_ns": t_send,
        "send_unix_ns": t_send + unix_off,
        "token_count_source": "usage",
        "usage": {"completion_tokens": CHUNKS, "prompt_tokens": 128, "total_tokens": 128 + CHUNKS},
        "v": 1,
        "worker": i % point["c"],
    }, end


def _point_lines(point: dict[str, Any], n: int, t0: int, rng: np.random.Generator):  # type: ignore[no-untyped-def]
    """The point's n request lines (bytes, as the collector's stream writes them), its workers each sending
    the next request when the last ended; yields (line, end)."""
    free = [t0] * point["c"]
    for i in range(n):
        w = i % point["c"]
        obj, end = _request(point, i, free[w] + 100_000, rng)
        free[w] = end
        yield orjson.dumps(obj, option=orjson.OPT_SORT_KEYS) + b"\n", end


def write_run(n: int) -> Path:
    """A sealed synthetic run of n requests under build/bench/scale/raw-<n> (reused when already sealed);
    returns the raw root."""
    from collector.raw.records import EventRecord
    from collector.raw.store import RawStore, json_line

    root = OUT / f"raw-{n}"
    if (root / CAMPAIGN / "run" / "SEALED").exists():
        return root
    if root.exists():
        subprocess.run(["rm", "-rf", str(root)], check=True)
    rng = np.random.default_rng(n)
    run = RawStore(root).create_run(
        CAMPAIGN, "run", kind="collector-run", meta={"engine": "llamacpp", "gpu": "cpu"}
    )
    t = 1_000_000_000_000
    events = [EventRecord("run_start", t, t, {"campaign": CAMPAIGN, "run": "run", "server_mode": "attach"})]
    with run.open_stream("requests.jsonl") as req:
        for k, c in enumerate(CONCURRENCIES):
            point = {"id": f"p{k:02d}-sweep-c{c:03d}-i128-o{CHUNKS}", "index": k, "c": c}
            per = n // len(CONCURRENCIES) + (k < n % len(CONCURRENCIES))
            events.append(
                EventRecord("point_start", t, t, {"point": point["id"], "concurrency": c, "requests": per})
            )
            first = True
            for line, end in _point_lines(point, per, t, rng):
                if first:  # the bytes are the collector's own: json_line of the same object
                    assert line == json_line(orjson.loads(line)).encode() + b"\n"
                    first = False
                req.write(line)
                t = max(t, end)
            events.append(
                EventRecord("point_end", t, t, {"point": point["id"], "sent": per, "finished": per})
            )
    with run.open_stream("events.jsonl") as ev:
        for e in [*events, EventRecord("run_end", t, t, {"status": "complete"})]:
            ev.write_json(e.to_obj())
    run.seal("complete")
    return root


@dataclass(frozen=True)
class Measured:
    """One fresh process: wall and CPU (user + system) seconds, peak RSS bytes."""

    wall_s: float
    cpu_s: float
    peak_rss_bytes: int


def _measure(argv: list[str], env: dict[str, str] | None = None, cwd: Path | None = None) -> Measured:
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, cwd=cwd)
    assert proc.stdout is not None
    out = proc.stdout.read().decode(errors="replace")
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{' '.join(argv)} failed:\n{out[-2000:]}")
    return Measured(wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss * 1024)


def measure(n: int, code: Path) -> dict[str, Any]:
    """Floor and analyze of the n-request run, each a fresh process. On a shared machine the CPU seconds
    are the steadier measure (a process waiting for a core adds wall time, not CPU time)."""
    root = write_run(n)
    req = root / CAMPAIGN / "run" / "requests.jsonl"
    floor = _measure([sys.executable, "-c", FLOOR, str(req)])
    out = OUT / f"results-{n}"
    shutil.rmtree(out, ignore_errors=True)
    env = {**os.environ, "PYTHONPATH": str(code)}
    argv = [sys.executable, "-m", "collector.cli", "analyze", "--raw", str(root), "--out", str(out), CAMPAIGN]
    got = _measure(argv, env, cwd=code)  # `-m` puts the working directory first on the path
    size = req.stat().st_size
    row = {
        "requests": n,
        "chunks": n * CHUNKS,
        "requests_jsonl_bytes": size,
        "floor_s": round(floor.wall_s, 2),
        "floor_cpu_s": round(floor.cpu_s, 2),
        "floor_peak_rss_bytes": floor.peak_rss_bytes,
        "analyze_s": round(got.wall_s, 2),
        "analyze_cpu_s": round(got.cpu_s, 2),
        "analyze_peak_rss_bytes": got.peak_rss_bytes,
        "wall_x_floor": round(got.wall_s / floor.wall_s, 2),
        "cpu_x_floor": round(got.cpu_s / floor.cpu_s, 2),
        "rss_x_file": round(got.peak_rss_bytes / size, 2),
    }
    print(json.dumps(row), flush=True)
    return row


def _git(code: Path) -> str:
    """The measured checkout's commit: its GIT_COMMIT file when it has one (an exported tree, such as main's
    put under build/ for the before numbers, would otherwise report the enclosing checkout's), else git's."""
    mark = code / "GIT_COMMIT"
    if mark.exists():
        return mark.read_text().strip()
    r = subprocess.run(
        ["git", "-C", str(code), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    )
    return r.stdout.strip() or "?"


LABELS_ZH = {"before": "改前", "after": "改后"}


def _answer(doc: dict[str, Any]) -> str:
    """The block's answer: the largest size measured after, the before at the largest size both have, how
    the cost grows with the request count."""
    series = doc["series"]
    after = series.get("after") or next(iter(series.values()))
    rows = sorted(after["rows"], key=_n)
    big = rows[-1]
    before = {r["requests"]: r for r in series.get("before", {}).get("rows", [])}
    both = [r for r in rows if r["requests"] in before]
    was = ""
    if both:
        a, b = both[-1], before[both[-1]["requests"]]
        was = (
            f"{a['requests']:,} 个请求时，改前 CPU {b['analyze_cpu_s']:.0f} 秒、峰值内存 "
            f"{_gib(b['analyze_peak_rss_bytes'])}（下限的 {b['cpu_x_floor']:.1f} 倍、文件的 "
            f"{b['rss_x_file']:.1f} 倍），改后 {a['analyze_cpu_s']:.0f} 秒、"
            f"{_gib(a['analyze_peak_rss_bytes'])}。"
        )
    grow = ""
    if len(rows) > 1:  # the two largest sizes: the fixed cost of a process weighs least there
        lo = rows[-2]
        k_n, k_cpu = big["requests"] / lo["requests"], big["analyze_cpu_s"] / lo["analyze_cpu_s"]
        k_rss = big["analyze_peak_rss_bytes"] / lo["analyze_peak_rss_bytes"]
        shape = "与请求数成正比" if max(k_cpu, k_rss) <= 1.2 * k_n else "快于请求数的增长"
        grow = (
            f"请求数从 {lo['requests']:,} 增到 {big['requests']:,}（{k_n:.0f} 倍），"
            f"CPU 时间增到 {k_cpu:.1f} 倍、峰值内存增到 {k_rss:.1f} 倍：{shape}。"
        )
    million = ""
    if big["requests"] < 1_000_000:
        size = big["requests_jsonl_bytes"] / big["requests"] * 1_000_000
        million = (
            f"1,000,000 个请求（约 {size / 2**30:.0f} GiB 的文件）没有在这台 24 GiB 的共用机器上测："
            f"按 {big['requests']:,} 个请求时的倍数，峰值内存约 {big['rss_x_file'] * size / 2**30:.0f} GiB。"
        )
    return (
        "**一次运行有十万、百万个请求时，`collector analyze` 要多久、占多少内存？** "
        f"{big['requests']:,} 个请求（每个 {CHUNKS} 块，requests.jsonl {_mib(big['requests_jsonl_bytes'])}）"
        f"用 CPU {big['analyze_cpu_s']:.0f} 秒（墙钟 {big['analyze_s']:.0f} 秒）、峰值内存 "
        f"{_gib(big['analyze_peak_rss_bytes'])}：是只读文件并建块时间数组的下限的 "
        f"{big['cpu_x_floor']:.1f} 倍 CPU 时间、文件大小的 {big['rss_x_file']:.1f} 倍内存"
        f"（目标：≤ {CPU_X_FLOOR:g} 倍、≤ {RSS_X_FILE:g} 倍）。"
        f"{was}{grow}{million}"
    )


def _fixed(doc: dict[str, Any]) -> str:
    """What every analyze pays before reading a line (imports), from the run's own measurement; and, when the
    smallest run misses a target, that this is why."""
    imp = doc.get("imports")
    if not imp:
        return ""
    after = doc["series"].get("after") or next(iter(doc["series"].values()))
    small = min(after["rows"], key=_n)
    missed = small["cpu_x_floor"] > CPU_X_FLOOR or small["rss_x_file"] > RSS_X_FILE
    return (
        f"每次 analyze 都先付一份与请求数无关的开销：导入本身就要 CPU {imp['cpu_s']:.1f} 秒、"
        f"常驻内存 {_mib(imp['peak_rss_bytes'])}"
        + (f"，所以 {small['requests']:,} 个请求时倍数偏高，请求越多越接近下限。" if missed else "。")
    )


def _mib(n: int) -> str:
    return f"{n / 2**20:,.0f} MiB"


def _gib(n: int) -> str:
    return f"{n / 2**30:.1f} GiB"


def table_md(doc: dict[str, Any]) -> str:
    """The methodology page's block: question → answer → how measured, then one row per series and size."""
    lines = [
        _answer(doc),
        "",
        f"测量日期 {doc['date']}（共用的 2 核机器，其他会话同时在跑，墙钟时间噪声很大，所以倍数按 CPU 时间"
        "（用户态 + 内核态）算；每项测一次，新进程，含导入）。运行是合成的，按收集器的写法写入并封存"
        "（`benchmarks/bench_scale.py`），4 个闭环点（并发 1/8/32/128）平分请求；"
        "下限 = 用 orjson 逐行读同一个 "
        "requests.jsonl 并建块时间数组；峰值内存是进程的最大常驻内存。" + _fixed(doc),
        "",
        "| 版本 | 请求数 | requests.jsonl | 下限 CPU (s) | analyze CPU (s) | CPU / 下限 | analyze 墙钟 (s) "
        "| 峰值内存 | 内存 / 文件 |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for label, s in doc["series"].items():
        for r in sorted(s["rows"], key=_n):
            lines.append(
                f"| {LABELS_ZH.get(label, label)}（git {s['git']}） | {r['requests']:,} "
                f"| {_mib(r['requests_jsonl_bytes'])} | {r['floor_cpu_s']:.1f} | {r['analyze_cpu_s']:.1f} "
                f"| {r['cpu_x_floor']:.1f}× | {r['analyze_s']:.0f} | {_mib(r['analyze_peak_rss_bytes'])} "
                f"| {r['rss_x_file']:.2f}× |"
            )
    return "\n".join(lines) + "\n"


def publish(md: str) -> None:
    text = PAGE.read_text()
    begin, end = "<!-- scale-analysis:begin -->", "<!-- scale-analysis:end -->"
    a, b = text.index(begin) + len(begin), text.index(end)
    PAGE.write_text(text[:a] + "\n" + md + text[b:])


def _n(row: dict[str, Any]) -> int:
    return int(row["requests"])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--sizes", default="10000,100000,1000000")
    ap.add_argument("--code", type=Path, default=ROOT, help="checkout whose analysis is measured")
    ap.add_argument("--label", default="after")
    ap.add_argument("--publish", action="store_true")
    ap.add_argument(
        "--from-json", action="store_true", help="render (and --publish) scale.json, measure nothing"
    )
    args = ap.parse_args()
    doc = json.loads(RESULTS.read_text()) if RESULTS.exists() else {"series": {}}
    if not args.from_json:
        sizes = [int(n) for n in args.sizes.split(",")]
        rows = [measure(n, args.code.resolve()) for n in sizes]
        doc["date"] = time.strftime("%Y-%m-%d", time.gmtime())
        imp = _measure(
            [sys.executable, "-c", IMPORTS], {**os.environ, "PYTHONPATH": str(args.code)}, args.code
        )
        doc["imports"] = {"cpu_s": round(imp.cpu_s, 2), "peak_rss_bytes": imp.peak_rss_bytes}
        kept = [r for r in doc["series"].get(args.label, {}).get("rows", []) if r["requests"] not in sizes]
        doc["series"][args.label] = {"git": _git(args.code), "rows": sorted(kept + rows, key=_n)}
        RESULTS.parent.mkdir(parents=True, exist_ok=True)
        RESULTS.write_text(json.dumps(doc, indent=1, ensure_ascii=False) + "\n")
    md = table_md(doc)
    print(md)
    if args.publish:
        publish(md)
    rows = doc["series"].get(args.label, {}).get("rows", [])
    ok = all(r["cpu_x_floor"] <= CPU_X_FLOOR and r["rss_x_file"] <= RSS_X_FILE for r in rows)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
