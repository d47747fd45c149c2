"""The theory sheet (`collector plan`, the command's name kept): the theory for one model on one GPU, as a
readable table or JSON. Not a plan: "plan" names the plan.toml a run follows (``collector.raw.plan``).

``theory_sheet`` returns the dict (``collector run`` writes it as prediction.json); ``theory_sheet_text``
renders it.
Every number comes from ``analysis.core.theory``; this module only gathers and formats.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from analysis.core import theory as th
from analysis.core.gpus import GpuSpec, get_gpu
from analysis.core.model_config import ModelConfig, load_model_config
from collector.raw.errors import PlanError

DEFAULT_BATCH_SIZES = (1, 2, 4, 8, 16, 32, 64, 128)
DEFAULT_DECODE_CONTEXT_TOKENS = 1024
DEFAULT_PREFILL_TOKENS = 1024  # plus max_model_len


def _check_positive(name: str, value: int | float | None) -> None:
    if value is not None and (isinstance(value, bool) or value <= 0):
        raise PlanError(f"--{name.replace('_', '-')} must be positive, got {value}")


@dataclass(frozen=True)
class SheetInputs:
    """What the theory sheet is asked (prediction.json's ``inputs``): a model (bundled name or config.json
    path) on a GPU, with the server's KV pool (``kv_pool_gib`` given, or llama.cpp's ``-c``/``-np``, else
    estimated the vLLM way), context limit, KV and weight formats and KV block size."""

    model: str
    gpu: str
    kv_pool_gib: float | None = None
    max_model_len: int | None = None
    kv_dtype: str = "bf16"
    weight_format: str = "bf16"
    block_size: int = 16
    llama_cpp_ctx_total: int | None = None
    llama_cpp_slots: int | None = None


def theory_sheet(
    inputs: SheetInputs,
    *,
    decode_context_tokens: int = DEFAULT_DECODE_CONTEXT_TOKENS,
    batch_sizes: Sequence[int] = DEFAULT_BATCH_SIZES,
    prefill_tokens: Sequence[int] | None = None,
) -> dict[str, Any]:
    """The prediction for a model on a GPU, as a JSON-ready dict.

    Keys are snake_case with units in the name. ``kv_pool_source`` says whether the pool was given
    (``--kv-pool-gib``) or estimated the vLLM way (``theory.estimated_kv_pool_bytes``).
    For a llama.cpp server pass its ``-c`` and ``-np`` (``llama_cpp_ctx_total``, ``llama_cpp_slots``) to get
    its KV buffer and per-slot context as well.
    """
    _check_positive("kv_pool_gib", inputs.kv_pool_gib)
    _check_positive("max_model_len", inputs.max_model_len)
    _check_positive("block_size", inputs.block_size)
    if decode_context_tokens < 0:
        raise PlanError(f"decode context must be >= 0 tokens, got {decode_context_tokens}")
    cfg = load_model_config(inputs.model)
    spec = get_gpu(inputs.gpu)
    fmt = th.normalise_weight_format(inputs.weight_format)
    max_model_len, max_len_source = _max_model_len(cfg, inputs.max_model_len)
    # a context or prompt longer than a request may be is not a prediction for this server
    decode_context_tokens = min(decode_context_tokens, max_model_len)
    prefill = sorted(
        {min(s, max_model_len) for s in prefill_tokens or (DEFAULT_PREFILL_TOKENS, max_model_len)}
    )
    pool_bytes, pool_source = _pool(inputs, cfg, spec, th.weight_bytes(cfg, fmt))
    pool_tokens = th.kv_pool_tokens(pool_bytes, th.kv_bytes_per_token(cfg, inputs.kv_dtype))
    data = _model_data(cfg, spec, inputs.kv_dtype, fmt)
    data["attention_flops_per_token_per_context_token"] = th.attention_flops_decode_per_token(cfg, 1)
    data["flops_per_token_decode_at_context"] = th.flops_decode_per_token(cfg, decode_context_tokens)
    data["attention_overtakes_weights_at_tokens"] = th.attention_overtakes_weights_at_tokens(cfg)
    data["attention_overtakes_weights_prefill_at_tokens"] = th.attention_overtakes_weights_prefill_at_tokens(
        cfg
    )
    data["attention_causal_halving"] = False
    data["prefill"] = _prefill_rows(cfg, spec, prefill)
    data |= _weights_data(cfg, fmt)
    data |= _decode_data(cfg, spec, inputs.kv_dtype, fmt, batch_sizes, decode_context_tokens, pool_tokens)
    data |= {"kv_pool_source": pool_source, "kv_pool_bytes": pool_bytes, "kv_pool_tokens": pool_tokens}
    data |= _capacity_data(
        pool_bytes,
        pool_tokens,
        th.kv_bytes_per_token(cfg, inputs.kv_dtype),
        inputs.block_size,
        max_model_len,
        max_len_source,
    )
    data |= _shape_data(cfg, batch_sizes, pool_bytes, max_model_len, decode_context_tokens, inputs.kv_dtype)
    data |= _llama_cpp_data(inputs, cfg)
    data |= _pool_source_data(inputs, pool_source, th.kv_bytes_per_token(cfg, inputs.kv_dtype), max_model_len)
    return data


def _max_model_len(cfg: ModelConfig, given: int | None) -> tuple[int, str]:
    """The context limit and where it came from: given, else the config's ``max_position_embeddings``."""
    if given is not None:
        return given, "given"
    if cfg.max_position_embeddings is None:
        raise PlanError(f"{cfg.source}: no 'max_position_embeddings'; pass --max-model-len")
    return cfg.max_position_embeddings, "config max_position_embeddings"


