"""GPU datasheet numbers, as data: memory, memory bandwidth, dense BF16 tensor throughput.

Conventions, the same for every entry:
- ``memory_bytes`` is what ``nvidia-smi --query-gpu=memory.total`` reports (MiB × 2**20), because that is the
  capacity an engine actually sizes itself from; the marketing figure ("24 GB", "141 GB") is in the comment.
  (CUDA's own ``cudaMemGetInfo`` total is smaller still: vLLM logged 23.52 GiB on the reference RTX 4090.)
- ``bandwidth_bytes_per_s`` is the datasheet's peak DRAM bandwidth in decimal units (1 GB/s = 1e9 B/s).
- ``bf16_flops_per_s`` is dense (no 2:4 sparsity) BF16 tensor-core peak with FP32 accumulate: PyTorch/cuBLAS
  and FlashAttention accumulate BF16 GEMMs in FP32, so that is the ceiling an inference engine can reach.
"""

from __future__ import annotations

from dataclasses import dataclass

from collector.raw.errors import PlanError


@dataclass(frozen=True)
class GpuSpec:
    """One GPU model's datasheet numbers (units in the field names)."""

    name: str
    display_name: str
    memory_bytes: int | None
    bandwidth_bytes_per_s: float | None
    bf16_flops_per_s: float | None
    source: str

    @property
    def has_datasheet(self) -> bool:
        return self.bandwidth_bytes_per_s is not None and self.bf16_flops_per_s is not None


MIB = 2**20

GPUS: dict[str, GpuSpec] = {
    # NVIDIA Ada Lovelace GPU Architecture whitepaper (v2.1), Appendix A, GeForce RTX 4090: 24 GB GDDR6X,
    # 384-bit at 21 Gbps = 1008 GB/s; "Peak BF16 Tensor TFLOPS with FP32 Accumulate 165.2/330.4" (dense/sparse).
    # GeForce runs FP16/BF16 tensor math at half rate when accumulating in FP32 (330.3 TFLOPS is the
    # FP16-accumulate figure, which no BF16 framework path uses) -> 165.2e12.
    # 24564 MiB: nvidia-smi in the reference campaign's fingerprint.txt.
    "rtx4090": GpuSpec(
        name="rtx4090",
        display_name="NVIDIA GeForce RTX 4090",
        memory_bytes=24564 * MIB,
        bandwidth_bytes_per_s=1008e9,
        bf16_flops_per_s=165.2e12,
        source="NVIDIA Ada Lovelace GPU Architecture whitepaper v2.1, Appendix A (RTX 4090)",
    ),
    # NVIDIA A100 Tensor Core GPU datasheet, A100 80GB SXM: 80GB HBM2e, 2,039 GB/s;
    # "BFLOAT16 Tensor Core 312 TFLOPS | 624 TFLOPS*" (* with sparsity). nvidia-smi: 81920 MiB.
    "a100-80gb": GpuSpec(
        name="a100-80gb",
        display_name="NVIDIA A100 80GB SXM",
        memory_bytes=81920 * MIB,
        bandwidth_bytes_per_s=2039e9,
        bf16_flops_per_s=312e12,
        source="NVIDIA A100 Tensor Core GPU datasheet (A100 80GB SXM)",
    ),
    # NVIDIA H100 Tensor Core GPU datasheet, H100 SXM: 80GB, 3.35 TB/s; "BF16 Tensor Core 1,979 teraFLOPS*"
    # (* with sparsity) -> dense 989.4 TFLOPS (H100 architecture whitepaper, Table 1). nvidia-smi: 81559 MiB.
    "h100-sxm": GpuSpec(
        name="h100-sxm",
        display_name="NVIDIA H100 SXM 80GB",
        memory_bytes=81559 * MIB,
        bandwidth_bytes_per_s=3.35e12,
        bf16_flops_per_s=989.4e12,
        source="NVIDIA H100 Tensor Core GPU datasheet (H100 SXM); H100 whitepaper Table 1 for the dense figure",
    ),
    # NVIDIA H200 Tensor Core GPU datasheet, H200 SXM: 141GB HBM3e, 4.8 TB/s; "BF16 Tensor Core 1,979 TFLOPS"
    # with sparsity -> dense 989.4 TFLOPS (same GH100 compute as H100 SXM). nvidia-smi: 143771 MiB.
    "h200": GpuSpec(
        name="h200",
        display_name="NVIDIA H200 SXM 141GB",
        memory_bytes=143771 * MIB,
        bandwidth_bytes_per_s=4.8e12,
        bf16_flops_per_s=989.4e12,
        source="NVIDIA H200 Tensor Core GPU datasheet (H200 SXM)",
    ),
    # NVIDIA L40S datasheet: 48GB GDDR6 with ECC, 864 GB/s; "BF16 Tensor Core 362.05 | 733 TFLOPS*"
    # (* with sparsity). Data-centre Ada runs FP32-accumulate at full rate, unlike GeForce. nvidia-smi: 46068 MiB.
    "l40s": GpuSpec(
        name="l40s",
        display_name="NVIDIA L40S",
        memory_bytes=46068 * MIB,
        bandwidth_bytes_per_s=864e9,
        bf16_flops_per_s=362.05e12,
        source="NVIDIA L40S GPU datasheet",
    ),
}

ALIASES: dict[str, str] = {
    "4090": "rtx4090",
    "rtx-4090": "rtx4090",
    "geforce-rtx-4090": "rtx4090",
    "nvidia-geforce-rtx-4090": "rtx4090",
    "a100": "a100-80gb",
    "a100-sxm": "a100-80gb",
    "a100-80gb-sxm": "a100-80gb",
    "a100-sxm4-80gb": "a100-80gb",
    "nvidia-a100-sxm4-80gb": "a100-80gb",
    "h100": "h100-sxm",
    "h100-80gb": "h100-sxm",
    "h100-sxm5": "h100-sxm",
    "h100-80gb-hbm3": "h100-sxm",
    "nvidia-h100-80gb-hbm3": "h100-sxm",
    "h200-sxm": "h200",
    "nvidia-h200": "h200",
    "nvidia-l40s": "l40s",
}


def _key(name: str) -> str:
    return "-".join(name.strip().lower().replace("_", " ").split())


# A CPU run (the CI smoke campaigns) has no datasheet ceilings: theory that needs a bandwidth or a FLOP rate
# is left out (null), everything that follows from the config alone still holds.
CPU = GpuSpec(
    name="cpu",
    display_name="CPU (no datasheet ceilings)",
    memory_bytes=None,
    bandwidth_bytes_per_s=None,
    bf16_flops_per_s=None,
    source="no datasheet: a CPU has no single memory-bandwidth / tensor-rate figure to predict against",
)


def gpu_names() -> list[str]:
    """The normalised names of the bundled GPUs."""
    return list(GPUS)


def get_gpu(name: str) -> GpuSpec:
    """Look a GPU up by name, case-insensitive, with aliases (``RTX 4090``, ``NVIDIA H200``, ``h100``)."""
    key = _key(name)
    key = ALIASES.get(key, key)
    if key == CPU.name:
        return CPU
    if key in GPUS:
        return GPUS[key]
    raise PlanError(f"unknown GPU {name!r}; known: {', '.join(GPUS)}, cpu")
