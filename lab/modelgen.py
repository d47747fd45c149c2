"""Random-weight qwen2-architecture models of a real shape, for measuring engines without a model hub.

One shape, one seed -> the same float32 draws for every tensor, written either as GGUF (llama.cpp; F16 or
F32) or as a Hugging Face directory (safetensors + config.json + tokenizer files; vLLM). Tensors are generated
and written one chunk at a time, so a Qwen2.5-7B-shaped model (~15 GiB in F16) never sits in memory.

Two choices make the models useful for timing:
- weights are uniform with a small std (0.02): activations stay finite through every layer in F16;
- the output head (`output.weight` / `lm_head.weight`) has non-zero rows only for the 95 printable-ASCII
  single-byte tokens, so the argmax is always one printable character: one generated token is one complete
  UTF-8 piece, hence one streamed event in both engines.

The tokenizer is a real gpt2-style byte-level BPE (256 byte tokens, merges learned from a fixed word list,
`<|endoftext|>`, `<|im_start|>`, `<|im_end|>`), identical in the GGUF metadata and in tokenizer.json.
GGUF needs one token per embedding row, so a shape whose vocab is larger than the tokenizer is padded with
`[PAD<id>]` tokens (as llama.cpp's own converter does for Qwen); the HF tokenizer leaves them out (as Qwen's).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import struct
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from collector.protocol.workload import bytes_to_unicode

WEIGHT_STD = 0.02
CHUNK_ELEMENTS = 1 << 25  # 32 Mi values per generated chunk: ~128 MiB of float32 at a time
HF_SHARD_BYTES = 4 << 30  # HF-style shards of at most ~4 GiB
SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
PRINTABLE_ASCII = range(0x20, 0x7F)  # ' ' .. '~'
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
# Qwen2's pre-tokenizer split (the same regex llama.cpp selects with tokenizer.ggml.pre = "qwen2").
QWEN2_SPLIT_REGEX = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+"
    r"|\s+(?!\S)|\s+"
)


@dataclass(frozen=True)
class ModelShape:
    name: str
    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    intermediate_size: int
    vocab_size: int
    max_position_embeddings: int
    rope_theta: float
    rms_norm_eps: float
    # The small Qwen2.5 models share one matrix between the input embedding and the output head.
    tie_word_embeddings: bool = False

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads

    @property
    def kv_dim(self) -> int:
        return self.num_key_value_heads * self.head_dim


SHAPES: dict[str, ModelShape] = {
    "tiny": ModelShape(
        name="tiny",
        hidden_size=256,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=512,
        vocab_size=512,
        max_position_embeddings=4096,
        rope_theta=1e6,
        rms_norm_eps=1e-6,
    ),
    # Qwen2.5-7B-Instruct, as in its config.json.
    "qwen2.5-7b": ModelShape(
        name="qwen2.5-7b",
        hidden_size=3584,
        num_hidden_layers=28,
        num_attention_heads=28,
        num_key_value_heads=4,
        intermediate_size=18944,
        vocab_size=152064,
        max_position_embeddings=32768,
        rope_theta=1e6,
        rms_norm_eps=1e-6,
    ),
    # The other Qwen2.5 sizes, as in their Instruct config.json (analysis/core/models/), for the model-size
    # experiment (issue #15, experiment 4). 0.5B-3B tie the output head to the embedding table.
    "qwen2.5-0.5b": ModelShape(
        name="qwen2.5-0.5b",
        hidden_size=896,
        num_hidden_layers=24,
        num_attention_heads=14,
        num_key_value_heads=2,
        intermediate_size=4864,
        vocab_size=151936,
        max_position_embeddings=32768,
        rope_theta=1e6,
        rms_norm_eps=1e-6,
        tie_word_embeddings=True,
    ),
    "qwen2.5-1.5b": ModelShape(
        name="qwen2.5-1.5b",
        hidden_size=1536,
        num_hidden_layers=28,
        num_attention_heads=12,
        num_key_value_heads=2,
        intermediate_size=8960,
        vocab_size=151936,
        max_position_embeddings=32768,
        rope_theta=1e6,
        rms_norm_eps=1e-6,
        tie_word_embeddings=True,
    ),
    "qwen2.5-3b": ModelShape(
        name="qwen2.5-3b",
        hidden_size=2048,
        num_hidden_layers=36,
        num_attention_heads=16,
        num_key_value_heads=2,
        intermediate_size=11008,
        vocab_size=151936,
        max_position_embeddings=32768,
        rope_theta=1e6,
        rms_norm_eps=1e-6,
        tie_word_embeddings=True,
    ),
    "qwen2.5-14b": ModelShape(
        name="qwen2.5-14b",
        hidden_size=5120,
        num_hidden_layers=48,
        num_attention_heads=40,
        num_key_value_heads=8,
        intermediate_size=13824,
        vocab_size=152064,
        max_position_embeddings=32768,
        rope_theta=1e6,
        rms_norm_eps=1e-6,
    ),
}


# ---------------------------------------------------------------------------------------------- tokenizer

# Words the BPE merges are learned from; their order is their frequency rank (Zipf weights below).
_CORPUS_WORDS = (
    "the of and to in a is that for it as with on be by this are at from or an was which have not but "
    "can all one has its more will each other about their time into only two than first been also new "
    "after used many some these would such when there most made them over number between through model "
    "token tokens cache memory server request requests batch decode prefill latency throughput bandwidth "
    "compute attention layer layers head heads hidden weight weights vector matrix kernel thread threads "
    "queue slot slots context length sequence prompt output input stream streaming event events measure "
    "engine engines inference benchmark result results report reports value values second seconds byte "
    "bytes block blocks page pages pool size shape float half precision quantize quantized random seed "
    "window step steps rate peak floor roof roofline capacity concurrency scheduler running waiting"
).split()


@dataclass(frozen=True)
class BpeVocab:
    """A byte-level BPE vocabulary: `tokens[id]` in GPT-2 unicode form, merges in priority order."""

    tokens: tuple[str, ...]  # bytes (ids 0..255, id = byte value), merges, special tokens
    merges: tuple[tuple[str, str], ...]
    special_ids: dict[str, int]

    @property
    def eos_id(self) -> int:
        return self.special_ids["<|im_end|>"]

    @property
    def pad_id(self) -> int:
        return self.special_ids["<|endoftext|>"]

    def printable_ascii_ids(self) -> list[int]:
        """Ids of the single-byte tokens ' '..'~' (byte tokens sit at id == byte value)."""
        return list(PRINTABLE_ASCII)


def build_tokenizer(n_new_tokens: int) -> BpeVocab:
    """Learn BPE merges from the fixed word list until `n_new_tokens` tokens beyond the 256 bytes exist
    (or the words are all single tokens). Deterministic: ties are broken by text."""
    b2u = bytes_to_unicode()
    # Words as they appear after the Qwen2 split: mostly with a leading space ('Ġ'), sometimes without.
    weights: Counter[tuple[str, ...]] = Counter()
    for rank, word in enumerate(_CORPUS_WORDS):
        freq = max(1, 10_000 // (rank + 1))
        for text, f in ((" " + word, freq), (word, max(1, freq // 4))):
            weights[tuple(b2u[b] for b in text.encode())] += f
    merges: list[tuple[str, str]] = []
    new_tokens: list[str] = []  # two merges can spell the same string: a token is added once
    seen = set(b2u.values())
    words = dict(weights)
    while len(new_tokens) < n_new_tokens:
        pairs: Counter[tuple[str, str]] = Counter()
        for sym, f in words.items():
            for a, b in zip(sym, sym[1:], strict=False):
                pairs[(a, b)] += f
        if not pairs:
            break
        best = min(pairs, key=lambda p: (-pairs[p], p))
        merges.append(best)
        joined = best[0] + best[1]
        if joined not in seen:
            seen.add(joined)
            new_tokens.append(joined)
        new_words: dict[tuple[str, ...], int] = {}
        for sym, f in words.items():
            out: list[str] = []
            i = 0
            while i < len(sym):
                if i + 1 < len(sym) and (sym[i], sym[i + 1]) == best:
                    out.append(joined)
                    i += 2
                else:
                    out.append(sym[i])
                    i += 1
            new_words[tuple(out)] = new_words.get(tuple(out), 0) + f
        words = new_words
    tokens = [b2u[b] for b in range(256)] + new_tokens
    special_ids = {}
    for s in SPECIAL_TOKENS:
        special_ids[s] = len(tokens)
        tokens.append(s)
    return BpeVocab(tokens=tuple(tokens), merges=tuple(merges), special_ids=special_ids)


def tokenizer_for(shape: ModelShape) -> BpeVocab:
    """The tokenizer of a shape: as many merged tokens as fit in its vocab (the word list caps them)."""
    return build_tokenizer(max(0, shape.vocab_size - 256 - len(SPECIAL_TOKENS)))


# ------------------------------------------------------------------------------------------------ tensors


@dataclass(frozen=True)
class TensorSpec:
    hf_name: str
    gguf_name: str
    shape: tuple[int, ...]  # row-major, as in PyTorch (out_features, in_features)
    init: str  # "uniform" (std WEIGHT_STD), "ones" (RMSNorm weights), "head" (uniform, masked rows)

    @property
    def n_elements(self) -> int:
        return int(np.prod(self.shape))


def tensor_specs(shape: ModelShape) -> list[TensorSpec]:
    """Every tensor of a Qwen2ForCausalLM (q/k/v biases), in GGUF write order. A tied model has no
    ``lm_head``: its embedding table is the output head, so it gets the head's printable-ASCII rows (the
    prompts draw printable ids only, so the input side loses nothing)."""
    h, kv, inter, v = shape.hidden_size, shape.kv_dim, shape.intermediate_size, shape.vocab_size
    embd_init = "head" if shape.tie_word_embeddings else "uniform"
    specs = [TensorSpec("model.embed_tokens.weight", "token_embd.weight", (v, h), embd_init)]
    for i in range(shape.num_hidden_layers):
        hf, gg = f"model.layers.{i}.", f"blk.{i}."
        specs += [
            TensorSpec(hf + "input_layernorm.weight", gg + "attn_norm.weight", (h,), "ones"),
            TensorSpec(hf + "self_attn.q_proj.weight", gg + "attn_q.weight", (h, h), "uniform"),
            TensorSpec(hf + "self_attn.q_proj.bias", gg + "attn_q.bias", (h,), "uniform"),
            TensorSpec(hf + "self_attn.k_proj.weight", gg + "attn_k.weight", (kv, h), "uniform"),
            TensorSpec(hf + "self_attn.k_proj.bias", gg + "attn_k.bias", (kv,), "uniform"),
            TensorSpec(hf + "self_attn.v_proj.weight", gg + "attn_v.weight", (kv, h), "uniform"),
            TensorSpec(hf + "self_attn.v_proj.bias", gg + "attn_v.bias", (kv,), "uniform"),
            TensorSpec(hf + "self_attn.o_proj.weight", gg + "attn_output.weight", (h, h), "uniform"),
            TensorSpec(hf + "post_attention_layernorm.weight", gg + "ffn_norm.weight", (h,), "ones"),
            TensorSpec(hf + "mlp.gate_proj.weight", gg + "ffn_gate.weight", (inter, h), "uniform"),
            TensorSpec(hf + "mlp.up_proj.weight", gg + "ffn_up.weight", (inter, h), "uniform"),
            TensorSpec(hf + "mlp.down_proj.weight", gg + "ffn_down.weight", (h, inter), "uniform"),
        ]
    specs.append(TensorSpec("model.norm.weight", "output_norm.weight", (h,), "ones"))
    if not shape.tie_word_embeddings:
        specs.append(TensorSpec("lm_head.weight", "output.weight", (v, h), "head"))
    return specs


def _tensor_seed(seed: int, hf_name: str) -> list[int]:
    # Per-tensor streams: a tensor's values do not depend on which other tensors exist or their order.
    return [seed, int.from_bytes(hashlib.sha256(hf_name.encode()).digest()[:8], "little")]


def tensor_chunks(spec: TensorSpec, seed: int, allowed_rows: list[int] | None = None) -> Iterator[np.ndarray]:
    """The tensor's float32 values, whole rows at a time, flattened row-major.

    Uniform on [-a, a] with a = std * sqrt(3) (so the std is WEIGHT_STD), drawn as int16 and scaled: about 5x
    faster than normal draws, which matters for 7.6 B values. Chunking does not change the values.
    """
    if spec.init == "ones":
        yield np.ones(spec.n_elements, dtype=np.float32)
        return
    rng = np.random.default_rng(_tensor_seed(seed, spec.hf_name))
    scale = np.float32(WEIGHT_STD * np.sqrt(3.0) / 32768.0)
    row = spec.shape[-1] if len(spec.shape) > 1 else spec.n_elements
    n_rows = spec.n_elements // row
    rows_per_chunk = max(1, CHUNK_ELEMENTS // row)
    keep = None
    if spec.init == "head":
        keep = np.zeros(n_rows, dtype=bool)
        keep[allowed_rows if allowed_rows is not None else []] = True
    for r0 in range(0, n_rows, rows_per_chunk):
        r1 = min(n_rows, r0 + rows_per_chunk)
        k = rng.integers(-32768, 32768, size=(r1 - r0, row), dtype=np.int16)
        x = np.multiply(k, scale, dtype=np.float32)
        if keep is not None:
            x[~keep[r0:r1]] = 0.0
        yield x.reshape(-1)


def param_count(shape: ModelShape) -> int:
    """Parameters of the generated model = sum of the elements of every tensor (count)."""
    return sum(s.n_elements for s in tensor_specs(shape))


def _to_bf16_bits(x: np.ndarray) -> np.ndarray:
    """float32 -> bfloat16 bit patterns (uint16), round to nearest even; numpy has no bfloat16 dtype."""
    u = x.view(np.uint32)
    return ((u + np.uint32(0x7FFF) + ((u >> np.uint32(16)) & np.uint32(1))) >> np.uint32(16)).astype(
        np.uint16
    )


# ------------------------------------------------------------------------------------------------- config


def hf_config(shape: ModelShape, tok: BpeVocab, torch_dtype: str = "bfloat16") -> dict:
    """A Qwen2ForCausalLM config.json with the fields of Qwen2.5's own (token ids from our tokenizer)."""
    return {
        "architectures": ["Qwen2ForCausalLM"],
        "attention_dropout": 0.0,
        "bos_token_id": tok.pad_id,
        "eos_token_id": tok.eos_id,
        "hidden_act": "silu",
        "hidden_size": shape.hidden_size,
        "initializer_range": WEIGHT_STD,
        "intermediate_size": shape.intermediate_size,
        "max_position_embeddings": shape.max_position_embeddings,
        "max_window_layers": shape.num_hidden_layers,
        "model_type": "qwen2",
        "num_attention_heads": shape.num_attention_heads,
        "num_hidden_layers": shape.num_hidden_layers,
        "num_key_value_heads": shape.num_key_value_heads,
        "rms_norm_eps": shape.rms_norm_eps,
        "rope_scaling": None,
        "rope_theta": shape.rope_theta,
        "sliding_window": shape.max_position_embeddings,
        "tie_word_embeddings": shape.tie_word_embeddings,
        "torch_dtype": torch_dtype,
        "use_cache": True,
        "use_sliding_window": False,
        "vocab_size": shape.vocab_size,
    }