def _pool(inputs: SheetInputs, cfg: ModelConfig, spec: GpuSpec, weight_bytes: float) -> tuple[float, str]:
    """The KV pool in bytes and its source: given (``kv_pool_gib``), llama.cpp's ``-c`` (it allocates exactly
    that many tokens of KV, whatever the card), else estimated from the datasheet memory the vLLM way."""
    if inputs.kv_pool_gib is not None:
        return inputs.kv_pool_gib * th.GIB, "given"
    if inputs.llama_cpp_ctx_total:
        return th.llama_cpp_kv_bytes(cfg, inputs.llama_cpp_ctx_total, inputs.kv_dtype), "llama.cpp -c"
    if spec.memory_bytes is None:
        raise PlanError(f"{spec.name} has no datasheet memory to estimate a KV pool from; pass --kv-pool-gib")
    return th.estimated_kv_pool_bytes(spec.memory_bytes, weight_bytes), "estimated"


def _model_data(cfg: ModelConfig, spec: GpuSpec, kv_dtype: str, fmt: str) -> dict[str, Any]:
    """The model's shape, the GPU's datasheet, parameters, KV bytes per token and matmul FLOPs."""
    fmt_notes = cfg.family_notes
    if fmt_notes and fmt in th.GGUF_FTYPES and not th.gguf_recipe_covers(cfg):
        fmt_notes.append(
            f"weights: {fmt} taken at its typical {th.GGUF_TYPICAL_BPW[fmt]} bits/weight (the per-tensor "
            "recipe covers dense grouped-query layers only)"
        )
    by_component = th.params_by_component(cfg)
    per_layer = th.params_per_layer_by_component(cfg)
    return {
        "model": cfg.name,
        "model_config_path": cfg.source,
        "model_type": cfg.model_type,
        "config": {
            "hidden_size": cfg.hidden_size,
            "intermediate_size": cfg.intermediate_size,
            "num_hidden_layers": cfg.num_hidden_layers,
            "num_attention_heads": cfg.num_attention_heads,
            "num_key_value_heads": cfg.num_key_value_heads,
            "head_dim": cfg.head_dim,
            "vocab_size": cfg.vocab_size,
            "tie_word_embeddings": cfg.tie_word_embeddings,
            "qkv_bias": cfg.qkv_bias,
            "o_bias": cfg.o_bias,
            **cfg.extra_keys,  # MoE / MLA / window keys by their config.json names (empty for dense)
        },
        # what the theory assumes or leaves out for this shape (MoE routing, MLA absorption, windows)
        "theory_notes": fmt_notes,
        "gpu": spec.name,
        "gpu_display_name": spec.display_name,
        "gpu_memory_bytes": spec.memory_bytes,
        "gpu_bandwidth_bytes_per_s": spec.bandwidth_bytes_per_s,
        "gpu_bf16_flops_per_s": spec.bf16_flops_per_s,
        "gpu_source": spec.source,
        # parameters
        "params_total": th.params_total(cfg),
        "params_by_component": by_component,
        "params_share_by_component": th.shares(by_component),
        "params_per_layer": th.params_per_layer(cfg),
        "params_per_layer_by_component": per_layer,
        "params_per_layer_share_by_component": th.shares(per_layer),
        "params_layers_total": sum(per * n for per, n in th.layer_component_counts(cfg).values()),
        "layers_by_component": {k: n for k, (_, n) in th.layer_component_counts(cfg).items()},
        # KV cache
        "kv_dtype": kv_dtype,
        "kv_bytes_per_element": th.kv_bytes_per_element(kv_dtype),
        "kv_bytes_per_token": th.kv_bytes_per_token(cfg, kv_dtype),
        "kv_bytes_per_token_mha": th.kv_bytes_per_token_mha(cfg, kv_dtype),
        "gqa_factor": th.gqa_factor(cfg),
        # FLOPs
        "matmul_params_per_layer": th.matmul_params_per_layer(cfg),
        "flops_per_token_matmul": th.flops_per_token_matmul(cfg),
        "flops_per_token_lm_head": th.flops_per_token_lm_head(cfg),
    }


