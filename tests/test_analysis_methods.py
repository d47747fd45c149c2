"""The small formulas of the reconciliations, on hand-checkable numbers."""

from __future__ import annotations

import pytest

from analysis.reconcile import concurrency, gates, overload, roofline, ttft
from analysis.reconcile.capacity import kv
from analysis.reconcile.engines import points as engines


def test_overload_formulas():
    # 64 × (6144 + 2048) = 524288 tokens of demand against a 120064-token pool
    assert overload.oversubscription(64, 6144, 2048, 120064) == pytest.approx(524288 / 120064)
    # 38 preemptions over 128 × 2047 intervals
    assert overload.itl_share_touched_pct(38, 128, 2048) == pytest.approx(38 / 262016 * 100)
    # usage 0.9 -> 0.4 of a 1000-token pool, 2 preemptions: 250 tokens each
    assert overload.tokens_freed(0.9, 0.4, 1000, 2) == pytest.approx(250)


def test_roofline_floor_by_hand():
    # 1000 B of weights + 4 requests × 250 B of KV = 2000 B at 1e6 B/s = 2 ms
    assert roofline.roofline_floor_ms(1000, 4, 250, 1e6) == pytest.approx(2.0)
    assert roofline.achievement_pct(2.0, 2.5) == pytest.approx(80)
    assert roofline.mean_context_tokens(1024, 256) == 1152
    # 10 requests asked for 256 tokens, 2500 came back: 10 short of 2560 -> 2.34375 %
    assert engines.shortfall_pct(2500, 10, 256) == pytest.approx(60 / 2560 * 100)


def test_kv_and_ttft_and_rates():
    assert kv.tokens_in_flight(16, 4096, 256) == 16 * 4352
    assert kv.usage_tokens(0.5, 120064) == 60032
    assert ttft.remainder_ms(100, 10, 80) == 10
    assert ttft.share_pct(25, 200) == 12.5
    assert concurrency.achieved_rate(5e12, 2.0) == 2.5e12
    assert concurrency.utilization_pct(82.6e12, 165.2e12) == pytest.approx(50)
    assert concurrency.tokens_from_throughput(61.5, 10) == 615


def test_gate_predicates():
    assert gates.gate_completed(40, 40) and not gates.gate_completed(320, 312)
    assert gates.gate_output_tokens(10240, 40, 256)
    assert not gates.gate_output_tokens(10238, 40, 256)


def test_llamacpp_overload_formulas():
    # a 5,120-token prompt asking for 2,048 more in a 6,144-token slot: 7,168 ÷ 6,144 of the slot ...
    assert overload.slot_oversubscription(5120, 2048, 6144) == pytest.approx(7168 / 6144)
    # ... of which 6,144 − 5,120 = 1,024 can be generated; a request that fits gets what it asked for
    assert overload.slot_output_limit_tokens(2048, 5120, 6144) == 1024
    assert overload.slot_output_limit_tokens(256, 1024, 6144) == 256
    assert overload.slot_output_limit_tokens(16, 7000, 6144) == 0
    # TTFT 9,762.4 ms of which llama.cpp spent 831.0 ms on the prompt: 8,931.4 ms waiting
    assert ttft.llamacpp_wait_ms(9762.4, 831.0) == pytest.approx(8931.4)


def test_byte_ledger_one_row_per_engine_and_format():
    def s(run, engine, fmt, wb):
        return {
            "series": run,
            "run": run,
            "engine": engine,
            "weight_format": fmt,
            "weight_bytes_per_step": wb,
            "kv_bytes_per_token": 57344,
            "format_source": f"{run}/plan.toml",
        }

    series = [
        s("a-f16", "llamacpp", "fp16", 2e9),
        s("b-q4", "llamacpp", "q4_k_m", 5e8),
        s("c-q4-repeat", "llamacpp", "q4_k_m", 5e8),
        s("d-nothing", "vllm", "bf16", None),
    ]
    rows = engines.byte_ledger(series, 1e12)
    assert [(r["engine"], r["weight_format"], r["run"]) for r in rows] == [
        ("llamacpp", "fp16", "a-f16"),
        ("llamacpp", "q4_k_m", "b-q4"),
    ]
    # 2e9 B at 1e12 B/s = 2 ms; 5e8 B = 0.5 ms; no bandwidth (a CPU): no floor
    assert [r["weight_floor_ms"] for r in rows] == [pytest.approx(2.0), pytest.approx(0.5)]
    assert engines.byte_ledger(series[:1], None)[0]["weight_floor_ms"] is None


def test_series_labels_name_the_runs_own_format():
    from analysis.core.charts import engine_format_zh

    assert engine_format_zh("llamacpp", "fp16") == "llama.cpp（F16）"
    assert engine_format_zh("llamacpp", "q4_k_m") == "llama.cpp（Q4_K_M）"
    assert engine_format_zh("vllm", "bf16") == "vLLM（bf16）"
    # a table that does not say: the bare engine, never another campaign's format
    assert engine_format_zh("llamacpp", None) == engine_format_zh("llamacpp", float("nan")) == "llama.cpp"


