"""`collector init` on this machine, the datasheet table it matches GPUs against, the bundled configs, and the
MoE / MLA / sliding-window configs the theory now takes (refused on main) beside the ones it still refuses.

Real files throughout: the tiny model and llama-server from the engines cache, the bundled config.json files,
real config.json contents of MoE / MLA / sliding-window models written to tmp. The one stand-in is
``nvidia-smi``: a script on PATH printing a real nvidia-smi line, because CI has no GPU to query.
"""

from __future__ import annotations

import json
import re
import socket
import stat
from pathlib import Path

import gguf
import numpy as np
import pytest
from click.testing import CliRunner

from analysis.core import theory as th
from analysis.core.gpus import CPU, GPUS, MIB, NVIDIA_SMI_NAMES, match_nvidia_smi
from analysis.core.model_config import bundled_model_names, load_model_config
from collector.cli import main
from collector.protocol.init import (
    Engine,
    Gpu,
    ModelFacts,
    init_plan,
    model_from_folder,
    model_from_gguf,
    render_plan,
    size_vllm,
    token_id_range,
    vocab_from_config,
    vocab_from_tokenizer_json,
)
from collector.protocol.theory_sheet import SheetInputs, theory_sheet
from collector.raw.errors import PlanError
from collector.raw.plan import load_plan, parse_plan
from tests import engine_cache

# Public config.json contents (the Hub files, as copied into ai-dynamo/aiconfigurator's model_configs/ and
# mlc-ai/mlc-llm's model_preset.py), cut to the keys that matter here.
QWEN3_30B_A3B = {
    "architectures": ["Qwen3MoeForCausalLM"],
    "head_dim": 128,
    "hidden_size": 2048,
    "intermediate_size": 6144,
    "max_position_embeddings": 40960,
    "model_type": "qwen3_moe",
    "moe_intermediate_size": 768,
    "num_attention_heads": 32,
    "num_experts": 128,
    "num_experts_per_tok": 8,
    "num_hidden_layers": 48,
    "num_key_value_heads": 4,
    "sliding_window": None,
    "tie_word_embeddings": False,
    "use_sliding_window": False,
    "vocab_size": 151936,
}
MIXTRAL_8X7B = {
    "architectures": ["MixtralForCausalLM"],
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "max_position_embeddings": 32768,
    "model_type": "mixtral",
    "num_attention_heads": 32,
    "num_experts_per_tok": 2,
    "num_hidden_layers": 32,
    "num_key_value_heads": 8,
    "num_local_experts": 8,
    "sliding_window": None,
    "vocab_size": 32000,
}
DEEPSEEK_V2_LITE = {
    "architectures": ["DeepseekV2ForCausalLM"],
    "hidden_size": 2048,
    "intermediate_size": 10944,
    "kv_lora_rank": 512,
    "model_type": "deepseek_v2",
    "n_routed_experts": 64,
    "num_attention_heads": 16,
    "num_hidden_layers": 27,
    "num_key_value_heads": 16,
    "vocab_size": 102400,
}
MISTRAL_7B_V01 = {  # every layer attends over a 4,096-token window
    "architectures": ["MistralForCausalLM"],
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "max_position_embeddings": 32768,
    "model_type": "mistral",
    "num_attention_heads": 32,
    "num_hidden_layers": 32,
    "num_key_value_heads": 8,
    "sliding_window": 4096,
    "vocab_size": 32000,
}


def _config_dir(tmp_path: Path, name: str, data: dict) -> Path:
    folder = tmp_path / name
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(data))
    return folder


def _fake_nvidia_smi(bin_dir: Path, *lines: str) -> None:
    """An nvidia-smi that prints real `--query-gpu=name,memory.total --format=csv,noheader,nounits` lines."""
    bin_dir.mkdir(exist_ok=True)
    script = bin_dir / "nvidia-smi"
    script.write_text("#!/bin/sh\n" + "".join(f"echo '{ln}'\n" for ln in lines))
    script.chmod(script.stat().st_mode | stat.S_IXUSR)


