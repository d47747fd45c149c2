"""prediction.json: the theory `collector run` writes into a run before its first request.

``{"v": 1, "inputs": {...}, "prediction": {...} | null, "error": str | null}``: ``inputs`` are what
``collector.theory_sheet.theory_sheet`` was asked (its ``SheetInputs``: the plan's ``[model]`` table, plus a
llama.cpp server's ``-c`` and ``-np``), ``prediction`` its numbers (None when it refused: ``error`` says
why). The collector writes the file through ``PredictionDoc.to_dict`` and analysis reads it through
``PredictionDoc.from_dict``, so both sides use the attributes below, never string keys. Every key is checked
on reading: a missing or unknown key or a value of the wrong type is one line naming the file and the key
(``ParseError``).

A field with a default of None is optional: older runs lack it (``theory_notes``, a decode row's
``weight_bytes_read_per_step``) or only some shapes and pools have it (the MoE / MLA / window numbers, a
given pool's rounding ranges, an estimated pool's formula, a llama.cpp server's slots); ``to_dict`` leaves it
out when None, as the writer always did. A field without a default is always written, null where the
theory has no number (a CPU has no datasheet bandwidth, so no decode floor).
"""

from __future__ import annotations

import types
from dataclasses import MISSING, dataclass, fields, is_dataclass
from pathlib import Path
from typing import Any, TypeVar, Union, get_args, get_origin, get_type_hints

from collector.raw.errors import ParseError

PREDICTION_VERSION = 1

T = TypeVar("T")


@dataclass(frozen=True)
class PredictionInputs:
    """What `collector plan` was asked: the plan's ``[model]`` table (pool in GiB, or None: estimated) and,
    for a llama.cpp server, its ``-c`` (total context tokens) and ``-np`` (slots)."""

    model: str  # bundled name or config.json path
    gpu: str
    kv_pool_gib: float | None
    max_model_len: int | None
    kv_dtype: str
    weight_format: str
    block_size: int
    llama_cpp_ctx_total: int | None = None
    llama_cpp_slots: int | None = None


@dataclass(frozen=True)
class DecodeBatchRow:
    """The decode floor at one batch size (bytes per step, ms, tokens/s)."""

    batch: int
    kv_bytes_read_per_step: float
    step_floor_ms: float | None
    tokens_per_s: float | None
    compute_floor_ms: float | None
    fits_kv_pool: bool
    weight_bytes_read_per_step: float | None = None  # written since the MoE theory (issue #20)


@dataclass(frozen=True)
class PrefillRow:
    """The prefill FLOPs and compute floor (ms) of one prompt length."""

    prompt_tokens: int
    flops: int
    attention_flops: int
    compute_floor_ms: float | None


@dataclass(frozen=True)
class MoePrediction:
    """A mixture of experts' shape and the experts a batch is expected to touch (by batch size)."""

    num_experts: int
    experts_per_token: int
    expert_intermediate_size: int
    shared_intermediate_size: int
    moe_layers: int
    params_per_expert: int
    expected_experts_touched_by_batch: dict[str, float]


@dataclass(frozen=True)
class MlaPrediction:
    """Multi-head latent attention's ranks (q_lora_rank None: q projected straight from h)."""

    kv_lora_rank: int
    qk_rope_head_dim: int
    q_lora_rank: int | None


@dataclass(frozen=True)
class KvPoolEstimate:
    """How an estimated pool was computed (the vLLM way)."""

    gpu_memory_utilization: float
    reserve_bytes: int
    formula: str


@dataclass(frozen=True)
class PredictedTheory:
    """The theory sheet's numbers, units in the names (``analysis.theory`` has each formula)."""

    model: str
    model_config_path: str
    model_type: str
    config: dict[str, Any]  # the config.json keys the theory read (model_config_from_dict rebuilds the shape)
    gpu: str
    gpu_display_name: str
    gpu_memory_bytes: int | None
    gpu_bandwidth_bytes_per_s: float | None
    gpu_bf16_flops_per_s: float | None
    gpu_source: str
    params_total: int
    params_by_component: dict[str, int]
    params_share_by_component: dict[str, float]
    params_per_layer: int
    params_per_layer_by_component: dict[str, int]
    params_per_layer_share_by_component: dict[str, float]
    params_layers_total: int
    kv_dtype: str
    kv_bytes_per_element: float
    kv_bytes_per_token: float
    kv_bytes_per_token_mha: float
    gqa_factor: float
    matmul_params_per_layer: int
    flops_per_token_matmul: int
    flops_per_token_lm_head: int
    attention_flops_per_token_per_context_token: int
    flops_per_token_decode_at_context: int
    attention_overtakes_weights_at_tokens: int | None
    attention_overtakes_weights_prefill_at_tokens: int | None
    attention_causal_halving: bool
    prefill: list[PrefillRow]
    weight_format: str
    weight_bytes: float
    weight_bytes_by_group: dict[str, float]
    weight_bits_per_param: float
    weight_bytes_read_per_step: float
    decode_context_tokens: int
    decode_step_floor_ms: float | None
    decode_tokens_per_s_single_stream: float | None
    decode_by_batch: list[DecodeBatchRow]
    kv_pool_source: str  # "given", "estimated" or "llama.cpp -c"
    kv_pool_bytes: float
    kv_pool_tokens: int
    max_model_len: int
    max_model_len_source: str
    max_concurrency: float
    block_size: int
    vllm_num_gpu_blocks: int
    vllm_kv_cache_tokens: int
    max_concurrency_vllm: float
    llama_cpp_ctx_total_for_max_model_len_per_slot: int
    llama_cpp_slots_at_max_model_len: int
    theory_notes: list[str] | None = None  # older runs lack these two
    layers_by_component: dict[str, int] | None = None
    # shapes beyond a dense full-attention model
    params_active: int | None = None
    params_active_excluding_embedding: int | None = None
    moe: MoePrediction | None = None
    mla: MlaPrediction | None = None
    layer_windows: list[int | None] | None = None
    kv_bytes_per_sequence_at_max_model_len: float | None = None
    kv_bytes_per_sequence_at_decode_context: float | None = None
    max_concurrency_windows_freed: float | None = None
    # a llama.cpp server (its -c and -np)
    llama_cpp_ctx_total: int | None = None
    llama_cpp_slots: int | None = None
    llama_cpp_n_ctx_slot: int | None = None
    llama_cpp_kv_bytes: float | None = None
    # an estimated pool; a given pool's rounding of the GiB vLLM logs
    kv_pool_estimate: KvPoolEstimate | None = None
    kv_pool_gib_rounding_tolerance_tokens: float | None = None
    vllm_kv_cache_tokens_range: list[int] | None = None
    max_concurrency_vllm_range: list[float] | None = None

    @classmethod
    def from_dict(cls, data: Any, path: str | Path) -> PredictedTheory:
        """The theory sheet's dict as JSON holds it; ParseError naming ``path`` and the key if not one."""
        return _dataclass_from(cls, data, str(path), "prediction.")


