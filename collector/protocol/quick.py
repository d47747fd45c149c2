"""A plan from ``vllm bench serve``'s flags: ``collector run --base-url URL --model NAME ...`` and
``collector init --url URL``.

The flags keep vllm bench serve's names, defaults and meanings (vLLM 0.11, ``vllm/benchmarks/serve.py``):
``--num-prompts`` 1000, ``--request-rate`` inf (every request due at once), ``--max-concurrency`` (a cap on
the requests in flight; with an infinite rate it is a closed loop of that many streams), ``--burstiness`` 1
(Poisson; gamma otherwise), ``--random-input-len`` 1024, ``--random-output-len`` 128, ``--random-range-ratio``
0, ``--random-prefix-len`` 0, ``--seed`` 0, ``--goodput ttft:MS tpot:MS e2el:MS``. What differs, on purpose:
several comma-separated values of ``--request-rate`` or ``--max-concurrency`` make a sweep (one point each),
and a small warm-up point comes first (``--num-warmups``, as newer vllm bench serve names it).

What a plan needs beyond the flags is asked of the server (``probe``): which engine answers (vLLM's or
llama.cpp's ``/metrics`` names, llama.cpp's ``/props``), the served model ids (``/v1/models``) and the model's
files when the server names them (vLLM's ``root``, llama.cpp's ``model_path``), from which the theory's
config and the prompt token ids come (``collector.protocol.init``'s readers). The result is plan TOML text:
the run
is the same sealed run a hand-written plan makes, its ``plan.toml`` this text.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from analysis.core import metrics
from analysis.core.model_config import bundled_model_names, load_model_config
from collector.protocol import init as init_mod
from collector.raw.errors import PlanError
from collector.raw.plan import ENGINES, parse_plan

PROBE_TIMEOUT_S = 5.0
GENERIC_ENGINE = (
    "openai"  # collector.raw.plan: attach to any OpenAI-compatible server (SGLang, TGI, a gateway)
)
INIT_SWEEP = (1, 2, 4, 8, 16, 32, 64)  # init --url: the concurrency sweep (the reference's 1..64)
INIT_WAVES = 10  # init --url: about ten waves per point, as init plans a GPU box
MIN_REQUESTS = 32  # fewer gave 591 vs 1,153 tok/s in two identical one-stream runs (3 requests)
CHAT_BACKENDS = ("openai-chat",)  # vllm bench serve's --backend for /v1/chat/completions


@dataclass(frozen=True)
class QuickSpec:
    """vllm bench serve's flags (their names, less the dashes) plus what a sealed run needs besides."""

    base_url: str
    model: str | None = None
    engine: str | None = None  # vllm | llamacpp; None: recognised from the server
    model_config: str | None = None  # the theory's config: a bundled name, a config.json, its folder, a .gguf
    tokenizer: str | None = None
    gpu: str | None = None  # None: this box's nvidia-smi, else cpu
    endpoint: str = "/v1/completions"
    backend: str = "openai"
    num_prompts: int = 1000
    request_rates: tuple[float, ...] = (math.inf,)
    max_concurrency: tuple[int, ...] = ()
    burstiness: float = 1.0
    random_input_len: int = 1024
    random_output_len: int = 128
    random_range_ratio: float = 0.0
    random_prefix_len: int = 0
    seed: int = 0
    num_warmups: int | None = None  # None: min(8, the first concurrency) x 2
    # `init --url`: each point sends waves x its concurrency requests (at least MIN_REQUESTS) instead of
    # --num-prompts, and a commented rate phase follows the sweep
    waves: int | None = None
    goodput: dict[str, float] = field(default_factory=dict)
    headers: dict[str, str] = field(default_factory=dict)
    api_key_env: str | None = None
    campaign: str = "quick"
    label: str | None = None  # the run's folder name (vllm bench serve's --label)
    description: str = ""


@dataclass(frozen=True)
class ServerFacts:
    engine: str | None
    model_ids: list[str]
    model_path: str | None  # vLLM's root / llama.cpp's model_path, when the server says
    max_model_len: int | None


def parse_numbers(text: str, what: str, kind: type) -> tuple:
    """``"1,2,4"`` -> (1, 2, 4); ``inf`` allowed for rates. Errors name the flag."""
    out = []
    for part in (p.strip() for p in text.split(",")):
        try:
            v = kind(part)
        except ValueError:
            raise PlanError(f"{what} {text!r}: {part!r} is not a number") from None
        if not v > 0:
            raise PlanError(f"{what} {text!r}: every value must be > 0")
        out.append(v)
    return tuple(out)


