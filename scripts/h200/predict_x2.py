"""Issue #27's predictions, written into the plans/h200x2-exp-*.toml headers BEFORE the runs: per split mode,
the single-stream p50 ITL and the decode rate at c=64 (c ÷ p50 ITL), with bounds, and the KV pool.

Inputs, each from data we hold (a build's results of the H200 campaign) or a bound stated here:
- a, bw_eff and their intervals: experiment 4's fit (model_size_fits.csv), per weight format;
- S1(c): the one-GPU p50 ITL at concurrency c of the F16 sweep (points.csv, run llamacpp-f16);
- the link: sync latency 5–30 µs per cross-GPU wait and 300–450 GB/s one way (the H200's NVLink 4 is 900 GB/s
  both ways together, datasheet), until collector.protocol.ceilings measures both on the two-GPU machine.

    python scripts/h200/predict_x2.py --results build/results/h200-qwen2.5-7b-random
"""

from __future__ import annotations

import argparse
import csv
import itertools
from pathlib import Path

from analysis.core import multigpu as mg
from analysis.core import theory
from analysis.core.gpus import get_gpu
from analysis.core.model_config import load_model_config

GIB = 2**30
SYNC_S = (5e-6, 30e-6)
P2P_BYTES_PER_S = (300e9, 450e9)
CONTEXT_TOKENS = 1024 + 128  # the sweep's prompt plus half its 256 output tokens: the mean cached context
MODELS = {"7b": "Qwen2.5-7B-Instruct", "14b": "Qwen2.5-14B-Instruct"}


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def one_gpu_itl_s(tables: Path, concurrency: int) -> float:
    """The F16 sweep's measured p50 ITL at ``concurrency``, s."""
    for r in _rows(tables / "points.csv"):
        if r["test"] == "llamacpp-f16" and r["test_kind"] == "concurrency_sweep":
            if int(r["concurrency"]) == concurrency:
                return float(r["p50_itl_ms"]) / 1e3
    raise SystemExit(f"{tables}/points.csv: no llamacpp-f16 sweep point at c={concurrency}")


def size_fit(tables: Path, fmt: str = "fp16") -> dict[str, float]:
    row = next(r for r in _rows(tables / "model_size_fits.csv") if r["weight_format"] == fmt)
    return {k: float(row[k]) for k in ("intercept_lo_ms", "intercept_hi_ms", "bw_eff_lo_tb_per_s",
                                       "bw_eff_hi_tb_per_s", "intercept_ms", "bw_eff_tb_per_s")}  # fmt: skip


def predict(model: str, mode: str, tables: Path) -> dict[str, tuple[float, float, float]]:
    """(central, low, high) of ITL at c=1 [ms] and decode tok/s at c=64 for ``model`` in ``mode``."""
    cfg = load_model_config(MODELS[model])
    w = theory.weight_bytes_read_per_decode_step(cfg, "f16")
    w7 = theory.weight_bytes_read_per_decode_step(load_model_config(MODELS["7b"]), "f16")
    kvpt = theory.kv_bytes_per_token(cfg, "fp16")
    fit = size_fit(tables)
    out: dict[str, list[float]] = {"itl_c1_ms": [], "tok_s_c64": []}
    corners = itertools.product(
        (fit["intercept_lo_ms"], fit["intercept_ms"], fit["intercept_hi_ms"]),
        (fit["bw_eff_lo_tb_per_s"], fit["bw_eff_tb_per_s"], fit["bw_eff_hi_tb_per_s"]),
        (*SYNC_S, sum(SYNC_S) / 2),
        (*P2P_BYTES_PER_S, sum(P2P_BYTES_PER_S) / 2),
    )
    for a_ms, bw_tb, sync_s, p2p in corners:
        bw = bw_tb * 1e12
        link = {"n_gpus": 2, "sync_s": sync_s, "p2p_bytes_per_s": p2p}
        s1 = mg.single_gpu_step_s(a_ms / 1e3, w, bw)
        itl = mg.mode_step_s(
            mode, cfg, batch=1, step_1gpu_s=s1, weight_stream_s=w / bw, kv_stream_s=0.0, **link
        )
        # c = 64: the 7B sweep's measured step; a 14B adds its extra weight bytes (the per-sequence cost is
        # host-side sampling over the same 152k vocabulary: experiment 1)
        s64 = one_gpu_itl_s(tables, 64) + (w - w7) / bw
        kv64 = theory.kv_bytes_read_per_step(kvpt, 64, CONTEXT_TOKENS) / bw
        if mode == "replicas":
            rate = mg.replicas_tokens_per_s(64, one_gpu_itl_s(tables, 32) + (w - w7) / bw)
        else:
            step = mg.mode_step_s(mode, cfg, batch=64, step_1gpu_s=s64, weight_stream_s=w / bw,
                                  kv_stream_s=kv64, **link)  # fmt: skip
            rate = theory.tokens_per_s(64, step)
        out["itl_c1_ms"].append(itl * 1e3)
        out["tok_s_c64"].append(rate)
    return {k: (_central(v), min(v), max(v)) for k, v in out.items()}


def _central(values: list[float]) -> float:
    return sorted(values)[len(values) // 2]


def pool_gib(model: str, mode: str) -> float:
    cfg = load_model_config(MODELS[model])
    m = get_gpu("h200").memory_bytes or 0
    return (
        mg.kv_pool_bytes(mode, m, theory.weight_bytes(cfg, "f16"), theory.DEFAULT_KV_RESERVE_BYTES, 2) / GIB
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--results", type=Path, required=True, help="build/results/<H200 campaign>")
    tables = p.parse_args().results / "tables"
    print(
        f"{'model':>5} {'mode':>9} {'ITL c=1 ms [lo-hi]':>22} {'tok/s c=64 [lo-hi]':>24} {'KV pool GiB':>12}"
    )
    for model, mode in itertools.product(MODELS, mg.MODES):
        r = predict(model, mode, tables)
        (i, il, ih), (t, tl, th) = r["itl_c1_ms"], r["tok_s_c64"]
        print(f"{model:>5} {mode:>9} {i:8.2f} [{il:5.2f}-{ih:5.2f}] {t:9.0f} [{tl:5.0f}-{th:5.0f}]"
              f" {pool_gib(model, mode):12.1f}")  # fmt: skip


if __name__ == "__main__":
    main()
