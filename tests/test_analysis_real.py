"""The analysis on our own committed campaigns (raw/): the CPU smoke campaign and the H200 campaign
(llama.cpp Q4_K_M complete; F16 sealed `failed` — its overload point was cut by the device deadline), with the
RTX 4090 reference imported beside them when it is available.

Every expected number is computed here from the raw files themselves or by hand (the model's shape, the plan's
flags), never taken from the analysis' own output:
- Qwen2.5-7B-Instruct: 7,615,616,512 parameters, embedding 152,064 × 3,584 = 544,997,376 (gathered, not read
  whole per step); KV bytes per token (f16) = 2 × 28 layers × 4 KV heads × 128 × 2 B = 57,344.
- The H200 plans: -np 256 -c 1,572,864 (256 × 6,144), kv_pool_gib 84 → 84 × 2^30 ÷ 57,344 = 1,572,864 tokens.
- The overload point asks 5,120 prompt + 2,048 output tokens of a 6,144-token slot: 1,024 can be generated.
"""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import numpy as np
import pytest

from analysis.pipeline.analyze import analyze
from tests.by_hand import itls_ms
from tests.seed import SEED

REPO = Path(__file__).resolve().parents[1]
RAW = REPO / "raw"
REF = "rtx4090-qwen2.5-7b"
H200 = "h200-qwen2.5-7b-random"
CPU = "cpu-tiny-qwen2"

PARAMS = 7_615_616_512
EMBED = 152_064 * 3_584
KV_BYTES_PER_TOKEN = 2 * 28 * 4 * 128 * 2
W_F16_READ = (PARAMS - EMBED) * 2
SLOTS, N_CTX_SLOT = 256, 6144
H200_BW = 4.8e12
IN_LEN, OUT_LEN = 1024, 256  # the sweep protocol
OV_IN, OV_OUT = 5120, 2048  # the overload point

pytestmark = pytest.mark.skipif(
    not (RAW / H200).is_dir() or not (RAW / CPU).is_dir(),
    reason="our own campaigns are not committed in raw/",
)


@pytest.fixture(scope="module")
def out(tmp_path_factory, reference_raw) -> Path:
    roots = [RAW, *([reference_raw] if reference_raw else [])]
    res = tmp_path_factory.mktemp("res")
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(REPO)
        lines = list(analyze(roots, res, None))
    assert any(line.startswith(H200) for line in lines) and any(line.startswith(CPU) for line in lines)
    return res


def _findings(out: Path, campaign: str) -> dict:
    return json.loads((out / campaign / "findings.json").read_text())