def write_config(path: Path, shape: ModelShape, torch_dtype: str = "bfloat16") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(hf_config(shape, tokenizer_for(shape), torch_dtype), indent=2) + "\n")
    return path


# --------------------------------------------------------------------------------------------------- GGUF

Progress = Callable[[str], None]


def _quiet(_: str) -> None:
    pass


def write_gguf(
    path: Path, shape: ModelShape, seed: int = 0, dtype: str = "f16", progress: Progress = _quiet
) -> Path:
    """Write a GGUF (architecture qwen2) tensor by tensor; 2-D tensors in `dtype`, 1-D ones in F32."""
    import gguf

    if dtype not in ("f16", "f32"):
        raise ValueError(f"GGUF dtype must be f16 or f32, not {dtype!r}")
    np_dtype = np.float16 if dtype == "f16" else np.float32
    tok = tokenizer_for(shape)
    specs = tensor_specs(shape)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".partial")

    w = gguf.GGUFWriter(tmp, "qwen2")
    w.add_name(f"random-{shape.name}-qwen2")
    w.add_description(f"random weights (uniform, std {WEIGHT_STD}, seed {seed}); printable-ASCII output head")
    w.add_context_length(shape.max_position_embeddings)
    w.add_embedding_length(shape.hidden_size)
    w.add_block_count(shape.num_hidden_layers)
    w.add_feed_forward_length(shape.intermediate_size)
    w.add_head_count(shape.num_attention_heads)
    w.add_head_count_kv(shape.num_key_value_heads)
    w.add_rope_freq_base(shape.rope_theta)
    w.add_layer_norm_rms_eps(shape.rms_norm_eps)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16 if dtype == "f16" else gguf.LlamaFileType.ALL_F32)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("qwen2")
    n_pad = shape.vocab_size - len(tok.tokens)
    if n_pad < 0:
        raise ValueError(f"vocab {shape.vocab_size} is smaller than the tokenizer ({len(tok.tokens)} tokens)")
    tokens = list(tok.tokens) + [f"[PAD{i}]" for i in range(len(tok.tokens), shape.vocab_size)]
    types = [gguf.TokenType.NORMAL] * (len(tok.tokens) - len(SPECIAL_TOKENS))
    types += [gguf.TokenType.CONTROL] * len(SPECIAL_TOKENS) + [gguf.TokenType.UNUSED] * n_pad
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges([f"{a} {b}" for a, b in tok.merges])
    w.add_bos_token_id(tok.pad_id)
    w.add_eos_token_id(tok.eos_id)
    w.add_pad_token_id(tok.pad_id)
    w.add_add_bos_token(False)
    w.add_chat_template(CHAT_TEMPLATE)

    def out_dtype(spec: TensorSpec) -> type:
        return np_dtype if len(spec.shape) > 1 else np.float32

    for spec in specs:
        info_dt = np.dtype(out_dtype(spec))
        w.add_tensor_info(spec.gguf_name, spec.shape, info_dt, spec.n_elements * info_dt.itemsize)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    # Tensor data written here chunk by chunk (GGUFWriter.write_tensor_data wants whole tensors): the data
    # section and every tensor start on the file's alignment, as write_tensor_data would place them.
    assert w.fout is not None
    fout = w.fout[0]
    w.write_padding(fout, fout.tell())
    allowed = tok.printable_ascii_ids()
    t0 = time.monotonic()
    for i, spec in enumerate(specs):
        dt = out_dtype(spec)
        for chunk in tensor_chunks(spec, seed, allowed):
            chunk.astype(dt).tofile(fout)
        w.write_padding(fout, spec.n_elements * np.dtype(dt).itemsize)
        if shape.hidden_size >= 1024 and (i % 12 == 0 or i == len(specs) - 1):
            progress(f"gguf {i + 1}/{len(specs)} tensors, {time.monotonic() - t0:.0f} s")
    w.close()
    tmp.replace(path)
    return path


