"""A model's shape from its Hugging Face ``config.json``: bundled by name, or any file by path.

Bundled configs (``analysis/core/models/*.json``) are the Hub files, content unchanged unless said below;
where the Hub file itself could not be read, the public copy it came from is named and checked against a
second source for the keys the theory reads:

- ``Qwen2.5-7B-Instruct`` (``Qwen/Qwen2.5-7B-Instruct``): values agree with several public copies of the Hub
  file and with vLLM 0.27.1's own start-up log in the reference campaign (``hidden_size=3584
  num_attention_heads=28 num_key_value_heads=4 head_dim=128 intermediate_size=18944 vocab_size=152064``);
  7,615,616,512 parameters.
- ``Qwen2.5-0.5B-Instruct`` (``Qwen/Qwen2.5-0.5B-Instruct``): tied embeddings; 494,032,768 parameters.
- ``Llama-3.1-8B-Instruct`` (``meta-llama/Llama-3.1-8B-Instruct``): llama3 rope scaling; 8,030,261,248
  parameters.
- ``Llama-3.1-70B-Instruct``: inference-sim/inference-sim ``model_configs/llama-3.1-70b-instruct/config.json``
  (f90a1e3), identical to mlc-ai/mlc-llm ``model_preset.py`` ``llama3_1_70b`` (79d603f).
- ``Llama-3.2-1B-Instruct``, ``Llama-3.2-3B-Instruct``, ``Qwen2.5-3B-Instruct``, ``Mistral-7B-v0.3``,
  ``gemma-2-2b-it``, ``gemma-2-9b-it``: mlc-ai/mlc-llm ``python/mlc_llm/model/model_preset.py`` (79d603f)
  presets ``llama3_2_1b``, ``llama3_2_3b``, ``qwen2.5_3b``, ``mistral_7b_v03``, ``gemma2_2b``, ``gemma2_9b``
  (copies of the Hub files); shapes cross-checked with other public copies (Llama-3.2-3B base, Qwen2.5-3B
  base, gemma-2-9b).
- ``Qwen2.5-1.5B-Instruct``, ``Qwen2.5-72B-Instruct``: public verbatim copies of the Hub files (a test fixture
  marked "verbatim snapshot", and a ``原始 config.json`` dump; a second copy agrees for the 1.5B).
- ``Qwen2.5-32B-Instruct``: a transformers load log of the Hub file (``Qwen2Config {...}``); the loader-added
  ``rope_scaling: null``, ``_name_or_path`` and loader ``transformers_version`` are left out.
- ``Qwen2.5-14B-Instruct``: only the keys the theory reads (no full public copy found): shape from the model
  card (48 layers, 40 Q / 8 KV heads) and public configs (hidden 5120, intermediate 13824, vocab 152064,
  untied); ``max_position_embeddings`` 32768 from the card ("The current config.json is set for context length
  up to 32,768 tokens").
- ``Qwen3-0.6B``, ``Qwen3-8B``, ``Qwen3-32B``: ai-dynamo/aiconfigurator ``aic-core/.../model_configs/
  Qwen--Qwen3-*_config.json`` (095f58a); ``Qwen3-14B``: inference-sim ``model_configs/qwen3-14b`` (f90a1e3);
  ``Qwen3-4B``: two public copies agree. Qwen3's ``head_dim`` (128) is explicit and is not hidden/heads.

- ``Qwen3-30B-A3B``, ``Mixtral-8x7B-v0.1``, ``gpt-oss-20b``, ``DeepSeek-V3``: ai-dynamo/aiconfigurator
  ``aic-core/src/aiconfigurator_core/model_configs/{Qwen--Qwen3-30B-A3B, mistralai--Mixtral-8x7B-v0.1,
  openai--gpt-oss-20b, deepseek-ai--DeepSeek-V3}_config.json`` (095f58a), copies of the Hub files.
- ``gemma-3-1b-it``: NVIDIA/TensorRT-LLM's test copy of the Hub file (``GEMMA3_1B_CONFIG`` in its Gemma 3
  model test) with the two keys that test shrinks restored to the Hub's values, 26 layers and a 512-token
  window, as several other public copies of ``google/gemma-3-1b-it``'s config give them.
- ``DeepSeek-V2-Lite``: the Hub file's keys as public copies of ``deepseek-ai/DeepSeek-V2-Lite-Chat``'s
  config.json show them (the Lite base and Chat share the shape; TechxGenus/DeepSeek-V2-Lite-Chat-AWQ and
  nicoboss/DeepSeek-V2-Lite-Chat-Uncensored on the Hub, and a transformers 5.7 load log), less
  ``_name_or_path``, ``quantization_config`` and ``transformers_version``.

Only the keys the theory needs are read; which biases and norms a layer has follows the architecture
(``model_type``), the way transformers builds the modules. Beyond dense decoder layers with full attention
the theory represents (``MoeShape``, ``MlaShape``, ``layer_windows``):

- a mixture of experts: routed experts (``num_experts`` / ``num_local_experts`` / ``n_routed_experts``,
  ``num_experts_per_tok``, ``moe_intermediate_size``), shared experts (``n_shared_experts``), dense layers
  before or between them (``first_k_dense_replace``, ``moe_layer_freq``, ``mlp_only_layers``,
  ``decoder_sparse_step``);
- multi-head latent attention (``kv_lora_rank``, ``q_lora_rank``, ``qk_nope_head_dim``, ``qk_rope_head_dim``,
  ``v_head_dim``): one compressed latent cached per token per layer;
- sliding-window and mixed local/global attention (``layer_types``, ``sliding_window`` with Gemma 2's
  alternation, Gemma 3's ``sliding_window_pattern`` (5 local : 1 global), Mistral v0.1's every-layer window,
  Qwen's ``use_sliding_window`` + ``max_window_layers``).

What is still refused, with one line naming the key (``unsupported_reason``): layers that are neither full
nor sliding-window attention (linear attention, chunked attention), and model types whose layer layout the
theory does not know.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from collector.raw.errors import PlanError

MODELS_DIR = Path(__file__).resolve().parent / "models"

REQUIRED_KEYS = (
    "model_type",
    "hidden_size",
    "intermediate_size",
    "num_hidden_layers",
    "num_attention_heads",
    "vocab_size",
)


@dataclass(frozen=True)
class _Arch:
    """What a model type's layers hold beyond the dense decoder block (as transformers builds them)."""

    qkv_bias: bool = False  # Qwen2 hard-codes bias=True on q/k/v and bias=False on o_proj
    o_bias: bool = False
    qk_norm: bool = False  # Qwen3, Gemma 3: per-head RMSNorm on q and k over head_dim
    bias_from_config: bool = False  # Llama/Mistral: `attention_bias` (default False) sets q/k/v/o bias
    sandwich_norms: bool = False  # Gemma 2/3: RMSNorm before and after the MLP as well (+2·h per layer)
    tied_default: bool = False  # Gemma configs omit tie_word_embeddings: tied
    attention_sinks: bool = False  # gpt-oss: one learned sink logit per head per layer
    router_bias: bool = False  # gpt-oss router bias; DeepSeek-V3 e_score_correction_bias (E per layer)
    expert_bias: bool = False  # gpt-oss: gate_up (2·I) and down (h) biases in every expert


