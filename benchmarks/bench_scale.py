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

Targets: wall ≤ 5 × floor, peak RSS ≤ 3 × the requests.jsonl size, both linear in the request count.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
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
WALL_X_FLOOR, RSS_X_FILE = 5.0, 3.0  # the targets

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


def _measure(
    argv: list[str], env: dict[str, str] | None = None, cwd: Path | None = None
) -> tuple[float, int, str]:
    """(wall s, peak RSS bytes, stdout) of one fresh process."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, cwd=cwd)
    assert proc.stdout is not None
    out = proc.stdout.read().decode(errors="replace")
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{' '.join(argv)} failed:\n{out[-2000:]}")
    return wall, usage.ru_maxrss * 1024, out


def measure(n: int, code: Path) -> dict[str, Any]:
    """Floor and analyze of the n-request run, each a fresh process."""
    root = write_run(n)
    req = root / CAMPAIGN / "run" / "requests.jsonl"
    floor_s, floor_rss, _ = _measure([sys.executable, "-c", FLOOR, str(req)])
    out = OUT / f"results-{n}"
    subprocess.run(["rm", "-rf", str(out)], check=True)
    env = {**os.environ, "PYTHONPATH": str(code)}
    argv = [sys.executable, "-m", "collector.cli", "analyze", "--raw", str(root), "--out", str(out), CAMPAIGN]
    wall, rss, _ = _measure(argv, env, cwd=code)  # `-m` puts the working directory first on the path
    size = req.stat().st_size
    row = {
        "requests": n,
        "chunks": n * CHUNKS,
        "requests_jsonl_bytes": size,
        "floor_s": round(floor_s, 2),
        "floor_peak_rss_bytes": floor_rss,
        "analyze_s": round(wall, 2),
        "analyze_peak_rss_bytes": rss,
        "wall_x_floor": round(wall / floor_s, 2),
        "rss_x_file": round(rss / size, 2),
    }
    print(json.dumps(row), flush=True)
    return row


def _git(code: Path) -> str:
    r = subprocess.run(
        ["git", "-C", str(code), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    )
    return r.stdout.strip() or "?"


def _answer(doc: dict[str, Any]) -> str:
    """The block's first sentence: the largest size measured after, with the before beside it."""
    series = doc["series"]
    after = series.get("after") or next(iter(series.values()))
    big = max(after["rows"], key=lambda r: r["requests"])
    was = {r["requests"]: r for r in series.get("before", {}).get("rows", [])}.get(big["requests"])
    before = f"（改前 {was['analyze_s']:.0f} 秒、{_gib(was['analyze_peak_rss_bytes'])}）" if was else ""
    small = min(after["rows"], key=lambda r: r["requests"])
    grow = big["analyze_s"] / small["analyze_s"] if small is not big else None
    linear = (
        f"请求数从 {small['requests']:,} 增到 {big['requests']:,}"
        f"（{big['requests'] // small['requests']} 倍），时间增到 {grow:.1f} 倍。"
        if grow
        else ""
    )
    return (
        "**一次运行有十万、百万个请求时，`collector analyze` 要多久、占多少内存？** "
        f"{big['requests']:,} 个请求（每个 {CHUNKS} 块，"
        f"requests.jsonl {_mib(big['requests_jsonl_bytes'])}）："
        f"{big['analyze_s']:.0f} 秒、峰值内存 {_gib(big['analyze_peak_rss_bytes'])}{before}，"
        f"是下限的 {big['wall_x_floor']:.1f} 倍时间、文件大小的 {big['rss_x_file']:.1f} 倍内存"
        f"（目标：≤ {WALL_X_FLOOR:g} 倍、≤ {RSS_X_FILE:g} 倍）；{linear}"
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
        f"测量日期 {doc['date']}（共用的 2 核机器，其他会话同时在跑，时间有噪声；"
        "每项测一次，新进程，含导入）。"
        "运行是合成的，按收集器的写法写入并封存（`benchmarks/bench_scale.py`），"
        "4 个闭环点（并发 1/8/32/128）平分请求；"
        "下限 = 用 orjson 逐行读同一个 requests.jsonl 并建块时间数组；"
        "峰值内存是进程的最大常驻内存。",
        "",
        "| 版本 | 请求数 | requests.jsonl | 下限 (s) | analyze (s) | 时间 / 下限 | 峰值内存 | 内存 / 文件 |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for label, s in doc["series"].items():
        for r in sorted(s["rows"], key=lambda r: r["requests"]):
            lines.append(
                f"| {label}（git {s['git']}） | {r['requests']:,} | {_mib(r['requests_jsonl_bytes'])} "
                f"| {r['floor_s']:.1f} | {r['analyze_s']:.1f} | {r['wall_x_floor']:.1f}× "
                f"| {_mib(r['analyze_peak_rss_bytes'])} | {r['rss_x_file']:.2f}× |"
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
        kept = [r for r in doc["series"].get(args.label, {}).get("rows", []) if r["requests"] not in sizes]
        doc["series"][args.label] = {"git": _git(args.code), "rows": sorted(kept + rows, key=_n)}
        RESULTS.parent.mkdir(parents=True, exist_ok=True)
        RESULTS.write_text(json.dumps(doc, indent=1, ensure_ascii=False) + "\n")
    md = table_md(doc)
    print(md)
    if args.publish:
        publish(md)
    rows = doc["series"].get(args.label, {}).get("rows", [])
    ok = all(r["wall_x_floor"] <= WALL_X_FLOOR and r["rss_x_file"] <= RSS_X_FILE for r in rows)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
