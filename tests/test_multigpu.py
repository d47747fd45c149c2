"""The two-GPU theory (analysis.core.multigpu) against numbers worked out by hand from Qwen2.5-7B's published
config (28 layers, hidden 3,584, MLP 18,944, 28 query heads and 4 KV heads of 128)."""

from __future__ import annotations

from pathlib import Path

import pytest

from analysis.core import multigpu as mg
from analysis.core import theory
from analysis.core.gpus import get_gpu
from analysis.core.model_config import load_model_config
from analysis.parse.nvidia_smi_csv import parse_nvidia_smi_csv
from analysis.parse.scrapes_jsonl import parse_scrapes_jsonl
from collector.protocol.fingerprint import gpu_info
from collector.raw.errors import ParseError
from collector.raw.plan import load_plan

GIB = 2**30
ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def qwen7b():
    return load_model_config("Qwen2.5-7B-Instruct")


def test_row_split_syncs_and_bytes_by_hand(qwen7b):
    assert mg.row_split_syncs_per_step(qwen7b) == 28 * 7
    # inputs per layer: q, k, v, gate, up read 3,584; o reads 3,584; down reads 18,944 -> 40,448 elements,
    # copied to the one other GPU; outputs 3,584 + 512 + 512 + 3,584 + 18,944 + 18,944 + 3,584 = 49,664,
    # half of them gathered back: 24,832. 65,280 elements x 4 bytes x 28 layers = 7,311,360 bytes per token.
    assert mg.row_split_transfer_bytes_per_step(qwen7b, batch=1, n_gpus=2) == 7_311_360
    assert mg.row_split_transfer_bytes_per_step(qwen7b, batch=64, n_gpus=2) == 64 * 7_311_360


def test_tensor_split_allreduce_by_hand(qwen7b):
    assert mg.tensor_split_allreduces_per_step(qwen7b) == 56
    # one hidden state of a 64-batch: 64 x 3,584 x 4 = 917,504 bytes; a 2-GPU ring sends it once per GPU
    assert mg.ring_allreduce_bytes_per_gpu(mg.hidden_state_bytes(qwen7b, 64), 2) == 917_504


def test_single_stream_modes_order(qwen7b):
    """One stream, 7B F16-like numbers: layer split saves nothing and pays a hand-over; row split halves the
    weight streaming but pays 196 syncs; at 10 us per sync that is 1.96 ms against the 2.0 ms saved."""
    kw = dict(batch=1, step_1gpu_s=5.69e-3, weight_stream_s=4.03e-3, kv_stream_s=0.0, n_gpus=2)
    link = dict(sync_s=10e-6, p2p_bytes_per_s=400e9)
    none = mg.mode_step_s("none", qwen7b, **kw, **link)
    layer = mg.mode_step_s("layer", qwen7b, **kw, **link)
    row = mg.mode_step_s("row", qwen7b, **kw, **link)
    tensor = mg.mode_step_s("tensor", qwen7b, **kw, **link)
    assert none == pytest.approx(5.69e-3)
    assert layer == pytest.approx(5.69e-3 + 10e-6 + 3584 * 4 / 400e9)
    assert row == pytest.approx(5.69e-3 - 4.03e-3 / 2 + 196 * 10e-6 + 7_311_360 / 400e9)
    assert tensor == pytest.approx(5.69e-3 - 4.03e-3 / 2 + 56 * (10e-6 + 3584 * 4 / 400e9))
    assert tensor < none < layer


def test_unknown_mode_is_refused(qwen7b):
    with pytest.raises(ValueError, match="unknown split mode 'pipeline'"):
        mg.mode_step_s(
            "pipeline", qwen7b, batch=1, step_1gpu_s=1.0, weight_stream_s=0.5, kv_stream_s=0.0, n_gpus=2,
            sync_s=1e-5, p2p_bytes_per_s=1e11,
        )  # fmt: skip


def test_kv_pool_per_mode_by_hand():
    m, w, r = 140 * GIB, 15 * GIB, 1 * GIB
    assert mg.kv_pool_bytes("none", m, w, r, 2) == 124 * GIB
    assert mg.kv_pool_bytes("replicas", m, w, r, 2) == 124 * GIB  # each replica's own pool
    assert mg.kv_pool_bytes("layer", m, w, r, 2) == 263 * GIB  # 2 x 139 - 15
    assert mg.kv_pool_bytes("tensor", m, w, r, 2) == 263 * GIB
    assert mg.kv_pool_bytes("row", m, w, r, 2) == 131.5 * GIB  # 140 - 7.5 - 1: the main GPU alone
    assert mg.kv_pool_bytes("none", 10 * GIB, w, r, 1) == 0.0


def test_replicas_throughput_from_half_concurrency():
    # c = 64 over two replicas: each runs 32 streams at the one-GPU step time of batch 32
    assert mg.replicas_tokens_per_s(64, 20e-3) == pytest.approx(3200.0)


# --- the sampler's nvidia-smi scrapes, one line per device ------------------------------------------------

H200_RUN = ROOT / "raw" / "h200-qwen2.5-7b-random" / "llamacpp-f16"


def _first_smi_text() -> str:
    recs = parse_scrapes_jsonl(H200_RUN / "scrapes.jsonl")
    return next(r.text for r in recs if r.source == "nvidia-smi" and r.text)


