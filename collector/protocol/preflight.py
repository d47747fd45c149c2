"""Pre-flight: everything ``collector run`` can check before it creates a run folder, one line per problem.

A plan that cannot work must fail here, in a second, with the field to fix — not minutes later in a raw run
sealed as failed (a typo'd path), nor as a "complete" run whose every request got HTTP 400 (token ids past
the vocabulary). Checked, in this order, the first problem raised as a ``PreflightError``:

1. plan values in range (``_ranges``: counts, lengths, token ids, rates, the sampling interval ≥ 0.1 s, drain,
   timeouts; finite: TOML allows ``inf`` and ``nan``) and an attached server's URL well-formed;
2. the raw store's root can be written;
3. the engine's executable (``llama-server`` / the vLLM python) and the model path exist;
4. the port is free (after stopping a server an earlier, dead collector left on it:
``collector.protocol.server``),
   else the error names the process holding it;
5. the prompt token ids ``[low, high)`` lie inside the model's vocabulary (GGUF metadata, the model folder's
   ``config.json``, else the theory's config);
6. every point's longest request fits the context a request gets (``[model].max_model_len``, else the engine
   flags, else the model's trained context): the longest prompt the workload can draw (the shared prefix +
   the top of the input length distribution, or the dataset's longest prompt when its text can be encoded
   here) + the longest output (the distribution's top, or the dataset's longest reply), times the turns of a
   conversation (the last turn sends every earlier prompt and reply); chat-template tokens are not counted;
7. every flag in ``[server].args`` is one the installed engine knows: llama-server's ``--help`` is read once;
   for vLLM, whose ``--help`` takes tens of seconds to import, the flag must appear in the installed vllm
   package's source (an option's dashed name or its field's identifier) — that catches flags of another
   version (``--enable-mfu-metrics`` on an older vLLM), not a flag given a wrong value.
"""

from __future__ import annotations

import json
import math
import os
import re
import struct
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO
from urllib.parse import urlsplit

from analysis.core.model_config import load_model_config
from collector.protocol import workload
from collector.protocol.checks import flag_value
from collector.protocol.server import describe_pid, port_free, port_owner_pids, stop_recorded_orphan
from collector.raw.errors import AnatomyError, RunError
from collector.raw.plan import Plan, PointPlan

# `llama-server --help` answers in well under a second and finding vllm's folder imports nothing: a binary
# silent for 10 s hangs (the start-up then fails at once instead of after a minute)
HELP_TIMEOUT_S = 10.0
# A hub id ("Qwen/Qwen2.5-7B-Instruct"): vLLM downloads it, so it need not exist on disk.
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
_FLAG = re.compile(r"^--?[A-Za-z]")
_HELP_FLAG = re.compile(r"(?<![\w-])(--?[A-Za-z][\w-]*)")


class PreflightError(RunError):
    """A plan or machine problem found before any run folder exists; the message names what to fix."""


@dataclass
class Preflight:
    """What pre-flight found: notes for the console (an orphan stopped, a check skipped) and the facts
    used."""

    notes: list[str] = field(default_factory=list)
    vocab_size: int | None = None
    vocab_source: str | None = None
    context_tokens: int | None = None
    context_source: str | None = None


def preflight(plan: Plan, raw_root: Path) -> Preflight:
    """Run every check (module docstring); raise PreflightError on the first problem."""
    pf = Preflight()
    check_values(plan)
    check_raw_root(Path(raw_root))
    sp = plan.server
    if not sp.attach:
        check_paths(plan)
        note = stop_recorded_orphan(sp.port, grace_s=sp.stop_timeout_s)
        if note:
            pf.notes.append(note)
        check_port(sp.port)
    check_vocabulary(plan, pf)
    check_lengths(plan, pf)
    if not sp.attach:
        pf.notes.extend(check_flags(plan))
    return pf


# -- 1. values ---------------------------------------------------------------------------------------------


