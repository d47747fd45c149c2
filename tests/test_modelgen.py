"""The random-weight model generator: shapes and parameter counts read back from the written files, checked
against hand computations; config.json round trip; the printable-ASCII output head; seed determinism."""

from __future__ import annotations

import dataclasses
import json
import struct
from pathlib import Path

import gguf
import numpy as np
import pytest

from analysis.core.model_config import load_model_config
from analysis.core.theory import params_total
from lab import modelgen
from lab.modelgen import SHAPES

TINY = SHAPES["tiny"]

# Tiny shape by hand: hidden 256, 4 layers, 4 heads of 64 -> q dim 256, 2 kv heads -> k/v dim 128,
# intermediate 512, vocab 512, untied head.
TINY_PARAMS_BY_HAND = (
    512 * 256  # embed_tokens
    + 512 * 256  # lm_head (not tied)
    + 4
    * (
        (256 * 256 + 256)  # q_proj + bias
        + 2 * (128 * 256 + 128)  # k_proj, v_proj + biases
        + 256 * 256  # o_proj (no bias)
        + 3 * 256 * 512  # gate, up, down
        + 2 * 256  # input / post-attention RMSNorm
    )
    + 256  # final norm
)  # = 2,625,792
# Qwen2.5-7B-Instruct: its safetensors index says total_size 15,231,233,024 bytes of bfloat16.
QWEN25_7B_PARAMS = 15_231_233_024 // 2


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return modelgen.write_gguf(tmp_path_factory.mktemp("gguf") / "tiny.gguf", TINY, seed=7)


@pytest.fixture(scope="module")
def tiny_hf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return modelgen.write_hf(tmp_path_factory.mktemp("hf") / "tiny", TINY, seed=7)


def _field(reader: gguf.GGUFReader, key: str):
    return reader.fields[key].contents()


def _read_safetensors(path: Path) -> tuple[dict, int]:
    """(header dict, offset of the data section) read straight from the file format."""
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        return json.loads(f.read(n)), 8 + n


def _bf16_to_f32(bits: np.ndarray) -> np.ndarray:
    return (bits.astype(np.uint32) << 16).view(np.float32)


def test_param_counts_match_hand_computation() -> None:
    assert TINY_PARAMS_BY_HAND == 2_625_792
    assert modelgen.param_count(TINY) == TINY_PARAMS_BY_HAND
    assert modelgen.param_count(SHAPES["qwen2.5-7b"]) == QWEN25_7B_PARAMS


def test_gguf_reads_back_with_the_shape(tiny_gguf: Path) -> None:
    r = gguf.GGUFReader(tiny_gguf)
    assert sum(int(t.n_elements) for t in r.tensors) == TINY_PARAMS_BY_HAND
    assert len(r.tensors) == 2 + 4 * 12 + 1
    assert _field(r, "general.architecture") == "qwen2"
    assert _field(r, "qwen2.embedding_length") == 256
    assert _field(r, "qwen2.block_count") == 4
    assert _field(r, "qwen2.attention.head_count") == 4
    assert _field(r, "qwen2.attention.head_count_kv") == 2
    assert _field(r, "qwen2.feed_forward_length") == 512
    assert _field(r, "qwen2.context_length") == 4096
    assert _field(r, "qwen2.rope.freq_base") == pytest.approx(1e6)
    assert _field(r, "qwen2.attention.layer_norm_rms_epsilon") == pytest.approx(1e-6)
    by_name = {t.name: t for t in r.tensors}
    # GGUF stores dimensions fastest-first: (in_features, out_features).
    assert list(by_name["token_embd.weight"].shape) == [256, 512]
    assert list(by_name["output.weight"].shape) == [256, 512]
    assert list(by_name["blk.3.attn_k.weight"].shape) == [256, 128]
    assert list(by_name["blk.0.ffn_down.weight"].shape) == [512, 256]
    assert list(by_name["blk.0.attn_v.bias"].shape) == [128]
    assert by_name["blk.0.ffn_up.weight"].tensor_type == gguf.GGMLQuantizationType.F16
    assert by_name["blk.0.attn_norm.weight"].tensor_type == gguf.GGMLQuantizationType.F32
    assert np.all(by_name["blk.2.ffn_norm.weight"].data == 1.0)
    w = by_name["blk.1.ffn_gate.weight"].data.astype(np.float32)
    assert np.all(np.isfinite(w)) and 0.015 < float(w.std()) < 0.025