# ----------------------------------------------------------------------------------------------------- HF


def tokenizer_json(tok: BpeVocab) -> dict:
    """tokenizer.json (Hugging Face `tokenizers` format) for the byte-level BPE, Qwen2-style."""
    n_regular = len(tok.tokens) - len(SPECIAL_TOKENS)
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [
            {
                "id": i,
                "content": s,
                "single_word": False,
                "lstrip": False,
                "rstrip": False,
                "normalized": False,
                "special": True,
            }
            for s, i in tok.special_ids.items()
        ],
        "normalizer": {"type": "NFC"},
        "pre_tokenizer": {
            "type": "Sequence",
            "pretokenizers": [
                {
                    "type": "Split",
                    "pattern": {"Regex": QWEN2_SPLIT_REGEX},
                    "behavior": "Isolated",
                    "invert": False,
                },
                byte_level,
            ],
        },
        "post_processor": byte_level,
        "decoder": byte_level,
        "model": {
            "type": "BPE",
            "dropout": None,
            "unk_token": None,
            "continuing_subword_prefix": "",
            "end_of_word_suffix": "",
            "fuse_unk": False,
            "byte_fallback": False,
            "ignore_merges": False,
            "vocab": {t: i for i, t in enumerate(tok.tokens[:n_regular])},
            "merges": [f"{a} {b}" for a, b in tok.merges],
        },
    }