def _port_is_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


# --------------------------------------------------------------------------------------------- datasheets


@pytest.mark.parametrize("name", sorted(GPUS))
def test_every_datasheet_entry_is_cited_and_plausible(name):
    g = GPUS[name]
    assert g.source and g.memory_bytes and g.bandwidth_bytes_per_s, name
    assert 16 * 2**30 < g.memory_bytes < 300 * 2**30
    assert 250e9 <= g.bandwidth_bytes_per_s <= 6.5e12
    if g.bf16_flops_per_s is None:  # only where no vendor publishes one, said in the source
        assert "no published tensor rate" in g.source
        return
    ridge_flops_per_byte = g.bf16_flops_per_s / g.bandwidth_bytes_per_s
    assert 50 < ridge_flops_per_byte < 500, (name, ridge_flops_per_byte)


def test_geforce_entries_are_the_fp32_accumulate_rate():
    # Half the FP16-accumulate dense figure: SMs x 1,024 FP16-accumulate FLOP/clk x boost clock, halved.
    for name, sms, boost_ghz in (("rtx3090", 82, 1.695), ("rtx4090", 128, 2.52), ("rtx5090", 170, 2.407)):
        fp16_acc = sms * 1024 * boost_ghz * 1e9
        assert GPUS[name].bf16_flops_per_s == pytest.approx(fp16_acc / 2, rel=0.01), name


@pytest.mark.parametrize(
    ("smi_name", "mib", "entry"),
    [
        ("NVIDIA H100 80GB HBM3", 81559, "h100-sxm"),
        ("NVIDIA H100 PCIe", 81559, "h100-pcie"),
        ("NVIDIA H200", 143771, "h200"),
        ("NVIDIA A100-SXM4-40GB", 40960, "a100-40gb"),
        ("NVIDIA A100-PCIE-40GB", 40960, "a100-40gb"),
        ("NVIDIA A100-SXM4-80GB", 81920, "a100-80gb"),
        ("NVIDIA A100 80GB PCIe", 81920, "a100-80gb-pcie"),
        ("NVIDIA L40S", 46068, "l40s"),
        ("NVIDIA L4", 23034, "l4"),
        ("NVIDIA A10G", 23028, "a10g"),
        ("NVIDIA GeForce RTX 3090", 24576, "rtx3090"),
        ("NVIDIA GeForce RTX 4090", 24564, "rtx4090"),
        ("NVIDIA GeForce RTX 5090", 32607, "rtx5090"),
        ("NVIDIA GeForce RTX 4090", None, "rtx4090"),  # no memory column: the name alone
    ],
)
def test_nvidia_smi_names_match_their_entry(smi_name, mib, entry):
    assert match_nvidia_smi(smi_name, mib).name == entry


@pytest.mark.parametrize(
    ("smi_name", "mib"),
    [
        ("NVIDIA H100 NVL", 95830),  # 94 GB, 3.9 TB/s: not the SXM card
        ("NVIDIA H200 NVL", 143771),  # same memory as the H200 SXM, lower clocks
        ("NVIDIA GeForce RTX 4090 D", 24564),  # fewer SMs than the 4090
        ("NVIDIA L40", 46068),
        ("NVIDIA A100-SXM4-80GB", 40960),  # a MIG slice or a vGPU profile, not the whole card
        ("Tesla T4", 15360),
    ],
)
def test_other_boards_are_unknown(smi_name, mib):
    assert match_nvidia_smi(smi_name, mib) is None


def test_every_nvidia_smi_name_points_at_an_entry():
    assert set(NVIDIA_SMI_NAMES.values()) == {
        k for k in GPUS if not k.startswith("mi3")
    }  # AMD: no nvidia-smi