def _get(client: httpx.Client, url: str) -> httpx.Response | None:
    try:
        return client.get(url)
    except httpx.HTTPError:
        return None


def probe(base_url: str, headers: dict[str, str] | None = None) -> ServerFacts:
    """What the server at ``base_url`` says about itself; a server that does not answer is one clear line at
    once (``connection refused — is the server running?``), not a wait."""
    base = base_url.rstrip("/")
    with httpx.Client(timeout=PROBE_TIMEOUT_S, headers=headers) as client:
        try:
            r = client.get(f"{base}/v1/models")
        except httpx.ConnectError as err:
            raise PlanError(f"{base}: connection refused — is the server running? ({err})") from err
        except httpx.TimeoutException as err:
            raise PlanError(f"{base}/v1/models: no answer in {PROBE_TIMEOUT_S:g} s") from err
        except httpx.HTTPError as err:
            raise PlanError(f"{base}/v1/models: {type(err).__name__}: {err}") from err
        try:
            data = r.json().get("data") if r.status_code == 200 else None
        except (ValueError, AttributeError):
            data = None
        if not isinstance(data, list):
            raise PlanError(
                f"{base}/v1/models: HTTP {r.status_code}, no model list: not an OpenAI-compatible server?"
            )
        entries = [d for d in data if isinstance(d, dict)]
        ids = [str(d.get("id")) for d in entries]
        root = next((str(d["root"]) for d in entries if d.get("root")), None)
        mml = next(
            (int(d["max_model_len"]) for d in entries if isinstance(d.get("max_model_len"), int)), None
        )
        engine = None
        m = _get(client, f"{base}/metrics")
        text = m.text if m is not None and m.status_code == 200 else ""
        if "vllm:" in text:
            engine = "vllm"
        elif "llamacpp:" in text:
            engine = "llamacpp"
        p = _get(client, f"{base}/props")
        props = _json(p) if p is not None and p.status_code == 200 else {}
        if "default_generation_settings" in props:
            engine = engine or "llamacpp"
            root = props.get("model_path") or root
            n_ctx = (props.get("default_generation_settings") or {}).get("n_ctx")
            mml = n_ctx if isinstance(n_ctx, int) else mml
    return ServerFacts(engine=engine, model_ids=ids, model_path=root, max_model_len=mml)


def _json(r: httpx.Response) -> dict:
    try:
        v = r.json()
    except ValueError:
        return {}
    return v if isinstance(v, dict) else {}


@dataclass(frozen=True)
class TheoryInputs:
    config_ref: str  # [model].config
    token_range: tuple[int, int, str]
    weight_format: str
    derived_config: dict | None = None  # a GGUF's shape without a bundled config: written beside the plan
    notes: tuple[str, ...] = ()


def _facts_from_path(path: Path) -> init_mod.ModelFacts | None:
    if path.is_file() and path.suffix == ".gguf":
        return init_mod.model_from_gguf(path)
    if path.is_dir() and (path / "config.json").is_file():
        return init_mod.model_from_folder(path, init_mod.Engine("vllm", path, "attached server"))
    return None


def theory_inputs(spec: QuickSpec, facts: ServerFacts) -> TheoryInputs:
    """The theory's config and the prompt ids: ``--model-config`` when given, else the model files the
    server names, else ``--model`` as a bundled name or Hub id (``Qwen/Qwen2.5-7B-Instruct``)."""
    candidates = [spec.model_config] if spec.model_config else [facts.model_path, spec.model, spec.tokenizer]
    for ref in (c for c in candidates if c):
        mf = _facts_from_path(Path(ref).expanduser())
        if mf is not None:
            derived = mf.derived_config
            return TheoryInputs(
                mf.config_ref,
                init_mod.token_id_range(mf.vocab, mf.cfg.vocab_size),
                mf.weight_format,
                derived,
                tuple(mf.notes),
            )
        try:
            cfg = load_model_config(ref)
        except PlanError:
            if spec.model_config:
                raise
            continue
        vocab = _tokenizer_vocab(spec.tokenizer)
        fmt = init_mod.TORCH_DTYPES.get(cfg.torch_dtype or "", "bf16")
        return TheoryInputs(ref, init_mod.token_id_range(vocab, cfg.vocab_size), fmt)
    raise PlanError(
        f"{spec.model or spec.base_url}: no model config for the theory (the server names no model files "
        "here): give --model-config (a config.json, its folder, a .gguf, or a bundled name: "
        f"{', '.join(bundled_model_names()[:4])}, ...)"
    )


