"""llama.cpp ``llama-server`` log: build, slots, KV/device buffers, per-request timing blocks, slot releases.

Lines look like ``5.41.307.415 I slot print_timing: id 31 | task 0 | prompt eval time = …`` (elapsed
minutes.seconds.ms.us, level letter, message). Facts are only read from messages that *start* with a known
shape (``slot <func>: id N | task M | …``, ``srv  <func>: …``, ``llama_kv_cache: …``), so model output dumped
into the log (multi-line, any script, broken UTF-8 from byte tokens) is skipped, never misread. Every record
keeps its line number.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from analysis.parse.text import iter_lines
from collector.raw.errors import ParseError
from collector.raw.jsonl import clip

_NUM = r"-?(?:\d+(?:\.\d+)?|inf|nan)"
_PREFIX = re.compile(
    r"^(?:(?P<m>\d+)\.(?P<s>\d{2})\.(?P<ms>\d{3})\.(?P<us>\d{3}) )?(?:(?P<lvl>[IWED]) )?(?P<msg>.*)$"
)
_SLOT = re.compile(r"^slot +(?P<func>\w+): id +(?P<id>-?\d+) \| task (?P<task>-?\d+) \| (?P<body>.*)$")
_SRV = re.compile(r"^srv +(?P<func>\w+): (?P<body>.*)$")
_P = {
    "prompt": re.compile(
        rf"^prompt eval time = +(?P<ms>{_NUM}) ms / +(?P<n>\d+) tokens \( *(?P<mspt>{_NUM}) ms per token, "
        rf"+(?P<tps>{_NUM}) tokens per second\)$"
    ),
    "eval": re.compile(
        rf"^eval time = +(?P<ms>{_NUM}) ms / +(?P<n>\d+) tokens \( *(?P<mspt>{_NUM}) ms per token, "
        rf"+(?P<tps>{_NUM}) tokens per second\)$"
    ),
    "total": re.compile(rf"^total time = +(?P<ms>{_NUM}) ms / +(?P<n>\d+) tokens$"),
    "graphs": re.compile(r"^graphs reused = +(?P<n>\d+)$"),
    "progress": re.compile(rf"^n_gen = +(?P<n>\d+), tg = +(?P<tg>{_NUM}) t/s, tg_3s = +(?P<tg3>{_NUM}) t/s$"),
    "release": re.compile(r"^stop processing: n_tokens = (?P<n>\d+), truncated = (?P<t>\d+)$"),
    # older builds print no ", is_child = N"
    "launch": re.compile(r"^processing task(?:, is_child = (?P<child>\d+))?$"),
    "init": re.compile(
        r"^initializing, n_slots = (?P<n>\d+), n_ctx_slot = (?P<c>\d+), kv_unified = '(?P<u>\w+)'$"
    ),
    "loading": re.compile(r"^loading model '(?P<p>.*)'$"),
    "buffer": re.compile(
        r"^(?P<func>\w+): +(?P<dev>\S+) +(?P<kind>KV|model|compute|output|RS) buffer size = "
        rf"+(?P<mib>{_NUM}) MiB$"
    ),
    "kv_size": re.compile(
        rf"^(?P<func>llama_kv_cache\w*): size = +(?P<mib>{_NUM}) MiB \( *(?P<cells>\d+) cells, "
        r"+(?P<layers>\d+) layers, +(?P<seqs>\d+)/(?P<seqmax>\d+) seqs\), K \((?P<kt>\w+)\): "
        rf"+(?P<kmib>{_NUM}) MiB, V \((?P<vt>\w+)\): +(?P<vmib>{_NUM}) MiB$"
    ),
    "ctx_param": re.compile(
        r"^llama_context: (?P<k>n_\w+|flash_attn|causal_attn|kv_unified|freq_\w+) += (?P<v>.+)$"
    ),
    "build_a": re.compile(r"\bbuild:? (?P<n>\d+) \((?P<c>[0-9a-f]+)\)"),
    "build_b": re.compile(r"\(build (?P<n>\d+), commit (?P<c>[0-9a-f]+)\)"),
    "build_c": re.compile(r"\bbuild = (?P<n>\d+) \((?P<c>[0-9a-f]+)\)"),
    "threads": re.compile(r"\bn_threads = (?P<n>\d+)"),
}


@dataclass(slots=True)  # one per log line of its kind: hundreds of thousands in a long log
class SlotTiming:
    """One request's ``print_timing`` block (llama.cpp's own timing of prefill and decode)."""

    line: int  # the "prompt eval time" line
    elapsed_s: float | None  # log time since server start
    slot_id: int
    task_id: int
    prompt_eval_ms: float
    prompt_tokens: int
    prompt_ms_per_token: float
    prompt_tokens_per_s: float
    eval_ms: float | None = None
    eval_tokens: int | None = None
    eval_ms_per_token: float | None = None
    eval_tokens_per_s: float | None = None
    total_ms: float | None = None
    total_tokens: int | None = None
    graphs_reused: int | None = None
    extra: dict[str, str] = field(default_factory=dict)  # other print_timing lines (draft stats …), verbatim


@dataclass(slots=True)  # one per log line of its kind: hundreds of thousands in a long log
class SlotProgress:
    """An interim ``n_gen = N, tg = X t/s, tg_3s = Y t/s`` line printed while a slot generates."""

    line: int
    elapsed_s: float | None
    slot_id: int
    task_id: int
    n_gen: int
    tg_tok_s: float
    tg_3s_tok_s: float


@dataclass(slots=True)  # one per log line of its kind: hundreds of thousands in a long log
class SlotRelease:
    line: int
    elapsed_s: float | None
    slot_id: int
    task_id: int
    n_tokens: int  # tokens in the slot's context at release
    truncated: bool


@dataclass(slots=True)  # one per log line of its kind: hundreds of thousands in a long log
class SlotLaunch:
    """A slot taking a task: ``slot launch_slot_: id N | task M | processing task, is_child = 0`` (-lv 4 and
    up). Tasks are launched as requests arrive (requests arriving together may launch in any order among
    them)."""

    line: int
    elapsed_s: float | None
    slot_id: int
    task_id: int


@dataclass(slots=True)  # one per log line of its kind: hundreds of thousands in a long log
class DeviceBuffer:
    line: int
    kind: str  # "KV" | "model" | "compute" | "output" | "RS"
    device: str  # "CUDA0", "CPU", "CUDA_Host" …
    mib: float
    source: str  # the logging function: "llama_kv_cache", "load_tensors", "llama_context"


@dataclass(slots=True)  # one per log line of its kind: hundreds of thousands in a long log
class LogLine:
    line: int
    elapsed_s: float | None
    level: str | None
    message: str


@dataclass
class LlamacppServerLog:
    path: str
    line_count: int
    build_number: int | None = None
    build_commit: str | None = None
    model_path: str | None = None
    n_threads: int | None = None
    n_slots: int | None = None
    n_ctx_slot: int | None = None
    kv_unified: bool | None = None
    kv_cache_mib: float | None = None  # "llama_kv_cache: size = X MiB (…)"
    kv_cache_cells: int | None = None
    kv_cache_layers: int | None = None
    kv_k_type: str | None = None
    kv_v_type: str | None = None
    context_params: dict[str, str] = field(default_factory=dict)  # llama_context: n_ctx = …, flash_attn = …
    buffers: list[DeviceBuffer] = field(default_factory=list)
    timings: list[SlotTiming] = field(default_factory=list)
    progress: list[SlotProgress] = field(default_factory=list)
    releases: list[SlotRelease] = field(default_factory=list)
    launches: list[SlotLaunch] = field(default_factory=list)  # in log order
    warnings: list[LogLine] = field(default_factory=list)  # W / E lines
    lines: dict[str, int] = field(default_factory=dict)  # fact name -> line

    @property
    def kv_buffer_mib(self) -> float | None:
        """Sum of the ``KV buffer size`` lines over devices; None when the log has none (default
        verbosity)."""
        kv = [b.mib for b in self.buffers if b.kind == "KV"]
        return sum(kv) if kv else None


def _f(s: str) -> float:
    return float(s)


def _elapsed(m: re.Match[str]) -> float | None:
    if m["m"] is None:
        return None
    us = ((int(m["m"]) * 60 + int(m["s"])) * 1000 + int(m["ms"])) * 1000 + int(m["us"])
    return us / 1e6


def _strict(path: str, no: int, key: str, body: str, expected: str) -> re.Match[str]:
    m = _P[key].match(body)
    if not m:
        raise ParseError(path, no, f"expected '{expected}', got: {clip(body, 120)}")
    return m


class _State:
    def __init__(self, path: str, line_count: int):
        self.path = path
        self.log = LlamacppServerLog(path=path, line_count=line_count)
        self.open: dict[tuple[int, int], SlotTiming] = {}  # block started, no total yet
        self.last_done: dict[tuple[int, int], SlotTiming] = {}

    def set(self, name: str, value: object, no: int) -> None:
        if name not in self.log.lines:
            setattr(self.log, name, value)
            self.log.lines[name] = no


def _slot_line(st: _State, no: int, t: float | None, m: re.Match[str]) -> None:
    path = st.path
    func, body = m["func"], m["body"].strip()
    slot_id, task_id = int(m["id"]), int(m["task"])
    key = (slot_id, task_id)
    if func == "release" or body.startswith("stop processing:"):
        r = _strict(path, no, "release", body, "stop processing: n_tokens = N, truncated = 0|1")
        st.log.releases.append(SlotRelease(no, t, slot_id, task_id, int(r["n"]), r["t"] != "0"))
        return
    if func == "launch_slot_" and body.startswith("processing task"):
        _strict(path, no, "launch", body, "processing task[, is_child = N]")
        st.log.launches.append(SlotLaunch(no, t, slot_id, task_id))
        return
    if func == "print_timing":
        _timing_line(st, no, t, key, body)


def _timing_line(st: _State, no: int, t: float | None, key: tuple[int, int], body: str) -> None:
    """One line of a slot's ``print_timing`` block: prompt eval, eval, total, graphs reused, progress; any
    other (speculative-decoding stats in newer builds) is kept, not dropped."""
    path = st.path
    slot_id, task_id = key
    if body.startswith("prompt eval time"):
        if key in st.open:
            raise ParseError(
                path,
                no,
                f"new timing block for slot {slot_id} task {task_id} before the one at "
                f"line {st.open[key].line} ended",
            )
        r = _strict(path, no, "prompt", body, "prompt eval time = X ms / N tokens (…)")
        st.open[key] = SlotTiming(
            no, t, slot_id, task_id, _f(r["ms"]), int(r["n"]), _f(r["mspt"]), _f(r["tps"])
        )
    elif body.startswith("eval time"):
        block = st.open.get(key)
        if block is None or block.eval_ms is not None:
            raise ParseError(
                path, no, f"'eval time' for slot {slot_id} task {task_id} without its 'prompt eval'"
            )
        r = _strict(path, no, "eval", body, "eval time = X ms / N tokens (…)")
        block.eval_ms, block.eval_tokens = _f(r["ms"]), int(r["n"])
        block.eval_ms_per_token, block.eval_tokens_per_s = _f(r["mspt"]), _f(r["tps"])
    elif body.startswith("total time"):
        _total_line(st, no, key, body)
    elif body.startswith("graphs reused"):
        r = _strict(path, no, "graphs", body, "graphs reused = N")
        done = st.last_done.get(key)
        if done is None or done.graphs_reused is not None:
            raise ParseError(
                path, no, f"'graphs reused' for slot {slot_id} task {task_id} outside a timing block"
            )
        done.graphs_reused = int(r["n"])
    elif body.startswith("n_gen ="):
        r = _strict(path, no, "progress", body, "n_gen = N, tg = X t/s, tg_3s = Y t/s")
        st.log.progress.append(SlotProgress(no, t, slot_id, task_id, int(r["n"]), _f(r["tg"]), _f(r["tg3"])))
    else:
        target = st.open.get(key) or st.last_done.get(key)
        if target is not None:
            k, _, v = body.partition("=")
            target.extra[k.strip() or body] = v.strip()


def _total_line(st: _State, no: int, key: tuple[int, int], body: str) -> None:
    """A timing block's ``total time`` line: the block is complete."""
    block = st.open.get(key)
    if block is None or block.eval_ms is None:
        raise ParseError(st.path, no, f"'total time' for slot {key[0]} task {key[1]} without its eval lines")
    r = _strict(st.path, no, "total", body, "total time = X ms / N tokens")
    block.total_ms, block.total_tokens = _f(r["ms"]), int(r["n"])
    del st.open[key]
    st.log.timings.append(block)
    st.last_done[key] = block