def _rows(out: Path, campaign: str, table: str) -> list[dict]:
    with open(out / campaign / "tables" / f"{table}.csv", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def _requests(run: str, campaign: str = H200) -> list[dict]:
    return [
        json.loads(line)
        for line in (RAW / campaign / run / "requests.jsonl").read_text().splitlines()
        if line
    ]


def _point_ok(run: str, point: str) -> list[dict]:
    return [r for r in _requests(run) if r["point"] == point and r["error"] is None]


def _p50_itl_ms(run: str, point: str) -> float:
    return float(np.percentile([g for r in _point_ok(run, point) for g in itls_ms(r)], 50))


# --- the raw data itself: internally consistent -------------------------------------------------------------


@pytest.mark.parametrize(
    "campaign,run", [(H200, "llamacpp-q4km"), (H200, "llamacpp-f16"), (CPU, "llamacpp"), (CPU, "vllm")]
)
def test_every_completed_request_got_what_it_asked_for_except_the_overload(campaign, run):
    reqs = _requests(run, campaign)
    assert reqs
    for r in reqs:
        if r["error"] is not None:
            continue
        got = r["usage"]["completion_tokens"]
        assert sum(r["chunk_tokens"]) == got, r["request_id"]  # the stream and the server agree
        assert r["usage"]["prompt_tokens"] == r["input_len"], r["request_id"]
        if r["phase_kind"] == "overload" and run.startswith("llamacpp"):
            # the slot holds 6,144 tokens: prompt 5,120 + at most 1,024 generated, then finish_reason length
            assert (
                got == min(r["max_tokens"], N_CTX_SLOT - r["input_len"]) == 1024
                and r["finish_reason"] == "length"
            )
        else:
            assert got == r["max_tokens"], r["request_id"]


def test_only_the_f16_overload_point_was_cut():
    reqs = _requests("llamacpp-f16")
    bad = {r["point"] for r in reqs if r["error"] is not None}
    assert bad == {"p15-overload-c032-i5120-o2048"}
    cut = [r for r in reqs if r["point"] in bad]
    assert len(cut) == 32 and all(r["error"]["kind"] == "aborted" for r in cut)
    # they had streamed most of what the slot allows, not all of it
    assert max(sum(r["chunk_tokens"]) for r in cut) < N_CTX_SLOT - OV_IN
    points = {r["point"] for r in reqs}
    assert len(points) == 16 and len(points - bad) == 15


# --- capacity: exact, from the plan's flags and the model's shape ------------------------------------------


@pytest.mark.parametrize("run", ["llamacpp_q4km", "llamacpp_f16"])
def test_h200_capacity_is_exact(out, run):
    f = _findings(out, H200)
    pre = f"runs.{run}."
    assert f[pre + "n_slots"]["value"] == SLOTS and f[pre + "n_ctx_slot"]["value"] == N_CTX_SLOT
    cap = f[pre + "capacity_tokens"]
    assert (
        cap["value"] == SLOTS * N_CTX_SLOT == 1_572_864
        and cap["theory"] == 1_572_864
        and cap["status"] == "ok"
    )
    # the pool the plan gave the theory: 84 GiB of 57,344-byte tokens
    pool = f[pre + "prediction.kv_pool_tokens"]
    assert pool["theory"] == 84 * 2**30 / KV_BYTES_PER_TOKEN == 1_572_864 and pool["error_pct"] == 0
    kv = f[pre + "kv_cache_mib"]
    assert kv["value"] == kv["theory"] == 1_572_864 * KV_BYTES_PER_TOKEN / 2**20 == 84 * 1024
    assert f[pre + "prediction.max_concurrency"]["value"] == SLOTS


def test_cpu_capacity_is_exact(out):
    f = _findings(out, CPU)
    assert f["runs.llamacpp.capacity_tokens"]["value"] == f["runs.llamacpp.capacity_tokens"]["theory"]
    g = f["runs.vllm.kv_pool_tokens"]
    assert g["status"] == "ok" and g["value"] == g["blocks"] * g["block_size"] == g["theory"]


# --- single stream, floors, quantization
# ---------------------------------------------------------------------


def _floor_ms(weight_bytes: float, bw: float) -> float:
    """Decode floor at concurrency 1: (weights + mean context (1,024 + 256 ÷ 2) × KV bytes) ÷ bandwidth,
    ms."""
    return (weight_bytes + (IN_LEN + OUT_LEN / 2) * KV_BYTES_PER_TOKEN) / bw * 1000


def test_single_stream_itl_is_the_median_of_the_raw_gaps(out):
    f = _findings(out, H200)
    for run, slug in (("llamacpp-q4km", "llamacpp_q4km"), ("llamacpp-f16", "llamacpp_f16")):
        reqs = [r for r in _requests(run) if r["point"] == "p01-sweep-c001-i1024-o256"]
        gaps = [g for r in reqs for g in itls_ms(r)]
        # 256 one-token chunks and an empty closing chunk: 255 intervals per request
        assert all(r["chunk_tokens"] == [1] * OUT_LEN + [0] for r in reqs)
        assert len(gaps) == len(reqs) * (OUT_LEN - 1)
        p50 = float(np.percentile(gaps, 50))
        assert f[f"runs.{slug}.single_stream_p50_itl_ms"]["value"] == pytest.approx(p50, rel=1e-9)


def test_f16_floors_and_achievement_by_hand(out):
    f = _findings(out, H200)
    ceil = json.loads((RAW / H200 / "ceilings" / "ceilings.json").read_text())
    copy_bw = ceil["copy_bytes_per_s"]
    # the measured ceiling is what a copy moves (read + written) per second: 2 × 4 GiB per call
    assert copy_bw == pytest.approx(2 * 4 * 2**30 / float(np.median(ceil["copy_seconds_per_call"])), rel=1e-3)
    s = f["runs.llamacpp_f16.single_stream_p50_itl_ms"]
    assert s["floor_datasheet_ms"] == pytest.approx(_floor_ms(W_F16_READ, H200_BW), rel=1e-9)
    assert s["floor_measured_ms"] == pytest.approx(_floor_ms(W_F16_READ, copy_bw), rel=1e-9)
    a = f["runs.llamacpp_f16.roofline_achievement_pct"]
    assert a["value"] == pytest.approx(_floor_ms(W_F16_READ, H200_BW) / s["value"] * 100, rel=1e-9)
    # a step never beats its floor
    assert s["value"] > s["floor_measured_ms"] > s["floor_datasheet_ms"]


def test_measured_ceilings_against_the_datasheet(out):
    f = _findings(out, H200)
    ceil = json.loads((RAW / H200 / "ceilings" / "ceilings.json").read_text())
    copy, mm = f["ceilings.copy_bytes_per_s"], f["ceilings.bf16_matmul_flops_per_s"]
    assert copy["value"] == pytest.approx(ceil["copy_bytes_per_s"], rel=1e-9)
    assert copy["sources"] == ["ceilings/ceilings.json:copy_bytes_per_s"]
    # 4.256 TB/s of the datasheet's 4.8 TB/s: (4.256 − 4.8) ÷ 4.8 = −11.3 %, inside the ±15 % a healthy copy
    # lands in
    assert copy["theory"] == H200_BW and round(copy["error_pct"], 1) == -11.3 and copy["status"] == "ok"
    # 669 TFLOP/s of the dense bf16 peak 989.4: (669.35 − 989.4) ÷ 989.4 = −32.3 %, beyond ±25 %: a mismatch
    assert (
        mm["value"] == pytest.approx(ceil["bf16_matmul_flops_per_s"], rel=1e-9) and mm["theory"] == 989.4e12
    )
    assert round(mm["error_pct"], 1) == -32.3 and mm["status"] == "mismatch"
    assert not any(
        k.startswith("ceilings.") for k in _findings(out, CPU)
    )  # no ceilings.json, no ceiling findings


def test_quantization_ratio_against_the_byte_ledger(out):
    f = _findings(out, H200)
    q4_pred = json.loads((RAW / H200 / "llamacpp-q4km" / "prediction.json").read_text())["prediction"]
    w_q4 = q4_pred["weight_bytes_read_per_step"]  # written by `collector plan` before the run
    assert w_q4 / 2**30 == pytest.approx(4.07, abs=0.01)  # 4.37 GB
    g = f["quantization.llamacpp.fp16_over_q4_k_m.step_ratio"]
    f16 = _p50_itl_ms("llamacpp-f16", "p01-sweep-c001-i1024-o256")
    q4 = _p50_itl_ms("llamacpp-q4km", "p01-sweep-c001-i1024-o256")
    assert g["value"] == pytest.approx(f16 / q4, rel=1e-9)
    kv = (IN_LEN + OUT_LEN / 2) * KV_BYTES_PER_TOKEN
    assert g["theory"] == pytest.approx((W_F16_READ + kv) / (w_q4 + kv), rel=1e-9)
    assert g["weight_bytes_ratio"] == pytest.approx(W_F16_READ / w_q4, rel=1e-9)
    # the real H200 numbers do not reconcile (Q4_K_M reaches a far smaller share of its roofline): shown as
    # such
    assert g["status"] == "mismatch" and g["value"] < g["theory"]


def test_knee_and_peak_from_the_request_records(out):
    f = _findings(out, H200)
    for run, slug in (("llamacpp-q4km", "llamacpp_q4km"), ("llamacpp-f16", "llamacpp_f16")):
        points: dict[str, list[dict]] = {}
        for r in _requests(run):
            if r["phase_kind"] == "concurrency":
                points.setdefault(r["point"], []).append(r)
        data = []
        for recs in points.values():
            ok = [r for r in recs if r["error"] is None]
            gaps = [g for r in ok for g in itls_ms(r)]
            # output throughput: generated tokens of the completed requests ÷ (last end − first send)
            duration_s = (max(r["end_mono_ns"] for r in recs) - min(r["send_mono_ns"] for r in recs)) / 1e9
            tokens = sum(r["usage"]["completion_tokens"] for r in ok)
            data.append(
                {
                    "c": recs[0]["concurrency"],
                    "p50": float(np.percentile(gaps, 50)),
                    "p99": float(np.percentile(gaps, 99)),
                    "tok_s": tokens / duration_s,
                }
            )
        knee = min(d["c"] for d in data if d["p99"] > 2 * d["p50"])
        assert f[f"runs.{slug}.knee_concurrency"]["value"] == knee
        best = max(data, key=lambda d: d["tok_s"])
        peak = f[f"runs.{slug}.peak_output_throughput_tokens_per_s"]
        assert peak["value"] == pytest.approx(best["tok_s"]) and peak["concurrency"] == best["c"]


# --- overload: llama.cpp truncates, and the cut point says it was cut ------------------------------------


def test_llamacpp_overload_reports_truncation_not_preemption(out):
    f = _findings(out, H200)
    assert f["overload.all_requests_completed"]["value"] is True
    assert (
        f["overload.all_requests_completed"]["run"] == "llamacpp-q4km"
    )  # the complete point is the headline
    t = f["overload.output_tokens_per_request"]
    assert t["value"] == t["theory"] == N_CTX_SLOT - OV_IN and t["status"] == "ok"
    assert f["overload.truncated_requests"]["value"] == 32
    assert f["overload.oversubscription"]["value"] == pytest.approx((OV_IN + OV_OUT) / N_CTX_SLOT)
    assert f["overload.concurrency_over_slots"]["value"] == pytest.approx(32 / SLOTS)
    assert f["overload.output_tokens_complete"]["status"] == "mismatch"  # by design: truncated at the slot
    for k in (
        "preemptions",
        "kv_usage_at_preemption_pct",
        "tokens_freed_per_preemption",
        "itl_share_touched_by_preemptions_pct",
    ):
        assert (
            f[f"overload.{k}"]["status"] == "n/a" and f[f"overload.{k}"]["reason"] == "no_preemption_counter"
        )
    # queueing in TTFT: TTFT − llama.cpp's own prompt time, by hand from the raw requests
    reqs = [r for r in _requests("llamacpp-q4km") if r["phase_kind"] == "overload"]
    ttft = [
        (
            next(ns for ns, n in zip(r["chunk_mono_ns"], r["chunk_tokens"], strict=True) if n > 0)
            - r["send_mono_ns"]
        )
        / 1e6
        for r in reqs
    ]
    wait = [t - r["engine_timings"]["prompt_ms"] for t, r in zip(ttft, reqs, strict=True)]
    q = f["overload.ttft_queue_share_pct"]
    assert q["value"] == pytest.approx(sum(wait) / sum(ttft) * 100, rel=1e-9)


def test_the_cut_f16_overload_point_is_shown_as_cut(out):
    f = _findings(out, H200)
    pre = "runs.llamacpp_f16.overload."
    done = f[pre + "all_requests_completed"]
    assert done["value"] is False and done["status"] == "mismatch" and "SIGTERM" in done["aborted"]
    assert f[pre + "completed_requests"]["value"] == 0 and f[pre + "failed_requests"]["value"] == 32
    t = f[pre + "output_tokens_per_request"]
    assert t["status"] == "n/a" and t["reason"] == "point_cut" and t["slot_limit_tokens"] == 1024
    streamed = [sum(r["chunk_tokens"]) for r in _requests("llamacpp-f16") if r["phase_kind"] == "overload"]
    assert (t["streamed_tokens_min"], t["streamed_tokens_max"]) == (min(streamed), max(streamed))
    row = next(
        r for r in _rows(out, H200, "points") if r["key"] == "llamacpp-f16/p15-overload-c032-i5120-o2048"
    )
    # its summary's zero latencies are not measurements: empty in the table, and the point is gated out
    assert row["p50_itl_ms"] == "" and row["p99_ttft_ms"] == "" and row["gate_ok"] == "False"
    assert float(row["input_len_tokens"]) == OV_IN
    assert f["gates.points_failed"]["value"] == ["llamacpp-f16/p15-overload-c032-i5120-o2048"]
    # the complete points of the failed run carry its conclusions
    assert f["runs.llamacpp_f16.single_stream_p50_itl_ms"]["status"] == "ok"


# --- tables, figures, citations
# ------------------------------------------------------------------------------


def test_byte_ledger_has_one_row_per_series(out):
    rows = _rows(out, H200, "engines_byte_ledger")
    assert sorted((r["engine"], r["weight_format"]) for r in rows) == [
        ("llamacpp", "fp16"),
        ("llamacpp", "q4_k_m"),
    ]
    f16 = next(r for r in rows if r["weight_format"] == "fp16")
    assert float(f16["weight_bytes_per_step"]) == pytest.approx(W_F16_READ, rel=1e-9)


def test_legends_name_each_runs_own_weight_format(out):
    h200 = (out / H200 / "figures" / "engines_throughput.vl.json").read_text()
    assert "llama.cpp（F16）" in h200 and "llama.cpp（Q4_K_M）" in h200
    for name in ("engines_throughput", "concurrency_throughput"):
        cpu = (out / CPU / "figures" / f"{name}.vl.json").read_text()
        assert "Q4_K_M" not in cpu and "llama.cpp（F16）" in cpu and "vLLM（bf16）" in cpu, name
    # a CPU has no datasheet floor: the roofline figure is not drawn, and the index says why
    assert not (out / CPU / "figures" / "engines_itl_roofline.vl.json").exists()
    assert "engines_itl_roofline" in json.loads((out / CPU / "index.json").read_text())["figures_missing"]


def _legend(out: Path, campaign: str, figure: str, channel: str) -> tuple[str | None, set[str], dict]:
    """A figure's legend for one channel: its title, the values its data gives it, and its scale."""
    spec = json.loads((out / campaign / "figures" / f"{figure}.vl.json").read_text())

    def views(node: dict):  # the spec itself, its facet/concat/layer children, depth first
        yield node
        for key in ("spec", "layer", "hconcat", "vconcat", "concat"):
            kids = node.get(key) or []
            for kid in [kids] if isinstance(kids, dict) else kids:
                yield from views(kid)

    enc = next(v["encoding"][channel] for v in views(spec) if channel in v.get("encoding", {}))
    values = {r[enc["field"]] for rows in spec["datasets"].values() for r in rows if enc["field"] in r}
    return enc.get("title"), values, enc.get("scale", {})


def test_legends_one_label_per_series(out):
    series = {"llama.cpp（F16）", "llama.cpp（Q4_K_M）"}
    # a format's measured line and its floor: one colour per series, the floor told apart by its dash
    for fig in ("engines_itl_roofline", "roofline_itl_floor"):
        title, colours, _ = _legend(out, H200, fig, "color")
        assert title == "系列" and colours == series, fig  # no run folder name ("llamacpp-f16 · …")
        _, dashes, scale = _legend(out, H200, fig, "strokeDash")
        assert scale["domain"][0] == "实测 p50 ITL" and scale["range"][0] == [1, 0], fig  # measured: solid
        assert set(scale["domain"]) == dashes and all(r != [1, 0] for r in scale["range"][1:]), (
            fig
        )  # floors: dashed
    title, colours, _ = _legend(out, H200, "engines_throughput", "color")
    assert title == "系列" and colours == series
    _, lines, _ = _legend(out, H200, "overload_timeline", "color")
    assert lines and all(x.split(" · ")[0] in series for x in lines), lines


def test_model_findings_cite_files_that_exist(out):
    for campaign in (H200, CPU):
        f = _findings(out, campaign)
        for k, v in f.items():
            if not k.startswith("model."):
                continue
            assert v["sources"], k
            for src in v["sources"]:
                path = src.split(":", 1)[0]
                assert (RAW / campaign / path).is_file() or (REPO / path).is_file(), (k, src)


@pytest.mark.skipif(not SEED.is_dir(), reason="reference campaign not available")
def test_comparison_pair_reads_slower_card_first(out):
    comp = json.loads((out / "_comparison" / "comparison.json").read_text())
    pairs = [k for k in comp if "__vs__" in k]
    assert pairs == [
        "comparison.rtx4090_qwen2_5_7b__vs__h200_qwen2_5_7b_random.llamacpp_q4_k_m.single_stream_speedup"
    ]
    g = comp[pairs[0]]
    ref_ms = json.loads((SEED / "Round2/05-perf-test/llamacpp_c001.json").read_text())["p50_itl_ms"]
    h200_ms = _p50_itl_ms("llamacpp-q4km", "p01-sweep-c001-i1024-o256")
    assert g["value"] == pytest.approx(ref_ms / h200_ms, rel=1e-9) and g["value"] > 1
    assert g["faster"] == H200
    assert math.isclose(g["value"], 1.374, abs_tol=0.001)


def test_analysis_is_deterministic(out, tmp_path):
    roots = [RAW]
    if SEED.is_dir():
        from collector.protocol.importer import import_results

        roots.append(tmp_path / "ref")
        list(import_results(SEED, REF, roots[-1]))
    again = tmp_path / "again"
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(REPO)
        list(analyze(roots, again, None))
    files = sorted(p.relative_to(out) for p in out.rglob("*") if p.is_file())
    assert files == sorted(p.relative_to(again) for p in again.rglob("*") if p.is_file())
    for rel in files:
        assert (out / rel).read_bytes() == (again / rel).read_bytes(), rel
