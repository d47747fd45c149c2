"""`collector init`: a commented plan for the box it runs on, so a fresh rented machine needs no edits to
start.

What it looks at, in order:

- the engine: ``--engine-path`` (a ``llama-server``) or ``--vllm-python`` when given, else ``llama-server`` on
  PATH, else a ``python``/``python3`` on PATH that can import vllm (checked with a subprocess, only then);
- the model: a ``.gguf`` file (its metadata gives the shape, the vocabulary and the trained context) or a
  Hugging Face folder (``config.json`` for the theory, ``tokenizer.json`` for the vocabulary; for llama.cpp
  the one ``.gguf`` inside the folder or beside it named after it is what gets served);
- the GPU: ``nvidia-smi --query-gpu=name,memory.total --format=csv,noheader,nounits`` matched to a datasheet
  entry (``analysis.core.gpus.match_nvidia_smi``); no nvidia-smi means a CPU run;
- a free port on 127.0.0.1 (bound once to port 0, so the kernel picks it).

The phases are sized from the theory: the KV pool the card holds (vLLM's estimate: 0.9 × memory − weights −
1 GiB), the slots llama.cpp gets, the context per request. Every guess the plan makes is a comment in it
saying what to check. The plan is validated with the plan loader before it is written, and an existing file is
never replaced.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import socket
import subprocess
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

import gguf

from analysis.core import theory as th
from analysis.core.gpus import CPU, MIB, GpuSpec, match_nvidia_smi, match_rocm_smi
from analysis.core.model_config import (
    ModelConfig,
    bundled_model_names,
    load_model_config,
    model_config_from_dict,
    unsupported_reason,
)
from collector.protocol.workload import bytes_to_unicode
from collector.raw.errors import PlanError
from collector.raw.plan import parse_plan

NVIDIA_SMI_QUERY = ("--query-gpu=name,memory.total", "--format=csv,noheader,nounits")
VLLM_IMPORT_TIMEOUT_S = 120.0
NVIDIA_SMI_TIMEOUT_S = 20.0

# Context per request the plan asks for (capped by the model's trained context): the reference protocol's
# 8,192 on a GPU; 1,024 on a CPU, where a longer prompt takes minutes.
GPU_MAX_MODEL_LEN = 8192
CPU_MAX_MODEL_LEN = 1024
LLAMA_CPP_MAX_SLOTS = 64  # the 4090 reference's -np 64
LLAMA_CPP_CPU_SLOTS = 8
CTX_ALIGN = 256  # llama.cpp pads each slot's context to 256 cells
VLLM_MAX_NUM_SEQS = 256
VLLM_OVERLOAD_MAX_CONCURRENCY = 1024
VLLM_CPU_BLOCK_SIZE = 128  # vLLM's CPU backend: KV blocks of 128 tokens
VLLM_CPU_MAX_NUM_SEQS = 16

# A vocabulary this large has ordinary merges well past id 1000 (the byte tokens and first merges sit below).
LARGE_VOCAB = 4096
LARGE_VOCAB_LOW = 1000

# llama-quantize file types (gguf.LlamaFileType) the theory has a per-tensor recipe or a width for.
GGUF_FILE_TYPES = {
    0: "fp32",
    1: "fp16",
    2: "q4_0",
    7: "q8_0",
    15: "q4_k_m",
    17: "q5_k_m",
    18: "q6_k",
    32: "bf16",
}
TORCH_DTYPES = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}
# llama.cpp architecture names whose transformers model_type is spelt otherwise (the rest are the same)
GGUF_ARCH_TYPES = {"qwen3moe": "qwen3_moe", "gpt-oss": "gpt_oss", "deepseek2": "deepseek_v2"}
GGUF_SIGMOID_GATING = 2  # llama.cpp's expert_gating_func for sigmoid routing: DeepSeek-V3 (V2: softmax, 1)


# ----------------------------------------------------------------------------------------------- finding


@dataclass(frozen=True)
class Engine:
    kind: str  # "llamacpp" | "vllm"
    path: Path  # llama-server, or the venv's python
    how: str  # how it was found, for the plan's comment
    version: str | None = None


@dataclass(frozen=True)
class Vocab:
    """What the tokenizer says about token ids: how many, which are special, where the single bytes are."""

    size: int
    special_ids: frozenset[int]
    byte_ids: dict[int, int] | None  # byte value -> token id, for byte-level BPE
    source: str
    checked: bool = True  # False: only the config's bos/eos/pad ids are known, not the tokenizer's specials


@dataclass(frozen=True)
class Gpu:
    spec: GpuSpec  # CPU when no GPU or an unknown one
    smi_name: str | None = None
    smi_memory_mib: float | None = None
    count: int = 0
    note: str = ""

    @property
    def memory_bytes(self) -> float | None:
        if self.spec.memory_bytes is not None:
            return self.spec.memory_bytes
        return self.smi_memory_mib * MIB if self.smi_memory_mib else None

    def card_bytes(self) -> float:
        """The card's memory, to size a plan on it: one clear line when neither the datasheet nor nvidia-smi
        gives it."""
        mem = self.memory_bytes
        if mem is None:
            raise PlanError(
                f"{self.smi_name or self.spec.name}: the GPU's memory is unknown; cannot size a plan"
            )
        return mem


@dataclass
class ModelFacts:
    cfg: ModelConfig
    config_ref: str  # what [model].config says: a bundled name or a path
    served: Path  # what the server loads
    name: str
    vocab: Vocab | None
    weight_format: str
    weight_bytes: float
    max_position: int | None
    notes: list[str] = field(default_factory=list)
    derived_config: dict | None = None  # a config.json to write beside the plan (GGUF without one)


def _run(cmd: list[str], timeout_s: float) -> subprocess.CompletedProcess | None:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None


def _vllm_version(python: Path) -> str | None:
    """vllm's version as that python imports it, or None when it cannot import vllm."""
    r = _run([str(python), "-c", "import vllm; print(vllm.__version__)"], VLLM_IMPORT_TIMEOUT_S)
    if r is None or r.returncode != 0:
        return None
    return r.stdout.strip().splitlines()[-1] if r.stdout.strip() else "unknown"


def _executable(path: Path, what: str) -> Path:
    path = path.expanduser()
    if not path.is_file():
        raise PlanError(f"{path}: no such file ({what})")
    if not os.access(path, os.X_OK):
        raise PlanError(f"{path}: not executable ({what})")
    return path.absolute()  # not resolve(): a venv's python is a symlink whose target has no vllm