_ARCHS: dict[str, _Arch] = {
    "qwen2": _Arch(qkv_bias=True),
    "llama": _Arch(bias_from_config=True),
    "mistral": _Arch(bias_from_config=True),
    "qwen3": _Arch(qk_norm=True),
    "qwen3_moe": _Arch(qk_norm=True),
    "mixtral": _Arch(),
    "deepseek_v2": _Arch(),
    "deepseek_v3": _Arch(router_bias=True),
    "gpt_oss": _Arch(qkv_bias=True, o_bias=True, attention_sinks=True, router_bias=True, expert_bias=True),
    "gemma2": _Arch(sandwich_norms=True, tied_default=True),
    "gemma3_text": _Arch(qk_norm=True, sandwich_norms=True, tied_default=True),
}

# Keys naming the routed experts (a value above 1 means a mixture-of-experts MLP), per family.
_MOE_KEYS = ("num_experts", "num_local_experts", "n_routed_experts", "moe_num_experts")
# model types whose ``sliding_window`` only applies when ``use_sliding_window`` is true (transformers
# Qwen2/Qwen3), from layer ``max_window_layers`` on.
_GATED_SLIDING_WINDOW = ("qwen2", "qwen3", "qwen3_moe")
# model types whose ``sliding_window`` applies to every other layer, starting with layer 0 (transformers
# Gemma2DecoderLayer: ``is_sliding = not bool(layer_idx % 2)``) when the config has no ``layer_types``.
_ALTERNATING_WINDOW = ("gemma2", "gpt_oss")  # gpt-oss: transformers' default layer_types, the same rule
_LAYER_KINDS = ("full_attention", "sliding_attention")
_NOT_COVERED = (
    "the theory covers full, sliding-window and latent (MLA) attention with dense or mixture-of-experts MLPs"
)