def _server_line(st: _State, no: int, body: str) -> None:
    """A ``srv`` line: the slots and their context at start-up, the model's path."""
    path = st.path
    if body.startswith("initializing, n_slots"):
        r = _strict(
            path, no, "init", body, "initializing, n_slots = N, n_ctx_slot = C, kv_unified = 'true|false'"
        )
        st.set("n_slots", int(r["n"]), no)
        st.set("n_ctx_slot", int(r["c"]), no)
        if r["u"] not in ("true", "false"):
            raise ParseError(path, no, f"kv_unified should be 'true' or 'false', got {r['u']!r}")
        st.set("kv_unified", r["u"] == "true", no)
    elif body.startswith("loading model '"):
        r = _strict(path, no, "loading", body, "loading model '<path>'")
        st.set("model_path", r["p"], no)


def _other_line(st: _State, no: int, msg: str) -> None:
    path = st.path
    m = _SRV.match(msg)
    if m:
        _server_line(st, no, m["body"].strip())
        return
    if " buffer size = " in msg and msg.endswith("MiB"):
        r = _strict(path, no, "buffer", msg, "<func>: <device> KV|model|compute|output buffer size = X MiB")
        st.log.buffers.append(DeviceBuffer(no, r["kind"], r["dev"], _f(r["mib"]), r["func"]))
        return
    if msg.startswith("llama_kv_cache") and ": size = " in msg:
        r = _strict(
            path, no, "kv_size", msg, "llama_kv_cache: size = X MiB (N cells, L layers, s/S seqs), K (t): …"
        )
        st.set("kv_cache_mib", _f(r["mib"]), no)
        st.set("kv_cache_cells", int(r["cells"]), no)
        st.set("kv_cache_layers", int(r["layers"]), no)
        st.set("kv_k_type", r["kt"], no)
        st.set("kv_v_type", r["vt"], no)
        return
    m = _P["ctx_param"].match(msg)
    if m:
        st.log.context_params.setdefault(m["k"], m["v"].strip())
        st.log.lines.setdefault(f"ctx:{m['k']}", no)  # the line of each context parameter, to cite it
        return
    if "build" in msg and "build_number" not in st.log.lines:
        for key in ("build_b", "build_c", "build_a"):
            build = _P[key].search(msg)
            if build:
                st.set("build_number", int(build["n"]), no)
                st.set("build_commit", build["c"], no)
                return
    if "n_threads = " in msg and ("threadpool init" in msg or msg.startswith("system info")):
        threads = _P["threads"].search(msg)
        if threads:
            st.set("n_threads", int(threads["n"]), no)


