"""A measurement plan (TOML) as typed, validated dataclasses: ``load_plan(path) -> Plan``.

Unknown keys are errors (a misspelt flag must not silently fall back to a default); every error names the
file and the field. Relative paths in a plan are taken relative to the directory ``collector run`` is started
from (plans are written to be run from the repository root), and are resolved once, here.
"""

from __future__ import annotations

import dataclasses
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from collector.raw.errors import PlanError
from collector.raw.metric_families import SCRAPE_READ_MAX_BYTES, SCRAPE_STORED_MAX_BYTES

# "openai": any OpenAI-compatible server (SGLang, TGI, TensorRT-LLM, a gateway), attached only; the checks
# that need to know the engine are recorded as skipped unless its /metrics names it (collector.checks)
ENGINES = ("vllm", "llamacpp", "openai")
LOOPS = ("asyncio", "uvloop")  # [load] loop: the load client's event loop (uvloop: the extra of that name)
TRANSPORTS = ("aiohttp", "httpcore")  # [load] transport: under httpx, aiohttp's or httpx's own
ENDPOINTS = ("completions", "chat")  # AIPerf's --endpoint-type names (vllm bench: openai, openai-chat)
PREFIX_CACHE = ("off", "on", "any")
LOAD_BACKENDS = ("local", "ray")  # where the load shards run (collector.protocol.ray_backend for "ray")
PHASE_KINDS = ("warmup", "concurrency", "length", "overload", "rate")
ARRIVALS = ("poisson", "gamma", "constant")  # AIPerf's --arrival-pattern values
RAMP_UP_STRATEGIES = ("linear",)  # vllm bench serve's --ramp-up-strategy (its "exponential" is not built)
# per-request SLOs a plan may state for goodput ([slo]; `collector analyze --slo` wins), ms, by vllm bench
# serve's --goodput names (ttft, tpot, e2el) with AIPerf's itl beside: analysis.metrics.meets_slos judges them
SLO_METRICS = ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms")
# [[experiment]] (issue #21): the knob an experiment varies, as a plan states it — a server flag's value
# ("arg"), a flag's presence ("flag": on/off), a server environment variable ("env": "unset" when absent), a
# [model] key ("model")
KNOB_KINDS = ("arg", "flag", "env", "model")
# a prediction: a bound [lo, hi], a point value (a predicted change), or a value analysis recomputes from the
# byte ledger ("ledger")
PREDICTION_KINDS = ("bound", "point", "ledger")
_MISSING = object()


@dataclass(frozen=True)
class ServerPlan:
    engine: str
    port: int
    url: str | None = None  # attach to a running server instead of starting one
    binary: Path | None = None  # llama.cpp: the llama-server executable
    python: Path | None = None  # vLLM: the venv's python (the server runs as ``python -m vllm...``)
    model: str | None = None  # model file/dir passed to the server
    served_model_name: str = ""  # the "model" field of each request
    args: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    startup_timeout_s: float = 300.0
    stop_timeout_s: float = 20.0
    # the engine's prefix (prompt) cache: "off" (checked at start-up: the default, every request measured
    # cold), "on" (checked: a shared-prefix workload measures its reuse), "any" (not checked)
    prefix_cache: str = "off"

    @property
    def attach(self) -> bool:
        return self.url is not None

    @property
    def base_url(self) -> str:
        return (self.url or f"http://127.0.0.1:{self.port}").rstrip("/")


@dataclass(frozen=True)
class ModelPlan:
    config: str  # config.json path or bundled model name (for the theory)
    gpu: str  # GPU name from the datasheet table, or "cpu"
    token_id_low: int  # prompt ids are drawn from [token_id_low, token_id_high): printable, no special tokens
    token_id_high: int
    kv_dtype: str = "bf16"
    weight_format: str = "bf16"
    kv_pool_gib: float | None = None
    max_model_len: int | None = None
    block_size: int = 16


@dataclass(frozen=True)
class SamplingPlan:
    interval_s: float = 1.0
    metrics: bool = True
    nvidia_smi: str = "auto"  # auto: when the nvidia-smi binary exists
    # a /metrics page larger than this is stored as only the families analysis reads (metric_families)
    scrape_stored_max_bytes: int = SCRAPE_STORED_MAX_BYTES


@dataclass(frozen=True)
class LoadPlan:
    drain_s: float = 5.0  # pause between points, so one point's tail never overlaps the next
    request_timeout_s: float = 600.0  # whole request, send to last byte
    read_timeout_s: float = 120.0  # longest silence between two bytes (also the first byte)
    extra_body: dict[str, Any] = field(default_factory=dict)
    # load-client processes per point (each its own event loop; records merged on the one monotonic clock):
    # 0 = from the core count and the point's concurrency (collector.loadgen.shards_for)
    shards: int = 0
    endpoint: str = "completions"  # "completions" (/v1/completions) or "chat" (/v1/chat/completions)
    # the environment variable holding the API key (sent as "Authorization: Bearer <key>"; never written)
    api_key_env: str | None = None
    headers: dict[str, str] = field(default_factory=dict)  # extra HTTP headers of every request
    # the load client's event loop and HTTP transport (collector.protocol.eventloop / aiohttp_transport),
    # chosen by the fidelity bench (methodology page): asyncio's own loop, aiohttp under httpx's interface
    loop: str = "asyncio"
    transport: str = "aiohttp"
    # where the shards run: "local" (processes of this host) or "ray" (actors spread over a Ray cluster's
    # nodes, collector.protocol.ray_backend); the cluster's address: ray_address, else RAY_ADDRESS
    backend: str = "local"
    ray_address: str | None = None