def test_pairs_put_the_slower_card_first():
    from analysis.core.findings import FindingSet
    from analysis.reconcile.comparison import CampaignSummary, slower_first

    def c(name, bw):
        return CampaignSummary(
            name=name,
            tables={},
            findings=FindingSet(),
            gpu=None,
            gpu_display=None,
            bandwidth_datasheet_bytes_per_s=bw,
            bandwidth_measured_bytes_per_s=None,
        )

    rtx, h200, cpu = c("rtx4090-x", 1008e9), c("h200-x", 4.8e12), c("cpu-x", None)
    assert slower_first(h200, rtx) == slower_first(rtx, h200) == ("rtx4090-x", "h200-x")
    assert slower_first(h200, cpu) == ("cpu-x", "h200-x")  # no datasheet counts as slowest
    assert slower_first(c("b", 1e12), c("a", 1e12)) == ("a", "b")  # ties by name


def test_model_findings_cite_only_real_files(tmp_path):
    from analysis.reconcile.roofline.structure import MODELS_DIR, config_sources

    bundled = MODELS_DIR / "Qwen2.5-7B-Instruct.json"
    assert config_sources(str(bundled), ["r/x.json:model_id"]) == [
        "r/x.json:model_id",
        "analysis/core/models/Qwen2.5-7B-Instruct.json",
    ]
    # a run's own model-config.json (or prediction.json) is the source; no invented bundled path
    own = tmp_path / "model-config.json"
    own.write_text("{}")
    assert config_sources(str(own), ["run/model-config.json"]) == ["run/model-config.json"]
    assert config_sources(str(MODELS_DIR / "llamacpp.json"), ["run/prediction.json:prediction.config"]) == [
        "run/prediction.json:prediction.config"
    ]


def _ceilings_ctx(copy_bytes_per_s: float, matmul_flops_per_s: float, gpu: str | None):
    from analysis.core.gpus import get_gpu
    from analysis.loading.rundocs import Ceilings
    from analysis.reconcile.theoryctx import TheoryCtx

    return TheoryCtx(
        cfg=None,
        gpu=get_gpu(gpu) if gpu else None,
        ceilings=Ceilings(copy_bytes_per_s, matmul_flops_per_s, "NVIDIA H200"),
        ceilings_source=["ceilings/ceilings.json"],
    )


def test_ceilings_against_the_h200_datasheet_by_hand():
    from analysis.reconcile import SectionInput
    from analysis.reconcile.roofline import ceilings

    # the H200 datasheet: 4.8 TB/s, dense bf16 989.4 TFLOP/s
    f = {
        x.key: x
        for x in ceilings.run(SectionInput(None, None, _ceilings_ctx(4.26e12, 6.69e14, "h200"))).findings
    }
    copy = f["ceilings.copy_bytes_per_s"]
    assert copy.value == 4.26e12 and copy.theory == 4.8e12 and copy.unit == "bytes/s"
    # (4.26 − 4.8) ÷ 4.8 = −0.54 ÷ 4.8 = −11.25 %: inside ±15 %, a healthy card's copy
    assert copy.error_pct == pytest.approx(-11.25) and copy.status == "ok"
    assert copy.sources == ("ceilings/ceilings.json:copy_bytes_per_s",)
    mm = f["ceilings.bf16_matmul_flops_per_s"]
    # (669 − 989.4) ÷ 989.4 = −320.4 ÷ 989.4 = −32.38 %: further below the peak than ±25 % → mismatch
    assert (
        mm.theory == 989.4e12 and mm.error_pct == pytest.approx(-32.383, abs=1e-3) and mm.status == "mismatch"
    )
    # a measured copy far below the datasheet (3.0 of 4.8 TB/s: −37.5 %) is a mismatch too, and so is one
    # above it
    assert (
        ceilings.run(SectionInput(None, None, _ceilings_ctx(3.0e12, 8e14, "h200"))).findings[0].status
        == "mismatch"
    )
    assert (
        ceilings.run(SectionInput(None, None, _ceilings_ctx(5.6e12, 8e14, "h200"))).findings[0].status
        == "mismatch"
    )  # +16.7 %


def test_ceilings_without_datasheet_or_without_a_file():
    from analysis.reconcile import SectionInput
    from analysis.reconcile.roofline import ceilings

    f = ceilings.run(SectionInput(None, None, _ceilings_ctx(4.26e12, 6.69e14, "cpu"))).findings
    assert [x.key for x in f] == ["ceilings.copy_bytes_per_s", "ceilings.bf16_matmul_flops_per_s"]
    assert all(x.theory is None and x.status == "ok" and "no datasheet" in (x.detail or "") for x in f)
    from analysis.reconcile.theoryctx import TheoryCtx

    assert ceilings.run(SectionInput(None, None, TheoryCtx(cfg=None, gpu=None))).findings == []