def _tokenizer_vocab(tokenizer: str | None) -> init_mod.Vocab | None:
    if not tokenizer:
        return None
    path = Path(tokenizer).expanduser()
    path = path / "tokenizer.json" if path.is_dir() else path
    return init_mod.vocab_from_tokenizer_json(path) if path.is_file() else None


def _served_model(spec: QuickSpec, facts: ServerFacts) -> str:
    """The request's model name: --model when the server lists it (or lists none), else its first id."""
    if spec.model and (not facts.model_ids or spec.model in facts.model_ids):
        return spec.model
    if spec.model and not _facts_from_path(Path(spec.model).expanduser()):
        raise PlanError(
            f"--model {spec.model!r}: {spec.base_url} serves {', '.join(facts.model_ids)} (use one of them)"
        )
    if not facts.model_ids:
        raise PlanError(f"{spec.base_url}/v1/models lists no model: give --model")
    return facts.model_ids[0]


def _phases(spec: QuickSpec) -> list[str]:
    """The [[phase]] tables: a warm-up, then a closed-loop point per --max-concurrency for an infinite rate
    and one open-loop phase for the finite rates."""
    lens = [f"input_len = {spec.random_input_len}", f"output_len = {spec.random_output_len}"]
    inf_rate = any(math.isinf(r) for r in spec.request_rates)
    rates = [r for r in spec.request_rates if not math.isinf(r)]
    if rates and len(spec.max_concurrency) > 1:
        raise PlanError("--max-concurrency: one value with a finite --request-rate (it caps each rate point)")
    conc = list(spec.max_concurrency) or [spec.num_prompts]
    warm = spec.num_warmups if spec.num_warmups is not None else 2 * min(8, conc[0])
    out: list[str] = []
    if warm:
        out += [
            "[[phase]]",
            'name = "warmup"',
            'kind = "warmup"',
            f"concurrency = {min(warm, conc[0])}",
            f"requests = {warm}",
            *lens,
            f"seed = {spec.seed + 100_000}",
            "",
        ]
    if inf_rate:
        out += ["[[phase]]", 'name = "sweep"', 'kind = "concurrency"', *lens, "points = ["]
        out += [
            f"  {{ concurrency = {c}, requests = {_requests(spec, c)}, seed = {spec.seed + i} }},"
            for i, c in enumerate(conc)
        ]
        out += ["]", ""]
    if spec.waves:
        out += [
            "# An open-loop rate sweep (vllm bench serve --request-rate): after the sweep above,",
            "# `collector slo` names the rate worth measuring; set it here and uncomment.",
            "# [[phase]]",
            '# name = "rate"',
            '# kind = "rate"',
            *(f"# {x}" for x in lens),
            '# arrival = "poisson"',
            "# request_rates = [1.0, 2.0, 4.0]",
            "# duration_s = 60",
            f"# seed = {spec.seed + 500}",
            "",
        ]
    if rates:
        arrival = (
            ['arrival = "poisson"']
            if spec.burstiness == 1
            else ['arrival = "gamma"', f"burstiness = {spec.burstiness!r}"]
        )
        cap = [f"max_concurrency = {conc[0]}"] if spec.max_concurrency else []
        out += [
            "[[phase]]",
            'name = "rate"',
            'kind = "rate"',
            *lens,
            *arrival,
            *cap,
            f"max_requests = {spec.num_prompts}",
            f"request_rates = [{', '.join(map(repr, rates))}]",
            f"seed = {spec.seed + len(conc)}",
            "",
        ]
    return out


def _requests(spec: QuickSpec, concurrency: int) -> int:
    return max(MIN_REQUESTS, spec.waves * concurrency) if spec.waves else spec.num_prompts


def _q(v: object) -> str:
    return json.dumps(v, ensure_ascii=False)