def _positive_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def unsupported_reason(data: dict) -> str | None:
    """Why the theory cannot represent this config.json (``key ...: why``), or None when it can:
    ``layer_types`` naming a layer that is neither full nor sliding-window attention (linear or chunked
    attention keeps a state the KV formulas do not describe)."""
    layer_types = data.get("layer_types")
    if isinstance(layer_types, list):
        kinds = sorted({str(t) for t in layer_types} - set(_LAYER_KINDS))
        if kinds:
            return (
                f"key 'layer_types' has {', '.join(kinds)} layers: such a layer keeps a state that is not "
                f"a per-token KV cache; {_NOT_COVERED}"
            )
    return None


@dataclass(frozen=True)
class MoeShape:
    """A mixture-of-experts MLP: E routed experts of width I_e, k of them per token, optional shared experts
    (always run) of total width I_s, in ``moe_layers`` of the L layers (the rest have a dense MLP of width
    I)."""

    num_experts: int  # E
    experts_per_token: int  # k
    expert_intermediate_size: int  # I_e
    shared_intermediate_size: int  # I_s (0: none)
    moe_layers: int  # layers with the routed MLP
    router_bias: bool
    expert_bias: bool


@dataclass(frozen=True)
class MlaShape:
    """Multi-head latent attention (DeepSeek-V2/V3): K and V of every head are rebuilt from one latent of
    ``kv_lora_rank`` plus a shared rotary key of ``qk_rope_head_dim``, which is all the cache holds."""

    kv_lora_rank: int  # r
    q_lora_rank: int | None  # r_q (None: q projected straight from h)
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int


@dataclass(frozen=True)
class ModelConfig:
    """The shape of a decoder-only transformer, as the theory needs it: the dense fields, and where the model
    has them its experts (``moe``), latent attention (``mla``) and per-layer attention windows."""

    name: str
    source: str
    model_type: str
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    vocab_size: int
    tie_word_embeddings: bool
    qkv_bias: bool
    o_bias: bool
    mlp_bias: bool
    qk_norm: bool
    max_position_embeddings: int | None
    torch_dtype: str | None
    moe: MoeShape | None = None
    mla: MlaShape | None = None
    # per layer: its attention window in tokens, None for full attention; () when every layer is full
    layer_windows: tuple[int | None, ...] = ()
    sandwich_norms: bool = False
    attention_sinks: bool = False
    quant_method: str | None = None  # the checkpoint's quantization_config.quant_method (gpt-oss mxfp4)
    # the config keys beyond the dense shape that the theory read (MoE, MLA, windows), by their config.json
    # names: kept so a prediction's "config" rebuilds the same shape
    extra_keys: dict = field(default_factory=dict, compare=False, hash=False)

    @property
    def family_notes(self) -> list[str]:
        """What the theory assumes or leaves out for this shape, one sentence each (empty for a dense
        full-attention model)."""
        return shape_notes(self)


def bundled_model_names() -> list[str]:
    """Names of the bundled configs (file stems of ``analysis/core/models/*.json``), sorted."""
    return sorted(p.stem for p in MODELS_DIR.glob("*.json"))