@dataclass(frozen=True)
class WorkloadPlan:
    """``[workload]``: what each request sends beyond the point's lengths (collector.workload: the meanings
    and the peers' names). Absent: random token ids of exactly ``input_len`` on every request."""

    dataset_path: Path | None = None  # ShareGPT JSON, JSONL, or a datasets .parquet/.arrow file on disk
    tokenizer: str | None = None  # tokenizer.json or its folder; "none": send dataset text as text
    input_range_ratio: float = 0.0  # uniform lengths on [L(1-r), L(1+r)] (vllm bench --random-range-ratio)
    input_stddev: float = 0.0  # normal lengths (AIPerf --synthetic-input-tokens-stddev)
    output_range_ratio: float = 0.0
    output_stddev: float = 0.0
    prefix_len: int = 0  # shared prefix tokens before each prompt (vllm bench --random-prefix-len)
    num_prefixes: int = 1  # distinct prefixes (AIPerf --num-prefix-prompts)
    turns: int = 1  # requests per conversation (GuideLLM turns, AIPerf --conversation-turn-mean)
    turn_delay_ms: float = 0.0  # think time between turns (AIPerf --conversation-turn-delay-mean)
    # "plan": the points' output_len (and the output distribution); "dataset": each entry's reply length in
    # tokens (vllm bench serve's ShareGPT default, when --sharegpt-output-len is not given)
    output_len: str = "plan"


@dataclass(frozen=True)
class RatePlan:
    """Open-loop arrivals of one point of a ``kind = "rate"`` phase (issue #14), by the names of ``vllm bench
    serve`` where the tools agree: ``request_rate`` req/s; ``arrival`` poisson | gamma | constant (AIPerf's
    ``--arrival-pattern``); ``burstiness`` the gamma shape (vllm's ``--burstiness``: gaps are
    Gamma(shape=burstiness, scale=1/(rate·burstiness)), 1 = Poisson); ``max_concurrency`` caps the requests
    in flight (vllm's ``--max-concurrency``: a request due while the cap is full waits for a slot and is sent
    late); ``ramp_up_*`` the rate rising linearly from ``ramp_up_start_rps`` to ``request_rate`` over
    ``ramp_up_duration_s`` (vllm ramps over the run's requests, AIPerf's ``--request-rate-ramp-duration``
    over seconds: over seconds here); stop conditions ``duration_s`` (no send scheduled at or after it),
    ``max_requests`` and ``max_error_rate`` (GuideLLM's names). The send times themselves:
    ``collector.loadgen.arrival_offsets_ns``."""

    request_rate: float
    arrival: str = "poisson"
    burstiness: float = 1.0
    max_concurrency: int | None = None
    ramp_up_strategy: str | None = None
    ramp_up_start_rps: float | None = None
    ramp_up_duration_s: float | None = None
    duration_s: float | None = None
    max_requests: int | None = None
    max_error_rate: float | None = None


@dataclass(frozen=True)
class PointPlan:
    phase: str
    kind: str
    index: int  # position of this point in the whole run (0-based)
    # closed loop: the streams kept busy; a rate point: its max_concurrency, 0 when uncapped
    concurrency: int
    # closed loop: requests sent; a rate point: its max_requests, 0 when only duration_s bounds it (the
    # collector sets the scheduled count before the point starts: collector.loadgen.resolve_rate_point)
    requests: int
    input_len: int
    output_len: int
    seed: int
    expect_preemptions: str  # "none" | "some" | "any"
    rate: RatePlan | None = None  # a rate point's arrivals; None for a closed-loop point

    @property
    def point_id(self) -> str:
        load = f"c{self.concurrency:03d}" if self.rate is None else f"r{self.rate.request_rate:g}"
        return f"p{self.index:02d}-{self.phase}-{load}-i{self.input_len}-o{self.output_len}"


@dataclass(frozen=True)
class PhasePlan:
    name: str
    kind: str
    points: tuple[PointPlan, ...]


@dataclass(frozen=True)
class KnobPlan:
    """The one setting an experiment varies (``KNOB_KINDS``); ``default`` the value when a plan leaves an
    "arg" out (llama.cpp's KV type is f16 unless -ctk says otherwise)."""

    kind: str
    name: str
    default: str | None = None


@dataclass(frozen=True)
class TargetPlan:
    """Where a prediction is tested and what it says there: a point (concurrency, input length, or an arm's
    ``variant``; None = every point) and a bound [lo, hi] (None = open) or a point ``value``; ``stated``: the
    number the plan wrote where analysis recomputes it (a ledger prediction)."""

    concurrency: int | None = None
    input_len: int | None = None
    variant: str | None = None
    lo: float | None = None
    hi: float | None = None
    value: float | None = None
    stated: float | None = None