def test_amd_instinct_entries_plan_and_hold_what_an_nvidia_card_cannot():
    # MI300X: 5.3 TB/s, 1307.4 TFLOPS dense BF16; DeepSeek-V2-Lite's 29 GiB of bf16 weights leave it a pool
    # 14 GiB over the H200's (the difference in memory less nothing else)
    mi300x = theory_sheet(SheetInputs("DeepSeek-V2-Lite", "AMD Instinct MI300X"))
    h200 = theory_sheet(SheetInputs("DeepSeek-V2-Lite", "h200"))
    assert mi300x["gpu_bandwidth_bytes_per_s"] == 5.3e12 and mi300x["gpu_bf16_flops_per_s"] == 1307.4e12
    extra = mi300x["kv_pool_bytes"] - h200["kv_pool_bytes"]
    assert extra == pytest.approx(0.9 * (196592 - 143771) * MIB)
    assert (
        theory_sheet(SheetInputs("Qwen3-30B-A3B", "mi325x"))["decode_step_floor_ms"]
        < theory_sheet(SheetInputs("Qwen3-30B-A3B", "mi300x"))["decode_step_floor_ms"]
    )


# ------------------------------------------------------------------------------------------ bundled configs


@pytest.mark.parametrize("model", bundled_model_names())
def test_collector_plan_runs_for_every_bundled_model_on_every_card(model):
    runner = CliRunner()
    for gpu in [*GPUS, "cpu"]:
        args = ["plan", "--model", model, "--gpu", gpu, "--max-model-len", "4096"]
        result = runner.invoke(main, [*args, "--kv-pool-gib", "1"] if gpu == "cpu" else args)
        assert result.exit_code == 0, (model, gpu, result.output)
        assert "== KV pool ==" in result.output