# The ranges a plan's numbers must lie in (inclusive). Upper bounds are far above any real measurement and
# below what would exhaust this machine before the first request (a list of 10^9 requests, a 2^70 token id
# numpy cannot draw, a sampler polling every microsecond, a drain of 30 years).
MAX_REQUESTS = 1_000_000  # per point (a rate point: request_rate × duration_s when max_requests is not set)
MAX_CONCURRENCY = 65_536
MAX_TOKENS = 10_000_000  # any length in tokens (input, output, prefix, stddev, max_model_len)
MAX_TOKEN_ID = 2**31  # no vocabulary is larger; numpy draws ids as int64
MAX_SEED = 2**63 - 1
MAX_RATE_REQ_S = 100_000.0
MIN_INTERVAL_S = 0.1  # the sampler's scrape interval: a /metrics scrape itself takes milliseconds
DAY_S = 86_400.0


def _ranges(plan: Plan) -> list[tuple[str, float | None, float, float]]:
    """(field, value, lowest, highest) of every bounded number of the plan but the points'."""
    sp, m, ld, wl = plan.server, plan.model, plan.load, plan.workload
    return [
        ("[server].port", None if sp.attach else sp.port, 1, 65_535),
        ("[server].startup_timeout_s", sp.startup_timeout_s, 1.0, DAY_S),
        ("[server].stop_timeout_s", sp.stop_timeout_s, 0.1, 3_600.0),
        ("[sampling].interval_s", plan.sampling.interval_s, MIN_INTERVAL_S, 3_600.0),
        ("[load].drain_s", ld.drain_s, 0.0, 3_600.0),
        ("[load].request_timeout_s", ld.request_timeout_s, 0.1, DAY_S),
        ("[load].read_timeout_s", ld.read_timeout_s, 0.1, DAY_S),
        ("[load].shards", ld.shards, 0, 1_024),
        ("[model].token_id_range high", m.token_id_high, 1, MAX_TOKEN_ID),
        ("[model].kv_pool_gib", m.kv_pool_gib, 0.0, 1e6),
        ("[model].max_model_len", m.max_model_len, 1, MAX_TOKENS),
        ("[model].block_size", m.block_size, 1, 65_536),
        ("[workload].prefix_len", wl.prefix_len, 0, MAX_TOKENS),
        ("[workload].num_prefixes", wl.num_prefixes, 1, MAX_REQUESTS),
        ("[workload].turns", wl.turns, 1, 1_000),
        ("[workload].turn_delay_ms", wl.turn_delay_ms, 0.0, DAY_S * 1e3),
        ("[workload].input_stddev", wl.input_stddev, 0.0, MAX_TOKENS),
        ("[workload].output_stddev", wl.output_stddev, 0.0, MAX_TOKENS),
    ]


def _point_ranges(pt: PointPlan) -> list[tuple[str, float | None, float, float]]:
    """(field, value, lowest, highest) of one point's bounded numbers."""
    out: list[tuple[str, float | None, float, float]] = [
        ("input_len", pt.input_len, 1, MAX_TOKENS),
        ("output_len", pt.output_len, 1, MAX_TOKENS),
        ("seed", pt.seed, 0, MAX_SEED),
    ]
    r = pt.rate
    if r is None:
        return [
            ("concurrency", pt.concurrency, 1, MAX_CONCURRENCY),
            ("requests", pt.requests, 1, MAX_REQUESTS),
            *out,
        ]
    sends = r.max_requests or (r.request_rate * r.duration_s if r.duration_s else None)
    return [
        *out,
        ("request_rate", r.request_rate, 1e-6, MAX_RATE_REQ_S),
        ("max_concurrency", r.max_concurrency, 1, MAX_CONCURRENCY),
        ("burstiness", r.burstiness, 1e-3, 1e3),
        ("ramp_up_start_rps", r.ramp_up_start_rps, 0.0, MAX_RATE_REQ_S),
        ("ramp_up_duration_s", r.ramp_up_duration_s, 0.0, DAY_S),
        ("duration_s", r.duration_s, 0.001, DAY_S),
        ("requests it sends (max_requests, else request_rate × duration_s)", sends, 1, MAX_REQUESTS),
    ]


def _in_range(where: str, v: float | None, lo: float, hi: float) -> None:
    if v is None:
        return
    if isinstance(v, float) and not math.isfinite(v):
        raise PreflightError(f"{where}: must be a finite number, got {v!r}")
    if not lo <= v <= hi:
        raise PreflightError(f"{where}: must be in {_num(lo)}..{_num(hi)}, got {_num(v)}")


def _num(v: float) -> str:
    """A bound or value as a reader checks it: integers in full with thousands separators, floats short."""
    return f"{v:,}" if isinstance(v, int) else f"{v:g}"