@dataclass(frozen=True)
class PredictionPlan:
    """``[[experiment.predict]]``: one numeric prediction written before the run. ``quote``: words on the plan
    line that states it (the finding cites that line of the run's plan copy); ``arm``: the plan (by name) of
    the arm it is about (default: this plan's arm); ``series``: a group of arms it is about instead (a fit
    over them); ``versus``: the baseline arm's plan (or series) of a difference."""

    name: str
    quantity: str
    kind: str
    stated: str
    quote: str
    targets: tuple[TargetPlan, ...]
    arm: str | None = None
    series: str | None = None
    versus: str | None = None


@dataclass(frozen=True)
class ExperimentPlan:
    """``[[experiment]]``: this plan as one arm of a controlled experiment. ``name``, ``item``, ``question``,
    ``hypothesis``, ``knob`` and ``arms`` (every arm's plan, by name, in order) are the experiment's and read
    the same in every arm's plan (analysis checks); ``variant`` (a label key), ``value`` (the knob's value
    this plan states), ``versus`` (the baseline arm's plan), ``series`` (the arms a fit groups), ``quote``
    (words on the plan line stating this arm's expectation), ``params`` and ``context`` (plans of earlier runs
    shown beside it) are this arm's."""

    name: str
    item: str
    question: str
    hypothesis: str
    knob: KnobPlan
    arms: tuple[str, ...]
    variant: str
    value: str
    versus: str | None = None
    series: str | None = None
    quote: str | None = None
    params: dict[str, float] = field(default_factory=dict)
    context: tuple[str, ...] = ()
    predictions: tuple[PredictionPlan, ...] = ()


@dataclass(frozen=True)
class Plan:
    path: Path
    campaign: str
    run_name: str
    server: ServerPlan
    model: ModelPlan
    sampling: SamplingPlan
    load: LoadPlan
    phases: tuple[PhasePlan, ...]
    description: str = ""
    raw_text: str = ""
    workload: WorkloadPlan = field(default_factory=WorkloadPlan)
    # [slo]: per-request SLOs (SLO_METRICS -> ms) analysis judges goodput by when no --slo is given
    slo: dict[str, float] = field(default_factory=dict)
    # [[experiment]]: the experiments this plan is an arm of (issue #21: experiments are data)
    experiments: tuple[ExperimentPlan, ...] = ()

    @property
    def points(self) -> list[PointPlan]:
        return [pt for ph in self.phases for pt in ph.points]


class _Table:
    """Typed access to one TOML table; ``done()`` rejects every key nobody asked for."""

    def __init__(self, data: Any, file: Path, where: str):
        if not isinstance(data, dict):
            raise PlanError(f"{file}: {where}: expected a table")
        self.data, self.file, self.where = data, file, where
        self.seen: set[str] = set()

    def _err(self, key: str, what: str) -> PlanError:
        return PlanError(f"{self.file}: {self.where}.{key}: {what}")

    def get(self, key: str, kind: type | tuple[type, ...], default: Any = _MISSING) -> Any:
        self.seen.add(key)
        if key not in self.data:
            if default is _MISSING:
                raise self._err(key, "missing (required)")
            return default
        v = self.data[key]
        kinds = kind if isinstance(kind, tuple) else (kind,)
        if float in kinds and isinstance(v, int) and not isinstance(v, bool):
            v = float(v)
        if isinstance(v, bool) and bool not in kinds or not isinstance(v, kinds):
            names = " or ".join(k.__name__ for k in kinds)
            raise self._err(key, f"expected {names}, got {type(v).__name__} {v!r}")
        return v

    def positive(self, key: str, kind: type, default: Any = _MISSING, zero_ok: bool = False) -> Any:
        v = self.get(key, kind, default)
        if v is not None and v is not default and (v < 0 or (v == 0 and not zero_ok)):
            raise self._err(key, f"must be {'>= 0' if zero_ok else '> 0'}, got {v!r}")
        return v

    def choice(self, key: str, choices: tuple[str, ...], default: Any = _MISSING) -> str:
        v: str = self.get(key, str, default)
        if v not in choices:
            raise self._err(key, f"must be one of {', '.join(choices)}; got {v!r}")
        return v

    def str_list(self, key: str, default: Any = _MISSING) -> tuple[str, ...]:
        v = self.get(key, list, default)
        if not all(isinstance(x, str) for x in v):
            raise self._err(key, 'expected a list of strings (quote numbers: "-np", "8")')
        return tuple(v)

    def str_dict(self, key: str) -> dict[str, str]:
        v = self.get(key, dict, {})
        bad = [k for k, x in v.items() if not isinstance(x, str)]
        if bad:
            raise self._err(f"{key}.{bad[0]}", "expected a string value")
        return dict(v)

    def sub(self, key: str, required: bool = True) -> _Table:
        self.seen.add(key)
        if key not in self.data and not required:
            return _Table({}, self.file, f"[{key}]")
        if key not in self.data:
            raise PlanError(f"{self.file}: [{key}]: missing table (required)")
        return _Table(self.data[key], self.file, f"[{key}]")

    def done(self) -> None:
        extra = sorted(set(self.data) - self.seen)
        if extra:
            raise self._err(extra[0], "unknown key (typo? see the commented plans in plans/)")