def _normalise(name: str) -> str:
    name = name.strip().lower()
    if "/" in name:  # a Hub id such as Qwen/Qwen2.5-7B-Instruct
        name = name.rsplit("/", 1)[1]
    return name.removesuffix(".json")


def _bundled_path(name: str) -> Path | None:
    wanted = _normalise(name)
    for stem in bundled_model_names():
        key = stem.lower()
        if wanted in (key, key.removesuffix("-instruct"), key.removesuffix("-it")):
            return MODELS_DIR / f"{stem}.json"
    return None


def _read_json(path: Path) -> dict:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as err:
        raise PlanError(f"{path}: cannot read model config: {err.strerror or err}") from err
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        raise PlanError(f"{path}: not valid JSON (line {err.lineno}: {err.msg})") from err
    if not isinstance(data, dict):
        raise PlanError(f"{path}: a config.json must be a JSON object, got {type(data).__name__}")
    return data


def _int_key(path: Path, data: dict, key: str) -> int:
    if data.get(key) is None:
        raise PlanError(f"{path}: missing key '{key}'")
    value = data[key]
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise PlanError(f"{path}: key '{key}' must be a positive integer, got {value!r}")
    return value


def _moe_layer_flags(data: dict, layers: int) -> list[bool]:
    """Which layers route to experts: DeepSeek's first ``first_k_dense_replace`` layers are dense and then
    every ``moe_layer_freq``-th; Qwen-MoE's ``mlp_only_layers`` are dense and every
    ``decoder_sparse_step``-th layer is sparse; Mixtral and gpt-oss route in every layer."""
    first_dense = data.get("first_k_dense_replace") or 0
    freq = data.get("moe_layer_freq") or 1
    step = data.get("decoder_sparse_step") or 1
    dense_only = set(data.get("mlp_only_layers") or [])
    return [
        i >= first_dense and i % freq == 0 and (i + 1) % step == 0 and i not in dense_only
        for i in range(layers)
    ]


def _moe_shape(source: Path, data: dict, arch: _Arch, layers: int) -> MoeShape | None:
    experts_key = next((k for k in _MOE_KEYS if _positive_int(data.get(k)) and data[k] > 1), None)
    if experts_key is None:
        return None
    per_token_key = "num_experts_per_tok" if data.get("num_experts_per_tok") else "experts_per_token"
    if per_token_key not in data:
        raise PlanError(f"{source}: key '{experts_key}' names experts but 'num_experts_per_tok' is missing")
    width_key = "moe_intermediate_size" if data.get("moe_intermediate_size") else "intermediate_size"
    expert_width = _int_key(source, data, width_key)
    shared = data.get("n_shared_experts") or 0
    shared_width = shared * expert_width if _positive_int(shared) else 0
    if _positive_int(data.get("shared_expert_intermediate_size")):
        shared_width = data["shared_expert_intermediate_size"]
    return MoeShape(
        num_experts=data[experts_key],
        experts_per_token=_int_key(source, data, per_token_key),
        expert_intermediate_size=expert_width,
        shared_intermediate_size=shared_width,
        moe_layers=sum(_moe_layer_flags(data, layers)),
        router_bias=arch.router_bias,
        expert_bias=arch.expert_bias,
    )


def _mla_shape(source: Path, data: dict) -> MlaShape | None:
    if not data.get("kv_lora_rank"):
        return None
    q_rank = data.get("q_lora_rank")
    return MlaShape(
        kv_lora_rank=_int_key(source, data, "kv_lora_rank"),
        q_lora_rank=_int_key(source, data, "q_lora_rank") if q_rank else None,
        qk_nope_head_dim=_int_key(source, data, "qk_nope_head_dim"),
        qk_rope_head_dim=_int_key(source, data, "qk_rope_head_dim"),
        v_head_dim=_int_key(source, data, "v_head_dim"),
    )