def test_explicit_head_dim_is_what_the_theory_uses():
    # Qwen3-32B: head_dim 128 while hidden/heads = 5120/64 = 80.
    cfg = load_model_config("Qwen3-32B")
    assert (cfg.head_dim, cfg.hidden_size // cfg.num_attention_heads, cfg.qk_norm) == (128, 80, True)
    assert th.q_proj_params(cfg) == 5120 * 64 * 128
    assert th.o_proj_params(cfg) == 64 * 128 * 5120
    assert th.kv_bytes_per_token(cfg, "bf16") == 2 * 64 * 8 * 128 * 2
    # Qwen3-0.6B by hand: the model card's "0.44B" non-embedding parameters, tied embeddings.
    small = load_model_config("Qwen3-0.6B")
    layer = 1024 * 16 * 128 * 2 + 1024 * 8 * 128 * 2 + 3 * 1024 * 3072 + 2 * 1024 + 2 * 128
    assert th.params_total(small) == 151936 * 1024 + 28 * layer + 1024 == 596_049_920


@pytest.mark.parametrize(
    ("name", "published_params"),
    [  # model cards' parameter counts
        ("Llama-3.2-1B-Instruct", 1.24e9),
        ("Llama-3.2-3B-Instruct", 3.21e9),
        ("Llama-3.1-70B-Instruct", 70.6e9),
        ("Qwen2.5-1.5B-Instruct", 1.54e9),
        ("Qwen2.5-3B-Instruct", 3.09e9),
        ("Qwen2.5-14B-Instruct", 14.7e9),
        ("Qwen2.5-32B-Instruct", 32.5e9),
        ("Qwen2.5-72B-Instruct", 72.7e9),
        ("Qwen3-4B", 4.0e9),
        ("Qwen3-8B", 8.2e9),
        ("Qwen3-14B", 14.8e9),
        ("Mistral-7B-v0.3", 7.25e9),
    ],
)
def test_bundled_configs_add_up_to_the_published_size(name, published_params):
    assert th.params_total(load_model_config(name)) == pytest.approx(published_params, rel=0.01)


@pytest.mark.parametrize(
    ("data", "shape"),
    [
        (QWEN3_30B_A3B, lambda c: c.moe.num_experts == 128 and c.moe.moe_layers == 48),
        (MIXTRAL_8X7B, lambda c: c.moe.experts_per_token == 2 and not c.layer_windows),
        (MISTRAL_7B_V01, lambda c: c.layer_windows == (4096,) * 32),
        (  # Qwen2.5's max_window_layers is its layer count: the switch windows no layer
            {
                **json.loads(Path(load_model_config("Qwen2.5-7B-Instruct").source).read_text()),
                "use_sliding_window": True,
            },
            lambda c: c.layer_windows == (),
        ),
    ],
)
def test_configs_refused_on_main_now_have_a_theory(tmp_path, data, shape):
    cfg = load_model_config(_config_dir(tmp_path, "m", data))
    assert shape(cfg) and th.params_total(cfg) > 0


@pytest.mark.parametrize(
    ("data", "key"),
    [
        ({**QWEN3_30B_A3B, "num_experts_per_tok": None}, "num_experts'"),  # experts, but not how many run
        (DEEPSEEK_V2_LITE, "n_routed_experts"),  # keys cut here: no num_experts_per_tok
        ({**DEEPSEEK_V2_LITE, "n_routed_experts": None}, "qk_nope_head_dim"),  # a latent without head dims
        (
            {
                **QWEN3_30B_A3B,
                "num_experts": None,
                "model_type": "qwen3",
                "layer_types": ["linear_attention", "full_attention"] * 24,
            },
            "layer_types",
        ),
        ({**MIXTRAL_8X7B, "model_type": "llama4_text"}, "model_type"),
    ],
)
def test_configs_the_theory_cannot_represent_are_refused_in_one_line(tmp_path, data, key):
    folder = _config_dir(tmp_path, "m", data)
    with pytest.raises(PlanError) as err:
        load_model_config(folder)
    msg = str(err.value)
    assert len(msg.splitlines()) == 1 and msg.startswith(str(folder / "config.json"))
    assert f"key '{key}" in msg


def test_dense_configs_that_name_full_attention_layers_are_fine(tmp_path):
    data = json.loads(Path(load_model_config("Qwen3-8B").source).read_text())
    folder = _config_dir(tmp_path, "q", {**data, "layer_types": ["full_attention"] * 36})
    assert load_model_config(folder).num_hidden_layers == 36


# ------------------------------------------------------------------------------------------ token ids


def test_token_range_from_the_config_avoids_its_special_ids():
    for name, high in (("Qwen2.5-7B-Instruct", 151643), ("Llama-3.1-8B-Instruct", 128000)):
        cfg = load_model_config(name)
        low, hi, why = token_id_range(vocab_from_config(Path(cfg.source), cfg.vocab_size), cfg.vocab_size)
        assert (low, hi) == (1000, high) and "check" in why


def test_token_range_of_the_tiny_tokenizer_is_its_printable_bytes():
    p = engine_cache.paths()
    engine_cache.require(p.tiny_hf_dir / "tokenizer.json")
    vocab = vocab_from_tokenizer_json(p.tiny_hf_dir / "tokenizer.json")
    low, high, why = token_id_range(vocab, 512)
    assert (low, high) == (32, 127) and "printable" in why
    assert not vocab.special_ids & set(range(low, high))


# ----------------------------------------------------------------------------------------------- init


@pytest.fixture
def box(tmp_path, monkeypatch):
    """PATH with the real llama-server and nothing else of ours: no nvidia-smi, unless a test adds one."""
    p = engine_cache.paths()
    engine_cache.require(p.llama_server, p.tiny_gguf, p.tiny_hf_dir)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "llama-server").symlink_to(p.llama_server)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    monkeypatch.chdir(tmp_path)
    return p, bin_dir


@pytest.mark.engines
def test_init_for_the_tiny_folder_and_llama_server_on_path(box, tmp_path):
    p, _ = box
    result = init_plan(tmp_path / "box.toml", p.tiny_hf_dir)
    plan = load_plan(result.plan_path)
    assert plan.server.engine == "llamacpp"
    assert plan.server.binary == p.llama_server.resolve()
    assert Path(plan.server.model) == p.tiny_gguf.resolve()  # the GGUF beside the folder is what is served
    assert plan.model.config == str((p.tiny_hf_dir / "config.json").resolve())
    assert (plan.model.token_id_low, plan.model.token_id_high) == (32, 127)
    assert plan.model.gpu == "cpu" and "-ngl" not in plan.server.args
    assert _port_is_free(plan.server.port)
    assert {ph.kind for ph in plan.phases} == {"warmup", "concurrency", "length", "overload"}
    slots = int(plan.server.args[plan.server.args.index("-np") + 1])
    for pt in plan.points:  # every request fits a slot; only the overload has more in flight than slots
        assert pt.input_len + pt.output_len <= plan.model.max_model_len, pt.point_id
        assert (pt.concurrency > slots) == (pt.kind == "overload"), pt.point_id
    text = result.plan_path.read_text()
    assert "no nvidia-smi or rocm-smi on PATH" in text