def _prefill_rows(cfg: ModelConfig, spec: GpuSpec, prompts: Sequence[int]) -> list[dict[str, Any]]:
    """Per prompt length: its FLOPs (attention's share) and the compute floor at the datasheet's bf16 peak."""
    peak = spec.bf16_flops_per_s
    rows = []
    for s in prompts:
        flops = th.flops_prefill(cfg, s)
        rows.append(
            {
                "prompt_tokens": s,
                "flops": flops,
                "attention_flops": th.attention_flops_prefill(cfg, s),
                "compute_floor_ms": th.decode_compute_floor_s(flops, peak) * 1e3 if peak else None,
            }
        )
    return rows


def _weights_data(cfg: ModelConfig, fmt: str) -> dict[str, Any]:
    """The weights in ``fmt``: bytes in all and by group, bits per parameter, bytes one decode step reads."""
    w_bytes = th.weight_bytes(cfg, fmt)
    return {
        "weight_format": fmt,
        "weight_bytes": w_bytes,
        "weight_bytes_by_group": th.weight_bytes_by_group(cfg, fmt),
        "weight_bits_per_param": w_bytes * 8 / th.params_total(cfg),
        "weight_bytes_read_per_step": th.weight_bytes_read_per_decode_step(cfg, fmt),
    }


def _decode_data(
    cfg: ModelConfig,
    spec: GpuSpec,
    kv_dtype: str,
    fmt: str,
    batch_sizes: Sequence[int],
    context_tokens: int,
    pool_tokens: int,
) -> dict[str, Any]:
    """The decode floor at ``context_tokens`` of context: one stream, and per batch size (bytes read, step
    floor, tokens/s, compute floor, whether the batch's KV fits the pool)."""
    bw, peak = spec.bandwidth_bytes_per_s, spec.bf16_flops_per_s
    kv_seq = th.kv_bytes_per_sequence(cfg, context_tokens, kv_dtype)
    rows = []
    for batch in batch_sizes:
        kv_read = th.kv_bytes_read_per_step(kv_seq, batch, 1)
        w_read_b = th.weight_bytes_read_per_decode_step(cfg, fmt, batch)
        step_s = th.decode_step_floor_s(w_read_b, kv_read, bw) if bw else None
        flops = batch * th.flops_decode_per_token(cfg, context_tokens)
        rows.append(
            {
                "batch": batch,
                "weight_bytes_read_per_step": w_read_b,
                "kv_bytes_read_per_step": kv_read,
                "step_floor_ms": step_s * 1e3 if step_s else None,
                "tokens_per_s": th.tokens_per_s(batch, step_s) if step_s else None,
                "compute_floor_ms": th.decode_compute_floor_s(flops, peak) * 1e3 if peak else None,
                "fits_kv_pool": batch * context_tokens <= pool_tokens,
            }
        )
    w_read = th.weight_bytes_read_per_decode_step(cfg, fmt)
    single = th.decode_step_floor_s(w_read, th.kv_bytes_read_per_step(kv_seq, 1, 1), bw) if bw else None
    return {
        "decode_context_tokens": context_tokens,
        "decode_step_floor_ms": single * 1e3 if single else None,
        "decode_tokens_per_s_single_stream": th.tokens_per_s(1, single) if single else None,
        "decode_by_batch": rows,
    }


