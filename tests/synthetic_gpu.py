"""A synthetic H200-like llama.cpp campaign written with the raw store: two weight formats (f16, Q4_K_M), a
measured copy ceiling, exact timings, so every number the analysis derives from it is checkable by hand.
tests/test_analysis_own.py checks those numbers; the site tests (tests/browser.py) render it so the
cross-campaign pages exist before real H200 data does. A plain helper module, not a test module.

Hand numbers: Qwen2.5-7B-Instruct has 7,615,616,512 parameters, an embedding table of 152,064 × 3,584 =
544,997,376, and 2 × 28 × 4 × 128 × 2 = 57,344 KV bytes per token (f16).
"""

from __future__ import annotations

from pathlib import Path

from analysis.core import metrics, theory
from analysis.core.model_config import load_model_config
from collector.protocol.ceilings import store_run
from collector.protocol.theory_sheet import SheetInputs, theory_sheet
from collector.raw.records import RequestRecord
from collector.raw.store import RawStore

CAMPAIGN = "h200-synth"
KV_BYTES_PER_TOKEN = 2 * 28 * 4 * 128 * 2
PARAMS = 7_615_616_512
EMBED = 152_064 * 3_584
W_F16_READ = (PARAMS - EMBED) * 2  # every weight but the gathered embedding table, 2 bytes each
H200_BW = 4.8e12
COPY_BW = 4.0e12  # the synthetic measured ceiling
SLOTS, CTX = 8, 8 * 4096
IN_LEN, OUT_LEN = 1024, 32
TTFT_MS, PREFILL_S = 50.0, 0.02
ITL_1_MS = {"fp16": 10.0, "q4_k_m": 4.0}
CONCURRENCIES = (1, 2, 4)


def itl_ms(fmt: str, c: int) -> float:
    """The synthetic step: 10 % longer per extra request in flight."""
    return ITL_1_MS[fmt] * (1 + 0.1 * (c - 1))


def _plan_toml(run: str, fmt: str) -> str:
    return f"""description = "synthetic"
campaign = "{CAMPAIGN}"
run = "{run}"
[server]
engine = "llamacpp"
binary = "llama-server"
model = "m.gguf"
served_model_name = "m"
port = 8400
args = ["-ngl", "99", "-np", "{SLOTS}", "-c", "{CTX}"]
[model]
config = "Qwen2.5-7B-Instruct"
gpu = "h200"
kv_dtype = "fp16"
weight_format = "{fmt}"
kv_pool_gib = {CTX * KV_BYTES_PER_TOKEN / 2**30}
max_model_len = {CTX // SLOTS}
token_id_range = [32, 127]
[[phase]]
name = "sweep"
kind = "concurrency"
input_len = {IN_LEN}
output_len = {OUT_LEN}
points = [{", ".join(f"{{ concurrency = {c}, requests = {2 * c}, seed = {c} }}" for c in CONCURRENCIES)}]
"""


def _metrics(prompt_s: float, pred_tokens: int, pred_s: float) -> str:
    return (
        f"# TYPE llamacpp:prompt_seconds_total counter\nllamacpp:prompt_seconds_total {prompt_s}\n# TYPE "
        f"llamacpp:tokens_predicted_total counter\nllamacpp:tokens_predicted_total {pred_tokens}\n# TYPE "
        "llamacpp:tokens_predicted_seconds_total counter\nllamacpp:tokens_predicted_seconds_total "
        f"{pred_s}\n# TYPE llamacpp:requests_processing gauge\nllamacpp:requests_processing 0\n"
    )


def _scrape(tag: str, point: str, t: int, wall: int, counters: list[float]) -> dict[str, object]:
    """One /metrics scrape of the point's start or end (1 µs long), the counters as they stand."""
    return {
        "v": 1,
        "source": "metrics",
        "tag": tag,
        "point": point,
        "start_mono_ns": t,
        "start_unix_ns": wall,
        "end_mono_ns": t + 1000,
        "end_unix_ns": wall + 1000,
        "status": 200,
        "error": None,
        "text": _metrics(*counters),
    }


