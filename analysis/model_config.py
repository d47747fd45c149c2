"""A model's shape from its Hugging Face ``config.json``: bundled by name, or any file by path.

Bundled configs (``analysis/models/*.json``) are the Hub files, content unchanged unless said below; where the
Hub file itself could not be read, the public copy it came from is named and checked against a second source
for the keys the theory reads:

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

Only the keys the theory needs are read; which biases and norms a layer has follows the architecture
(``model_type``), the way transformers builds the modules. Configs the theory cannot represent - mixture of
experts, latent (MLA) attention, sliding-window or mixed attention layers, which change the weight bytes read
per token or the KV bytes per token - are refused with one line naming the key (``unsupported_reason``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
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

# model_type -> (q/k/v bias, o bias, per-head q/k RMSNorm). Qwen2 hard-codes bias=True on q/k/v and
# bias=False on o_proj; Llama/Mistral take both from `attention_bias` (default False); Qwen3 drops the
# biases and adds q_norm/k_norm over head_dim.
_ARCH_DEFAULTS: dict[str, tuple[bool, bool, bool]] = {
    "qwen2": (True, False, False),
    "llama": (False, False, False),
    "mistral": (False, False, False),
    "qwen3": (False, False, True),
}


# Keys whose presence (a value above 1) means a mixture-of-experts MLP: each token reads only its routed
# experts'
# weights, so weight bytes read per step, FLOPs per token and the parameter count all differ from a dense MLP.
_MOE_KEYS = ("num_experts", "num_local_experts", "n_routed_experts", "moe_num_experts")
# model types whose ``sliding_window`` only applies when ``use_sliding_window`` is true (transformers
# Qwen2/Qwen3).
_GATED_SLIDING_WINDOW = ("qwen2", "qwen3")
_NOT_COVERED = "the theory covers dense decoder layers with full attention only"


def unsupported_reason(data: dict) -> str | None:
    """Why the theory cannot represent this config.json (``key ...: why``), or None when it can.

    - a mixture of experts (``num_experts`` / ``num_local_experts`` / ``n_routed_experts`` > 1);
    - multi-head latent attention (``kv_lora_rank``): KV holds a compressed latent, not K and V per head;
    - windowed attention: ``layer_types`` other than full attention, ``use_sliding_window`` true, or a
      ``sliding_window`` shorter than the context on architectures that always apply it (Gemma 2, Mistral
      v0.1): a windowed layer caches at most the window, so KV bytes per token depend on the context length.
    """
    for key in _MOE_KEYS:
        value = data.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 1:
            return (
                f"key '{key}' = {value}: a mixture of experts reads only the routed experts per token, "
                f"so weight bytes, FLOPs and parameters per token are not a dense layer's; {_NOT_COVERED}"
            )
    if data.get("kv_lora_rank"):
        return (
            f"key 'kv_lora_rank' = {data['kv_lora_rank']}: multi-head latent attention caches a compressed "
            f"latent, not K and V per head, so KV bytes per token differ; {_NOT_COVERED}"
        )
    layer_types = data.get("layer_types")
    if isinstance(layer_types, list):
        kinds = sorted({str(t) for t in layer_types} - {"full_attention"})
        if kinds:
            return (
                f"key 'layer_types' has {', '.join(kinds)} layers: a windowed or linear layer caches a "
                f"bounded state, so KV bytes per token depend on the context; {_NOT_COVERED}"
            )
    window = data.get("sliding_window")
    model_type = data.get("model_type")
    if model_type in _GATED_SLIDING_WINDOW:
        if data.get("use_sliding_window"):
            return (
                f"key 'use_sliding_window' is true (window {window}): windowed layers cache at most the "
                f"window, so KV bytes per token depend on the context; {_NOT_COVERED}"
            )
    elif isinstance(window, int) and not isinstance(window, bool) and window > 0:
        max_pos = data.get("max_position_embeddings")
        if not isinstance(max_pos, int) or window < max_pos:
            return (
                f"key 'sliding_window' = {window} (model_type {model_type!r}): windowed layers cache at most "
                f"{window} tokens, so KV bytes per token depend on the context; {_NOT_COVERED}"
            )
    return None


@dataclass(frozen=True)
class ModelConfig:
    """The shape of a dense decoder-only transformer, as the theory needs it."""

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


def bundled_model_names() -> list[str]:
    """Names of the bundled configs (file stems of ``analysis/models/*.json``), sorted."""
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
    value = data[key]
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise PlanError(f"{path}: key '{key}' must be a positive integer, got {value!r}")
    return value


def model_config_from_dict(data: dict, *, name: str, source: Path) -> ModelConfig:
    """Build a ModelConfig from a parsed config.json; errors name the file and the key."""
    reason = unsupported_reason(data)
    if reason is not None:
        raise PlanError(f"{source}: {reason}")
    for key in REQUIRED_KEYS:
        if key not in data:
            raise PlanError(f"{source}: missing key '{key}'")
    model_type = data["model_type"]
    if model_type not in _ARCH_DEFAULTS:
        known = ", ".join(sorted(_ARCH_DEFAULTS))
        raise PlanError(f"{source}: key 'model_type' is {model_type!r}; the theory knows {known}")
    hidden = _int_key(source, data, "hidden_size")
    heads = _int_key(source, data, "num_attention_heads")
    kv_heads = _int_key(source, data, "num_key_value_heads") if data.get("num_key_value_heads") else heads
    if heads % kv_heads:
        raise PlanError(
            f"{source}: key 'num_key_value_heads' ({kv_heads}) must divide num_attention_heads ({heads})"
        )
    if data.get("head_dim"):
        head_dim = _int_key(source, data, "head_dim")
    else:
        if hidden % heads:
            raise PlanError(
                f"{source}: key 'head_dim' missing and hidden_size {hidden} is not a multiple of "
                f"{heads} heads"
            )
        head_dim = hidden // heads
    qkv_bias, o_bias, qk_norm = _ARCH_DEFAULTS[model_type]
    if model_type in ("llama", "mistral") and data.get("attention_bias"):
        qkv_bias = o_bias = True
    max_pos = data.get("max_position_embeddings")
    return ModelConfig(
        name=name,
        source=str(source),
        model_type=model_type,
        hidden_size=hidden,
        intermediate_size=_int_key(source, data, "intermediate_size"),
        num_hidden_layers=_int_key(source, data, "num_hidden_layers"),
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        head_dim=head_dim,
        vocab_size=_int_key(source, data, "vocab_size"),
        tie_word_embeddings=bool(data.get("tie_word_embeddings", False)),
        qkv_bias=qkv_bias,
        o_bias=o_bias,
        mlp_bias=bool(data.get("mlp_bias", False)),
        qk_norm=qk_norm,
        max_position_embeddings=int(max_pos) if isinstance(max_pos, int) and max_pos > 0 else None,
        torch_dtype=data.get("torch_dtype") or data.get("dtype"),
    )


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