def plan_text(spec: QuickSpec, facts: ServerFacts, theory: TheoryInputs, gpu: str, config_ref: str) -> str:
    """The plan TOML a hand-written plan would hold for these flags (validated by the plan loader)."""
    # a server that is neither vLLM nor llama.cpp by its /metrics and /props: any OpenAI-compatible one
    engine = spec.engine or facts.engine or GENERIC_ENGINE
    if engine not in ENGINES:
        raise PlanError(f"--engine {engine!r}: one of {', '.join(ENGINES)}")
    served = _served_model(spec, facts)
    chat = spec.backend in CHAT_BACKENDS or spec.endpoint.rstrip("/").endswith("/chat/completions")
    lo, hi, why = theory.token_range
    desc = spec.description or (
        f"collector run --base-url {spec.base_url} --model {served}: {engine}, {spec.num_prompts} prompts, "
        f"{spec.random_input_len} in / {spec.random_output_len} out"
    )
    lines = [
        "# Written by `collector run --base-url` from vllm bench serve's flags "
        "(collector/protocol/quick.py).",
        f"description = {_q(desc)}",
        f"campaign = {_q(spec.campaign)}",
        f"run = {_q(spec.label or engine)}",
        "",
        "[server]",
        f"engine = {_q(engine)}",
        f"url = {_q(spec.base_url.rstrip('/'))}",
        f"served_model_name = {_q(served)}",
        'prefix_cache = "any"                 # an attached server: its prefix cache is what it is',
        "",
        "[model]",
        f"config = {_q(config_ref)}",
        f"gpu = {_q(gpu)}",
        f"weight_format = {_q(theory.weight_format)}",
        f"kv_dtype = {_q('fp16' if engine == 'llamacpp' else 'bf16')}",
        *([f"max_model_len = {facts.max_model_len}"] if facts.max_model_len else []),
        f"token_id_range = [{lo}, {hi}]          # {why}",
        "",
        "[load]",
        'endpoint = "chat"' if chat else 'endpoint = "completions"',
        "drain_s = 1.0",
        *([f"api_key_env = {_q(spec.api_key_env)}"] if spec.api_key_env else []),
        *(
            ["headers = { " + ", ".join(f"{_q(k)} = {_q(v)}" for k, v in spec.headers.items()) + " }"]
            if spec.headers
            else []
        ),
        "",
    ]
    if spec.random_range_ratio or spec.random_prefix_len or (chat and spec.tokenizer):
        lines += ["[workload]"]
        if spec.random_range_ratio:
            lines += [
                f"input_range_ratio = {spec.random_range_ratio!r}",
                f"output_range_ratio = {spec.random_range_ratio!r}",
            ]
        if spec.random_prefix_len:
            lines += [f"prefix_len = {spec.random_prefix_len}"]
        if spec.tokenizer:
            lines += [f"tokenizer = {_q(str(Path(spec.tokenizer).expanduser()))}"]
        lines += [""]
    if spec.goodput:
        lines += ["[slo]", *(f"{k} = {v!r}" for k, v in spec.goodput.items()), ""]
    return "\n".join(lines + _phases(spec))


def build_plan(spec: QuickSpec, out: Path) -> list[str]:
    """Ask the server, write the plan to ``out`` (and the model's derived config beside it when a GGUF has
    no bundled one); return what was found, one line each."""
    facts = probe(spec.base_url, spec.headers or None)
    theory = theory_inputs(spec, facts)
    gpu = spec.gpu or init_mod.detect_gpu().spec.name
    config_ref = theory.config_ref
    config_path = out.with_name(f"{out.stem}.model-config.json")
    if theory.derived_config is not None:
        config_ref = str(config_path.resolve())
    text = plan_text(spec, facts, theory, gpu, config_ref)
    parse_plan(text, out)  # a plan the loader refuses is a bug here, not the user's
    if theory.derived_config is not None:
        config_path.write_text(json.dumps(theory.derived_config, indent=2) + "\n", encoding="utf-8")
    out.write_text(text, encoding="utf-8")
    engine = spec.engine or facts.engine or GENERIC_ENGINE
    lo, hi, _ = theory.token_range
    return [
        f"server {spec.base_url}: {engine}"
        + (" (--engine)" if spec.engine else " (recognised from its /metrics or /props)")
        + f"; models {', '.join(facts.model_ids) or 'none listed'}",
        f"theory config {config_ref}; gpu {gpu}; prompt ids [{lo}, {hi})",
        *(f"check: {n}" for n in theory.notes),
    ]