def check_values(plan: Plan) -> None:
    """Every number of the plan within its range (``_ranges``, ``_point_ranges``), and an attached
    server's ``url`` a well-formed http(s) URL with a host and a valid port (``check_url``)."""
    f = plan.path
    for name, v, lo, hi in _ranges(plan):
        _in_range(f"{f}: {name}", v, lo, hi)
    for pt in plan.points:
        for name, v, lo, hi in _point_ranges(pt):
            _in_range(f"{f}: [[phase]] {pt.phase!r}, point {pt.point_id}: {name}", v, lo, hi)
    if plan.server.url is not None:
        check_url(f, plan.server.url)


def check_url(f: Path, url: str) -> None:
    """An attached server's URL: http(s), a host, a port in 1..65535 (an impossible port would make the
    collector wait its whole start-up timeout for a server that cannot be there)."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as err:
        raise PreflightError(f"{f}: [server].url: {url!r} is not a URL ({err})") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise PreflightError(f"{f}: [server].url: expected http://host:port, got {url!r}")
    if port == 0:
        raise PreflightError(f"{f}: [server].url: port must be 1..65535, got 0")


# -- 2. raw root ---------------------------------------------------------------------------------------------


def check_raw_root(root: Path) -> None:
    """The nearest existing folder on the way to ``root`` must be a writable directory."""
    p = root.absolute()
    while not p.exists():
        p = p.parent
    if not p.is_dir():
        raise PreflightError(f"{root}: cannot hold a raw store: {p} is not a directory")
    if not os.access(p, os.W_OK | os.X_OK):
        raise PreflightError(f"{root}: the raw store is not writable ({p}: permission denied or read-only)")
    try:
        if os.statvfs(p).f_flag & os.ST_RDONLY:
            raise PreflightError(f"{root}: the raw store is on a read-only file system ({p})")
    except OSError:
        pass


# -- 3. paths ----------------------------------------------------------------------------------------------


def check_paths(plan: Plan) -> None:
    sp, f = plan.server, plan.path
    exe, key = (sp.binary, "binary") if sp.engine == "llamacpp" else (sp.python, "python")
    if exe is None or not exe.exists():
        raise PreflightError(f"{f}: [server].{key}: {exe} does not exist")
    if not exe.is_file() or not os.access(exe, os.X_OK):
        raise PreflightError(f"{f}: [server].{key}: {exe} is not an executable file")
    if sp.model is None:
        raise PreflightError(f"{f}: [server].model: missing (a server the collector starts needs a model)")
    model = Path(sp.model).expanduser()
    if model.exists():
        if sp.engine == "llamacpp" and not model.is_file():
            raise PreflightError(f"{f}: [server].model: {model} is not a file (llama-server needs a .gguf)")
        return
    if sp.engine == "vllm" and _HUB_ID.match(sp.model) and not sp.model.startswith("."):
        return  # a hub id: vLLM fetches it
    raise PreflightError(f"{f}: [server].model: {model} does not exist")


# -- 4. port -----------------------------------------------------------------------------------------------


def check_port(port: int) -> None:
    if port_free(port):
        return
    owners = port_owner_pids(port)
    who = describe_pid(owners[0]) if owners else "another process (not visible in /proc)"
    raise PreflightError(f"port {port} is already in use by {who}: stop it, or choose another [server].port")


# -- 5. vocabulary -----------------------------------------------------------------------------------------


def _config_json(model_dir: Path) -> dict | None:
    p = model_dir / "config.json"
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict):
        return None
    # multimodal configs keep the language model's numbers under text_config
    return data.get("text_config") if isinstance(data.get("text_config"), dict) else data


def _served_model(plan: Plan) -> Path | None:
    sp = plan.server
    if sp.attach or not sp.model:
        return None
    p = Path(sp.model).expanduser()
    return p if p.exists() else None


def model_limits(plan: Plan) -> dict[str, tuple[int, str]]:
    """``{"vocab": (n, source), "context": (n, source)}`` from the served model itself where it can be read
    (GGUF metadata, the folder's config.json), else from the theory's config."""
    out: dict[str, tuple[int, str]] = {}
    model = _served_model(plan)
    if model is not None and model.is_file() and model.suffix == ".gguf":
        meta = read_gguf_meta(model)
        arch = meta.get("general.architecture")
        n_tokens = meta.get("tokenizer.ggml.tokens")
        vocab = meta.get(f"{arch}.vocab_size") or n_tokens
        if isinstance(vocab, int):
            out["vocab"] = (vocab, f"{model} (GGUF metadata)")
        ctx = meta.get(f"{arch}.context_length")
        if isinstance(ctx, int):
            out["context"] = (ctx, f"{model} (GGUF {arch}.context_length)")
    elif model is not None and model.is_dir():
        cfg = _config_json(model)
        if cfg is not None:
            if isinstance(cfg.get("vocab_size"), int):
                out["vocab"] = (cfg["vocab_size"], f"{model / 'config.json'} vocab_size")
            if isinstance(cfg.get("max_position_embeddings"), int):
                out["context"] = (
                    cfg["max_position_embeddings"],
                    f"{model / 'config.json'} max_position_embeddings",
                )
    if "vocab" not in out or "context" not in out:
        try:
            mc = load_model_config(plan.model.config)
        except (AnatomyError, OSError, ValueError):
            mc = None  # the prediction step reports a bad config; it is not this check's to refuse
        if mc is not None:
            out.setdefault("vocab", (mc.vocab_size, f"[model].config {plan.model.config} vocab_size"))
            if mc.max_position_embeddings:
                out.setdefault(
                    "context",
                    (
                        mc.max_position_embeddings,
                        f"[model].config {plan.model.config} max_position_embeddings",
                    ),
                )
    return out


def check_vocabulary(plan: Plan, pf: Preflight) -> None:
    limits = model_limits(plan)
    if "vocab" not in limits:
        pf.notes.append("token-id range not checked: no vocabulary size found (model or [model].config)")
        return
    n, source = limits["vocab"]
    pf.vocab_size, pf.vocab_source = n, source
    high = plan.model.token_id_high
    if high > n:
        raise PreflightError(
            f"{plan.path}: [model].token_id_range [{plan.model.token_id_low}, {high}) reaches past the "
            f"vocabulary of {n} tokens ({source}): ids must stay below {n}"
        )


# -- 6. lengths --------------------------------------------------------------------------------------------


def _int_flag(args: Sequence[str], *names: str) -> int | None:
    v = flag_value(args, *names)
    return int(v) if v is not None and v.isdigit() else None


def request_context(plan: Plan) -> tuple[int, str] | None:
    """Tokens one request may hold (prompt + output) and where that number comes from."""
    m, sp = plan.model, plan.server
    if m.max_model_len:
        return m.max_model_len, "[model].max_model_len"
    if sp.engine == "vllm" and (n := _int_flag(sp.args, "--max-model-len")):
        return n, "--max-model-len"
    if sp.engine == "llamacpp":
        ctx = _int_flag(sp.args, "-c", "--ctx-size")
        slots = _int_flag(sp.args, "-np", "--parallel")
        unified = any(a in ("-kvu", "--kv-unified") for a in sp.args)
        if ctx and slots and not unified:
            return ctx // slots, f"-c {ctx} / -np {slots} (context per slot)"
        if ctx:
            return ctx, f"-c {ctx}"
    lim = model_limits(plan).get("context")
    return lim


def _drawn(name: str, length: int, ratio: float, stddev: float) -> tuple[int, str]:
    """The longest length a distribution draws and how it reads: ``input_len 24``, or ``input up to 30
    (input_len 24, input_range_ratio 0.25)``."""
    top = workload.max_length(length, ratio, stddev)
    if ratio:
        return top, f"{name} up to {top} ({name}_len {length}, {name}_range_ratio {ratio:g})"
    if stddev:
        return top, f"{name} up to {top} ({name}_len {length}, {name}_stddev {stddev:g})"
    return top, f"{name}_len {length}"


def check_lengths(plan: Plan, pf: Preflight) -> None:
    ctx = request_context(plan)
    if ctx is None:
        pf.notes.append("request lengths not checked: no max_model_len, context flag or model context found")
        return
    n, source = ctx
    pf.context_tokens, pf.context_source = n, source
    w = plan.workload
    spec = workload.spec_from_plan(plan)
    ds_prompt: int | None = None
    ds_reply: int | None = None
    if spec.dataset is not None:
        ds_prompt, ds_reply = workload.dataset_max_lengths(spec)
        if ds_prompt is None:
            pf.notes.append(
                f"dataset prompt lengths not checked: {spec.dataset}'s text cannot be encoded here (no "
                "tokenizer, or no tokenizers package); only the prefix and output lengths are"
            )
    for pt in plan.points:
        parts: list[str] = []
        prompt_tokens = 0
        if w.prefix_len:
            prompt_tokens += w.prefix_len
            parts.append(f"prefix_len {w.prefix_len}")
        if spec.dataset is None:
            top, how = _drawn("input", pt.input_len, w.input_range_ratio, w.input_stddev)
            prompt_tokens += top
            parts.append(how)
        elif ds_prompt is not None:
            prompt_tokens += ds_prompt
            parts.append(f"the dataset's longest prompt {ds_prompt}")
        if spec.output_from_dataset:
            assert ds_reply is not None
            out_tokens, how = ds_reply, f"the dataset's longest reply {ds_reply}"
        else:
            out_tokens, how = _drawn("output", pt.output_len, w.output_range_ratio, w.output_stddev)
        parts.append(how)
        total = w.turns * (prompt_tokens + out_tokens)
        if total <= n:
            continue
        llama_overload = plan.server.engine == "llamacpp" and pt.kind == "overload"
        if llama_overload and w.turns == 1 and prompt_tokens < n:
            # llama.cpp's way of running out of KV: the prompt fits its slot, generation stops when the slot
            # is full (finish_reason "length", fewer tokens than asked) — an overload measures exactly that
            pf.notes.append(
                f"point {pt.point_id}: {prompt_tokens} + {out_tokens} tokens exceed the {n} a slot holds "
                f"({source}): each request stops after {n - prompt_tokens} tokens, "
                "its output check fails by design"
            )
            continue
        how = " + ".join(parts)
        turns = ""
        if w.turns > 1:
            how = f"{w.turns} turns x ({how})"
            turns = "; a conversation's last turn sends every earlier prompt and reply again"
        raise PreflightError(
            f"{plan.path}: [[phase]] {pt.phase!r}, point {pt.point_id}: {how} = {total} tokens exceeds the "
            f"{n} a request may hold ({source}){turns}"
        )


# -- 7. engine flags ---------------------------------------------------------------------------------------


def plan_flags(args: Sequence[str]) -> list[str]:
    """The option names among the server args (``--x=1`` → ``--x``; values such as ``-1`` are not options)."""
    return [a.split("=", 1)[0] for a in args if _FLAG.match(a)]


def llamacpp_known_flags(binary: Path) -> set[str] | None:
    """Every option name ``llama-server --help`` prints; None when it cannot be run."""
    try:
        p = subprocess.run(
            [str(binary), "--help"],
            capture_output=True,
            text=True,
            errors="replace",
            timeout=HELP_TIMEOUT_S,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    flags = set(_HELP_FLAG.findall(p.stdout + p.stderr))
    return flags if len(flags) > 5 else None


def vllm_source_dir(python: Path) -> Path | None:
    """The installed vllm package's folder, found without importing vllm (which takes tens of seconds)."""
    code = "import importlib.util as u; s = u.find_spec('vllm'); print(s.submodule_search_locations[0])"
    try:
        p = subprocess.run(
            [str(python), "-c", code],
            capture_output=True,
            text=True,
            timeout=HELP_TIMEOUT_S,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    d = Path(p.stdout.strip()) if p.returncode == 0 else None
    return d if d is not None and d.is_dir() else None


def vllm_unknown_flags(src: Path, flags: Sequence[str]) -> list[str]:
    """The flags whose dashed name (``"--max-model-len"``) and identifier (``max_model_len``) appear nowhere
    in vllm's source (``--no-X`` is looked up as ``X``: argparse's BooleanOptionalAction makes it)."""
    wanted: dict[str, tuple[str, ...]] = {}
    for fl in flags:
        if fl.startswith("--"):
            name = fl[2:].removeprefix("no-")
            wanted[fl] = (f"--{name}", name.replace("-", "_"))
        else:  # -tp, -O3: the short option as a string literal
            wanted[fl] = (f'"{fl}"', f'"{fl[:2]}"')
    missing = set(wanted)
    for py in src.rglob("*.py"):
        if not missing:
            break
        try:
            text = py.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        for fl in list(missing):
            if any(needle in text for needle in wanted[fl]):
                missing.discard(fl)
    return [fl for fl in flags if fl in missing]


def check_flags(plan: Plan) -> list[str]:
    """Refuse a flag the installed engine does not know; notes when the check could not be made."""
    sp = plan.server
    flags = plan_flags(sp.args)
    if not flags:
        return []
    exe = sp.binary if sp.engine == "llamacpp" else sp.python
    if exe is None:  # check_paths refused it before
        return []
    if sp.engine == "llamacpp":
        known = llamacpp_known_flags(exe)
        if known is None:
            return [f"server flags not checked: `{sp.binary} --help` gave no option list"]
        unknown = [fl for fl in flags if fl not in known]
        where = f"`{sp.binary} --help` does not list it"
    else:
        src = vllm_source_dir(exe)
        if src is None:
            return [f"server flags not checked: no vllm package found for {sp.python}"]
        unknown = vllm_unknown_flags(src, flags)
        where = f"the vllm installed for {sp.python} ({src}) has no such option"
    if unknown:
        raise PreflightError(f"{plan.path}: [server].args: {unknown[0]}: unknown flag ({where})")
    return []


# -- GGUF metadata -----------------------------------------------------------------------------------------

# GGUF value types: 0 u8, 1 i8, 2 u16, 3 i16, 4 u32, 5 i32, 6 f32, 7 bool, 8 string, 9 array, 10 u64, 11 i64,
# 12 f64 (https://github.com/ggml-org/ggml/blob/master/docs/gguf.md).
_SCALAR = {
    0: "<B",
    1: "<b",
    2: "<H",
    3: "<h",
    4: "<I",
    5: "<i",
    6: "<f",
    7: "<?",
    10: "<Q",
    11: "<q",
    12: "<d",
}
_WANT_SUFFIXES = (".vocab_size", ".context_length")


def _read(f: BinaryIO, fmt: str) -> int | float | bool:
    size = struct.calcsize(fmt)
    b = f.read(size)
    if len(b) != size:
        raise EOFError
    return struct.unpack(fmt, b)[0]


def _skip_string(f: BinaryIO) -> None:
    f.seek(int(_read(f, "<Q")), os.SEEK_CUR)


def _string(f: BinaryIO) -> str:
    n = int(_read(f, "<Q"))
    if n > 1 << 20:
        raise ValueError("string too long")
    return f.read(n).decode("utf-8", "replace")


def read_gguf_meta(path: Path) -> dict[str, object]:
    """The few metadata values pre-flight needs from a GGUF header, read without loading the file:
    ``general.architecture``, ``<arch>.vocab_size``, ``<arch>.context_length`` and the *length* of
    ``tokenizer.ggml.tokens`` (the vocabulary). A file that is not GGUF gives {}."""
    out: dict[str, object] = {}
    try:
        with open(path, "rb") as f:
            if f.read(4) != b"GGUF" or _read(f, "<I") not in (2, 3):
                return {}
            _read(f, "<Q")  # tensor count
            n_kv = int(_read(f, "<Q"))
            for _ in range(n_kv):
                if not _gguf_kv(f, out):
                    break
    except (OSError, EOFError, ValueError, struct.error):
        pass
    return out


def _gguf_kv(f: BinaryIO, out: dict[str, object]) -> bool:
    """One key/value of the header: kept in ``out`` when pre-flight needs it, else skipped; False when the
    rest cannot be skipped (nested arrays, an unknown type: nothing pre-flight needs lies beyond)."""
    key = _string(f)
    vtype = int(_read(f, "<I"))
    if vtype == 9:
        etype, count = int(_read(f, "<I")), int(_read(f, "<Q"))
        if key == "tokenizer.ggml.tokens":
            out[key] = count
        if etype == 8:
            for _ in range(count):
                _skip_string(f)
        elif etype in _SCALAR:
            f.seek(count * struct.calcsize(_SCALAR[etype]), os.SEEK_CUR)
        else:
            return False
    elif vtype == 8:
        text = _string(f)
        if key == "general.architecture":
            out[key] = text
    elif vtype in _SCALAR:
        value = _read(f, _SCALAR[vtype])
        if key.endswith(_WANT_SUFFIXES):
            out[key] = int(value)
    else:
        return False
    return True