def _capacity_data(
    pool_bytes: float, pool_tokens: int, kv_bpt: float, block_size: int, max_model_len: int, len_source: str
) -> dict[str, Any]:
    """How many requests of ``max_model_len`` the pool holds: plainly, in vLLM blocks, in llama.cpp slots."""
    num_blocks = th.vllm_num_gpu_blocks(pool_bytes, block_size, kv_bpt)
    return {
        "max_model_len": max_model_len,
        "max_model_len_source": len_source,
        "max_concurrency": th.max_concurrency_plain(pool_tokens, max_model_len),
        "block_size": block_size,
        "vllm_num_gpu_blocks": num_blocks,
        "vllm_kv_cache_tokens": th.vllm_kv_cache_tokens(num_blocks, block_size),
        "max_concurrency_vllm": th.vllm_max_concurrency(num_blocks, block_size, max_model_len),
        "llama_cpp_ctx_total_for_max_model_len_per_slot": max_model_len
        * max(1, pool_tokens // max_model_len),
        "llama_cpp_slots_at_max_model_len": pool_tokens // max_model_len,
    }


def _llama_cpp_data(inputs: SheetInputs, cfg: ModelConfig) -> dict[str, Any]:
    """A llama.cpp server's KV buffer and per-slot context from its ``-c`` and ``-np`` (empty without)."""
    ctx, slots = inputs.llama_cpp_ctx_total, inputs.llama_cpp_slots
    if ctx is None and slots is None:
        return {}
    if not ctx or not slots or ctx <= 0 or slots <= 0:
        raise PlanError("llama.cpp needs both -c (total context) and -np (slots), positive")
    return {
        "llama_cpp_ctx_total": ctx,
        "llama_cpp_slots": slots,
        "llama_cpp_n_ctx_slot": th.llama_cpp_n_ctx_slot(ctx, slots),
        "llama_cpp_kv_bytes": th.llama_cpp_kv_bytes(cfg, ctx, inputs.kv_dtype),
    }


def _pool_source_data(inputs: SheetInputs, source: str, kv_bpt: float, max_model_len: int) -> dict[str, Any]:
    """How the pool was had: the estimate's formula, or a given (logged) GiB's rounding range."""
    if source == "estimated":
        return {
            "kv_pool_estimate": {
                "gpu_memory_utilization": th.DEFAULT_GPU_MEMORY_UTILIZATION,
                "reserve_bytes": th.DEFAULT_KV_RESERVE_BYTES,
                "formula": "gpu_memory_utilization * gpu_memory_bytes - weight_bytes - reserve_bytes",
            }
        }
    if source != "given" or inputs.kv_pool_gib is None:
        return {}
    block = inputs.block_size
    lo, hi = th.vllm_tokens_range_for_logged_gib(inputs.kv_pool_gib, kv_bpt, block)
    return {
        "kv_pool_gib_rounding_tolerance_tokens": th.logged_gib_tolerance_tokens(kv_bpt),
        "vllm_kv_cache_tokens_range": [lo, hi],
        "max_concurrency_vllm_range": [
            th.vllm_max_concurrency(lo // block, block, max_model_len),
            th.vllm_max_concurrency(hi // block, block, max_model_len),
        ],
    }


def _shape_data(cfg, batch_sizes, pool_bytes, max_model_len, context_tokens, kv_dtype) -> dict:
    """The numbers only a mixture of experts, latent attention or windowed layers have (empty for a dense
    full-attention model, so its prediction is unchanged)."""
    out: dict = {}
    if cfg.moe is not None:
        m = cfg.moe
        out["params_active"] = th.params_active(cfg)
        out["params_active_excluding_embedding"] = th.params_active(cfg, count_embedding=False)
        out["moe"] = {
            "num_experts": m.num_experts,
            "experts_per_token": m.experts_per_token,
            "expert_intermediate_size": m.expert_intermediate_size,
            "shared_intermediate_size": m.shared_intermediate_size,
            "moe_layers": m.moe_layers,
            "params_per_expert": th.expert_params(cfg),
            "expected_experts_touched_by_batch": {
                str(b): th.expected_experts_touched(m.num_experts, m.experts_per_token, b)
                for b in batch_sizes
            },
        }
    if cfg.mla is not None:
        out["mla"] = {
            "kv_lora_rank": cfg.mla.kv_lora_rank,
            "qk_rope_head_dim": cfg.mla.qk_rope_head_dim,
            "q_lora_rank": cfg.mla.q_lora_rank,
        }
    if cfg.layer_windows:
        seq = th.kv_bytes_per_sequence(cfg, max_model_len, kv_dtype)
        out["layer_windows"] = list(cfg.layer_windows)
        out["kv_bytes_per_sequence_at_max_model_len"] = seq
        out["kv_bytes_per_sequence_at_decode_context"] = th.kv_bytes_per_sequence(
            cfg, context_tokens, kv_dtype
        )
        out["max_concurrency_windows_freed"] = th.max_concurrency_by_bytes(pool_bytes, seq)
    return out


# ---------------------------------------------------------------------------------------------------------
# Rendering
# ---------------------------------------------------------------------------------------------------------


def _n(x: float) -> str:
    return f"{x:,.0f}"


def _gib(x: float) -> str:
    return f"{x / th.GIB:,.2f} GiB"


def _pct(x: float) -> str:
    return f"{100 * x:6.2f}%"


def _bytes(x: float) -> str:
    return _gib(x) if x >= th.GIB else f"{x / 2**20:,.1f} MiB"


def _sci(x: float) -> str:
    return f"{x:.3e}"


def _table(headers: Sequence[str], rows: Sequence[Sequence[str]], align: str) -> list[str]:
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]

    def line(cells: Sequence[str]) -> str:
        out = [c.ljust(w) if a == "l" else c.rjust(w) for c, w, a in zip(cells, widths, align, strict=True)]
        return "  ".join(out).rstrip()

    return [line(headers), line(["-" * w for w in widths]), *(line(r) for r in rows)]


def _decode_floor_lines(d: dict, T: int) -> list[str]:
    out: list[str] = []
    peak = d["gpu_bf16_flops_per_s"]  # None where the datasheet publishes no tensor rate (A10G)
    peak_text = f"{peak / 1e12:,.1f} TFLOP/s dense bf16" if peak else "no datasheet bf16 rate"
    out.append(
        f"{d['gpu']}: {d['gpu_bandwidth_bytes_per_s'] / 1e9:,.0f} GB/s, {peak_text}; "
        f"each sequence holds {T:,} tokens of KV"
    )
    moe = "moe" in d  # weights read grow with the batch: more distinct experts
    out.append(
        "step floor = (weight bytes read"
        + (" (the experts touched at B)" if moe else "")
        + (
            " + B x KV bytes of a sequence, windows capped"
            if "layer_windows" in d
            else " + B x T x KV bytes/token"
        )
        + ") / bandwidth; compute floor = B x FLOPs/token / peak"
    )
    rows = [
        [
            str(r["batch"]),
            *([_bytes(r["weight_bytes_read_per_step"])] if moe else []),
            _bytes(r["kv_bytes_read_per_step"]),
            f"{r['step_floor_ms']:.2f}",
            f"{r['tokens_per_s']:,.1f}",
            f"{r['compute_floor_ms']:.2f}" if r["compute_floor_ms"] is not None else "n/a",
            "yes" if r["fits_kv_pool"] else "no",
        ]
        for r in d["decode_by_batch"]
    ]
    headers = ["batch", *(["weights read"] if moe else []), "KV read/step", "step floor ms", "tokens/s"]
    out += _table([*headers, "compute ms", "fits pool"], rows, "r" * (len(headers) + 2))
    out.append(
        f"single stream: {d['decode_step_floor_ms']:.2f} ms/step -> "
        f"{d['decode_tokens_per_s_single_stream']:,.1f} tokens/s at most"
    )
    return out


def render_theory_sheet(d: dict) -> str:
    """The theory sheet as plain text, one section per topic."""
    c = d["config"]
    L = c["num_hidden_layers"]
    out: list[str] = [
        f"{d['model']} on {d['gpu_display_name']} ({d['gpu']}): weights {d['weight_format']}, KV cache "
        f"{d['kv_dtype']}",
        f"config: {d['model_config_path']}",
        f"shape: h={c['hidden_size']} I={c['intermediate_size']} L={L} H={c['num_attention_heads']} "
        f"K={c['num_key_value_heads']} d={c['head_dim']} V={c['vocab_size']} tied={c['tie_word_embeddings']}",
    ]
    out += ["", "== Parameters =="]
    out += _param_lines(d, L)
    out += ["", "== KV cache =="]
    out += _kv_lines(d, L)
    out += ["", "== FLOPs per token =="]
    out += _flop_lines(d)
    out += ["", "== Weights =="]
    out += _weight_lines(d)
    out += ["", "== Decode floor =="]
    if d["decode_step_floor_ms"] is None:
        out.append(f"{d['gpu']}: {d['gpu_source']}; no floor is predicted")
    else:
        out += _decode_floor_lines(d, d["decode_context_tokens"])
    out += ["", "== KV pool =="]
    out += _pool_lines(d)
    if d.get("theory_notes"):
        out += ["", "== What the theory covers here =="]
        out += [f"- {note}" for note in d["theory_notes"]]
    return "\n".join(out)


def _param_lines(d: dict, L: int) -> list[str]:
    """Parameters by component, per layer and in the whole model, with their shares."""
    c = d["config"]
    per_layer, per_share = d["params_per_layer_by_component"], d["params_per_layer_share_by_component"]
    whole, whole_share = d["params_by_component"], d["params_share_by_component"]
    bias = {"q_proj": c["qkv_bias"], "k_proj": c["qkv_bias"], "v_proj": c["qkv_bias"], "o_proj": c["o_bias"]}
    rows = [["embed_tokens", "", "", "", _n(whole["embed_tokens"]), _pct(whole_share["embed_tokens"])]]
    layers = d.get("layers_by_component", {})
    for name, count in per_layer.items():
        label = name + (" (+bias)" if bias.get(name) else "")
        n = layers.get(name, L)
        rows.append(
            [label, _n(count), _pct(per_share[name]), f"x{n}", _n(whole[name]), _pct(whole_share[name])]
        )
    rows.append(["norm (final)", "", "", "", _n(whole["norm"]), _pct(whole_share["norm"])])
    head = "lm_head (tied: 0)" if c["tie_word_embeddings"] else "lm_head"
    rows.append([head, "", "", "", _n(whole["lm_head"]), _pct(whole_share["lm_head"])])
    rows.append(["total", _n(d["params_per_layer"]), _pct(1.0), f"x{L}", _n(d["params_total"]), _pct(1.0)])
    out = _table(["component", "per layer", "of layer", "layers", "whole model", "of model"], rows, "lrrrrr")
    attn = sum(per_share.get(k, 0.0) for k in ("q_proj", "k_proj", "v_proj", "o_proj"))
    mlp = sum(per_share.get(k, 0.0) for k in ("gate_proj", "up_proj", "down_proj"))
    if "moe" in d or "mla" in d:
        out.append(
            f"all layers {_n(d['params_layers_total'])} = "
            f"{100 * d['params_layers_total'] / d['params_total']:.1f}% of the model"
        )
    else:
        out.append(
            f"per layer: attention {100 * attn:.1f}%, MLP {100 * mlp:.1f}%; all layers "
            f"{_n(d['params_layers_total'])} = {100 * d['params_layers_total'] / d['params_total']:.1f}% of "
            "the model"
        )
    if "moe" in d:
        out += _moe_lines(d)
    return out


def _flop_lines(d: dict) -> list[str]:
    """FLOPs per token: layer matmuls, lm_head, attention at context T, prefill per prompt length."""
    T = d["decode_context_tokens"]
    attn_formula = "2 x H x (d_qk + d_v) x L" if "mla" in d else "4 x T x L x H x d"
    out = [
        f"layer matmuls   2 x {_n(d['flops_per_token_matmul'] // 2)} weights = "
        f"{_sci(d['flops_per_token_matmul'])}",
        f"lm_head         2 x V x h = {_sci(d['flops_per_token_lm_head'])} (per sampled position only)",
        f"attention       {attn_formula} = {_n(d['attention_flops_per_token_per_context_token'])} x "
        "T (decode at context T" + (", windowed layers capped at W)" if "layer_windows" in d else ")"),
        f"decode at T={T:,}: {_sci(d['flops_per_token_decode_at_context'])} FLOPs/token",
        f"attention overtakes weights at T = {d['attention_overtakes_weights_at_tokens']:,} tokens (decode, "
        f"lm_head included); prefill S = {d['attention_overtakes_weights_prefill_at_tokens']:,} (full SxS, "
        "no causal halving)",
    ]
    for p in d["prefill"]:
        out.append(
            f"prefill of {p['prompt_tokens']:,} tokens: {_sci(p['flops'])} FLOPs "
            f"(attention {_sci(p['attention_flops'])})"
            + (
                f" -> compute floor {p['compute_floor_ms']:.2f} ms at peak bf16"
                if p["compute_floor_ms"]
                else ""
            )
        )
    return out


def _weight_lines(d: dict) -> list[str]:
    """The weights' bytes (by group) and what one decode step reads."""
    g = d["weight_bytes_by_group"]
    note = (
        "tied table read once as lm_head"
        if d["config"]["tie_word_embeddings"]
        else "embedding table gathered, not read"
    )
    return [
        f"{d['weight_format']}: {_n(d['weight_bytes'])} B ({_gib(d['weight_bytes'])}), "
        f"{d['weight_bits_per_param']:.3f} bits/param",
        f"  embedding {_gib(g['embedding'])}, layers {_gib(g['layers'])}, lm_head {_gib(g['lm_head'])}, "
        f"final norm {_n(g['final_norm'])} B",
        f"read per decode step: {_n(d['weight_bytes_read_per_step'])} B "
        f"({_gib(d['weight_bytes_read_per_step'])}); {note}",
    ]


def _pool_lines(d: dict) -> list[str]:
    """The KV pool (given or estimated), its tokens and what it holds in vLLM blocks and llama.cpp slots."""
    out = []
    if d["kv_pool_source"] == "given":
        out.append(f"pool: {_gib(d['kv_pool_bytes'])} = {_n(d['kv_pool_bytes'])} B (given)")
    else:
        e = d["kv_pool_estimate"]
        out.append(
            f"pool: {_gib(d['kv_pool_bytes'])} (estimated: {e['gpu_memory_utilization']} x "
            f"{_gib(d['gpu_memory_bytes'])} - weights {_gib(d['weight_bytes'])} - reserve "
            f"{_gib(e['reserve_bytes'])})"
        )
    out.append(f"tokens: floor(pool / {_n(d['kv_bytes_per_token'])} B) = {d['kv_pool_tokens']:,}")
    out.append(
        f"max_model_len {d['max_model_len']:,} ({d['max_model_len_source']}): "
        f"max concurrency {d['max_concurrency']:.2f} (tokens / max_model_len)"
    )
    if "max_concurrency_windows_freed" in d:
        out.append(
            "an engine that frees KV beyond each window "
            f"({_gib(d['kv_bytes_per_sequence_at_max_model_len'])} "
            f"per full-length request): max concurrency {d['max_concurrency_windows_freed']:.2f}"
        )
    blocks_per_req = math.ceil(d["max_model_len"] / d["block_size"])
    out.append(
        f"vLLM: block {d['block_size']} -> {d['vllm_num_gpu_blocks']:,} blocks = "
        f"{d['vllm_kv_cache_tokens']:,} tokens; max concurrency {d['vllm_num_gpu_blocks']:,} / "
        f"{blocks_per_req:,} blocks per request = {d['max_concurrency_vllm']:.2f}x"
    )
    if d["kv_pool_source"] == "given":
        lo, hi = d["vllm_kv_cache_tokens_range"]
        clo, chi = d["max_concurrency_vllm_range"]
        out.append(
            f"a GiB figure rounded to 2 decimals hides +/-{d['kv_pool_gib_rounding_tolerance_tokens']:,.1f} "
            f"tokens: vLLM would report {lo:,}..{hi:,} tokens, {clo:.2f}x..{chi:.2f}x"
        )
    out.append(
        f"llama.cpp: -np N -c C gives each slot C/N tokens; {d['llama_cpp_slots_at_max_model_len']:,} slots "
        f"of {d['max_model_len']:,} fit (-c {d['llama_cpp_ctx_total_for_max_model_len_per_slot']:,})"
    )
    return out


def _kv_lines(d: dict, L: int) -> list[str]:
    c = d["config"]
    b = f"{d['kv_bytes_per_element']:g} B ({d['kv_dtype']})"
    if "mla" in d:
        m = d["mla"]
        formula = f"{L} layers x ({m['kv_lora_rank']} latent + {m['qk_rope_head_dim']} rope) x {b}"
        saving = f"latent attention saves {d['gqa_factor']:.1f}x"
    else:
        formula = (
            f"2 (K,V) x {L} layers x {c['num_key_value_heads']} kv heads x {c['head_dim']} head_dim x {b}"
        )
        heads = f"{c['num_attention_heads']} heads / {c['num_key_value_heads']} kv heads"
        saving = f"GQA saves {d['gqa_factor']:g}x ({heads})"
    out = [
        f"KV bytes/token = {formula} = {_n(d['kv_bytes_per_token'])} B "
        f"({d['kv_bytes_per_token'] / 1024:,.1f} KiB)",
        f"full multi-head would need {_n(d['kv_bytes_per_token_mha'])} B/token; {saving}",
    ]
    if "layer_windows" in d:
        windows = [w for w in d["layer_windows"] if w is not None]
        out.append(
            f"{len(windows)} of {L} layers keep only the last {max(windows):,} tokens: "
            f"{max(1, d['max_model_len']):,} tokens of context = "
            f"{_gib(d['kv_bytes_per_sequence_at_max_model_len'])} (every layer full: "
            f"{_gib(d['kv_bytes_per_token'] * d['max_model_len'])})"
        )
    else:
        out.append(
            f"{max(1, d['max_model_len']):,} tokens of context = "
            f"{_gib(d['kv_bytes_per_token'] * d['max_model_len'])}"
        )
    return out


def _moe_lines(d: dict) -> list[str]:
    m = d["moe"]
    touched = ", ".join(f"B={b}: {x:.1f}" for b, x in m["expected_experts_touched_by_batch"].items())
    return [
        f"experts: {m['experts_per_token']} of {m['num_experts']} per token in {m['moe_layers']} layers, "
        f"{_n(m['params_per_expert'])} parameters each; active per token {_n(d['params_active'])} "
        f"({_n(d['params_active_excluding_embedding'])} without the embedding table) of "
        f"{_n(d['params_total'])} resident",
        f"expected distinct experts per layer per step, E(1-(1-k/E)^B): {touched}",
    ]


def theory_sheet_text(
    model, gpu, kv_pool_gib, max_model_len, kv_dtype, weight_format, block_size, as_json
) -> str:
    """What `collector plan` prints: the table, or JSON with sorted keys."""
    data = theory_sheet(
        SheetInputs(model, gpu, kv_pool_gib, max_model_len, kv_dtype, weight_format, block_size)
    )
    if as_json:
        return json.dumps(data, sort_keys=True, indent=2)
    return render_theory_sheet(data)