def test_gguf_tokenizer_metadata(tiny_gguf: Path) -> None:
    r = gguf.GGUFReader(tiny_gguf)
    tokens = _field(r, "tokenizer.ggml.tokens")
    assert len(tokens) == 512 == len(set(tokens))
    assert _field(r, "tokenizer.ggml.model") == "gpt2"
    assert _field(r, "tokenizer.ggml.pre") == "qwen2"
    assert tokens[_field(r, "tokenizer.ggml.eos_token_id")] == "<|im_end|>"
    assert tokens[_field(r, "tokenizer.ggml.padding_token_id")] == "<|endoftext|>"
    assert tokens[ord("A")] == "A" and tokens[ord(" ")] == "Ġ"  # GPT-2 byte alphabet, id = byte
    vocab = set(tokens)
    for merge in _field(r, "tokenizer.ggml.merges"):
        a, b = merge.split(" ")
        assert a in vocab and b in vocab and a + b in vocab
    types = _field(r, "tokenizer.ggml.token_type")
    assert types[:509] == [gguf.TokenType.NORMAL] * 509 and types[509:] == [gguf.TokenType.CONTROL] * 3


def test_gguf_pads_a_vocab_larger_than_the_tokenizer(tmp_path: Path) -> None:
    shape = modelgen.ModelShape(
        name="pad",
        hidden_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        intermediate_size=128,
        vocab_size=1200,
        max_position_embeddings=256,
        rope_theta=1e4,
        rms_norm_eps=1e-5,
    )
    r = gguf.GGUFReader(modelgen.write_gguf(tmp_path / "pad.gguf", shape, dtype="f32"))
    tokens = _field(r, "tokenizer.ggml.tokens")
    n_real = len(modelgen.tokenizer_for(shape).tokens)
    assert len(tokens) == 1200 and n_real < 1200
    assert tokens[1199] == "[PAD1199]"
    assert _field(r, "tokenizer.ggml.token_type")[n_real:] == [gguf.TokenType.UNUSED] * (1200 - n_real)
    assert {t.tensor_type for t in r.tensors} == {gguf.GGMLQuantizationType.F32}
    assert sum(int(t.n_elements) for t in r.tensors) == (
        2 * 1200 * 64 + (64 * 64 + 64) + 2 * (32 * 64 + 32) + 64 * 64 + 3 * 64 * 128 + 2 * 64 + 64
    )


def test_output_head_only_printable_ascii(tiny_gguf: Path) -> None:
    r = gguf.GGUFReader(tiny_gguf)
    head = next(t for t in r.tensors if t.name == "output.weight").data.astype(np.float32)
    nonzero_rows = np.flatnonzero(np.abs(head).sum(axis=1) > 0)
    assert nonzero_rows.tolist() == list(range(0x20, 0x7F))
    embd = next(t for t in r.tensors if t.name == "token_embd.weight").data
    assert np.all(np.abs(embd.astype(np.float32)).sum(axis=1) > 0)  # the input side is not masked


def test_seed_determines_the_weights(tmp_path: Path, tiny_gguf: Path) -> None:
    again = modelgen.write_gguf(tmp_path / "again.gguf", TINY, seed=7)
    other = modelgen.write_gguf(tmp_path / "other.gguf", TINY, seed=8)
    assert again.read_bytes() == tiny_gguf.read_bytes()
    assert other.read_bytes() != tiny_gguf.read_bytes()