@dataclass(frozen=True)
class PredictionDoc:
    """The whole file: version, inputs, the prediction or the error that kept it from being made."""

    inputs: PredictionInputs
    prediction: PredictedTheory | None
    error: str | None
    v: int = PREDICTION_VERSION

    @classmethod
    def from_dict(cls, data: Any, path: str | Path) -> PredictionDoc:
        """The document ``data`` read from ``path``; ParseError naming the file and the key if not one."""
        if not isinstance(data, dict):
            raise ParseError(path, None, "expected a prediction object")
        if data.get("v") != PREDICTION_VERSION:
            raise ParseError(
                path, None, f"key 'v': expected version {PREDICTION_VERSION}, got {data.get('v')!r}"
            )
        return _dataclass_from(cls, data, str(path), "")

    def to_dict(self) -> dict[str, Any]:
        """The JSON object the collector writes (optional fields that are None left out)."""
        out: dict[str, Any] = _dataclass_to(self)
        return out


def _key_error(path: str, key: str, what: str) -> ParseError:
    return ParseError(path, None, f"key {key!r}: {what}")


def _dataclass_from(cls: type[T], data: Any, path: str, prefix: str) -> T:
    if not isinstance(data, dict):
        raise _key_error(
            path, prefix.rstrip(".") or "(top)", f"expected an object, got {type(data).__name__}"
        )
    hints = get_type_hints(cls)
    known = {f.name: f for f in fields(cls)}  # type: ignore[arg-type]
    unknown = sorted(set(data) - set(known))
    if unknown:
        raise _key_error(path, prefix + unknown[0], "unknown key (not in the prediction.json schema)")
    values = {}
    for name, f in known.items():
        if name in data:
            values[name] = _value(data[name], hints[name], path, prefix + name)
        elif f.default is MISSING:
            raise _key_error(path, prefix + name, "missing")
    return cls(**values)


def _value(v: Any, hint: Any, path: str, key: str) -> Any:
    """``v`` checked against the field type ``hint`` (a dataclass, list/dict of one type, a union with None,
    int/float/str/bool or Any); ints are kept as written where a float is expected (JSON keeps 2 and 2.0)."""
    origin, args = get_origin(hint), get_args(hint)
    if origin in (Union, types.UnionType):
        if v is None and type(None) in args:
            return None
        (inner,) = [a for a in args if a is not type(None)]
        return _value(v, inner, path, key)
    if isinstance(hint, type) and is_dataclass(hint):
        return _dataclass_from(hint, v, path, key + ".")
    if origin is list:
        if not isinstance(v, list):
            raise _key_error(path, key, f"expected a list, got {type(v).__name__}")
        return [_value(x, args[0], path, f"{key}[{i}]") for i, x in enumerate(v)]
    if origin is dict:
        if not isinstance(v, dict):
            raise _key_error(path, key, f"expected an object, got {type(v).__name__}")
        return {k: _value(x, args[1], path, f"{key}.{k}") for k, x in v.items()}
    if hint is Any or _scalar_ok(v, hint):
        return v
    raise _key_error(path, key, f"expected {hint.__name__}, got {v!r}")


def _scalar_ok(v: Any, hint: type) -> bool:
    if isinstance(v, bool) or hint is bool:
        return hint is bool and isinstance(v, bool)
    if hint is float:
        return isinstance(v, int | float)
    return isinstance(v, hint)


def _dataclass_to(obj: Any) -> Any:
    if is_dataclass(obj) and not isinstance(obj, type):
        out = {}
        for f in fields(obj):
            v = getattr(obj, f.name)
            if v is None and f.default is None:
                continue  # optional and absent
            out[f.name] = _dataclass_to(v)
        return out
    if isinstance(obj, list):
        return [_dataclass_to(x) for x in obj]
    if isinstance(obj, dict):
        return {k: _dataclass_to(x) for k, x in obj.items()}
    return obj