def _engine_candidates(engine_path: Path | None, vllm_python: Path | None):
    """Engines in the order the brief gives: explicit ones first (only those, when any), then PATH."""
    if engine_path is not None or vllm_python is not None:
        if engine_path is not None:
            yield lambda: Engine("llamacpp", _executable(engine_path, "--engine-path"), "--engine-path")
        if vllm_python is not None:

            def explicit_vllm() -> Engine:
                py = _executable(vllm_python, "--vllm-python")
                version = _vllm_version(py)
                if version is None:
                    raise PlanError(f"{py}: cannot import vllm (--vllm-python); give the vLLM venv's python")
                return Engine("vllm", py, "--vllm-python", version)

            yield explicit_vllm
        return
    found = shutil.which("llama-server")
    if found:
        yield lambda: Engine("llamacpp", Path(found).resolve(), "llama-server on PATH")
    for name in ("python3", "python"):
        py = shutil.which(name)
        if py:

            def path_vllm(py: str = py, name: str = name) -> Engine | None:
                version = _vllm_version(Path(py))
                return Engine("vllm", Path(py), f"{name} on PATH imports vllm", version) if version else None

            yield path_vllm


def _gguf_for_folder(folder: Path) -> Path | None:
    """The GGUF that serves a Hugging Face folder with llama.cpp: the one inside it, else the one beside it
    whose name starts with the folder's (``models/tiny-qwen2/`` -> ``models/tiny-qwen2-f16.gguf``)."""
    inside = sorted(folder.glob("*.gguf"))
    beside = sorted(folder.parent.glob(f"{folder.name}*.gguf"))
    for found in (inside, beside):
        if len(found) > 1:
            names = ", ".join(p.name for p in found)
            raise PlanError(f"{folder}: several GGUF files ({names}); pass the one to serve as --model")
        if found:
            return found[0].resolve()
    return None


def detect_engine(model: Path, engine_path: Path | None, vllm_python: Path | None) -> Engine:
    """The first engine that can serve ``model`` (a .gguf needs llama.cpp; a folder needs vLLM or a GGUF)."""
    is_gguf = model.is_file() and model.suffix == ".gguf"
    tried: list[str] = []
    for make in _engine_candidates(engine_path, vllm_python):
        engine = make()
        if engine is None:
            continue
        if engine.kind == "vllm" and is_gguf:
            tried.append(f"vLLM ({engine.path}) serves a Hugging Face folder, not {model.name}")
            continue
        if engine.kind == "llamacpp" and not is_gguf and _gguf_for_folder(model) is None:
            tried.append(f"llama-server ({engine.path}) needs a .gguf; none in or beside {model}")
            continue
        return engine
    if tried:
        raise PlanError(f"{model}: no engine found that can serve it: {'; '.join(tried)}")
    raise PlanError(
        "no engine found: pass --engine-path (llama-server) or --vllm-python, or put llama-server "
        "(or a python that imports vllm) on PATH"
    )


def _detect_amd(rocm_smi: str) -> Gpu | None:
    """The first card rocm-smi lists (its JSON of product names and VRAM), matched to a datasheet entry; None
    without rocm-smi or when it lists no card."""
    # local import: only AMD machines
    from collector.protocol.fingerprint import ROCM_SMI_GPU_QUERY, rocm_smi_gpus

    exe = shutil.which(rocm_smi)
    r = _run([exe, *ROCM_SMI_GPU_QUERY], NVIDIA_SMI_TIMEOUT_S) if exe else None
    cards = rocm_smi_gpus(r.stdout) if r is not None and r.returncode == 0 else []
    if not cards:
        return None
    name, mem = cards[0]["name"], cards[0].get("memory.total [MiB]", "").split()
    mib = float(mem[0]) if mem else None
    return Gpu(match_rocm_smi(name, mib) or CPU, smi_name=name, smi_memory_mib=mib, count=len(cards))


def detect_gpu(nvidia_smi: str = "nvidia-smi", rocm_smi: str = "rocm-smi") -> Gpu:
    """The first GPU nvidia-smi lists (else rocm-smi, on an AMD machine), matched to a datasheet entry; CPU
    when there is neither."""
    exe = shutil.which(nvidia_smi)
    if exe is None:
        amd = _detect_amd(rocm_smi)
        return amd or Gpu(CPU, note="no nvidia-smi or rocm-smi on PATH: a CPU run (no datasheet ceilings)")
    r = _run([exe, *NVIDIA_SMI_QUERY], NVIDIA_SMI_TIMEOUT_S)
    if r is None or r.returncode != 0:
        said = "" if r is None else (r.stderr or r.stdout).strip()
        why = "did not answer" if r is None else (said.splitlines()[0] if said else f"exit {r.returncode}")
        return Gpu(CPU, note=f"nvidia-smi failed ({why}): planned as a CPU run; check the driver")
    lines = [ln.strip() for ln in r.stdout.splitlines() if ln.strip()]
    if not lines:
        return Gpu(CPU, note="nvidia-smi lists no GPU: planned as a CPU run")
    name, _, mem = lines[0].rpartition(",")
    name = name.strip()
    try:
        mib = float(mem)
    except ValueError:
        name, mib = lines[0], None
    spec = match_nvidia_smi(name, mib)
    return Gpu(spec or CPU, smi_name=name, smi_memory_mib=mib, count=len(lines))


def free_port(host: str = "127.0.0.1") -> int:
    """A port nobody listens on now: bind port 0 and let the kernel choose (free when init ran, no later)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


# ---------------------------------------------------------------------------------------------- vocabulary


def _byte_ids(piece_to_id: dict[str, int]) -> dict[int, int] | None:
    table = bytes_to_unicode()
    ids = {b: piece_to_id[ch] for b, ch in table.items() if ch in piece_to_id}
    return ids if len(ids) == 256 else None


def vocab_from_tokenizer_json(path: Path) -> Vocab:
    """Vocabulary facts from a Hugging Face tokenizer.json: added tokens count as special."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as err:
        raise PlanError(f"{path}: cannot read the tokenizer ({err})") from err
    model = data.get("model") or {}
    vocab = model.get("vocab")
    if isinstance(vocab, dict):
        piece_to_id = {str(k): int(v) for k, v in vocab.items()}
    elif isinstance(vocab, list):  # Unigram: [[piece, score], ...], the id is the index
        piece_to_id = {str(p[0]): i for i, p in enumerate(vocab)}
    else:
        raise PlanError(f"{path}: key 'model.vocab' missing or not a map/list")
    added = {int(t["id"]) for t in data.get("added_tokens") or [] if "id" in t}
    byte_fallback = {i for p, i in piece_to_id.items() if re.fullmatch(r"<0x[0-9A-Fa-f]{2}>", p)}
    size = max([*piece_to_id.values(), *added], default=-1) + 1
    byte_level = "ByteLevel" in json.dumps(data.get("pre_tokenizer")) + json.dumps(data.get("decoder"))
    return Vocab(
        size=size,
        special_ids=frozenset(added | byte_fallback),
        byte_ids=_byte_ids(piece_to_id) if byte_level else None,
        source=str(path),
    )