@pytest.mark.engines
def test_init_for_a_gguf_reads_its_metadata(box, tmp_path):
    p, _ = box
    result = init_plan(tmp_path / "g.toml", p.tiny_gguf, engine_path=p.llama_server)
    plan = load_plan(result.plan_path)
    cfg = load_model_config(plan.model.config)  # the shape written from the GGUF metadata
    assert result.config_path == Path(plan.model.config)
    assert (cfg.hidden_size, cfg.num_hidden_layers, cfg.num_key_value_heads, cfg.vocab_size) == (
        256,
        4,
        2,
        512,
    )
    assert cfg.max_position_embeddings == 4096 and cfg.tie_word_embeddings is False
    assert plan.model.weight_format == "fp16"  # general.file_type 1 (MOSTLY_F16)
    assert (plan.model.token_id_low, plan.model.token_id_high) == (32, 127)


@pytest.mark.engines
def test_init_matches_an_h100_from_nvidia_smi(box, tmp_path):
    p, bin_dir = box
    _fake_nvidia_smi(bin_dir, "NVIDIA H100 80GB HBM3, 81559")
    plan = load_plan(init_plan(tmp_path / "h.toml", p.tiny_gguf).plan_path)
    assert plan.model.gpu == "h100-sxm" and plan.campaign.startswith("h100-sxm-")
    assert plan.server.args[:2] == ("-ngl", "99")
    np_ = int(plan.server.args[plan.server.args.index("-np") + 1])
    ctx = int(plan.server.args[plan.server.args.index("-c") + 1])
    assert np_ == 64 and ctx == 64 * plan.model.max_model_len  # 64 slots of the model's 4,096 tokens
    assert max(pt.concurrency for pt in plan.points if pt.kind == "concurrency") == np_


@pytest.mark.engines
def test_init_says_measure_the_ceilings_for_an_unknown_gpu(box, tmp_path):
    p, bin_dir = box
    _fake_nvidia_smi(bin_dir, "NVIDIA H100 NVL, 95830")
    result = init_plan(tmp_path / "u.toml", p.tiny_gguf)
    text = result.plan_path.read_text()
    assert "unknown: measure the ceilings" in text
    assert "python -m collector.protocol.ceilings --out ceilings.json" in text
    plan = load_plan(result.plan_path)
    assert plan.model.gpu == "cpu" and plan.campaign.startswith("h100-nvl-")  # named as nvidia-smi names it


@pytest.mark.engines
def test_init_never_replaces_a_file(box, tmp_path):
    p, _ = box
    out = tmp_path / "plan.toml"
    out.write_text("mine\n")
    with pytest.raises(PlanError, match="exists; collector init never replaces"):
        init_plan(out, p.tiny_gguf)
    assert out.read_text() == "mine\n"


def _vllm_plan_text(facts: ModelFacts, gpu: Gpu, sizing, config_ref: str) -> str:
    """The plan text init writes for a vLLM server at /opt/vllm (none needed: the sizing is the theory's)."""
    return render_plan(
        engine=Engine("vllm", Path("/opt/vllm/bin/python"), "test"),
        model=facts,
        gpu=gpu,
        sizing=sizing,
        port=8000,
        campaign="h200-test",
        config_ref=config_ref,
        token_range=(1000, 151643, "test"),
    )