def test_chunking_does_not_change_values(monkeypatch: pytest.MonkeyPatch) -> None:
    spec = next(s for s in modelgen.tensor_specs(TINY) if s.hf_name == "lm_head.weight")
    allowed = list(range(0x20, 0x7F))
    whole = np.concatenate(list(modelgen.tensor_chunks(spec, 3, allowed)))
    monkeypatch.setattr(modelgen, "CHUNK_ELEMENTS", 256 * 7)  # 7 rows per chunk
    chunks = list(modelgen.tensor_chunks(spec, 3, allowed))
    assert len(chunks) == -(-512 // 7)
    assert np.array_equal(np.concatenate(chunks), whole)


def test_hf_safetensors_match_the_shape_and_the_gguf(tiny_hf: Path, tiny_gguf: Path) -> None:
    header, data_start = _read_safetensors(tiny_hf / "model.safetensors")
    header.pop("__metadata__")
    total = sum(int(np.prod(v["shape"])) for v in header.values())
    assert total == TINY_PARAMS_BY_HAND
    assert {v["dtype"] for v in header.values()} == {"BF16"}
    assert header["model.layers.0.self_attn.k_proj.weight"]["shape"] == [128, 256]
    assert header["model.layers.3.mlp.down_proj.weight"]["shape"] == [256, 512]
    # Same seed -> same draws: the BF16 q_proj equals the GGUF's F16 one to within both roundings.
    ent = header["model.layers.0.self_attn.q_proj.weight"]
    b0, b1 = ent["data_offsets"]
    raw = (tiny_hf / "model.safetensors").read_bytes()[data_start + b0 : data_start + b1]
    hf_q = _bf16_to_f32(np.frombuffer(raw, dtype=np.uint16)).reshape(256, 256)
    r = gguf.GGUFReader(tiny_gguf)
    gg_q = next(t for t in r.tensors if t.name == "blk.0.attn_q.weight").data.astype(np.float32)
    assert np.allclose(hf_q, gg_q, rtol=1e-2, atol=1e-4)
    assert not np.allclose(hf_q, 0)


def test_hf_config_round_trip(tiny_hf: Path) -> None:
    cfg = json.loads((tiny_hf / "config.json").read_text())
    assert cfg["architectures"] == ["Qwen2ForCausalLM"] and cfg["model_type"] == "qwen2"
    assert (
        cfg["hidden_size"],
        cfg["num_hidden_layers"],
        cfg["num_attention_heads"],
        cfg["num_key_value_heads"],
        cfg["intermediate_size"],
        cfg["vocab_size"],
    ) == (256, 4, 4, 2, 512, 512)
    assert cfg["tie_word_embeddings"] is False
    tok = json.loads((tiny_hf / "tokenizer.json").read_text())
    assert cfg["eos_token_id"] == next(t["id"] for t in tok["added_tokens"] if t["content"] == "<|im_end|>")
    assert len(tok["model"]["vocab"]) + len(tok["added_tokens"]) == 512
    tcfg = json.loads((tiny_hf / "tokenizer_config.json").read_text())
    assert tcfg["tokenizer_class"] == "PreTrainedTokenizerFast" and "<|im_start|>" in tcfg["chat_template"]
    gen = json.loads((tiny_hf / "generation_config.json").read_text())
    assert cfg["eos_token_id"] in gen["eos_token_id"]


def test_qwen25_7b_config_is_the_real_shape(tmp_path: Path) -> None:
    cfg = json.loads(modelgen.write_config(tmp_path / "config.json", SHAPES["qwen2.5-7b"]).read_text())
    # Values of Qwen/Qwen2.5-7B-Instruct's config.json.
    expected = {
        "hidden_size": 3584,
        "num_hidden_layers": 28,
        "num_attention_heads": 28,
        "num_key_value_heads": 4,
        "intermediate_size": 18944,
        "vocab_size": 152064,
        "max_position_embeddings": 32768,
        "rope_theta": 1000000.0,
        "rms_norm_eps": 1e-06,
        "hidden_act": "silu",
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "model_type": "qwen2",
        "architectures": ["Qwen2ForCausalLM"],
        "max_window_layers": 28,
    }
    assert {k: cfg[k] for k in expected} == expected


def test_cli_writes_gguf_and_its_config(tmp_path: Path) -> None:
    out = tmp_path / "m-f16.gguf"
    assert modelgen.main(["--shape", "tiny", "--format", "gguf", "--out", str(out), "--seed", "1"]) == 0
    cfg = json.loads((tmp_path / "m-f16.config.json").read_text())
    r = gguf.GGUFReader(out)
    assert cfg["hidden_size"] == _field(r, "qwen2.embedding_length")
    assert cfg["vocab_size"] == len(_field(r, "tokenizer.ggml.tokens"))


@pytest.mark.parametrize(
    ("shape", "bundled", "published"),
    [
        ("qwen2.5-0.5b", "Qwen2.5-0.5B-Instruct", 494_032_768),
        ("qwen2.5-1.5b", "Qwen2.5-1.5B-Instruct", 1_543_714_304),
        ("qwen2.5-3b", "Qwen2.5-3B-Instruct", 3_085_938_688),
        ("qwen2.5-7b", "Qwen2.5-7B-Instruct", 7_615_616_512),
        ("qwen2.5-14b", "Qwen2.5-14B-Instruct", 14_770_033_664),
    ],
)
def test_each_size_is_its_real_config(shape: str, bundled: str, published: int, tmp_path: Path) -> None:
    """The generated model has the real model's shape: its config.json reads back as the bundled one (the
    theory's input), and the tensors it writes add up to the real checkpoint's parameter count (the total
    in the Hugging Face safetensors metadata of Qwen/<bundled>), which the theory's count equals too."""
    cfg = load_model_config(modelgen.write_config(tmp_path / "config.json", SHAPES[shape]))
    real = load_model_config(bundled)
    keys = ("hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads")
    keys += ("intermediate_size", "vocab_size", "tie_word_embeddings")
    assert {k: getattr(cfg, k) for k in keys} == {k: getattr(real, k) for k in keys}
    assert modelgen.param_count(SHAPES[shape]) == params_total(real) == published


def test_a_tied_model_has_no_output_tensor_and_a_printable_embedding(tmp_path: Path) -> None:
    tied = dataclasses.replace(TINY, name="tiny-tied", tie_word_embeddings=True)
    r = gguf.GGUFReader(modelgen.write_gguf(tmp_path / "tied.gguf", tied, seed=7))
    names = {t.name for t in r.tensors}
    assert "output.weight" not in names
    embd = next(t for t in r.tensors if t.name == "token_embd.weight").data.astype(np.float32)
    # the embedding table doubles as the output head: only printable-ASCII rows may win the argmax
    assert np.flatnonzero(np.abs(embd).sum(axis=1) > 0).tolist() == list(range(0x20, 0x7F))
    assert modelgen.param_count(tied) == modelgen.param_count(TINY) - TINY.vocab_size * TINY.hidden_size