def _path(v: str | None) -> Path | None:
    return None if v is None else Path(v).expanduser()


def _server(t: _Table) -> ServerPlan:
    engine = t.choice("engine", ENGINES)
    url = t.get("url", str, None)
    port = t.positive("port", int, 8000)
    binary = _path(t.get("binary", str, None))
    python = _path(t.get("python", str, None))
    model = t.get("model", str, None)
    served = t.get("served_model_name", str, None)
    args = t.str_list("args", ())
    env = t.str_dict("env")
    sp = ServerPlan(
        engine=engine,
        port=port,
        url=url,
        binary=binary,
        python=python,
        model=model,
        served_model_name=served or (Path(model).stem if model else engine),
        args=args,
        env=env,
        startup_timeout_s=t.positive("startup_timeout_s", float, 300.0),
        stop_timeout_s=t.positive("stop_timeout_s", float, 20.0),
        prefix_cache=t.choice("prefix_cache", PREFIX_CACHE, "off"),
    )
    t.done()
    if url is None:
        if engine == "openai":
            raise t._err("url", 'missing: engine = "openai" attaches to a running server (give url = ...)')
        if model is None:
            raise t._err("model", "missing: a started server needs a model (or give url = ... to attach)")
        if engine == "llamacpp" and binary is None:
            raise t._err("binary", "missing: path of llama-server")
        if engine == "vllm" and python is None:
            raise t._err("python", "missing: path of the vLLM virtualenv's python")
    elif not url.startswith(("http://", "https://")):
        raise t._err("url", f"expected http://host:port, got {url!r}")
    elif served is None:
        raise t._err("served_model_name", "missing: an attached server needs the model name requests use")
    return sp


def _model(t: _Table) -> ModelPlan:
    rng = t.get("token_id_range", list)
    if (
        len(rng) != 2
        or not all(isinstance(x, int) and not isinstance(x, bool) for x in rng)
        or not (0 <= rng[0] < rng[1])
    ):
        raise t._err("token_id_range", f"expected [low, high) with 0 <= low < high, got {rng!r}")
    mp = ModelPlan(
        config=t.get("config", str),
        gpu=t.get("gpu", str),
        token_id_low=rng[0],
        token_id_high=rng[1],
        kv_dtype=t.get("kv_dtype", str, "bf16"),
        weight_format=t.get("weight_format", str, "bf16"),
        kv_pool_gib=t.positive("kv_pool_gib", float, None),
        max_model_len=t.positive("max_model_len", int, None),
        block_size=t.positive("block_size", int, 16),
    )
    t.done()
    return mp


def _sampling(t: _Table) -> SamplingPlan:
    sp = SamplingPlan(
        interval_s=t.positive("interval_s", float, 1.0),
        metrics=t.get("metrics", bool, True),
        nvidia_smi=t.choice("nvidia_smi", ("auto", "on", "off"), "auto"),
        scrape_stored_max_bytes=t.positive("scrape_stored_max_bytes", int, SCRAPE_STORED_MAX_BYTES),
    )
    if sp.scrape_stored_max_bytes > SCRAPE_READ_MAX_BYTES:
        raise t._err("scrape_stored_max_bytes", f"at most {SCRAPE_READ_MAX_BYTES} (the most a scrape reads)")
    t.done()
    return sp


def _load(t: _Table) -> LoadPlan:
    lp = LoadPlan(
        drain_s=t.positive("drain_s", float, 5.0, zero_ok=True),
        request_timeout_s=t.positive("request_timeout_s", float, 600.0),
        read_timeout_s=t.positive("read_timeout_s", float, 120.0),
        extra_body=t.get("extra_body", dict, {}),
        shards=t.positive("shards", int, 0, zero_ok=True),
        endpoint=t.choice("endpoint", ENDPOINTS, "completions"),
        api_key_env=t.get("api_key_env", str, None),
        headers=t.str_dict("headers"),
        loop=t.choice("loop", LOOPS, "asyncio"),
        transport=t.choice("transport", TRANSPORTS, "aiohttp"),
        backend=t.choice("backend", LOAD_BACKENDS, "local"),
        ray_address=t.get("ray_address", str, None),
    )
    t.done()
    if lp.ray_address is not None and lp.backend != "ray":
        raise t._err("ray_address", 'is the Ray cluster of backend = "ray"; this plan\'s backend is "local"')
    if lp.api_key_env is not None and not lp.api_key_env.replace("_", "").isalnum():
        raise t._err("api_key_env", f"the NAME of an environment variable, got {lp.api_key_env!r}")
    return lp