def write_new_plan(spec: QuickSpec, out: Path) -> list[str]:
    """``build_plan`` into a file that does not exist yet (a plan is never replaced)."""
    if out.exists():
        raise PlanError(f"{out}: exists; a plan is never replaced (choose another file)")
    lines = build_plan(spec, out)
    return [f"wrote {out}", *lines, f"next: collector run {out}" if spec.waves else f"plan {out}"]


def init_spec(
    url: str, model: str | None, campaign: str | None, model_config: str | None, gpu: str | None
) -> QuickSpec:
    """``collector init --url``: a sweep of INIT_SWEEP streams at the peers' default lengths, warmed up."""
    return QuickSpec(
        base_url=url,
        model=model,
        model_config=model_config,
        gpu=gpu,
        max_concurrency=INIT_SWEEP,
        waves=INIT_WAVES,
        campaign=campaign or "quick",
        label="sweep",
    )


def _url(flags: dict) -> str:
    if flags["base_url"]:
        return str(flags["base_url"])
    return f"http://{flags['host'] or '127.0.0.1'}:{flags['port'] or 8000}"


def _header_dict(items: tuple[str, ...]) -> dict[str, str]:
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise PlanError(f"--header {item!r}: want KEY=VALUE")
        out[key.strip()] = value
    return out


# flags whose value is the spec's field of the same name, unchanged
_SAME_NAME_FLAGS = (
    *("model", "engine", "model_config", "tokenizer", "gpu", "endpoint", "backend", "num_prompts"),
    *("burstiness", "random_input_len", "random_output_len", "random_range_ratio", "random_prefix_len"),
    *("seed", "num_warmups", "campaign", "label"),
)


def spec_from_flags(flags: dict) -> QuickSpec:
    """The spec from ``collector run``'s vllm-bench-serve flags (click's parameter names)."""
    rates = parse_numbers(flags["request_rate"], "--request-rate", float)
    conc = (
        parse_numbers(flags["max_concurrency"], "--max-concurrency", int) if flags["max_concurrency"] else ()
    )
    return QuickSpec(
        base_url=_url(flags),
        request_rates=rates,
        max_concurrency=conc,
        goodput=metrics.parse_goodput(flags["goodput"]),
        headers=_header_dict(flags["headers"]),
        api_key_env="OPENAI_API_KEY" if os.environ.get("OPENAI_API_KEY") else None,
        **{k: flags[k] for k in _SAME_NAME_FLAGS},
    )


def _result_name(doc: dict, label: str) -> str:
    """vllm bench serve's default result file name:
    ``{label}-{request_rate}qps[-concurrency{N}]-{model id's last part}-{date}.json``."""
    rate = doc.get("request_rate")
    rate_s = "inf" if rate in (None, "inf") or rate == math.inf else f"{float(rate)}"
    conc = doc.get("max_concurrency")
    model = str(doc.get("model_id") or "model").split("/")[-1]
    conc_s = f"-concurrency{conc}" if conc is not None else ""
    return f"{label}-{rate_s}qps{conc_s}-{model}-{doc.get('date')}.json"


def save_results(
    summaries: dict[str, dict[str, Any]], result_dir: Path | None, filename: str | None
) -> list[str]:
    """``--save-result``: each measured point's summary in vllm bench serve's schema
    (``RunResult.vllm_bench``) written under vllm bench serve's default name, or
    ``--result-filename``; never into raw/."""
    out_dir = Path(result_dir) if result_dir else Path.cwd()
    out_dir.mkdir(parents=True, exist_ok=True)
    points = sorted(p for p in summaries if "-warmup-" not in p)
    lines = []
    for i, point in enumerate(points):
        doc = summaries[point]
        if filename:
            stem, suffix = (filename[:-5], ".json") if filename.endswith(".json") else (filename, "")
            name = filename if len(points) == 1 else f"{stem}-p{i:02d}{suffix or '.json'}"
        else:
            name = _result_name(doc, "openai")
        dest = out_dir / name
        text = json.dumps(doc, ensure_ascii=False, indent=2, sort_keys=True) + "\n"
        dest.write_text(text, encoding="utf-8")
        lines.append(f"saved {dest} ({point})")
    return lines