def vocab_from_gguf(reader: gguf.GGUFReader, path: Path) -> Vocab:
    """Vocabulary facts from GGUF metadata: any token type but NORMAL counts as special."""
    tokens_field = reader.fields.get("tokenizer.ggml.tokens")
    if tokens_field is None:
        raise PlanError(
            f"{path}: GGUF key 'tokenizer.ggml.tokens' missing: no vocabulary to draw prompts from"
        )
    tokens = [str(t) for t in tokens_field.contents()]
    types_field = reader.fields.get("tokenizer.ggml.token_type")
    types = list(types_field.contents()) if types_field is not None else [1] * len(tokens)
    special = frozenset(i for i, t in enumerate(types) if int(t) != int(gguf.TokenType.NORMAL))
    model_field = reader.fields.get("tokenizer.ggml.model")
    byte_level = model_field is not None and model_field.contents() == "gpt2"
    piece_to_id = {t: i for i, t in enumerate(tokens)}
    return Vocab(
        size=len(tokens),
        special_ids=special,
        byte_ids=_byte_ids(piece_to_id) if byte_level else None,
        source=f"{path} (GGUF tokenizer.ggml.tokens / token_type)",
    )


def vocab_from_config(path: Path, vocab_size: int) -> Vocab:
    """Without a tokenizer file: the config's bos/eos/pad ids are the only specials known."""
    data = json.loads(path.read_text(encoding="utf-8"))
    ids: set[int] = set()
    for key in ("bos_token_id", "eos_token_id", "pad_token_id"):
        value = data.get(key)
        for v in value if isinstance(value, list) else [value]:
            if isinstance(v, int) and not isinstance(v, bool):
                ids.add(v)
    return Vocab(size=vocab_size, special_ids=frozenset(ids), byte_ids=None, source=str(path), checked=False)


def token_id_range(vocab: Vocab | None, vocab_size: int) -> tuple[int, int, str]:
    """Prompt ids ``[low, high)`` and why: ordinary tokens only, never a special, added or byte-fallback one.

    - a large vocabulary (>= 4,096): from id 1,000 (past the byte tokens and the first merges) up to the first
      special/added token or the end of the vocabulary, like the reference plans' [1000, 150000);
    - a small one: the 95 single-byte tokens ' '..'~' when they are contiguous (printable, never special);
    - no tokenizer read: the same rule on the config's vocab_size alone, with a comment saying to check it.
    """
    limit = min(vocab.size, vocab_size) if vocab else vocab_size
    special = vocab.special_ids if vocab else frozenset()

    def normal(i: int) -> bool:
        return i < limit and i not in special

    if limit >= LARGE_VOCAB:
        high = LARGE_VOCAB_LOW
        while normal(high):
            high += 1
        if high - LARGE_VOCAB_LOW >= LARGE_VOCAB_LOW:
            end = f"the first special/added token, id {high}" if high < limit else "the end of the vocabulary"
            why = f"ordinary merges: past the byte tokens and the first merges, up to {end}"
            if vocab is None or not vocab.checked:
                why += " (no tokenizer file was read, only the config's bos/eos/pad ids: check the range)"
            return LARGE_VOCAB_LOW, high, why
    if vocab and vocab.byte_ids:
        ids = [vocab.byte_ids[b] for b in range(0x20, 0x7F)]
        if ids == list(range(ids[0], ids[0] + len(ids))) and all(normal(i) for i in ids):
            return ids[0], ids[-1] + 1, "the 95 single-byte tokens ' '..'~': printable, never special"
    best = (0, 0)
    start = None
    for i in range(limit + 1):
        if i < limit and normal(i):
            start = i if start is None else start
        elif start is not None:
            best = max(best, (start, i), key=lambda r: r[1] - r[0])
            start = None
    if best[1] - best[0] < 2:
        raise PlanError(
            f"{vocab.source if vocab else 'config'}: no run of ordinary token ids to draw prompts from"
        )
    return best[0], best[1], "the longest run of ordinary token ids; check it holds no control token"


# --------------------------------------------------------------------------------------------------- model


def _gguf_value(reader: gguf.GGUFReader, key: str):
    f = reader.fields.get(key)
    return None if f is None else f.contents()


def _gguf_shape(reader: gguf.GGUFReader, path: Path) -> dict:
    """The GGUF's metadata as config.json keys (what llama.cpp's converter wrote from them)."""
    arch = _gguf_value(reader, "general.architecture")
    if not arch:
        raise PlanError(f"{path}: GGUF key 'general.architecture' missing")

    def key(name: str, required: bool = True):
        value = _gguf_value(reader, f"{arch}.{name}")
        if value is None and required:
            raise PlanError(f"{path}: GGUF key '{arch}.{name}' missing")
        return value

    tensors = {t.name for t in reader.tensors}
    heads = int(key("attention.head_count"))
    data = {
        "model_type": GGUF_ARCH_TYPES.get(arch, arch),
        "hidden_size": int(key("embedding_length")),
        "intermediate_size": int(key("feed_forward_length")),
        "num_hidden_layers": int(key("block_count")),
        "num_attention_heads": heads,
        "num_key_value_heads": int(key("attention.head_count_kv", False) or heads),
        "vocab_size": int(
            key("vocab_size", False) or len(_gguf_value(reader, "tokenizer.ggml.tokens") or [])
        ),
        "max_position_embeddings": int(key("context_length", False) or 0) or None,
        "tie_word_embeddings": "output.weight" not in tensors,
    }
    head_dim = key("attention.key_length", False)
    if key("attention.kv_lora_rank", False):
        data.update(_gguf_mla(key, heads))
    elif head_dim:
        data["head_dim"] = int(head_dim)
    for gguf_key, hf_key in (
        ("expert_count", "num_local_experts"),
        ("expert_used_count", "num_experts_per_tok"),
        ("expert_feed_forward_length", "moe_intermediate_size"),
        ("attention.kv_lora_rank", "kv_lora_rank"),
        ("attention.sliding_window", "sliding_window"),
    ):
        value = key(gguf_key, False)
        if value:
            data[hf_key] = int(value)
    return data


def _gguf_mla(key, heads: int) -> dict:
    """Multi-head latent attention (llama.cpp's deepseek2) as config.json keys. llama.cpp's converter writes
    the per-head sizes two ways: before MLA absorption key_length = nope + rope and value_length = v; after it
    (head_count_kv 1, key_length = kv_lora_rank + rope) the per-head sizes move to key_length_mla and
    value_length_mla. The cache holds kv_lora_rank + rope per token either way."""
    rope = int(key("rope.dimension_count"))
    qk = key("attention.key_length_mla", False) or key("attention.key_length")
    v = key("attention.value_length_mla", False) or key("attention.value_length")
    data: dict[str, int | str] = {
        "kv_lora_rank": int(key("attention.kv_lora_rank")),
        "qk_rope_head_dim": rope,
        "qk_nope_head_dim": int(qk) - rope,
        "v_head_dim": int(v),
        "head_dim": int(qk),  # a query's and a key's width, as the theory reads an MLA config
        "num_key_value_heads": heads,  # config.json's convention for MLA: one K and V per head, rebuilt
    }
    for gguf_key, hf_key in (
        ("attention.q_lora_rank", "q_lora_rank"),
        ("leading_dense_block_count", "first_k_dense_replace"),
        ("expert_shared_count", "n_shared_experts"),
    ):
        if key(gguf_key, False):
            data[hf_key] = int(key(gguf_key))
    if key("expert_gating_func", False) == GGUF_SIGMOID_GATING:
        data["model_type"] = "deepseek_v3"
    return data