def _layer_windows(source: Path, data: dict, model_type: str, layers: int) -> tuple[int | None, ...]:
    """Each layer's attention window (None: full), from ``layer_types`` where the config lists them, else
    the family's rule (module constants above); () when every layer attends over the whole context."""
    window = data.get("sliding_window")
    layer_types = data.get("layer_types")
    if isinstance(layer_types, list):
        kinds = [str(t) for t in layer_types]
        if len(kinds) != layers:
            raise PlanError(
                f"{source}: key 'layer_types' lists {len(kinds)} layers, num_hidden_layers {layers}"
            )
    elif not _positive_int(window):
        return ()
    elif model_type in _GATED_SLIDING_WINDOW:
        first = data.get("max_window_layers") or 0
        on = bool(data.get("use_sliding_window"))
        kinds = ["sliding_attention" if on and i >= first else "full_attention" for i in range(layers)]
    elif _positive_int(data.get("sliding_window_pattern")):  # Gemma 3: every p-th layer is global
        p = data["sliding_window_pattern"]
        kinds = ["full_attention" if (i + 1) % p == 0 else "sliding_attention" for i in range(layers)]
    elif model_type in _ALTERNATING_WINDOW:
        kinds = ["full_attention" if i % 2 else "sliding_attention" for i in range(layers)]
    else:  # Mistral v0.1, Mixtral: every layer attends over the window
        kinds = ["sliding_attention"] * layers
    if "sliding_attention" not in kinds:
        return ()
    if not _positive_int(window):
        raise PlanError(f"{source}: key 'sliding_window' must be a positive integer for sliding layers")
    return tuple(window if k == "sliding_attention" else None for k in kinds)


_EXTRA_KEYS = (
    *_MOE_KEYS,
    "num_experts_per_tok",
    "experts_per_token",
    "moe_intermediate_size",
    "n_shared_experts",
    "shared_expert_intermediate_size",
    "first_k_dense_replace",
    "moe_layer_freq",
    "decoder_sparse_step",
    "mlp_only_layers",
    "kv_lora_rank",
    "q_lora_rank",
    "qk_nope_head_dim",
    "qk_rope_head_dim",
    "v_head_dim",
    "layer_types",
    "sliding_window",
    "use_sliding_window",
    "max_window_layers",
    "sliding_window_pattern",
)


def _head_dims(source: Path, data: dict, hidden: int, heads: int) -> int:
    if data.get("kv_lora_rank"):  # MLA: a query/key head is its no-rope part and its rotary part
        return _int_key(source, data, "qk_nope_head_dim") + _int_key(source, data, "qk_rope_head_dim")
    if data.get("head_dim"):
        return _int_key(source, data, "head_dim")
    if hidden % heads:
        raise PlanError(
            f"{source}: key 'head_dim' missing and hidden_size {hidden} is not a multiple of {heads} heads"
        )
    return hidden // heads


def model_config_from_dict(data: dict, *, name: str, source: Path) -> ModelConfig:
    """Build a ModelConfig from a parsed config.json; errors name the file and the key."""
    reason = unsupported_reason(data)
    if reason is not None:
        raise PlanError(f"{source}: {reason}")
    for key in REQUIRED_KEYS:
        if key not in data:
            raise PlanError(f"{source}: missing key '{key}'")
    model_type = data["model_type"]
    if model_type not in _ARCHS:
        known = ", ".join(sorted(_ARCHS))
        raise PlanError(f"{source}: key 'model_type' is {model_type!r}; the theory knows {known}")
    arch = _ARCHS[model_type]
    hidden = _int_key(source, data, "hidden_size")
    heads = _int_key(source, data, "num_attention_heads")
    kv_heads = _int_key(source, data, "num_key_value_heads") if data.get("num_key_value_heads") else heads
    if heads % kv_heads:
        raise PlanError(
            f"{source}: key 'num_key_value_heads' ({kv_heads}) must divide num_attention_heads ({heads})"
        )
    layers = _int_key(source, data, "num_hidden_layers")
    qkv_bias, o_bias = arch.qkv_bias, arch.o_bias
    if arch.bias_from_config and data.get("attention_bias"):
        qkv_bias = o_bias = True
    max_pos = data.get("max_position_embeddings")
    moe, mla = _moe_shape(source, data, arch, layers), _mla_shape(source, data)
    windows = _layer_windows(source, data, model_type, layers)
    extra = {k: data[k] for k in _EXTRA_KEYS if data.get(k) is not None} if moe or mla or windows else {}
    return ModelConfig(
        name=name,
        source=str(source),
        model_type=model_type,
        hidden_size=hidden,
        intermediate_size=_int_key(source, data, "intermediate_size"),
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        head_dim=_head_dims(source, data, hidden, heads),
        vocab_size=_int_key(source, data, "vocab_size"),
        tie_word_embeddings=bool(data.get("tie_word_embeddings", arch.tied_default)),
        qkv_bias=qkv_bias,
        o_bias=o_bias,
        mlp_bias=bool(data.get("mlp_bias", False)),
        qk_norm=arch.qk_norm,
        max_position_embeddings=int(max_pos) if isinstance(max_pos, int) and max_pos > 0 else None,
        torch_dtype=data.get("torch_dtype") or data.get("dtype"),
        moe=moe,
        mla=mla,
        layer_windows=windows,
        sandwich_norms=arch.sandwich_norms,
        attention_sinks=arch.attention_sinks,
        extra_keys=extra,
        quant_method=_quant_method(data),
    )