def _workload(t: _Table) -> WorkloadPlan:
    ratios = {k: t.positive(k, float, 0.0, zero_ok=True) for k in ("input_range_ratio", "output_range_ratio")}
    stddevs = {k: t.positive(k, float, 0.0, zero_ok=True) for k in ("input_stddev", "output_stddev")}
    wp = WorkloadPlan(
        dataset_path=_path(t.get("dataset_path", str, None)),
        tokenizer=t.get("tokenizer", str, None),
        prefix_len=t.positive("prefix_len", int, 0, zero_ok=True),
        num_prefixes=t.positive("num_prefixes", int, 1),
        turns=t.positive("turns", int, 1),
        turn_delay_ms=t.positive("turn_delay_ms", float, 0.0, zero_ok=True),
        output_len=t.choice("output_len", ("plan", "dataset"), "plan"),
        **ratios,
        **stddevs,
    )
    t.done()
    for side in ("input", "output"):
        if ratios[f"{side}_range_ratio"] >= 1:
            raise t._err(f"{side}_range_ratio", f"must be in [0, 1), got {ratios[side + '_range_ratio']!r}")
        if ratios[f"{side}_range_ratio"] and stddevs[f"{side}_stddev"]:
            raise t._err(
                f"{side}_stddev", f"give {side}_range_ratio (uniform) or {side}_stddev (normal), not both"
            )
    if wp.dataset_path is not None and wp.input_range_ratio + wp.input_stddev:
        raise t._err("input_range_ratio", "a dataset's prompts have their own lengths; no input distribution")
    if wp.output_len == "dataset" and wp.dataset_path is None:
        raise t._err("output_len", '"dataset" takes each entry\'s reply length: it needs a dataset_path')
    if wp.output_len == "dataset" and wp.output_range_ratio + wp.output_stddev:
        raise t._err("output_len", '"dataset" lengths are the replies\'; no output distribution beside them')
    if wp.output_len == "dataset" and wp.tokenizer == "none":
        raise t._err("output_len", '"dataset" counts each reply\'s tokens: it needs a tokenizer')
    if wp.dataset_path is not None and wp.prefix_len and wp.tokenizer == "none":
        raise t._err("prefix_len", "a prefix before dataset text is decoded from ids: it needs a tokenizer")
    return wp


def _slo(t: _Table) -> dict[str, float]:
    """The optional ``[slo]`` table: each of ``SLO_METRICS`` a positive, finite number of ms."""
    out = {k: v for k in SLO_METRICS if (v := t.get(k, float, None)) is not None}
    t.done()
    for k, v in out.items():
        if not 0 < v < float("inf"):
            raise t._err(k, f"a per-request SLO is a positive number of ms, got {v!r}")
    return out


def _name(t: _Table, key: str) -> str:
    """A name analysis keys findings by: letters, digits, '_', '.', '-' only."""
    v: str = t.get(key, str)
    if not v or not v.replace("_", "").replace("-", "").replace(".", "").isalnum():
        raise t._err(key, f"use letters, digits, '_', '.' and '-' only, got {v!r}")
    return v


def _knob(t: _Table) -> KnobPlan:
    k = KnobPlan(
        kind=t.choice("kind", KNOB_KINDS), name=t.get("name", str), default=t.get("default", str, None)
    )
    t.done()
    return k


_BOUND_KEYS = ("lo", "hi", "value")


def _target(t: _Table, kind: str, base: dict[str, float | None]) -> TargetPlan:
    """One point of a prediction; ``base``: the prediction's own lo/hi/value, which a point may override."""
    vals = {k: t.get(k, float, base[k]) for k in _BOUND_KEYS}
    tp = TargetPlan(
        concurrency=t.positive("concurrency", int, None),
        input_len=t.positive("input_len", int, None),
        variant=t.get("variant", str, None),
        stated=t.get("stated", float, None),
        **vals,
    )
    t.done()
    if kind == "bound" and tp.lo is None and tp.hi is None:
        raise t._err("lo", "missing: a bound prediction needs lo, hi or both")
    if kind == "bound" and tp.lo is not None and tp.hi is not None and tp.lo > tp.hi:
        raise t._err("hi", f"a bound [lo, hi] needs lo <= hi, got [{tp.lo:g}, {tp.hi:g}]")
    if kind == "point" and tp.value is None:
        raise t._err("value", "missing: a point prediction needs its value")
    if kind != "point" and tp.value is not None:
        raise t._err("value", f'only a kind = "point" prediction takes a value (this one is "{kind}")')
    return tp


def _targets(t: _Table, kind: str) -> tuple[TargetPlan, ...]:
    """The points a prediction names (``at``), each with the prediction's lo/hi/value unless it gives its
    own; without ``at``, one target: every point."""
    base = {k: t.get(k, float, None) for k in _BOUND_KEYS}
    raw_at = t.get("at", list, None)
    if raw_at is not None and not raw_at:
        raise t._err("at", "empty list (leave at out: every point)")
    if raw_at is None:
        return (_target(_Table({}, t.file, t.where), kind, base),)
    return tuple(_target(_Table(e, t.file, f"{t.where}.at[{i}]"), kind, base) for i, e in enumerate(raw_at))


def _prediction(t: _Table) -> PredictionPlan:
    kind = t.choice("kind", PREDICTION_KINDS)
    quote = t.get("quote", str)
    if not quote.strip():
        raise t._err("quote", "empty: give words on the plan line that states the prediction")
    p = PredictionPlan(
        name=_name(t, "name"),
        quantity=_name(t, "quantity"),
        kind=kind,
        stated=t.get("stated", str),
        quote=quote,
        targets=_targets(t, kind),
        arm=t.get("arm", str, None),
        series=t.get("series", str, None),
        versus=t.get("versus", str, None),
    )
    t.done()
    return p


