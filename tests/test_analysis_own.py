"""The analysis of our own collector campaigns: a synthetic H200-like llama.cpp campaign built with the raw
store in a temporary folder (tests/synthetic_gpu.py: two weight formats, measured ceilings, exact timings, so
every number is checkable by hand), the comparison against the real reference campaign, and a real CPU
campaign.

Hand numbers: Qwen2.5-7B-Instruct has 7,615,616,512 parameters, an embedding table of 152,064 × 3,584 =
544,997,376, and 2 × 28 × 4 × 128 × 2 = 57,344 KV bytes per token (f16).
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from analysis.core import theory
from analysis.core.model_config import load_model_config
from analysis.pipeline.analyze import analyze
from tests.seed import SEED
from tests.synthetic_gpu import (
    CAMPAIGN,
    COPY_BW,
    CTX,
    H200_BW,
    IN_LEN,
    KV_BYTES_PER_TOKEN,
    OUT_LEN,
    PREFILL_S,
    SLOTS,
    W_F16_READ,
    itl_ms,
    write_campaign,
)

REPO = Path(__file__).resolve().parents[1]
REF = "rtx4090-qwen2.5-7b"


@pytest.fixture(scope="module")
def synth_raw(tmp_path_factory) -> Path:
    raw = tmp_path_factory.mktemp("raw")
    write_campaign(raw)
    return raw


@pytest.fixture(scope="module")
def synth(synth_raw, tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("out")
    lines = list(analyze([synth_raw], out, [CAMPAIGN]))
    assert len(lines) == 1
    return json.loads((out / CAMPAIGN / "findings.json").read_text())


def _floor_ms(weight_bytes: float, context_tokens: float, bw: float) -> float:
    return (weight_bytes + context_tokens * KV_BYTES_PER_TOKEN) / bw * 1000


def test_capacity_reconciles_exactly(synth):
    f = synth["runs.llamacpp_f16.n_ctx_slot"]
    assert f["value"] == 4096 and f["theory"] == CTX / SLOTS and f["status"] == "ok"
    assert synth["runs.llamacpp_f16.n_slots"]["value"] == SLOTS
    assert synth["runs.llamacpp_f16.capacity_tokens"]["value"] == CTX
    # 32,768 cells × 57,344 B = 1,792 MiB
    f = synth["runs.llamacpp_q4km.kv_cache_mib"]
    assert f["value"] == 1792.0 and f["theory"] == pytest.approx(1792.0) and f["status"] == "ok"


def test_roofline_against_datasheet_and_measured_ceiling(synth):
    f = synth["runs.llamacpp_f16.single_stream_p50_itl_ms"]
    assert f["value"] == pytest.approx(10.0)
    ctx = IN_LEN + OUT_LEN / 2  # mean cached context while decoding
    floor_ds = _floor_ms(W_F16_READ, ctx, H200_BW)
    floor_ms = _floor_ms(W_F16_READ, ctx, COPY_BW)
    a = synth["runs.llamacpp_f16.roofline_achievement_pct"]
    assert a["floor_ms"] == pytest.approx(floor_ds) and a["value"] == pytest.approx(floor_ds / 10.0 * 100)
    m = synth["runs.llamacpp_f16.roofline_achievement_measured_ceiling_pct"]
    assert m["floor_ms"] == pytest.approx(floor_ms) and m["value"] == pytest.approx(floor_ms / 10.0 * 100)
    assert m["value"] > a["value"]  # a measured ceiling below the datasheet raises the floor, and the share


def test_quantization_speedup_against_byte_ledger(synth):
    f = synth["quantization.llamacpp.fp16_over_q4_k_m.step_ratio"]
    assert f["value"] == pytest.approx(10.0 / 4.0)
    cfg = load_model_config("Qwen2.5-7B-Instruct")
    w_q4 = theory.weight_bytes_read_per_decode_step(cfg, "q4_k_m")
    kv = (IN_LEN + OUT_LEN / 2) * KV_BYTES_PER_TOKEN
    assert f["theory"] == pytest.approx((W_F16_READ + kv) / (w_q4 + kv))
    assert f["weight_bytes_ratio"] == pytest.approx(W_F16_READ / w_q4)
    # throughput ratio at c=2: same token counts, steps 4.4 ms vs 11 ms (plus the same 50 ms TTFT)
    assert f["throughput_ratio_by_concurrency"]["2"] > 2.0


def test_knee_and_prediction(synth):
    assert synth["runs.llamacpp_f16.knee_concurrency"]["value"] == 4  # 5 of 31 gaps tripled at c=4
    p = synth["runs.llamacpp_f16.prediction.decode_step_ms"]
    assert p["value"] == pytest.approx(10.0)
    # recorded before measuring: floor at 1,024 tokens of context, datasheet bandwidth
    assert p["predicted_floor_ms"] == pytest.approx(_floor_ms(W_F16_READ, 1024, H200_BW))
    k = synth["runs.llamacpp_f16.prediction.kv_pool_tokens"]
    assert k["value"] == CTX and k["theory"] == CTX and k["status"] == "ok"
    c = synth["runs.llamacpp_f16.prediction.max_concurrency"]
    assert c["value"] == SLOTS and c["theory"] == SLOTS
    assert synth["runs.llamacpp_f16.prediction.decode_step_above_floor"]["value"] is True


def test_gates_from_collector_checks(synth):
    assert synth["gates.points_failed"]["value"] == []
    assert synth["gates.points_flagged"]["value"] == []
    assert synth["windows.client_clock_offset_s"]["value"] == 0


def test_server_token_time_and_ttft_anatomy(synth_raw, tmp_path):
    list(analyze([synth_raw], tmp_path, [CAMPAIGN]))
    import csv

    rows = list(csv.DictReader(open(tmp_path / CAMPAIGN / "tables" / "roofline_points.csv")))
    for r in rows:
        fmt = "fp16" if r["run"] == "llamacpp-f16" else "q4_k_m"
        assert float(r["server_token_ms"]) == pytest.approx(itl_ms(fmt, int(r["concurrency"])))
    tt = list(csv.DictReader(open(tmp_path / CAMPAIGN / "tables" / "ttft_anatomy.csv")))
    pre = [r for r in tt if r["part"] == "prefill"]
    assert pre and all(float(r["ms"]) == pytest.approx(PREFILL_S * 1000) for r in pre)


@pytest.mark.skipif(not SEED.is_dir(), reason="reference campaign not available")
def test_comparison_with_reference(synth_raw, tmp_path):
    from collector.protocol.importer import import_results

    raw = tmp_path / "ref"
    list(import_results(SEED, REF, raw))
    out = tmp_path / "out"
    lines = list(analyze([synth_raw, raw], out, None))
    assert any("comparison of 2 campaigns" in line for line in lines)
    comp = json.loads((out / "_comparison" / "comparison.json").read_text())
    # the slower card first (RTX 4090: 1,008 GB/s < H200: 4.8 TB/s): the speed-up reads "H200 ÷ 4090"
    key = "comparison.rtx4090_qwen2_5_7b__vs__h200_synth.llamacpp_q4_k_m.single_stream_speedup"
    ref_c1 = json.loads((SEED / "Round2/05-perf-test/llamacpp_c001.json").read_text())
    assert comp[key]["value"] == pytest.approx(ref_c1["p50_itl_ms"] / 4.0)
    assert comp[key]["faster"] == CAMPAIGN
    cfg = load_model_config("Qwen2.5-7B-Instruct")
    w_q4 = theory.weight_bytes_read_per_decode_step(cfg, "q4_k_m")
    ctx_ref = 1024 + ref_c1["total_output_tokens"] / ref_c1["completed"] / 2
    floor_h200 = _floor_ms(w_q4, IN_LEN + OUT_LEN / 2, H200_BW)
    floor_4090 = _floor_ms(w_q4, ctx_ref, 1008e9)
    assert comp[key]["theory"] == pytest.approx(floor_4090 / floor_h200)
    assert comp[key]["theory_measured_ceilings"] is None  # the reference has no measured ceilings
    # the reference measured one format per engine: its quantization ratio is across engines (vLLM bf16 ÷
    # llama.cpp Q4_K_M at one stream, issue #19 item 8), against the byte ratio as theory
    cross = comp["comparison.rtx4090_qwen2_5_7b.quantization.step_ratio"]
    vllm_c1 = json.loads((SEED / "Round2/01-02-perf-test/vllm_c001.json").read_text())
    assert cross["cross_engine"] is True
    assert cross["value"] == pytest.approx(vllm_c1["p50_itl_ms"] / ref_c1["p50_itl_ms"])
    assert cross["theory"] > cross["value"]  # the measured gap is smaller than the byte gap
    assert comp["comparison.h200_synth.quantization.llamacpp.fp16_over_q4_k_m.step_ratio"][
        "value"
    ] == pytest.approx(2.5)
    assert comp["comparison.rtx4090_qwen2_5_7b.vllm_bf16.capacity_tokens"]["value"] == 120064
    assert comp["comparison.h200_synth.llamacpp_q4_k_m.capacity_tokens"]["theory"] == CTX
    for name in ("comparison_itl_floor", "comparison_achievement", "comparison_throughput"):
        spec = (out / "_comparison" / "figures" / f"{name}.vl.json").read_text()
        assert any("\u4e00" <= ch <= "\u9fff" for ch in spec)
    # byte-identical on a second run
    again = tmp_path / "again"
    list(analyze([synth_raw, raw], again, None))
    files = sorted(p.relative_to(out) for p in out.rglob("*") if p.is_file())
    assert files == sorted(p.relative_to(again) for p in again.rglob("*") if p.is_file())
    for rel in files:
        assert (out / rel).read_bytes() == (again / rel).read_bytes(), rel


def test_one_campaign_writes_no_comparison(synth_raw, tmp_path):
    list(analyze([synth_raw], tmp_path, None))
    assert not (tmp_path / "_comparison").exists()


# --- a real CPU campaign: the committed one, else one made now with the real llama-server ----------------

CPU_CAMPAIGN = "cpu-tiny-qwen2"
LLAMA_SERVER = REPO / ".engines/llama.cpp/bin/llama-server"


@pytest.fixture(scope="module")
def cpu_raw(tmp_path_factory) -> Path:
    committed = REPO / "raw"
    if (committed / CPU_CAMPAIGN).is_dir():
        return committed
    if not LLAMA_SERVER.exists() or not (REPO / ".engines/models/tiny-qwen2-f16.gguf").exists():
        pytest.skip("no committed CPU campaign and no llama-server to make one")
    raw = tmp_path_factory.mktemp("cpu")
    cli = Path(sys.executable).with_name("collector")
    subprocess.run(
        [str(cli), "run", "plans/cpu-tiny-llamacpp.toml", "--raw", str(raw)],
        cwd=REPO,
        check=False,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        timeout=600,
    )
    if not (raw / CPU_CAMPAIGN).is_dir():
        pytest.skip("collector run made no CPU campaign")
    return raw


def test_cpu_campaign_capacity_is_exact_and_roofline_says_why(cpu_raw, tmp_path, monkeypatch):
    monkeypatch.chdir(REPO)  # the plan names the model config relative to the repository root
    list(analyze([cpu_raw], tmp_path, [CPU_CAMPAIGN]))
    f = json.loads((tmp_path / CPU_CAMPAIGN / "findings.json").read_text())
    # protocol runs only: experiment arms (exp-*) are read by the experiments section alone
    runs = {k.split(".")[1] for k in f if k.startswith("runs.") and not k.split(".")[1].startswith("exp_")}
    assert runs
    cfg_path = REPO / ".engines/models/tiny-qwen2.config.json"
    cfg = json.loads(cfg_path.read_text()) if cfg_path.exists() else None
    for run in runs:
        pre = f"runs.{run}."
        if pre + "n_ctx_slot" in f:  # llama.cpp: n_ctx_slot = -c / -np, exactly
            g = f[pre + "n_ctx_slot"]
            assert g["status"] == "ok" and g["value"] == g["ctx_total"] // g["slots"]
            if cfg is not None:
                kvb = (
                    2
                    * cfg["num_hidden_layers"]
                    * cfg["num_key_value_heads"]
                    * (cfg["hidden_size"] // cfg["num_attention_heads"])
                    * 2
                )
                assert f[pre + "kv_cache_mib"]["theory"] == pytest.approx(g["ctx_total"] * kvb / 2**20)
                assert f[pre + "kv_cache_mib"]["status"] == "ok"
        if pre + "kv_pool_tokens" in f:  # vLLM CPU: the logged tokens, exactly
            g = f[pre + "kv_pool_tokens"]
            assert g["status"] == "ok" and g["error_pct"] == 0
            assert g["value"] == g["blocks"] * g["block_size"]
        if not any(k.startswith(pre + "concurrency.") for k in f):
            continue  # an open-loop run (rate phases only) has no single-stream point to hold to a roofline
        ach = f[pre + "roofline_achievement_pct"]
        assert ach["status"] == "n/a" and ach["reason"] == "no_gpu_datasheet" and "cpu" in ach["detail"]


def test_no_qwen_assumption_for_the_tiny_model(cpu_raw, tmp_path, monkeypatch):
    monkeypatch.chdir(REPO)
    list(analyze([cpu_raw], tmp_path, [CPU_CAMPAIGN]))
    f = json.loads((tmp_path / CPU_CAMPAIGN / "findings.json").read_text())
    if f["model.params_total"]["status"] == "n/a":
        pytest.skip("the CPU campaign's model config is not readable here")
    assert f["model.params_total"]["value"] < 100_000_000  # a tiny model, not Qwen2.5-7B's 7.6 B
    assert not math.isclose(f["model.kv_bytes_per_token"]["value"], KV_BYTES_PER_TOKEN)