def tokenizer_config(tok: BpeVocab, max_length: int) -> dict:
    return {
        "add_bos_token": False,
        "add_prefix_space": False,
        "added_tokens_decoder": {
            str(i): {
                "content": s,
                "lstrip": False,
                "normalized": False,
                "rstrip": False,
                "single_word": False,
                "special": True,
            }
            for s, i in tok.special_ids.items()
        },
        "additional_special_tokens": ["<|im_start|>", "<|im_end|>"],
        "bos_token": None,
        "chat_template": CHAT_TEMPLATE,
        "clean_up_tokenization_spaces": False,
        "eos_token": "<|im_end|>",
        "errors": "replace",
        "model_max_length": max_length,
        "pad_token": "<|endoftext|>",
        "split_special_tokens": False,
        "tokenizer_class": "PreTrainedTokenizerFast",
        "unk_token": None,
    }


def _write_json(path: Path, obj: object) -> None:
    path.write_text(json.dumps(obj, indent=2, ensure_ascii=False) + "\n")


def _safetensors_header(entries: list[tuple[TensorSpec, int]], dtype: str) -> bytes:
    header: dict[str, object] = {"__metadata__": {"format": "pt"}}
    offset = 0
    for spec, nbytes in entries:
        header[spec.hf_name] = {
            "dtype": dtype,
            "shape": list(spec.shape),
            "data_offsets": [offset, offset + nbytes],
        }
        offset += nbytes
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)  # the data section starts 8-byte aligned
    return struct.pack("<Q", len(raw)) + raw