def _params(t: _Table) -> dict[str, float]:
    v = t.get("params", dict, {})
    bad = [k for k, x in v.items() if isinstance(x, bool) or not isinstance(x, int | float)]
    if bad:
        raise t._err(f"params.{bad[0]}", "expected a number")
    return {k: float(x) for k, x in v.items()}


def _arms(t: _Table) -> tuple[str, ...]:
    arms = t.str_list("arms")
    if len(arms) < 2 or len(set(arms)) != len(arms):
        raise t._err("arms", "list every arm's plan (by name, at least two), each once")
    return arms


def _experiment(t: _Table) -> ExperimentPlan:
    """One ``[[experiment]]`` entry: this plan as an arm of the named experiment (``ExperimentPlan``)."""
    arms = _arms(t)
    versus = t.get("versus", str, None)
    if versus is not None and versus not in arms:
        raise t._err("versus", f"{versus!r} is not one of this experiment's arms")
    raw_preds = t.get("predict", list, [])
    preds = tuple(
        _prediction(_Table(rp, t.file, f"{t.where}.predict[{i}]")) for i, rp in enumerate(raw_preds)
    )
    if len({(p.name, p.arm, p.series) for p in preds}) != len(preds):
        raise t._err("predict", "the same prediction (name, arm, series) twice")
    e = ExperimentPlan(
        name=_name(t, "name"),
        item=t.get("item", str),
        question=t.get("question", str),
        hypothesis=t.get("hypothesis", str),
        knob=_knob(_Table(t.get("knob", dict), t.file, f"{t.where}.knob")),
        arms=arms,
        variant=_name(t, "variant"),
        value=t.get("value", str),
        versus=versus,
        series=t.get("series", str, None),
        quote=t.get("quote", str, None),
        params=_params(t),
        context=t.str_list("context", ()),
        predictions=preds,
    )
    t.done()
    return e


def _experiments(data: dict[str, Any], path: Path) -> tuple[ExperimentPlan, ...]:
    """The optional ``[[experiment]]`` array: one entry per experiment this plan is an arm of."""
    raw = data.get("experiment", [])
    if not isinstance(raw, list):
        raise PlanError(
            f"{path}: [[experiment]]: expected an array of tables ([[experiment]], not [experiment])"
        )
    out = tuple(_experiment(_Table(e, path, f"[[experiment]] #{i + 1}")) for i, e in enumerate(raw))
    if len({e.name for e in out}) != len(out):
        raise PlanError(f"{path}: [[experiment]]: the same experiment twice in one plan")
    return out


_POINT_KEYS = ("concurrency", "requests", "input_len", "output_len", "seed")


def _closed_point(pt: _Table, defaults: dict[str, int | None], where: tuple[str, str, int, str]) -> PointPlan:
    """A closed-loop point: its counts its own, else the phase's; each present, seed ≥ 0, the rest > 0.
    ``where``: (phase name, phase kind, the point's index in the run, its expect_preemptions)."""
    phase, kind, index, expect = where
    vals = {k: pt.get(k, int, defaults[k]) for k in _POINT_KEYS}
    pt.done()
    out: dict[str, int] = {}
    for k, v in vals.items():
        if v is None:
            raise pt._err(k, f"missing (set it on the point or on phase {phase!r})")
        if v < 0 or (v == 0 and k != "seed"):
            raise pt._err(k, f"must be {'>= 0' if k == 'seed' else '> 0'}, got {v}")
        out[k] = v
    return PointPlan(
        phase=phase,
        kind=kind,
        index=index,
        concurrency=out["concurrency"],
        requests=out["requests"],
        input_len=out["input_len"],
        output_len=out["output_len"],
        seed=out["seed"],
        expect_preemptions=expect,
    )


def _phase(t: _Table, first_index: int, names: set[str]) -> PhasePlan:
    name = t.get("name", str)
    if name in names:
        raise t._err("name", f"phase name {name!r} used twice")
    if not name.replace("-", "").replace("_", "").isalnum():
        raise t._err("name", f"use letters, digits, '-' and '_' only, got {name!r}")
    kind = t.choice("kind", PHASE_KINDS)
    if kind == "rate":
        return _rate_phase(t, name, first_index)
    for k in _RATE_KEYS:
        if k in t.data:
            raise t._err(k, f'only a kind = "rate" phase takes {k} (this phase is kind = "{kind}")')
    default_expect = "some" if kind == "overload" else "none"
    expect = t.choice("expect_preemptions", ("none", "some", "any"), default_expect)
    defaults = {k: t.get(k, int, None) for k in _POINT_KEYS}
    raw_points = t.get("points", list, None)
    t.done()
    if raw_points is None:
        raw_points = [{}]
    if not raw_points:
        raise t._err("points", "empty list")
    points = [
        _closed_point(
            _Table(rp, t.file, f"{t.where}.points[{i}]"), defaults, (name, kind, first_index + i, expect)
        )
        for i, rp in enumerate(raw_points)
    ]
    if kind == "length" and len({p.concurrency for p in points}) != 1:
        raise t._err("points", "a length sweep keeps one concurrency; set it on the phase")
    return PhasePlan(name=name, kind=kind, points=tuple(points))