def test_recorded_h200_scrape_reads_one_device():
    (gpu,) = parse_nvidia_smi_csv(_first_smi_text())
    # the recorded line: "…, 0, GPU-97fb…, 100251, 143771, 0, 0, 159.34, 37, 1980, 3201, P0"
    assert (gpu.index, gpu.memory_used_mib, gpu.memory_total_mib) == (0, 100251, 143771)
    assert (gpu.power_w, gpu.temperature_c, gpu.clock_sm_mhz, gpu.pstate) == (159.34, 37, 1980, "P0")


def test_two_devices_in_one_scrape():
    """nvidia-smi prints one line per GPU: the recorded H200 line plus a second device (index 1, its own
    uuid, a reading nvidia-smi could not take) reads as two devices."""
    header, line = _first_smi_text().splitlines()[:2]
    cells = line.split(", ")
    cells[1], cells[2], cells[7] = "1", "GPU-00000000-0000-0000-0000-000000000001", "[N/A]"
    gpus = parse_nvidia_smi_csv("\n".join([header, line, ", ".join(cells)]) + "\n")
    assert [g.index for g in gpus] == [0, 1]
    assert gpus[1].uuid.endswith("0001") and gpus[1].power_w is None and gpus[0].power_w == 159.34


def test_torn_device_line_is_one_clear_error():
    header, line = _first_smi_text().splitlines()[:2]
    with pytest.raises(ParseError, match=r"scrapes.jsonl:7: 5 cells for 12 columns"):
        parse_nvidia_smi_csv(header + "\n" + ", ".join(line.split(", ")[:5]), "scrapes.jsonl:7")


# --- the two-GPU plans (run when the nvidia-h200-x2 kind is lent) -----------------------------------------

X2_PLANS = sorted((ROOT / "plans").glob("h200-x2-*.toml"))
SPLIT_ARGS = {"none": ["-sm", "none"], "layer": ["-sm", "layer"], "row": ["-sm", "row"],
              "tensor": ["-sm", "tensor", "-fa", "on"]}  # fmt: skip


def _arm(plan_path: Path) -> tuple[str, str]:
    """(arm, size) from plans/h200-x2-<arm>-<size>-f16.toml."""
    arm, size = plan_path.stem.removeprefix("h200-x2-").removesuffix("-f16").rsplit("-", 1)
    return arm, size


def test_every_arm_of_both_sizes_has_a_plan():
    arms = {_arm(p) for p in X2_PLANS}
    names = ("split-none", "split-layer", "split-row", "split-tensor", "replicas-a", "replicas-b")
    assert arms == {(a, s) for a in names for s in ("7b", "14b")}


@pytest.mark.parametrize("path", X2_PLANS, ids=lambda p: p.stem)
def test_x2_plan_sees_its_gpus_and_its_kv_fits_the_mode(path):
    p = load_plan(path)
    arm, size = _arm(path)
    mode = arm.removeprefix("split-") if arm.startswith("split-") else "replicas"
    args = p.server.args
    gpus = {"replicas-a": "0", "replicas-b": "1", "split-none": "0"}.get(arm, "0,1")
    assert p.server.env == {"CUDA_VISIBLE_DEVICES": gpus}
    sm = SPLIT_ARGS.get(mode, SPLIT_ARGS["none"])
    assert list(args[args.index("-sm") : args.index("-sm") + len(sm)]) == sm
    slots, ctx = int(args[args.index("-np") + 1]), int(args[args.index("-c") + 1])
    assert ctx // slots == p.model.max_model_len == 6144
    cfg = load_model_config(p.model.config)
    kv_bytes = ctx * theory.kv_bytes_per_token(cfg, "fp16")
    assert p.model.kv_pool_gib == pytest.approx(kv_bytes / GIB)
    pool = mg.kv_pool_bytes(mode, get_gpu("h200").memory_bytes, theory.weight_bytes(cfg, "f16"),
                            theory.DEFAULT_KV_RESERVE_BYTES, 2)  # fmt: skip
    assert kv_bytes < pool, f"{path.name}: {kv_bytes / GIB:.1f} GiB of KV over the {mode} pool"
    sweep = [pt.concurrency for pt in p.points if pt.kind == "concurrency"]
    assert sweep == ([4, 16, 32] if mode == "replicas" else [1, 8, 32, 64])  # a replica takes half
    assert f"{size.upper()} F16" in path.read_text().splitlines()[0] and "PREDICTION" in path.read_text()


@pytest.mark.parametrize("size", ["7b", "14b"])
def test_the_replica_pair_differs_only_in_gpu_port_and_name(size):
    a = load_plan(ROOT / "plans" / f"h200-x2-replicas-a-{size}-f16.toml")
    b = load_plan(ROOT / "plans" / f"h200-x2-replicas-b-{size}-f16.toml")
    assert a.points == b.points and a.server.args == b.server.args and a.model == b.model
    assert a.server.port != b.server.port and a.server.env != b.server.env


def test_fingerprint_records_the_gpu_interconnect(tmp_path, monkeypatch):
    """gpu_info asks nvidia-smi for `topo -m` beside the device CSV (an nvidia-smi on PATH that echoes its
    arguments stands in: CI has no GPU)."""
    smi = tmp_path / "nvidia-smi"
    smi.write_text('#!/bin/sh\necho "args: $*"\n')
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:/usr/bin:/bin")
    files = gpu_info()
    assert files is not None and files["nvidia-smi-topo.txt"].strip() == "args: topo -m"