def _bundled_with_shape(shape: dict) -> str | None:
    """A bundled config whose theory inputs equal this shape (a GGUF of a known model), else None."""
    keys = (
        "hidden_size",
        "intermediate_size",
        "num_hidden_layers",
        "num_attention_heads",
        "num_key_value_heads",
    )
    for name in bundled_model_names():
        try:
            cfg = load_model_config(name)
        except PlanError:  # a bundled config the theory refuses cannot match a planned model
            continue
        if cfg.model_type != shape["model_type"] or cfg.tie_word_embeddings != shape["tie_word_embeddings"]:
            continue
        experts = (cfg.moe.num_experts, cfg.moe.experts_per_token) if cfg.moe else (None, None)
        if experts != (shape.get("num_local_experts"), shape.get("num_experts_per_tok")):
            continue
        if cfg.vocab_size != shape["vocab_size"] or any(getattr(cfg, k) != shape[k] for k in keys):
            continue
        if cfg.head_dim != shape.get("head_dim", cfg.hidden_size // cfg.num_attention_heads):
            continue
        return name
    return None


def _gguf_weight_format(reader: gguf.GGUFReader, path: Path, params: int) -> tuple[str, list[str]]:
    ftype = _gguf_value(reader, "general.file_type")
    if ftype is not None and int(ftype) in GGUF_FILE_TYPES:
        return GGUF_FILE_TYPES[int(ftype)], []
    bpw = th.bits_per_weight_from_file_bytes(path.stat().st_size, params)
    what = f"file type {int(ftype)}" if ftype is not None else "no general.file_type"
    return f"{bpw:.2f}bpw", [
        f"weight_format: {what} has no per-tensor recipe in the theory; {bpw:.2f} bits/weight is the file's "
        "average (file bytes x 8 / parameters): check it"
    ]


def _gguf_reader(path: Path) -> gguf.GGUFReader:
    if path.suffix != ".gguf":
        raise PlanError(f"{path}: not a .gguf file; --model takes a .gguf or a Hugging Face model folder")
    try:
        return gguf.GGUFReader(path)
    except Exception as err:  # the gguf package raises ValueError, struct.error, KeyError... for a bad file
        raise PlanError(f"{path}: not a readable GGUF file ({type(err).__name__}: {err})") from err


def model_from_gguf(path: Path) -> ModelFacts:
    reader = _gguf_reader(path)
    shape = _gguf_shape(reader, path)
    reason = unsupported_reason(shape)
    if reason is not None:
        raise PlanError(f"{path}: GGUF metadata as config.json keys: {reason}")
    bundled = _bundled_with_shape(shape)
    notes = []
    if bundled:
        cfg = load_model_config(bundled)
        notes.append(
            f"config: the GGUF's shape is bundled {bundled}'s (same layers, heads, sizes, vocabulary)"
        )
        derived = None
    else:
        derived = {**shape, "_derived_from": f"GGUF metadata of {path.name} by collector init"}
        cfg = model_config_from_dict(derived, name=path.stem, source=path)
        notes.append("config: written from the GGUF's metadata (no bundled config has this shape)")
    fmt, fmt_notes = _gguf_weight_format(reader, path, th.params_total(cfg))
    return ModelFacts(
        cfg=cfg,
        config_ref=bundled or "",
        served=path.resolve(),
        name=path.stem,
        vocab=vocab_from_gguf(reader, path),
        weight_format=fmt,
        weight_bytes=float(path.stat().st_size),
        max_position=shape["max_position_embeddings"],
        notes=notes + fmt_notes,
        derived_config=derived,
    )


def model_from_folder(folder: Path, engine: Engine) -> ModelFacts:
    cfg_path = folder / "config.json"
    if not cfg_path.is_file():
        raise PlanError(f"{folder}: no config.json: not a Hugging Face model folder (or pass a .gguf)")
    cfg = load_model_config(cfg_path)
    tok = folder / "tokenizer.json"
    if tok.is_file():
        vocab, notes = vocab_from_tokenizer_json(tok), []
    else:
        vocab = vocab_from_config(cfg_path, cfg.vocab_size)
        notes = [
            f"token_id_range: {folder} has no tokenizer.json: only the config's special ids were avoided"
        ]
    if engine.kind == "llamacpp":
        served = _gguf_for_folder(folder)
        if served is None:
            raise PlanError(f"{folder}: llama-server needs a .gguf: none in or beside the folder")
        reader = _gguf_reader(served)
        shape = _gguf_shape(reader, served)
        if shape["num_hidden_layers"] != cfg.num_hidden_layers or shape["hidden_size"] != cfg.hidden_size:
            raise PlanError(
                f"{served}: GGUF shape ({shape['num_hidden_layers']} layers, hidden {shape['hidden_size']}) "
                f"is not {cfg_path}'s ({cfg.num_hidden_layers}, {cfg.hidden_size}): pass the matching .gguf "
                "as --model"
            )
        fmt, fmt_notes = _gguf_weight_format(reader, served, th.params_total(cfg))
        notes += [f"served file: {served.name}, the GGUF found with {folder.name}/: check it is this model"]
        notes += fmt_notes
        weight_bytes = float(served.stat().st_size)
    else:
        served = folder.resolve()
        fmt = TORCH_DTYPES.get(cfg.torch_dtype or "", "bf16")
        if cfg.torch_dtype not in TORCH_DTYPES:
            notes.append(f"weight_format: torch_dtype {cfg.torch_dtype!r} is not bf16/fp16/fp32: check it")
        weight_bytes = th.weight_bytes(cfg, fmt)
    notes += [f"theory: {note}" for note in cfg.family_notes]  # what it assumes for MoE, MLA, windows
    return ModelFacts(
        cfg=cfg,
        config_ref=str(cfg_path.resolve()),
        served=served,
        name=folder.name,
        vocab=vocab,
        weight_format=fmt,
        weight_bytes=weight_bytes,
        max_position=cfg.max_position_embeddings,
        notes=notes,
    )


# ------------------------------------------------------------------------------------------------ sizing


def _pow2_floor(n: int) -> int:
    return 1 << (n.bit_length() - 1) if n >= 1 else 0


def _pow2s(top: int) -> list[int]:
    return [1 << k for k in range(top.bit_length()) if (1 << k) <= top]


@dataclass
class Sizing:
    max_model_len: int
    input_len: int
    output_len: int
    sweep: list[int]
    length_concurrency: int
    length_inputs: list[int]
    length_output: int
    overload: tuple[int, int, int, int] | None  # concurrency, requests, input, output
    overload_note: str
    args: list[tuple[str, str, str]]  # (flag, value, comment)
    env: dict[str, str]
    kv_dtype: str
    kv_pool_gib: float | None
    kv_pool_note: str
    block_size: int
    notes: list[str]
    weight_format: str | None = None  # what the server loads, when it is not the checkpoint's dtype


def _requests(c: int, on_gpu: bool) -> int:
    # GPU: the reference's counts (about ten waves, 40..512 requests); CPU: four waves and at least 10
    # requests, minutes not hours (3 requests at one stream read 591 and 1,153 tok/s in two identical runs)
    return max(40, min(512, 10 * c)) if on_gpu else max(10, 4 * c)


def _lengths(max_model_len: int, on_gpu: bool) -> tuple[int, int, list[int], int]:
    """Sweep input/output and the length sweep's inputs/output for a context per request."""
    if on_gpu:
        inp, out = (1024, 256) if max_model_len >= 2048 else (max_model_len // 2, max_model_len // 8)
        lo, length_out = 256, min(256, max_model_len // 8)
    else:
        inp, out = (128, 64) if max_model_len >= 512 else (max_model_len // 4, max_model_len // 8)
        lo, length_out = 32, min(32, max_model_len // 8)
    inputs = [n for n in (lo << k for k in range(12)) if n + length_out <= max_model_len][:5]
    return inp, out, inputs or [max_model_len // 2], length_out


def size_llamacpp(m: ModelFacts, gpu: Gpu, max_model_len: int | None) -> Sizing:
    on_gpu = gpu.count > 0
    kv_dtype = "fp16"  # llama.cpp's default KV type (-ctk/-ctv f16)
    kv_bpt = th.kv_bytes_per_token(m.cfg, kv_dtype)
    ceiling = GPU_MAX_MODEL_LEN if on_gpu else CPU_MAX_MODEL_LEN
    mml = max_model_len or min(m.max_position or ceiling, ceiling)
    mml = max(CTX_ALIGN, mml // CTX_ALIGN * CTX_ALIGN)
    notes = []
    if on_gpu:
        mem = gpu.card_bytes()
        pool_tokens = th.kv_pool_tokens(th.estimated_kv_pool_bytes(mem, m.weight_bytes), kv_bpt)
        if pool_tokens < mml:
            if pool_tokens < 2 * CTX_ALIGN:
                raise PlanError(
                    f"{m.served}: {m.weight_bytes / th.GIB:.1f} GiB of weights leave no KV room on a "
                    f"{mem / th.GIB:.1f} GiB card (0.9 x memory - weights - 1 GiB): pick a smaller "
                    "quantisation"
                )
            mml = pool_tokens // CTX_ALIGN * CTX_ALIGN
            notes.append(f"context per slot cut to {mml:,} tokens: the KV that fits beside the weights")
        slots = min(LLAMA_CPP_MAX_SLOTS, _pow2_floor(pool_tokens // mml))
        pool_note = (
            f"{slots} slots x {mml:,} tokens = {slots * mml:,} tokens of f16 KV "
            f"({slots * mml * kv_bpt / th.GIB:.2f} GiB; the card holds ~{pool_tokens:,} tokens beside the "
            f"weights, estimated as 0.9 x {mem / th.GIB:.1f} GiB - {m.weight_bytes / th.GIB:.2f} GiB - 1 GiB)"
        )
    else:
        slots = LLAMA_CPP_CPU_SLOTS
        pool_note = (
            f"{slots} slots x {mml:,} tokens of f16 KV in RAM ({slots * mml * kv_bpt / 2**20:,.1f} MiB)"
        )
    inp, out, length_inputs, length_out = _lengths(mml, on_gpu)
    args = []
    if on_gpu:
        args.append(("-ngl", "99", "every layer on the GPU"))
    else:
        threads = max(1, (os.cpu_count() or 2) // 2)
        args.append(("-t", str(threads), "half the cores: the load client and the sampler need the rest"))
    args += [
        ("-np", str(slots), f"{slots} slots ..."),
        ("-c", str(slots * mml), f"... sharing {slots * mml:,} tokens: {mml:,} per slot"),
        ("--cache-ram", "0", "no prompt cache across requests"),
        ("--slot-prompt-similarity", "0", "no slot picked for a similar earlier prompt"),
        ("-lv", "4", "log the model, KV and slot lines the start-up checks read"),
    ]
    # Overload: twice as many requests in flight as there are slots, each fitting a slot: their KV demand is
    # twice the -c cells, and llama.cpp (no preemption) queues the extra requests until a slot frees.
    ov_in, ov_out = mml // 2, mml // 4
    return Sizing(
        max_model_len=mml,
        input_len=inp,
        output_len=out,
        sweep=_pow2s(slots),
        length_concurrency=min(16 if on_gpu else 4, slots),
        length_inputs=length_inputs,
        length_output=length_out,
        overload=(2 * slots, (4 if on_gpu else 2) * slots, ov_in, ov_out),  # GPU: two waves; CPU: one
        overload_note=(
            f"{2 * slots} requests in flight for {slots} slots, each {ov_in + ov_out:,} of a slot's {mml:,} "
            "tokens: twice the KV the -c cells hold; llama.cpp has no preemption, so half of them wait in "
            "its queue for a free slot (TTFT grows by the wait)"
        ),
        args=args,
        env={},
        kv_dtype=kv_dtype,
        kv_pool_gib=None,
        kv_pool_note=pool_note,
        block_size=16,
        notes=notes,
    )


@dataclass
class _VllmPool:
    """How a vLLM server is sized for its KV pool (``size_vllm``)."""

    block: int  # KV block size in tokens
    pool_tokens: int
    max_seqs: int  # --max-num-seqs
    over: int | None  # the overload point's concurrency (None: the pool cannot be overloaded)
    top: int  # the sweep's highest concurrency
    args: list[tuple[str, str, str]]
    kv_pool_gib: float | None
    pool_note: str


def _vllm_gpu_pool(m: ModelFacts, gpu: Gpu, mml: int, kv_bpt: float, request_tokens: int) -> _VllmPool:
    """A GPU: the pool vLLM's memory estimate gives (0.90 of the card), running requests enough to
    overload it."""
    mem = gpu.card_bytes()
    pool_bytes = th.estimated_kv_pool_bytes(mem, m.weight_bytes)
    pool_tokens = th.kv_pool_tokens(pool_bytes, kv_bpt)
    if pool_tokens < mml:
        raise PlanError(
            f"{m.served}: {m.weight_bytes / th.GIB:.1f} GiB of weights leave {pool_tokens:,} tokens of "
            f"KV on a {mem / th.GIB:.1f} GiB card, less than one {mml:,}-token request: pick a smaller "
            "model or pass a smaller --max-model-len"
        )
    over = next(
        (c for c in _pow2s(VLLM_OVERLOAD_MAX_CONCURRENCY) if c * mml >= 1.5 * pool_tokens),
        None,
    )
    max_seqs = max(VLLM_MAX_NUM_SEQS, over or 0)
    args = [
        ("--gpu-memory-utilization", "0.90", "the theory's pool estimate assumes 0.90"),
        ("--max-model-len", str(mml), "context per request"),
        ("--max-num-seqs", str(max_seqs), "enough running requests for the overload point"),
        ("--no-enable-prefix-caching", "", "random prompts would not hit; be sure"),
    ]
    return _VllmPool(
        block=16,
        pool_tokens=pool_tokens,
        max_seqs=max_seqs,
        over=over,
        top=min(max_seqs, VLLM_MAX_NUM_SEQS, _pow2_floor(pool_tokens // request_tokens)),
        args=args,
        kv_pool_gib=None if gpu.spec.memory_bytes is not None else round(pool_bytes / th.GIB, 2),
        pool_note=(
            f"~{pool_tokens:,} tokens (0.9 x {mem / th.GIB:.1f} GiB - {m.weight_bytes / th.GIB:.2f} GiB "
            "weights - 1 GiB, an estimate): after the first start, set kv_pool_gib to vLLM's logged "
            "'Available KV cache memory' for exact capacities"
        ),
    )


def _vllm_cpu_pool(mml: int, kv_bpt: float, request_tokens: int, env: dict[str, str]) -> _VllmPool:
    """A CPU: a small pool on purpose, as plans/cpu-tiny-vllm.toml: 4 requests of max_model_len, so the
    overload point really preempts; one block more because vLLM keeps one back as its null block. Sets the
    pool's size in ``env`` (VLLM_CPU_KVCACHE_SPACE)."""
    block = VLLM_CPU_BLOCK_SIZE
    blocks = 4 * math.ceil(mml / block) + 1
    pool_tokens = (blocks - 1) * block
    env["VLLM_CPU_KVCACHE_SPACE"] = str(max(1, math.ceil(blocks * block * kv_bpt / th.GIB)))
    args = [
        ("--dtype", "bfloat16", "vLLM's CPU backend computes in bfloat16"),
        ("--max-model-len", str(mml), "context per request"),
        ("--max-num-seqs", str(VLLM_CPU_MAX_NUM_SEQS), ""),
        ("--no-enable-prefix-caching", "", "every prompt computed in full"),
        ("--enforce-eager", "", "skips compilation: a faster start on a CPU"),
        ("--num-gpu-blocks-override", str(blocks), f"{blocks - 1} usable blocks of {block} tokens"),
    ]
    return _VllmPool(
        block=block,
        pool_tokens=pool_tokens,
        max_seqs=VLLM_CPU_MAX_NUM_SEQS,
        over=8 if 8 * mml > pool_tokens else None,
        top=min(8, _pow2_floor(pool_tokens // (math.ceil(request_tokens / block) * block))),
        args=args,
        kv_pool_gib=(blocks - 1) * block * kv_bpt / th.GIB,
        pool_note=f"{blocks - 1} blocks x {block} tokens x {kv_bpt:,.0f} B/token (--num-gpu-blocks-override)",
    )


def _vllm_overload(
    pool: _VllmPool, mml: int, on_gpu: bool, notes: list[str]
) -> tuple[tuple[int, int, int, int] | None, str]:
    """The overload point (concurrency, requests, input, output) and why it must preempt; None, with a note
    saying why, when the pool holds every request the overload could send."""
    over, pool_tokens = pool.over, pool.pool_tokens
    if not over:
        notes.append(
            f"no overload phase: the pool (~{pool_tokens:,} tokens) holds more than "
            f"{VLLM_OVERLOAD_MAX_CONCURRENCY} requests of {mml:,} tokens; to overload it, add an overload "
            "plan with --num-gpu-blocks-override (see plans/cpu-tiny-vllm.toml)"
        )
        return None, ""
    # vLLM admits about pool / prompt requests, whose outputs then outgrow the pool: it must preempt. The
    # proportions are the reference plans' (plans/overload.toml on a GPU, plans/cpu-tiny-vllm.toml on a
    # CPU, where 3/4 + 1/4 of 1,024 tokens fits 4 requests exactly in 32 blocks and never preempts).
    ov_in, ov_out = ((3 * mml) // 4 if on_gpu else mml // 2), mml // 4
    note = (
        f"{over} requests of {ov_in + ov_out:,} tokens want {over * (ov_in + ov_out):,} tokens of KV, "
        f"more than the ~{pool_tokens:,} the pool holds; the ~{min(over, pool_tokens // ov_in)} "
        "admitted on their prompts outgrow it while decoding: vLLM must preempt"
    )
    return (over, 2 * over, ov_in, ov_out), note


def size_vllm(m: ModelFacts, gpu: Gpu, max_model_len: int | None) -> Sizing:
    on_gpu = gpu.count > 0
    # vLLM's kv auto = the model dtype; its CPU backend runs bfloat16 (as plans/cpu-tiny-vllm.toml does)
    kv_dtype = m.weight_format if on_gpu and m.weight_format in ("bf16", "fp16") else "bf16"
    kv_bpt = th.kv_bytes_per_token(m.cfg, kv_dtype)
    ceiling = GPU_MAX_MODEL_LEN if on_gpu else CPU_MAX_MODEL_LEN
    mml = max_model_len or min(m.max_position or ceiling, ceiling)
    inp, out, length_inputs, length_out = _lengths(mml, on_gpu)
    notes: list[str] = []
    env = {"VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1", "HF_HUB_OFFLINE": "1"}
    if on_gpu:
        pool = _vllm_gpu_pool(m, gpu, mml, kv_bpt, inp + out)
        notes.append(
            'args: add "--enable-mfu-metrics" (vLLM\'s FLOP and byte counters, for MFU/MBU) if this vLLM '
            "knows the flag (python -m vllm.entrypoints.openai.api_server --help lists it)"
        )
    else:
        pool = _vllm_cpu_pool(mml, kv_bpt, inp + out, env)
    overload, overload_note = _vllm_overload(pool, mml, on_gpu, notes)
    return Sizing(
        max_model_len=mml,
        input_len=inp,
        output_len=out,
        sweep=_pow2s(max(1, pool.top)),
        length_concurrency=min(16 if on_gpu else 4, max(1, pool.top)),
        length_inputs=length_inputs,
        length_output=length_out,
        overload=overload,
        overload_note=overload_note,
        args=pool.args,
        env=env,
        kv_dtype=kv_dtype,
        kv_pool_gib=pool.kv_pool_gib,
        kv_pool_note=pool.pool_note,
        block_size=pool.block,
        notes=notes,
        weight_format=None if on_gpu else "bf16",
    )


# ------------------------------------------------------------------------------------------------ writing


def _q(value: str) -> str:
    """A TOML basic string (JSON's escaping is valid TOML for these values)."""
    return json.dumps(value, ensure_ascii=False)


def _name(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-._") or "box"


def _comment(text: str, width: int = 110) -> list[str]:
    """``# `` lines wrapped at ``width``; a line indented by four spaces (a command) is kept whole."""
    out = []
    for line in text.splitlines():
        if line.startswith("    "):
            out.append(f"# {line}")
        else:
            out += [f"# {part}" for part in textwrap.wrap(line, width - 2, subsequent_indent="  ")]
    return out


def render_plan(
    *,
    engine: Engine,
    model: ModelFacts,
    gpu: Gpu,
    sizing: Sizing,
    port: int,
    campaign: str,
    config_ref: str,
    token_range: tuple[int, int, str],
) -> str:
    """The plan's TOML text, every finding and every guess commented."""
    lines = _plan_head(engine, model, gpu, sizing, campaign)
    lines += _server_table(engine, model, gpu, sizing, port)
    lines += _model_table(engine, model, gpu, sizing, campaign, config_ref, token_range)
    lines += _sampling_and_load_tables(gpu)
    lines += _phases(engine, gpu, sizing)
    return "\n".join(lines) + "\n"


def _plan_head(engine: Engine, model: ModelFacts, gpu: Gpu, sizing: Sizing, campaign: str) -> list[str]:
    """What init found (engine, model, GPU, what to check), then the description, campaign and run name."""
    lines = [
        (
            "# Plan written by `collector init` for the box it ran on. Run it from any folder (paths are "
            "absolute):"
        ),
        "#     collector run <this file>",
        f"# engine: {engine.kind} at {engine.path} ({engine.how}"
        + (f", vllm {engine.version})" if engine.version else ")"),
        f"# model:  {model.served}",
    ]
    if gpu.count:
        lines.append(f"# GPU:    {gpu.smi_name}, {gpu.smi_memory_mib:,.0f} MiB (nvidia-smi)")
    else:
        lines.append(f"# GPU:    none ({gpu.note})")
    for note in model.notes + sizing.notes:
        lines += _comment(f"check: {note}")
    desc = (
        f"{engine.kind} on {gpu.smi_name or 'CPU'}: {model.name}, "
        f"{sizing.weight_format or model.weight_format}"
    )
    lines += [
        (
            "description = "
            f"{_q(desc + f'; sweep 1-{sizing.sweep[-1]}, length sweep, overload (collector init)')}"
        ),
        f"campaign = {_q(campaign)}",
        (
            f"run = {_q(engine.kind)}                        # run folder name; -2, -3 ... are added when "
            "it exists"
        ),
    ]
    return lines


def _server_table(engine: Engine, model: ModelFacts, gpu: Gpu, sizing: Sizing, port: int) -> list[str]:
    """``[server]``: the engine, the model it serves, its port, its sized flags and environment."""
    lines = ["", "[server]", f"engine = {_q(engine.kind)}"]
    if engine.kind == "llamacpp":
        lines.append(f"binary = {_q(str(engine.path))}")
    else:
        lines.append(
            f"python = {_q(str(engine.path))}      # started as python -m vllm.entrypoints.openai.api_server"
        )
    lines += [
        f"model = {_q(str(model.served))}",
        f"served_model_name = {_q(model.name)}",
        (
            f"port = {port}                           # free on 127.0.0.1 when init ran (the kernel's pick "
            "for port 0)"
        ),
        "args = [",
    ]
    for flag, value, why in sizing.args:
        item = f"  {_q(flag)}, {_q(value)}," if value else f"  {_q(flag)},"
        lines.append(f"{item:<40}# {why}" if why else item)
    lines.append("]")
    lines.append(f"startup_timeout_s = {900 if engine.kind == 'vllm' else (600 if gpu.count else 120)}")
    env = dict(sizing.env)
    if gpu.count > 1:
        env["CUDA_VISIBLE_DEVICES"] = "0"
    if env:
        lines.append("[server.env]")
        if gpu.count > 1:
            lines += _comment(f"{gpu.count} GPUs listed: this plan measures one (GPU 0)")
        lines += [f"{k} = {_q(v)}" for k, v in env.items()]
    return lines


def _gpu_comment(gpu: Gpu, campaign: str) -> list[str]:
    """What the theory knows of this GPU: nothing (measure the ceilings), no tensor rate, or its datasheet."""
    if gpu.spec is CPU and gpu.count:
        return _comment(
            f"unknown: measure the ceilings. {gpu.smi_name!r} ({gpu.smi_memory_mib:,.0f} MiB) "
            "has no datasheet\n"
            "entry in analysis/core/gpus.py, so the theory predicts capacities but no floors "
            '(gpu = "cpu" means\n'
            "no datasheet ceilings). Measure the card's copy bandwidth and bf16 matmul rate in this lease:\n"
            f"    python -m collector.protocol.ceilings --out ceilings.json --raw raw --campaign {campaign}\n"
            "and add an entry (memory, bandwidth, dense bf16 FLOP/s, cited) to analysis/core/gpus.py."
        )
    if gpu.count and gpu.spec.bf16_flops_per_s is None:
        return _comment(
            f"{gpu.spec.name}: no datasheet tensor rate, so no compute floor: measure the ceilings:\n"
            f"    python -m collector.protocol.ceilings --out ceilings.json --raw raw --campaign {campaign}"
        )
    if gpu.count:
        return _comment(f"{gpu.spec.display_name}: {gpu.spec.source}")
    return []


def _model_table(
    engine: Engine,
    model: ModelFacts,
    gpu: Gpu,
    sizing: Sizing,
    campaign: str,
    config_ref: str,
    token_range: tuple[int, int, str],
) -> list[str]:
    """``[model]``: the theory's inputs (config, GPU, formats, context, KV pool, token ids), explained."""
    low, high, range_why = token_range
    lines = ["", "[model]                                   # inputs of the theory (prediction.json)"]
    lines.append(f"config = {_q(config_ref)}")
    lines += _gpu_comment(gpu, campaign)
    lines.append(f"gpu = {_q(gpu.spec.name)}")
    lines.append(f"kv_dtype = {_q(sizing.kv_dtype)}")
    lines.append(f"weight_format = {_q(sizing.weight_format or model.weight_format)}")
    lines.append(f"max_model_len = {sizing.max_model_len}")
    if engine.kind == "vllm":
        lines.append(f"block_size = {sizing.block_size}")
    if sizing.kv_pool_gib is not None:
        lines.append(f"kv_pool_gib = {sizing.kv_pool_gib!r}")
    lines += _comment(f"KV pool: {sizing.kv_pool_note}")
    lines.append(f"token_id_range = [{low}, {high}]")
    lines += _comment(f"token ids: {range_why}")
    return lines


def _sampling_and_load_tables(gpu: Gpu) -> list[str]:
    """``[sampling]`` and ``[load]``, with the workload options commented out."""
    return [
        "",
        "[sampling]",
        f"interval_s = {1.0 if gpu.count else 2.0}",
        "metrics = true",
        'nvidia_smi = "auto"                       # query nvidia-smi every interval when it is installed',
        "# scrape_stored_max_bytes = 1048576       # a larger /metrics page: the families analysis reads",
        "",
        "[load]",
        f"drain_s = {5.0 if gpu.count else 1.0}                             # pause between points",
        f"request_timeout_s = {3600 if gpu.count else 600}",
        f"read_timeout_s = {1800 if gpu.count else 300}",
        "# What the requests send (README: workloads). Defaults: /v1/completions, random ids, cache off.",
        '# endpoint = "chat"                       # /v1/chat/completions (prompts sent as text)',
        '# api_key_env = "OPENAI_API_KEY"          # sent as "Authorization: Bearer <key>"; never in raw/',
        '# headers = { X-Tenant = "bench" }',
        "# [workload]",
        '# dataset_path = "sharegpt.json"          # ShareGPT JSON, JSONL, .parquet (on disk)',
        '# tokenizer = "path/to/model-dir"         # its tokenizer.json (chat needs one)',
        "# input_range_ratio = 0.25                # uniform lengths L(1-r)..L(1+r); or input_stddev = 64",
        "# prefix_len = 512                        # shared prefix; num_prefixes = 4",
        "# turns = 3                               # multi-turn conversations, turn_delay_ms = 1000",
    ]


def _phases(engine: Engine, gpu: Gpu, sizing: Sizing) -> list[str]:
    """The phases: warm-up, the concurrency sweep, the length sweep, the overload point when there is one."""
    lines = [
        "",
        "[[phase]]",
        'name = "warmup"',
        'kind = "warmup"',
        f"concurrency = {min(8, sizing.sweep[-1])}",
        f"requests = {2 * min(8, sizing.sweep[-1])}",
        f"input_len = {sizing.input_len}",
        f"output_len = {min(32, sizing.output_len)}",
        "seed = 0",
        "",
        "[[phase]]",
        'name = "sweep"',
        'kind = "concurrency"',
        f"input_len = {sizing.input_len}",
        f"output_len = {sizing.output_len}",
        "points = [",
    ]
    on_gpu = gpu.count > 0
    for c in sizing.sweep:
        lines.append(f"  {{ concurrency = {c}, requests = {_requests(c, on_gpu)}, seed = {1000 + c} }},")
    lines += [
        "]",
        "",
        "[[phase]]",
        'name = "length"',
        'kind = "length"',
        f"concurrency = {sizing.length_concurrency}",
        f"requests = {_requests(sizing.length_concurrency, on_gpu)}",
        f"output_len = {sizing.length_output}",
        "points = [",
    ]
    for n in sizing.length_inputs:
        lines.append(f"  {{ input_len = {n}, seed = {3000 + n} }},")
    lines.append("]")
    if sizing.overload:
        c, n, inp, out = sizing.overload
        lines += ["", *_comment(f"Overload: {sizing.overload_note}."), "[[phase]]"]
        lines += ['name = "overload"', 'kind = "overload"']
        lines.append(
            'expect_preemptions = "any"' if engine.kind == "llamacpp" else 'expect_preemptions = "some"'
        )
        lines += [
            f"concurrency = {c}",
            f"requests = {n}",
            f"input_len = {inp}",
            f"output_len = {out}",
            "seed = 4001",
        ]
    return lines


@dataclass(frozen=True)
class InitResult:
    plan_path: Path
    config_path: Path | None
    lines: list[str]


def _write_new(path: Path, text: str) -> None:
    try:
        with path.open("x", encoding="utf-8") as f:
            f.write(text)
    except FileExistsError as err:
        raise PlanError(
            f"{path}: exists; collector init never replaces a file (choose another --out)"
        ) from err
    except OSError as err:
        raise PlanError(f"{path}: cannot write ({err.strerror or err})") from err


def init_plan(
    out: Path,
    model: Path,
    *,
    engine_path: Path | None = None,
    vllm_python: Path | None = None,
    campaign: str | None = None,
    port: int | None = None,
    max_model_len: int | None = None,
    nvidia_smi: str = "nvidia-smi",
) -> InitResult:
    """Write a commented plan for this box to ``out`` (never replacing a file) and return what was found."""
    out = Path(out).expanduser()
    if out.exists():
        raise PlanError(f"{out}: exists; collector init never replaces a file (choose another --out)")
    model = Path(model).expanduser()
    if not model.exists():
        raise PlanError(f"{model}: no such model file or folder")
    if model.is_dir() and (model / "config.json").is_file():
        load_model_config(model)  # a config the theory refuses ends here, whatever engines the box has
    facts_gguf = model_from_gguf(model) if model.is_file() else None
    engine = detect_engine(model, engine_path, vllm_python)
    facts = facts_gguf or model_from_folder(model, engine)
    gpu = detect_gpu(nvidia_smi)
    sizing = (size_llamacpp if engine.kind == "llamacpp" else size_vllm)(facts, gpu, max_model_len)
    if facts.max_position and sizing.max_model_len > facts.max_position:
        raise PlanError(
            f"--max-model-len {sizing.max_model_len} is beyond the model's trained context "
            f"({facts.max_position})"
        )
    if campaign is None:
        # an unknown card is named as nvidia-smi names it, never "cpu"
        board = gpu.spec.name if gpu.spec is not CPU or not gpu.smi_name else gpu.smi_name.lower()
        campaign = f"{board.removeprefix('nvidia ')}-{facts.name}"
    campaign = _name(campaign)
    config_path = None
    config_ref = facts.config_ref
    if facts.derived_config is not None:
        config_path = out.with_name(f"{out.stem}.model-config.json").resolve()
        config_ref = str(config_path)
    text = render_plan(
        engine=engine,
        model=facts,
        gpu=gpu,
        sizing=sizing,
        port=port or free_port(),
        campaign=campaign,
        config_ref=config_ref,
        token_range=token_id_range(facts.vocab, facts.cfg.vocab_size),
    )
    parse_plan(text, out)  # the loader must take it as written: a plan init cannot load is a bug here
    if config_path is not None:
        _write_new(config_path, json.dumps(facts.derived_config, indent=2) + "\n")
    _write_new(out, text)
    lines = [f"wrote {out}"]
    if config_path is not None:
        lines.append(f"wrote {config_path} (the model's shape from its GGUF metadata)")
    lines.append(f"engine {engine.kind}: {engine.path} ({engine.how})")
    lines.append(f"model {facts.served} ({facts.weight_format}); theory config {config_ref}")
    lines.append(f"gpu {gpu.spec.name}" + (f" ({gpu.smi_name})" if gpu.smi_name else f" ({gpu.note})"))
    lines.append(f"next: collector run {out}")
    return InitResult(out, config_path, lines)