def _quant_method(data: dict) -> str | None:
    quant = data.get("quantization_config")
    method = quant.get("quant_method") if isinstance(quant, dict) else None
    return str(method) if method else None


def shape_notes(cfg: ModelConfig) -> list[str]:
    """What the theory assumes or leaves out for this shape, one sentence each; [] for a dense model with
    full attention (the shape the formulas were first checked on)."""
    notes = []
    if cfg.moe is not None:
        notes.append(
            f"MoE: {cfg.moe.experts_per_token} of {cfg.moe.num_experts} experts per token in "
            f"{cfg.moe.moe_layers} of {cfg.num_hidden_layers} layers; weight bytes read per step assume "
            "uniform, independent routing (expected distinct experts E(1-(1-k/E)^B)); routing skew, "
            "expert parallelism and capacity limits are not modelled (skew touches fewer experts: the "
            "floor would be lower)"
        )
    if cfg.mla is not None:
        notes.append(
            f"MLA: KV holds one latent of {cfg.mla.kv_lora_rank} + a rotary key of "
            f"{cfg.mla.qk_rope_head_dim} per token per layer; attention FLOPs count the un-absorbed per-head "
            "matmuls (engines that absorb W_UK/W_UV into the query in decode do other work for the same "
            "result)"
        )
    if cfg.layer_windows:
        windowed = sum(w is not None for w in cfg.layer_windows)
        window = max(w for w in cfg.layer_windows if w is not None)
        notes.append(
            f"windows: {windowed} of {cfg.num_hidden_layers} layers attend over the last {window:,} tokens; "
            "KV read per step and attention FLOPs are capped there; KV pool tokens and vLLM blocks count "
            "every layer (an engine that frees sliding-window KV fits more)"
        )
    if cfg.attention_sinks:
        notes.append("attention sinks: one parameter per head per layer, no FLOPs counted")
    if cfg.quant_method:
        served = "mxfp4" if cfg.quant_method == "mxfp4" else "'<x>bpw' from the file size"
        notes.append(
            f"checkpoint: quantized ({cfg.quant_method}); weight bytes follow the weight format given "
            f"(default bf16, the unquantized model): pass the served one, --weight-format {served}"
        )
    return notes


def load_model_config(name_or_path: str | Path) -> ModelConfig:
    """A bundled config by name (case-insensitive; ``qwen2.5-7b``, a Hub id) or a config.json / model folder
    path."""
    text = str(name_or_path)
    path = Path(text).expanduser()
    if path.is_dir():
        path = path / "config.json"
    if path.is_file():
        return model_config_from_dict(_read_json(path), name=path.parent.name or path.stem, source=path)
    bundled = _bundled_path(text)
    if bundled is not None:
        return model_config_from_dict(_read_json(bundled), name=bundled.stem, source=bundled)
    if text.endswith(".json"):
        raise PlanError(f"{path}: no such model config file")
    known = ", ".join(bundled_model_names())
    raise PlanError(f"unknown model {text!r}: not a config.json path nor a bundled model ({known})")