_RAMP_KEYS = ("ramp_up_strategy", "ramp_up_start_rps", "ramp_up_duration_s")
_RATE_KEYS = (
    "request_rates",
    "arrival",
    "burstiness",
    "max_concurrency",
    *_RAMP_KEYS,
    "duration_s",
    "max_requests",
    "max_error_rate",
)


def _arrival(t: _Table) -> tuple[str, float | None]:
    """``arrival`` and, for gamma arrivals only (required there), ``burstiness``."""
    arrival = t.choice("arrival", ARRIVALS, "poisson")
    burstiness = t.positive("burstiness", float, None)
    if burstiness is not None and arrival != "gamma":
        raise t._err(
            "burstiness", f'only arrival = "gamma" takes a burstiness (poisson is 1; arrival = "{arrival}")'
        )
    if arrival == "gamma" and burstiness is None:
        raise t._err(
            "burstiness", 'missing: arrival = "gamma" needs the gamma shape (1 = Poisson, < 1 burstier)'
        )
    return arrival, burstiness


def _ramp_up(t: _Table) -> tuple[str | None, float | None, float | None]:
    """The ramp-up's strategy, start rate and duration: all three or none."""
    strategy = t.get("ramp_up_strategy", str, None)
    if strategy is not None and strategy not in RAMP_UP_STRATEGIES:
        raise t._err("ramp_up_strategy", f"must be one of {', '.join(RAMP_UP_STRATEGIES)}; got {strategy!r}")
    ramp_start = t.positive("ramp_up_start_rps", float, None, zero_ok=True)
    ramp_s = t.positive("ramp_up_duration_s", float, None)
    given = [k for k, v in zip(_RAMP_KEYS, (strategy, ramp_start, ramp_s), strict=True) if v is not None]
    if given and len(given) < 3:
        missing = next(k for k in _RAMP_KEYS if k not in given)
        raise t._err(missing, f"missing: a ramp-up needs {', '.join(_RAMP_KEYS)} ({given[0]} is set)")
    return strategy, ramp_start, ramp_s


def _rate_template(t: _Table) -> RatePlan:
    """What every point of a rate phase shares (its ``request_rate`` set per point): arrivals, ramp-up, the
    in-flight cap and the stop conditions."""
    arrival, burstiness = _arrival(t)
    strategy, ramp_start, ramp_s = _ramp_up(t)
    duration_s = t.positive("duration_s", float, None)
    max_requests = t.positive("max_requests", int, None)
    max_error_rate = t.positive("max_error_rate", float, None, zero_ok=True)
    if max_error_rate is not None and max_error_rate > 1:
        raise t._err("max_error_rate", f"a fraction of the requests that ended, 0..1; got {max_error_rate!r}")
    return RatePlan(
        request_rate=0.0,
        arrival=arrival,
        burstiness=burstiness or 1.0,
        max_concurrency=t.positive("max_concurrency", int, None),
        ramp_up_strategy=strategy,
        ramp_up_start_rps=ramp_start,
        ramp_up_duration_s=ramp_s,
        duration_s=duration_s,
        max_requests=max_requests,
        max_error_rate=max_error_rate,
    )


def _check_stop(t: _Table, tpl: RatePlan) -> None:
    if tpl.duration_s is None and tpl.max_requests is None:
        raise t._err(
            "duration_s", "missing: an open-loop phase needs duration_s or max_requests (or both) to end"
        )
    ramp_s, duration_s = tpl.ramp_up_duration_s, tpl.duration_s
    if ramp_s is not None and duration_s is not None and ramp_s > duration_s:
        raise t._err("ramp_up_duration_s", f"{ramp_s:g} s is longer than duration_s = {duration_s:g} s")


def _rate_entries(
    t: _Table, rates: list[Any] | None, raw_points: list[Any] | None, seed: int | None, name: str
) -> list[tuple[Any, int, str]]:
    """(rate as written, seed, where it was written) per point: from ``request_rates`` (seed + i) or from
    ``points`` (each its ``request_rate`` and ``seed``, the phase's seed by default)."""
    if (rates is None) == (raw_points is None):
        raise t._err(
            "request_rates",
            "give either request_rates = [...] or points = [{request_rate = ..., seed = ...}, ...]",
        )
    if rates is not None:
        if not rates:
            raise t._err("request_rates", "empty list")
        if seed is None:
            raise t._err("seed", "missing (required with request_rates: point i takes seed + i)")
        return [(r, seed + i, f"{t.where}.request_rates[{i}]") for i, r in enumerate(rates)]
    if not raw_points:
        raise t._err("points", "empty list")
    entries = []
    for i, rp in enumerate(raw_points):
        pt = _Table(rp, t.file, f"{t.where}.points[{i}]")
        rate, pseed = pt.get("request_rate", float), pt.positive("seed", int, seed, zero_ok=True)
        pt.done()
        if pseed is None:
            raise pt._err("seed", f"missing (set it on the point or on phase {name!r})")
        entries.append((rate, pseed, f"{t.where}.points[{i}].request_rate"))
    return entries