def write_hf(
    out_dir: Path, shape: ModelShape, seed: int = 0, dtype: str = "bf16", progress: Progress = _quiet
) -> Path:
    """Write a Hugging Face model directory: safetensors (sharded above ~4 GiB), config and tokenizer files.

    safetensors is written by hand (8-byte header length, JSON header, raw little-endian data), so only
    numpy is needed and each tensor streams to disk in chunks.
    """
    if dtype not in ("bf16", "f16", "f32"):
        raise ValueError(f"HF dtype must be bf16, f16 or f32, not {dtype!r}")
    st_dtype, itemsize, torch_dtype = {
        "bf16": ("BF16", 2, "bfloat16"),
        "f16": ("F16", 2, "float16"),
        "f32": ("F32", 4, "float32"),
    }[dtype]

    def encode(x: np.ndarray) -> np.ndarray:
        if dtype == "bf16":
            return _to_bf16_bits(x)
        return x.astype(np.float16 if dtype == "f16" else np.float32)

    tok = tokenizer_for(shape)
    specs = tensor_specs(shape)
    out_dir.mkdir(parents=True, exist_ok=True)
    shards: list[list[tuple[TensorSpec, int]]] = [[]]
    for spec in specs:
        nbytes = spec.n_elements * itemsize
        if shards[-1] and sum(n for _, n in shards[-1]) + nbytes > HF_SHARD_BYTES:
            shards.append([])
        shards[-1].append((spec, nbytes))
    names = (
        ["model.safetensors"]
        if len(shards) == 1
        else [f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors" for i in range(len(shards))]
    )
    allowed = tok.printable_ascii_ids()
    t0 = time.monotonic()
    for name, entries in zip(names, shards, strict=True):
        tmp = out_dir / (name + ".partial")
        with open(tmp, "wb") as f:
            f.write(_safetensors_header(entries, st_dtype))
            for spec, _ in entries:
                for chunk in tensor_chunks(spec, seed, allowed):
                    encode(chunk).tofile(f)
        tmp.replace(out_dir / name)
        if len(shards) > 1:
            progress(f"hf {name} written, {time.monotonic() - t0:.0f} s")
    if len(shards) > 1:
        _write_json(
            out_dir / "model.safetensors.index.json",
            {
                "metadata": {"total_size": sum(n for entries in shards for _, n in entries)},
                "weight_map": {
                    spec.hf_name: name
                    for name, entries in zip(names, shards, strict=True)
                    for spec, _ in entries
                },
            },
        )
    _write_json(out_dir / "config.json", hf_config(shape, tok, torch_dtype))
    _write_json(
        out_dir / "generation_config.json",
        {
            "bos_token_id": tok.pad_id,
            "eos_token_id": [tok.eos_id, tok.pad_id],
            "pad_token_id": tok.pad_id,
        },
    )
    _write_json(out_dir / "tokenizer.json", tokenizer_json(tok))
    _write_json(out_dir / "tokenizer_config.json", tokenizer_config(tok, shape.max_position_embeddings))
    _write_json(
        out_dir / "special_tokens_map.json",
        {
            "additional_special_tokens": ["<|im_start|>", "<|im_end|>"],
            "eos_token": "<|im_end|>",
            "pad_token": "<|endoftext|>",
        },
    )
    return out_dir


# ---------------------------------------------------------------------------------------------------- CLI


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m lab.modelgen", description=__doc__.splitlines()[0])
    p.add_argument("--shape", choices=sorted(SHAPES), required=True)
    p.add_argument("--format", choices=("gguf", "hf"), required=True)
    p.add_argument("--out", type=Path, required=True, help="GGUF file, or HF model directory")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--dtype", default=None, help="gguf: f16 (default) | f32; hf: bf16 (default) | f16 | f32")
    p.add_argument(
        "--config-out",
        type=Path,
        default=None,
        help="gguf only: where to write the HF config.json of the model (default: OUT with .config.json)",
    )
    p.add_argument(
        "--tokenizer-out",
        type=Path,
        default=None,
        help="gguf only: also write the tokenizer as a tokenizer.json here (the chat endpoint decodes random "
        "prompts to text with it: [workload] tokenizer)",
    )
    a = p.parse_args(argv)
    shape = SHAPES[a.shape]

    def say(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    t0 = time.monotonic()
    try:
        if a.format == "gguf":
            out = write_gguf(a.out, shape, a.seed, a.dtype or "f16", progress=say)
            cfg = a.config_out or a.out.with_name(a.out.name.removesuffix(".gguf") + ".config.json")
            write_config(cfg, shape, torch_dtype="float16" if (a.dtype or "f16") == "f16" else "float32")
            if a.tokenizer_out is not None:
                _write_json(a.tokenizer_out, tokenizer_json(tokenizer_for(shape)))
                say(f"wrote {a.tokenizer_out}")
            say(f"wrote {out} ({out.stat().st_size / 2**20:.1f} MiB) and {cfg}")
        else:
            out = write_hf(a.out, shape, a.seed, a.dtype or "bf16", progress=say)
            say(f"wrote {out}/")
    except (ValueError, OSError) as e:
        say(f"modelgen: {e}")
        return 1
    say(f"{shape.name}: {param_count(shape):,} parameters, {time.monotonic() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
