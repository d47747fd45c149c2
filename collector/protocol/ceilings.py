"""The card's two measured ceilings, taken with PyTorch in the same lease as the runs they bound:

- memory: one large device-to-device copy, ``copy_bytes_per_s`` = (bytes read + bytes written) / time;
- compute: one large bf16 matrix product on random data, ``bf16_matmul_flops_per_s`` = 2·n³ / time;
- between GPUs, where two or more are visible (issue #27): one large copy from device 0 to device 1,
  ``peer_copy_bytes_per_s`` = bytes / time (one way), and the time of one small copy that the receiving
  device then waits for, ``peer_sync_s`` — what a split model pays for every synchronisation.

Each timed repeat is a burst of back-to-back operations between two CUDA events (one event pair per
operation would time launch gaps as well); the rate comes from the median repeat. Every repeat's time is
kept in the result too, so the spread is visible and the median can be re-derived.

Random data, never zeros: a matrix product of zeros runs faster on this hardware (toggling fewer bits
draws less power, so the clocks stay higher), which would overstate the ceiling.

    python -m collector.protocol.ceilings --out ceilings.json [--raw DIR --campaign NAME]

With ``--raw`` the result is also written as a sealed run (kind ``ceilings``) of that campaign in the raw
store. Without CUDA it prints why and exits 2.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from collector.raw.errors import AnatomyError
from collector.raw.store import RawStore

COPY_BYTES = 4 << 30  # 4 GiB source: ~70x the H200's 60 MB L2, so the copy streams from HBM
COPIES_PER_REPEAT = 5
MATMUL_N = 8192  # 8192^3 bf16: 1.1 TFLOP per product, compute-bound on any current GPU
MATMULS_PER_REPEAT = 10
REPEATS = 15
PEER_COPY_BYTES = 1 << 30  # 1 GiB: long enough that the link's rate, not the call overhead, sets the time
PEER_SYNC_BYTES = 64 << 10  # a few hidden states of a small batch: what a split decode step moves per sync
PEER_SYNCS_PER_REPEAT = 100
WARMUP_S = 1.0  # long enough for the clocks to leave idle (345 MHz SM idle seen on the H200)
RUN_KIND = "ceilings"
EXIT_NO_CUDA = 2


class NoCudaError(AnatomyError):
    """PyTorch is missing or sees no CUDA device."""


def copy_bytes_per_s(bytes_copied: int, seconds: float) -> float:
    """Copy bandwidth = 2 × bytes copied / seconds (each byte is read once and written once), B/s."""
    return 2 * bytes_copied / seconds


def matmul_flops_per_s(m: int, n: int, k: int, seconds: float) -> float:
    """Matrix-product rate = 2 × m × n × k / seconds (one multiply and one add per term), FLOP/s."""
    return 2 * m * n * k / seconds


def peer_bytes_per_s(bytes_copied: int, seconds: float) -> float:
    """Peer-to-peer bandwidth = bytes copied / seconds (one way: read on one GPU, written on another), B/s."""
    return bytes_copied / seconds


def _torch():
    try:
        import torch
    except ImportError as err:
        raise NoCudaError(f"PyTorch is not installed ({err})") from err
    if not torch.cuda.is_available():
        raise NoCudaError(f"PyTorch {torch.__version__} sees no CUDA device")
    return torch


def _time_bursts(torch: Any, op: Any, per_repeat: int, repeats: int, warmup_s: float) -> list[float]:
    """Run ``op`` until ``warmup_s`` has passed, then time ``repeats`` bursts of ``per_repeat`` calls each;
    returns the seconds per call of each burst."""
    t_end = time.monotonic() + warmup_s
    while time.monotonic() < t_end:
        for _ in range(per_repeat):
            op()
        torch.cuda.synchronize()
    out = []
    for _ in range(repeats):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(per_repeat):
            op()
        stop.record()
        stop.synchronize()
        out.append(start.elapsed_time(stop) / 1e3 / per_repeat)
    return out


def _copy_seconds(
    torch: Any, dev: Any, gen: Any, copy_bytes: int, repeats: int, warmup_s: float
) -> list[float]:
    # float32 words of random values: a copy does not care, but no all-zero pages either
    if copy_bytes % 4:
        raise ValueError(f"copy_bytes must be a multiple of 4, got {copy_bytes}")
    src = torch.randn((copy_bytes // 4,), dtype=torch.float32, device=dev, generator=gen)
    dst = torch.empty_like(src)
    seconds = _time_bursts(torch, lambda: dst.copy_(src), COPIES_PER_REPEAT, repeats, warmup_s)
    if not torch.equal(dst[-(1 << 20) :], src[-(1 << 20) :]):  # the timed work really happened
        raise RuntimeError("device copy check failed: destination differs from source")
    return seconds


def _matmul_seconds(torch: Any, dev: Any, gen: Any, n: int, repeats: int, warmup_s: float) -> list[float]:
    a = torch.randn((n, n), dtype=torch.bfloat16, device=dev, generator=gen)
    b = torch.randn((n, n), dtype=torch.bfloat16, device=dev, generator=gen)
    c = torch.empty((n, n), dtype=torch.bfloat16, device=dev)
    seconds = _time_bursts(torch, lambda: torch.matmul(a, b, out=c), MATMULS_PER_REPEAT, repeats, warmup_s)
    if not bool(torch.isfinite(c).all()) or float(c.abs().max()) == 0.0:
        raise RuntimeError("matmul check failed: result has non-finite values or is all zeros")
    return seconds


def _peer(torch: Any, gen: Any, repeats: int, warmup_s: float) -> dict[str, Any] | None:
    """Device 0 → device 1: the large copy's rate and the small copy-and-wait's time; None with one GPU."""
    if torch.cuda.device_count() < 2:
        return None
    d0, d1 = torch.device("cuda", 0), torch.device("cuda", 1)
    src = torch.randn((PEER_COPY_BYTES // 4,), dtype=torch.float32, device=d0, generator=gen)
    dst = torch.empty((PEER_COPY_BYTES // 4,), dtype=torch.float32, device=d1)
    big_s = _time_bursts(torch, lambda: dst.copy_(src), COPIES_PER_REPEAT, repeats, warmup_s)
    small_src, small_dst = src[: PEER_SYNC_BYTES // 4], dst[: PEER_SYNC_BYTES // 4]

    def copy_and_wait() -> None:  # a split step cannot start its next op before the slice has arrived
        small_dst.copy_(small_src)
        torch.cuda.synchronize(d1)

    sync_s = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(PEER_SYNCS_PER_REPEAT):
            copy_and_wait()
        sync_s.append((time.perf_counter() - t0) / PEER_SYNCS_PER_REPEAT)
    if not torch.equal(dst[-(1 << 20) :].cpu(), src[-(1 << 20) :].cpu()):
        raise RuntimeError("peer copy check failed: destination differs from source")
    return {
        "device_count": torch.cuda.device_count(),
        "can_access_peer_0_1": bool(torch.cuda.can_device_access_peer(0, 1)),
        "peer_copy_bytes_per_s": peer_bytes_per_s(PEER_COPY_BYTES, statistics.median(big_s)),
        "peer_sync_s": statistics.median(sync_s),
        "peer_copy_seconds_per_call": big_s,
        "peer_sync_seconds_per_call": sync_s,
        "sizes": {"peer_copy_bytes": PEER_COPY_BYTES, "peer_sync_bytes": PEER_SYNC_BYTES},
        "method": "torch copy_ cuda:0 -> cuda:1 (CUDA events over bursts); sync: copy + synchronize(cuda:1), "
        "wall clock over bursts of 100",
    }


def measure(
    copy_bytes: int = COPY_BYTES,
    matmul_n: int = MATMUL_N,
    repeats: int = REPEATS,
    warmup_s: float = WARMUP_S,
    seed: int = 0,
) -> dict[str, Any]:
    """Measure both ceilings on CUDA device 0 (and the link to device 1 where there is one); raises
    NoCudaError without CUDA."""
    torch = _torch()
    dev = torch.device("cuda", 0)
    props = torch.cuda.get_device_properties(dev)
    gen = torch.Generator(device=dev)
    gen.manual_seed(seed)

    copy_s = _copy_seconds(torch, dev, gen, copy_bytes, repeats, warmup_s)
    torch.cuda.empty_cache()
    n = matmul_n
    mm_s = _matmul_seconds(torch, dev, gen, n, repeats, warmup_s)
    torch.cuda.empty_cache()

    peer = _peer(torch, gen, repeats, warmup_s)
    torch.cuda.empty_cache()

    copy_med, mm_med = statistics.median(copy_s), statistics.median(mm_s)
    return {
        "v": 1,
        "copy_bytes_per_s": copy_bytes_per_s(copy_bytes, copy_med),
        "bf16_matmul_flops_per_s": matmul_flops_per_s(n, n, n, mm_med),
        "method": {
            "copy": (
                "torch.Tensor.copy_ device->device of a float32 buffer; bytes = read + written = 2 x buffer"
            ),
            "matmul": "torch.matmul(a, b, out=c), bf16, a and b ~ N(0,1) (never zeros); FLOPs = 2 n^3",
            "timing": "CUDA events around bursts of back-to-back calls after a time-based warm-up; "
            "rate from the median burst",
        },
        "sizes": {
            "copy_buffer_bytes": copy_bytes,
            "copies_per_repeat": COPIES_PER_REPEAT,
            "matmul_m_n_k": [n, n, n],
            "matmuls_per_repeat": MATMULS_PER_REPEAT,
        },
        "repeats": repeats,
        "warmup_s": warmup_s,
        "seed": seed,
        "copy_seconds_per_call": copy_s,
        "matmul_seconds_per_call": mm_s,
        "torch_version": torch.__version__,
        "cuda_version": torch.version.cuda,
        "device_name": props.name,
        "device_multiprocessor_count": props.multi_processor_count,
        "device_memory_bytes": props.total_memory,
        "measured_at_unix_ns": time.time_ns(),
        "peer": peer,  # None: one GPU visible
    }


def store_run(doc: dict[str, Any], raw_root: Path, campaign: str, run_name: str = "ceilings") -> Path:
    """The result as a sealed run of ``campaign`` (kind ``ceilings``); the name gets -2, -3 ... if taken."""
    store = RawStore(raw_root)
    name = store.unique_run_name(campaign, run_name)
    meta = {
        "test_kind": RUN_KIND,
        "device_name": doc.get("device_name"),
        "torch_version": doc.get("torch_version"),
    }
    run = store.create_run(campaign, name, kind=RUN_KIND, meta=meta)
    run.write_json("ceilings.json", doc, source="collector.protocol.ceilings.measure")
    run.seal("complete")
    return run.path


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m collector.protocol.ceilings", description=__doc__.splitlines()[0]
    )
    p.add_argument("--out", type=Path, required=True, help="JSON file to write")
    p.add_argument(
        "--raw", type=Path, default=None, help="also write a sealed 'ceilings' run into this raw store"
    )
    p.add_argument("--campaign", default=None, help="campaign of that run (required with --raw)")
    p.add_argument("--copy-bytes", type=int, default=COPY_BYTES)
    p.add_argument("--matmul-n", type=int, default=MATMUL_N)
    p.add_argument("--repeats", type=int, default=REPEATS)
    a = p.parse_args(argv)
    if a.raw is not None and not a.campaign:
        p.error("--raw needs --campaign")
    try:
        doc = measure(copy_bytes=a.copy_bytes, matmul_n=a.matmul_n, repeats=a.repeats)
    except NoCudaError as err:
        print(f"ceilings: no CUDA device: {err}; nothing measured", file=sys.stderr)
        return EXIT_NO_CUDA
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(doc, indent=2) + "\n")
    print(
        f"{doc['device_name']}: copy {doc['copy_bytes_per_s'] / 1e12:.2f} TB/s (read+write), "
        f"bf16 matmul {doc['bf16_matmul_flops_per_s'] / 1e12:.0f} TFLOP/s -> {a.out}"
    )
    if a.raw is not None:
        print(f"stored as {store_run(doc, a.raw, a.campaign)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