def _rate(t: _Table, rate: Any, at: str, tpl: RatePlan) -> RatePlan:
    """One point's arrivals: the phase's, at its rate (a finite number > 0, not below a ramp-up's start)."""
    if isinstance(rate, bool) or not isinstance(rate, int | float) or not rate > 0 or rate == float("inf"):
        raise PlanError(f"{t.file}: {at}: a request rate must be a finite number > 0 req/s, got {rate!r}")
    if tpl.ramp_up_start_rps is not None and tpl.ramp_up_start_rps > rate:
        raise t._err(
            "ramp_up_start_rps",
            f"{tpl.ramp_up_start_rps:g} req/s is above the point's request_rate {rate:g}: a ramp-up rises",
        )
    return dataclasses.replace(tpl, request_rate=float(rate))


def _rate_phase(t: _Table, name: str, first_index: int) -> PhasePlan:
    """A ``kind = "rate"`` phase: one open-loop point per rate of ``request_rates`` (or per ``points`` entry
    with its own ``request_rate`` and ``seed``); the arrival settings and stop conditions hold for every point
    of the phase. A point's seed draws both its prompts and its send times; ``request_rates`` points take
    ``seed``, ``seed + 1``, ... in list order."""
    for k in ("concurrency", "requests"):
        if k in t.data:
            other = {"concurrency": "max_concurrency", "requests": "max_requests"}[k]
            raise t._err(
                k, f'a kind = "rate" phase is open-loop: use {other} (see plans/cpu-tiny-llamacpp-rate.toml)'
            )
    expect = t.choice("expect_preemptions", ("none", "some", "any"), "none")
    input_len = t.positive("input_len", int)
    output_len = t.positive("output_len", int)
    seed = t.positive("seed", int, None, zero_ok=True)
    tpl = _rate_template(t)
    rates = t.get("request_rates", list, None)
    raw_points = t.get("points", list, None)
    t.done()
    _check_stop(t, tpl)
    points = [
        PointPlan(
            phase=name,
            kind="rate",
            index=first_index + i,
            concurrency=tpl.max_concurrency or 0,
            requests=tpl.max_requests or 0,
            input_len=input_len,
            output_len=output_len,
            seed=pseed,
            expect_preemptions=expect,
            rate=_rate(t, rate, at, tpl),
        )
        for i, (rate, pseed, at) in enumerate(_rate_entries(t, rates, raw_points, seed, name))
    ]
    if len({p.rate.request_rate for p in points if p.rate}) != len(points):
        raise t._err("request_rates", "the same rate twice in one phase")
    return PhasePlan(name=name, kind="rate", points=tuple(points))


def parse_plan(text: str, path: Path) -> Plan:
    """Validate a plan's TOML text; ``path`` is used for messages and the default run name."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise PlanError(f"{path}: not valid TOML: {err}") from err
    except RecursionError:  # tomllib recurses per nesting level: 100,000 nested arrays exhaust the stack
        raise PlanError(f"{path}: not a plan: arrays or tables nested too deep") from None
    top = _Table(data, path, "plan")
    description = top.get("description", str, "")
    campaign = top.get("campaign", str)
    run_name = top.get("run", str, path.stem)
    server = _server(top.sub("server"))
    model = _model(top.sub("model"))
    sampling = _sampling(top.sub("sampling", required=False))
    load = _load(top.sub("load", required=False))
    workload = _workload(top.sub("workload", required=False))
    slo = _slo(top.sub("slo", required=False))
    top.seen.update(("phase", "experiment"))
    experiments = _experiments(data, path)
    raw_phases = data.get("phase")
    if not isinstance(raw_phases, list) or not raw_phases:
        raise PlanError(f"{path}: [[phase]]: at least one phase is required")
    top.done()
    phases: list[PhasePlan] = []
    names: set[str] = set()
    for i, rp in enumerate(raw_phases):
        ph = _phase(_Table(rp, path, f"[[phase]] #{i + 1}"), sum(len(p.points) for p in phases), names)
        names.add(ph.name)
        phases.append(ph)
    if workload.turns > 1:
        for pt in (pt for ph in phases for pt in ph.points):
            if pt.kind == "rate" or pt.requests % workload.turns:
                raise PlanError(
                    f"{path}: [workload].turns: {workload.turns} turns per conversation, but point "
                    f"{pt.point_id} has {pt.requests} requests (a closed-loop multiple of turns)"
                )
    return Plan(
        path=path,
        campaign=campaign,
        run_name=run_name,
        server=server,
        model=model,
        sampling=sampling,
        load=load,
        phases=tuple(phases),
        description=description,
        raw_text=text,
        workload=workload,
        slo=slo,
        experiments=experiments,
    )


def load_plan(path: Path) -> Plan:
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as err:
        raise PlanError(f"{path}: cannot read plan ({err.strerror})") from err
    except UnicodeDecodeError as err:
        line = path.read_bytes()[: err.start].count(b"\n") + 1
        raise PlanError(
            f"{path}:{line}: not UTF-8 text (byte 0x{err.object[err.start]:02x}); save the plan as UTF-8"
        ) from err
    return parse_plan(text, path)