def test_init_plans_a_moe_model_for_vllm_and_says_what_the_theory_leaves_out(tmp_path):
    """Refused on main (key 'num_experts'); now the vLLM sizing runs on the MoE theory and the plan's notes
    name what it does not model. No engine needed: the sizing and the text come from the config alone."""
    folder = _config_dir(tmp_path, "Qwen3-30B-A3B", QWEN3_30B_A3B)
    facts = model_from_folder(folder, Engine("vllm", Path("/opt/vllm/bin/python"), "test"))
    gpu = Gpu(GPUS["h200"], "NVIDIA H200", 143771, 1)
    text = _vllm_plan_text(facts, gpu, size_vllm(facts, gpu, None), str(folder / "config.json"))
    plan = parse_plan(text, tmp_path / "moe.toml")
    assert plan.model.config == str(folder / "config.json")
    assert "theory: MoE: 8 of 128 experts" in text and "routing skew" in text


def _finish_gguf(w: gguf.GGUFWriter, path: Path) -> Path:
    """A Q4_K_M file with a 300-token vocabulary and one small tensor: the reader needs nothing more to plan
    it (the weights are not read)."""
    w.add_file_type(gguf.LlamaFileType.MOSTLY_Q4_K_M)
    w.add_token_list([f"t{i}" for i in range(300)])
    w.add_tensor("output.weight", np.zeros((2, 2), np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def _moe_gguf(path: Path, arch: str, experts: tuple[int, int, int]) -> Path:
    """A GGUF carrying the metadata llama.cpp's converter writes for Qwen3-30B-A3B (keys by gguf.Keys), with
    one small tensor: the reader needs nothing more to plan it (the weights are not read)."""
    w = gguf.GGUFWriter(path, arch)
    w.add_context_length(40960)
    w.add_embedding_length(2048)
    w.add_block_count(48)
    w.add_feed_forward_length(6144)
    w.add_head_count(32)
    w.add_head_count_kv(4)
    w.add_key_length(128)
    w.add_vocab_size(151936)
    w.add_expert_count(experts[0])
    w.add_expert_used_count(experts[1])
    w.add_expert_feed_forward_length(experts[2])
    return _finish_gguf(w, path)


def test_init_reads_a_moe_gguf_as_its_bundled_config(tmp_path):
    """llama.cpp users serve MoE models as GGUFs: qwen3moe metadata (expert_count 128, expert_used_count 8,
    expert_feed_forward_length 768) is Qwen3-30B-A3B's bundled config; other expert counts get a config
    written from the metadata, still a mixture of experts."""
    facts = model_from_gguf(_moe_gguf(tmp_path / "Qwen3-30B-A3B-Q4_K_M.gguf", "qwen3moe", (128, 8, 768)))
    assert facts.config_ref == "Qwen3-30B-A3B" and facts.weight_format == "q4_k_m"
    assert th.params_total(facts.cfg) == th.params_total(load_model_config("Qwen3-30B-A3B"))
    other = model_from_gguf(_moe_gguf(tmp_path / "other.gguf", "qwen3moe", (64, 4, 768)))
    assert other.config_ref == "" and other.cfg.moe is not None and other.cfg.moe.num_experts == 64


def _deepseek_gguf(path: Path, absorbed: bool, rope: bool = True) -> Path:
    """DeepSeek-V2-Lite's metadata as llama.cpp's converter writes it for arch deepseek2: before MLA
    absorption (key_length 192 = nope 128 + rope 64, value_length 128, 16 KV heads) or after it (head_count_kv
    1, key_length 576 = kv_lora_rank 512 + rope 64, the per-head sizes under key_length_mla and
    value_length_mla)."""
    w = gguf.GGUFWriter(path, "deepseek2")
    w.add_context_length(163840)
    w.add_embedding_length(2048)
    w.add_block_count(27)
    w.add_feed_forward_length(10944)
    w.add_head_count(16)
    w.add_head_count_kv(1 if absorbed else 16)
    w.add_key_length(576 if absorbed else 192)
    w.add_value_length(512 if absorbed else 128)
    if absorbed:
        w.add_key_length_mla(192)
        w.add_value_length_mla(128)
    w.add_kv_lora_rank(512)
    if rope:
        w.add_rope_dimension_count(64)
    w.add_leading_dense_block_count(1)
    w.add_vocab_size(102400)
    w.add_expert_count(64)
    w.add_expert_used_count(6)
    w.add_expert_shared_count(2)
    w.add_expert_feed_forward_length(1408)
    w.add_expert_gating_func(gguf.ExpertGatingFuncType.SOFTMAX)
    return _finish_gguf(w, path)


@pytest.mark.parametrize("absorbed", [False, True])
def test_init_reads_a_deepseek_gguf_with_its_mla_keys(tmp_path, absorbed):
    """Refused before (the deepseek2 metadata has no head sizes where a dense model keeps them): both ways
    llama.cpp writes MLA read as DeepSeek-V2-Lite's bundled config; without its rope size, one line naming
    the file and the key."""
    facts = model_from_gguf(_deepseek_gguf(tmp_path / "DeepSeek-V2-Lite-Q4_K_M.gguf", absorbed))
    assert facts.config_ref == "DeepSeek-V2-Lite" and facts.weight_format == "q4_k_m"
    bad = tmp_path / "no-rope.gguf"
    with pytest.raises(
        PlanError, match=rf"^{re.escape(str(bad))}: GGUF key 'deepseek2.rope.dimension_count' missing$"
    ):
        model_from_gguf(_deepseek_gguf(bad, absorbed, rope=False))


@pytest.mark.engines
def test_collector_init_command_and_gguf_refusal_for_vllm_only(box, tmp_path):
    p, _ = box
    r = CliRunner().invoke(main, ["init", "--model", str(p.tiny_gguf), "--out", str(tmp_path / "c.toml")])
    assert r.exit_code == 0, r.output
    assert r.output.splitlines()[0] == f"wrote {tmp_path / 'c.toml'}" and "next: collector run" in r.output
    bad = CliRunner().invoke(
        main, ["init", "--model", str(tmp_path / "nothing"), "--out", str(tmp_path / "d.toml")]
    )
    assert bad.exit_code == 1 and "no such model file or folder" in bad.output


def test_vllm_plan_on_an_h100_overloads_its_estimated_pool():
    """The vLLM sizing from the theory alone (no engine needed): the overload point asks for more KV than the
    pool the card holds, every other point fits it, and the loader takes the text."""
    cfg = load_model_config("Qwen2.5-7B-Instruct")
    weights = th.weight_bytes(cfg, "bf16")
    facts = ModelFacts(
        cfg, cfg.name, Path("/models/Qwen2.5-7B-Instruct"), cfg.name, None, "bf16", weights, 32768
    )
    gpu = Gpu(GPUS["h100-sxm"], "NVIDIA H100 80GB HBM3", 81559, 1)
    sizing = size_vllm(facts, gpu, None)
    pool_tokens = th.kv_pool_tokens(th.estimated_kv_pool_bytes(81559 * MIB, weights), 57344)
    c, n, inp, out = sizing.overload
    assert c * (inp + out) > pool_tokens and n == 2 * c
    assert sizing.sweep[-1] * (sizing.input_len + sizing.output_len) <= pool_tokens
    max_seqs = int(dict((a[0], a[1]) for a in sizing.args)["--max-num-seqs"])
    assert max_seqs >= c
    text = _vllm_plan_text(facts, gpu, sizing, cfg.name)
    plan = parse_plan(text, Path("v.toml"))
    assert plan.model.kv_pool_gib is None  # a known card: the theory estimates the pool itself
    assert "--no-enable-prefix-caching" in plan.server.args and plan.model.max_model_len == 8192


def test_vllm_plan_for_an_unknown_card_carries_the_pool_estimate():
    cfg = load_model_config("Qwen3-8B")
    weights = th.weight_bytes(cfg, "bf16")
    facts = ModelFacts(cfg, cfg.name, Path("/m"), cfg.name, None, "bf16", weights, 40960)
    sizing = size_vllm(facts, Gpu(CPU, "NVIDIA H100 NVL", 95830, 1), None)
    assert sizing.kv_pool_gib == pytest.approx((0.9 * 95830 * MIB - weights - 2**30) / 2**30, abs=0.01)


# ------------------------------------------------------------------------------------------- end to end


@pytest.mark.engines
def test_init_then_collector_run_measures_the_plan(box, tmp_path):
    """The plan init writes runs as written: collector run starts the real llama-server and measures every
    point (the tiny model on this machine's CPU; about a minute)."""
    p, _ = box
    out = tmp_path / "e2e.toml"
    init_plan(out, p.tiny_hf_dir, campaign="init-e2e")
    raw = tmp_path / "raw"
    r = CliRunner().invoke(main, ["run", str(out), "--raw", str(raw)])
    runs = list((raw / "init-e2e").iterdir())
    assert len(runs) == 1, r.output
    run = runs[0]
    assert (run / "SEALED").is_file(), r.output
    plan = load_plan(out)
    records = [json.loads(ln) for ln in (run / "requests.jsonl").read_text().splitlines() if ln.strip()]
    assert len(records) == sum(pt.requests for pt in plan.points), r.output
    assert all(rec["http_status"] == 200 and rec["error"] is None for rec in records), r.output
    measured = [rec for rec in records if rec["phase_kind"] != "overload"]
    assert all(rec["usage"]["completion_tokens"] == rec["max_tokens"] for rec in measured)
    events = [json.loads(ln) for ln in (run / "events.jsonl").read_text().splitlines() if ln.strip()]
    end = next(e for e in events if e["kind"] == "run_end")
    assert (end["status"], end["checks_failed"]) == ("complete", []), r.output
    prediction = json.loads((run / "prediction.json").read_text())
    assert prediction["error"] is None and prediction["prediction"]["llama_cpp_slots"] == 8


def test_init_rejects_a_model_file_that_is_not_gguf(tmp_path):
    bad = tmp_path / "model.gguf"
    bad.write_bytes(b"not a gguf")
    with pytest.raises(PlanError, match=r"model\.gguf: not a readable GGUF file \(ValueError"):
        init_plan(tmp_path / "p.toml", bad)
    weights = tmp_path / "model.safetensors"
    weights.write_bytes(b"")
    with pytest.raises(
        PlanError, match="not a .gguf file; --model takes a .gguf or a Hugging Face model folder"
    ):
        init_plan(tmp_path / "p.toml", weights)
    assert not (tmp_path / "p.toml").exists()


@pytest.mark.engines
def test_init_for_the_tiny_folder_with_the_real_vllm_python(tmp_path, monkeypatch):
    """The vLLM branch with the cache's vLLM (CPU) venv: the import check runs for real."""
    p = engine_cache.paths()
    engine_cache.require(p.vllm_python, p.tiny_hf_dir)
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    result = init_plan(tmp_path / "v.toml", p.tiny_hf_dir, vllm_python=p.vllm_python)
    plan = load_plan(result.plan_path)
    assert (
        plan.server.engine == "vllm" and plan.server.python == p.vllm_python
    )  # the venv's own python, not its symlink target
    assert Path(plan.server.model) == p.tiny_hf_dir.resolve()
    assert (plan.model.token_id_low, plan.model.token_id_high) == (32, 127)
    assert plan.model.block_size == 128 and plan.server.env["VLLM_CPU_KVCACHE_SPACE"] == "1"
    blocks = int(plan.server.args[plan.server.args.index("--num-gpu-blocks-override") + 1])
    over = next(pt for pt in plan.points if pt.kind == "overload")
    pool_tokens = (blocks - 1) * 128
    admitted = min(over.concurrency, pool_tokens // over.input_len)  # vLLM admits requests on their prompts
    assert admitted * (over.input_len + over.output_len) > pool_tokens  # ... which then outgrow the pool
    assert "vllm " in result.plan_path.read_text().splitlines()[2]  # the imported version is recorded