def own_run(store: RawStore, run_name: str, fmt: str) -> None:
    run = store.create_run(
        CAMPAIGN,
        run_name,
        kind="collector-run",
        meta={"engine": "llamacpp", "gpu": "h200", "model": "Qwen2.5-7B-Instruct"},
    )
    run.write_text("plan.toml", _plan_toml(run_name, fmt))
    inputs = {
        "model": "Qwen2.5-7B-Instruct",
        "gpu": "h200",
        "kv_pool_gib": CTX * KV_BYTES_PER_TOKEN / 2**30,
        "max_model_len": CTX // SLOTS,
        "kv_dtype": "fp16",
        "weight_format": fmt,
        "block_size": 16,
    }
    run.write_json(
        "prediction.json",
        {"v": 1, "inputs": inputs, "prediction": theory_sheet(SheetInputs(**inputs)), "error": None},
    )
    run.write_json("fingerprint/summary.json", {"gpus": [{"name": "NVIDIA H200"}], "engine": "llamacpp"})
    w_mib = theory.weight_bytes(load_model_config("Qwen2.5-7B-Instruct"), fmt) / 2**20
    run.write_text(
        "server.log",
        "\n".join(
            [
                "0.00.010.737 I srv    load_model: loading model 'm.gguf'",
                f"0.00.045.512 I load_tensors:   CUDA0 model buffer size = {w_mib:10.2f} MiB",
                f"0.00.057.382 I llama_kv_cache: size = {CTX * KV_BYTES_PER_TOKEN / 2**20:8.2f} MiB (  4096 "
                f"cells,  28 layers,  {SLOTS}/{SLOTS} seqs), K (f16):  896.00 MiB, V (f16):  896.00 MiB",
                f"0.00.078.718 I srv    load_model: initializing, n_slots = {SLOTS}, n_ctx_slot = "
                f"{CTX // SLOTS}, kv_unified = 'false'",
                "",
            ]
        ),
    )
    events = run.open_stream("events.jsonl")
    scrapes = run.open_stream("scrapes.jsonl")
    requests = run.open_stream("requests.jsonl")
    t = 1_000_000_000_000  # monotonic ns
    wall = 1_800_000_000_000_000_000
    ev = [
        {"kind": "server_start", "argv": ["llama-server", "-ngl", "99", "-np", str(SLOTS), "-c", str(CTX)]},
        {"kind": "check", "scope": "startup", "name": "greedy_sampling", "ok": True, "detail": "t=0"},
        {"kind": "check", "scope": "startup", "name": "prefix_caching_off", "ok": True, "detail": "off"},
    ]
    for e in ev:
        events.write_json({"v": 1, "mono_ns": t, "unix_ns": wall, **e})
    counters = [0.0, 0, 0.0]
    for i, c in enumerate(CONCURRENCIES):
        pid = f"p{i:02d}-sweep-c{c:03d}-i{IN_LEN}-o{OUT_LEN}"
        scrapes.write_json(_scrape("point_start", pid, t, wall, counters))
        t += 1_000_000
        step = itl_ms(fmt, c)
        recs = []
        for wave in range(2):
            for w in range(c):
                send = t
                gaps = [step * 3 if (c == 4 and k >= OUT_LEN - 5) else step for k in range(1, OUT_LEN)]
                chunks = [send + int(TTFT_MS * 1e6)]
                for g in gaps:
                    chunks.append(chunks[-1] + int(round(g * 1e6)))
                end = chunks[-1] + 100_000
                rec = {
                    "v": 1,
                    "request_id": f"{pid}-r{wave * c + w:05d}",
                    "phase": "sweep",
                    "phase_kind": "concurrency",
                    "point": pid,
                    "point_index": i,
                    "index": wave * c + w,
                    "worker": w,
                    "concurrency": c,
                    "seed": c,
                    "input_len": IN_LEN,
                    "max_tokens": OUT_LEN,
                    "send_mono_ns": send,
                    "send_unix_ns": wall + send - t,
                    "headers_mono_ns": send + 1000,
                    "end_mono_ns": end,
                    "end_unix_ns": wall + end - t,
                    "http_status": 200,
                    "chunk_mono_ns": chunks,
                    "chunk_unix_ns": [wall + x - t for x in chunks],
                    "chunk_tokens": [1] * OUT_LEN,
                    "token_count_source": "token_ids",
                    "done": True,
                    "usage": {"prompt_tokens": IN_LEN, "completion_tokens": OUT_LEN},
                    "finish_reason": "length",
                    "engine_timings": {"prompt_n": IN_LEN},
                    "response_id": "x",
                    "error": None,
                }
                requests.write_json(rec)
                recs.append(rec)
            t = max(r["end_mono_ns"] for r in recs) + 1_000_000
        n = len(recs)
        counters = [
            counters[0] + n * PREFILL_S,
            counters[1] + n * OUT_LEN,
            counters[2] + n * OUT_LEN * step / 1000,
        ]
        scrapes.write_json(_scrape("point_end", pid, t, wall, counters))
        t += 2_000_000
        parsed = [RequestRecord.from_obj(r) for r in recs]
        run.write_json(
            f"bench/{pid}.json",
            metrics.point_summary_vllm_bench(
                parsed, model_id="m", max_concurrency=c, num_prompts=n, label=pid
            ),
        )
        for name, ok in (
            ("completed_vs_sent", True),
            ("failures", True),
            ("output_tokens", True),
            ("input_tokens", True),
            ("preemptions", None),
            ("prefix_cache_hits", True),
        ):
            events.write_json(
                {
                    "v": 1,
                    "kind": "check",
                    "mono_ns": t,
                    "unix_ns": wall,
                    "scope": "point",
                    "name": name,
                    "ok": ok,
                    "detail": name,
                    "point": pid,
                }
            )
    run.seal("complete")


def write_campaign(raw: Path) -> str:
    """Write both runs and the measured ceilings into the raw store at ``raw``; return the campaign name."""
    store = RawStore(raw)
    own_run(store, "llamacpp-f16", "fp16")
    own_run(store, "llamacpp-q4km", "q4_k_m")
    store_run(
        {
            "v": 1,
            "copy_bytes_per_s": COPY_BW,
            "bf16_matmul_flops_per_s": 8.0e14,
            "device_name": "NVIDIA H200",
        },
        raw,
        CAMPAIGN,
    )
    return CAMPAIGN