def _parse(source: str | Path | bytes, path: str) -> LlamacppServerLog:
    """One pass over the lines as they are read (a log of hundreds of MB is never held whole)."""
    st = _State(path, 0)
    no = 0
    # Byte tokens make the server print partial UTF-8 in dumped model output; facts are ASCII, so those bytes
    # are replaced rather than refused.
    for no, raw in iter_lines(source, path, errors="replace", drop_cut_tail=True):
        for seg in raw.split("\r"):
            pm = _PREFIX.match(seg)
            if pm is None:  # pragma: no cover - the pattern matches any string
                continue
            msg = pm["msg"].rstrip()
            if not msg:
                continue
            t = _elapsed(pm)
            level = pm["lvl"]
            if level in ("W", "E") and pm["m"] is not None:
                st.log.warnings.append(LogLine(no, t, level, msg))
            sm = _SLOT.match(msg)
            if sm:
                _slot_line(st, no, t, sm)
            elif pm["m"] is not None or msg.startswith(("srv ", "llama_", "load_tensors", "main:", "build")):
                _other_line(st, no, msg)
    st.log.line_count = no
    if st.open:
        block = min(st.open.values(), key=lambda b: b.line)
        raise ParseError(
            path,
            block.line,
            f"timing block of slot {block.slot_id} task {block.task_id} has no "
            f"'total time' line (log truncated?)",
        )
    return st.log


def parse_llamacpp_log_bytes(data: bytes, path: str | Path = "<bytes>") -> LlamacppServerLog:
    return _parse(data, str(path))


def parse_llamacpp_log(path: str | Path) -> LlamacppServerLog:
    """The log at ``path``, streamed line by line."""
    return _parse(path, str(path))
