"""GPU datasheet numbers, as data: memory, memory bandwidth, dense BF16 tensor throughput.

Conventions, the same for every entry:
- ``memory_bytes`` is what ``nvidia-smi --query-gpu=memory.total`` reports (MiB × 2**20), because that is the
  capacity an engine actually sizes itself from; the marketing figure ("24 GB", "141 GB") is in the comment.
  (CUDA's own ``cudaMemGetInfo`` total is smaller still: vLLM logged 23.52 GiB on the reference RTX 4090.)
  AMD Instinct entries: ``rocm-smi --showmeminfo vram``'s "VRAM Total Memory (B)" where a public reading
  exists, else the ROCm GPU-specifications table's VRAM (GiB); ``nvidia-smi`` matching never picks them.
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
    board_power_w: float | None = None  # the board's power limit as shipped (total graphics / board power)

    @property
    def has_datasheet(self) -> bool:
        return self.bandwidth_bytes_per_s is not None and self.bf16_flops_per_s is not None


MIB = 2**20

# Order: the five cards the project started with first (messages list them so), the rented ones added for
# `collector init` after.
GPUS: dict[str, GpuSpec] = {
    # NVIDIA Ada Lovelace GPU Architecture whitepaper (v2.1), Appendix A, GeForce RTX 4090: 24 GB GDDR6X,
    # 384-bit at 21 Gbps = 1008 GB/s; "Peak BF16 Tensor TFLOPS with FP32 Accumulate 165.2/330.4"
    # (dense/sparse).
    # GeForce runs FP16/BF16 tensor math at half rate when accumulating in FP32 (330.3 TFLOPS is the
    # FP16-accumulate figure, which no BF16 framework path uses) -> 165.2e12.
    # 24564 MiB: nvidia-smi in the reference campaign's fingerprint.txt. Total Graphics Power 450 W (same
    # appendix).
    "rtx4090": GpuSpec(
        name="rtx4090",
        display_name="NVIDIA GeForce RTX 4090",
        memory_bytes=24564 * MIB,
        bandwidth_bytes_per_s=1008e9,
        bf16_flops_per_s=165.2e12,
        source="NVIDIA Ada Lovelace GPU Architecture whitepaper v2.1, Appendix A (RTX 4090)",
        board_power_w=450.0,
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
        source=(
            "NVIDIA H100 Tensor Core GPU datasheet (H100 SXM); H100 whitepaper Table 1 for the dense figure"
        ),
    ),
    # NVIDIA H200 Tensor Core GPU datasheet, H200 SXM: 141GB HBM3e, 4.8 TB/s; "BF16 Tensor Core 1,979 TFLOPS"
    # with sparsity -> dense 989.4 TFLOPS (same GH100 compute as H100 SXM). nvidia-smi: 143771 MiB.
    # The H200 NVL (same memory, 1,671 TFLOPS* sparse) is a different board: not matched to this entry.
    "h200": GpuSpec(
        name="h200",
        display_name="NVIDIA H200 SXM 141GB",
        memory_bytes=143771 * MIB,
        bandwidth_bytes_per_s=4.8e12,
        bf16_flops_per_s=989.4e12,
        source="NVIDIA H200 Tensor Core GPU datasheet (H200 SXM)",
    ),
    # NVIDIA L40S datasheet: 48GB GDDR6 with ECC, 864 GB/s; "BF16 Tensor Core 362.05 | 733 TFLOPS*"
    # (* with sparsity). Data-centre Ada runs FP32-accumulate at full rate, unlike GeForce. nvidia-smi: 46068
    # MiB.
    "l40s": GpuSpec(
        name="l40s",
        display_name="NVIDIA L40S",
        memory_bytes=46068 * MIB,
        bandwidth_bytes_per_s=864e9,
        bf16_flops_per_s=362.05e12,
        source="NVIDIA L40S GPU datasheet",
    ),
    # NVIDIA Ampere GA102 GPU Architecture whitepaper (v2.0), Appendix A, GeForce RTX 3090: 24 GB GDDR6X,
    # 384-bit at 19.5 Gbps = 936 GB/s; "Peak BF16 Tensor TFLOPS with FP32 Accumulate 71/142" (dense/sparse):
    # GeForce half rate, as on the 4090 (142 TFLOPS dense is the FP16-accumulate figure; 82 SMs x 1,024
    # FP16-accumulate FLOP/clk x 1.695 GHz = 142.3e12, halved = 71.2e12). 24576 MiB: nvidia-smi as printed by
    # several public logs ("NVIDIA GeForce RTX 3090, 24576").
    "rtx3090": GpuSpec(
        name="rtx3090",
        display_name="NVIDIA GeForce RTX 3090",
        memory_bytes=24576 * MIB,
        bandwidth_bytes_per_s=936e9,
        bf16_flops_per_s=71e12,
        source="NVIDIA Ampere GA102 GPU Architecture whitepaper v2.0, Appendix A (RTX 3090)",
    ),
    # NVIDIA RTX Blackwell GPU Architecture whitepaper, Appendix A, GeForce RTX 5090: 32 GB GDDR7, 512-bit at
    # 28 Gbps = 1,792 GB/s; "Peak BF16 Tensor TFLOPS with FP32 Accumulate 209.5/419" (dense/sparse): GeForce
    # half rate (the marketed 838 TFLOPS is FP16-accumulate with sparsity; 170 SMs x 1,024 FLOP/clk x
    # 2.407 GHz = 419e12 FP16-accumulate dense, halved = 209.5e12). 32607 MiB: nvidia-smi in public logs.
    "rtx5090": GpuSpec(
        name="rtx5090",
        display_name="NVIDIA GeForce RTX 5090",
        memory_bytes=32607 * MIB,
        bandwidth_bytes_per_s=1792e9,
        bf16_flops_per_s=209.5e12,
        source="NVIDIA RTX Blackwell GPU Architecture whitepaper, Appendix A (RTX 5090)",
    ),
    # NVIDIA A100 Tensor Core GPU datasheet, columns "A100 40GB PCIe" and "A100 40GB SXM": 40GB HBM2,
    # 1,555GB/s for both; "BFLOAT16 Tensor Core 312 TFLOPS | 624 TFLOPS*" (* with sparsity). The two 40 GB
    # boards differ only in power (250 W / 400 W), so one entry holds both. nvidia-smi: 40960 MiB for both
    # ("NVIDIA A100-SXM4-40GB" and "NVIDIA A100-PCIE-40GB" in public logs).
    "a100-40gb": GpuSpec(
        name="a100-40gb",
        display_name="NVIDIA A100 40GB (SXM or PCIe)",
        memory_bytes=40960 * MIB,
        bandwidth_bytes_per_s=1555e9,
        bf16_flops_per_s=312e12,
        source="NVIDIA A100 Tensor Core GPU datasheet (A100 40GB PCIe / A100 40GB SXM)",
    ),
    # Same datasheet, A100 80GB PCIe: 80GB HBM2e, 1,935GB/s (lower than the SXM board's 2,039 GB/s, hence its
    # own entry); BF16 312 TFLOPS dense like every A100. nvidia-smi: "NVIDIA A100 80GB PCIe", 81920 MiB.
    "a100-80gb-pcie": GpuSpec(
        name="a100-80gb-pcie",
        display_name="NVIDIA A100 80GB PCIe",
        memory_bytes=81920 * MIB,
        bandwidth_bytes_per_s=1935e9,
        bf16_flops_per_s=312e12,
        source="NVIDIA A100 Tensor Core GPU datasheet (A100 80GB PCIe)",
    ),
    # Same datasheet, H100 PCIe: 80GB HBM2e, 2 TB/s ("2,000 GB/sec"); "BF16 Tensor Core 1,513 teraFLOPS*"
    # (* with sparsity; "1/2 lower without sparsity") -> dense 756 TFLOPS, the H100 whitepaper's "Peak BF16
    # Tensor TFLOPS with FP32 Accumulate" for H100 PCIe (114 SMs, fewer than SXM's 132). nvidia-smi:
    # "NVIDIA H100 PCIe", 81559 MiB (public logs).
    "h100-pcie": GpuSpec(
        name="h100-pcie",
        display_name="NVIDIA H100 PCIe 80GB",
        memory_bytes=81559 * MIB,
        bandwidth_bytes_per_s=2.0e12,
        bf16_flops_per_s=756e12,
        source="NVIDIA H100 Tensor Core GPU datasheet (H100 PCIe); H100 whitepaper for the dense figure",
    ),
    # NVIDIA L4 Tensor Core GPU datasheet: 24GB GDDR6, 300 GB/s; "BF16 Tensor Core 242 teraFLOPS*" (* with
    # sparsity) -> dense 121 TFLOPS. The datasheet gives one figure (no separate FP32-accumulate row); like
    # the
    # L40S, a data-centre Ada part, so no GeForce half rate is applied. nvidia-smi: "NVIDIA L4", 23034 MiB.
    "l4": GpuSpec(
        name="l4",
        display_name="NVIDIA L4",
        memory_bytes=23034 * MIB,
        bandwidth_bytes_per_s=300e9,
        bf16_flops_per_s=121e12,
        source="NVIDIA L4 Tensor Core GPU datasheet",
    ),
    # NVIDIA A10G (AWS G5 instances): a GA102 variant made for AWS, with no public NVIDIA datasheet. Memory:
    # 24 GB GDDR6, nvidia-smi "NVIDIA A10G", 23028 MiB (public logs). Bandwidth: 600 GB/s, the A10 datasheet's
    # figure for the same 384-bit 12.5 Gbps GDDR6, which third-party comparisons give for the A10G as well -
    # not a vendor figure for this card. The tensor rate is left out (None): the A10 datasheet's 125 TFLOPS
    # BF16 is a different chip configuration, and the A10G figure circulating (~70 TFLOPS) has no vendor
    # source. Measure it: python -m collector.protocol.ceilings --out ceilings.json.
    "a10g": GpuSpec(
        name="a10g",
        display_name="NVIDIA A10G",
        memory_bytes=23028 * MIB,
        bandwidth_bytes_per_s=600e9,
        bf16_flops_per_s=None,
        source="no NVIDIA datasheet for the A10G (AWS-only part): bandwidth is the A10 datasheet's 600 GB/s "
        "for the same memory; no published tensor rate (measure the ceilings)",
    ),
    # AMD Instinct MI300X data sheet: 192 GB HBM3, "Peak Theoretical Memory Bandwidth 5.3 TB/s", "Peak BF16
    # 1307.4 TFLOPs" dense (2614.9 with structured sparsity; matrix cores accumulate BF16 in FP32). Memory:
    # rocm-smi "VRAM Total Memory (B): 206141652992" = 196592 MiB (public log, ROCm/legacy-rocm-build#4750).
    "mi300x": GpuSpec(
        name="mi300x",
        display_name="AMD Instinct MI300X",
        memory_bytes=196592 * MIB,
        bandwidth_bytes_per_s=5.3e12,
        bf16_flops_per_s=1307.4e12,
        source="AMD Instinct MI300X data sheet; memory as rocm-smi reports it",
    ),
    # AMD Instinct MI325X data sheet: 256 GB HBM3E, 6 TB/s, "Peak BF16 1307.4 TFLOPs" dense (same CDNA 3
    # compute as the MI300X, 2614.9 with sparsity). Memory: the ROCm GPU-specifications table's 256 GiB (no
    # public rocm-smi reading found; the MI300X's reads 0.01 % under its table figure of 192 GiB).
    "mi325x": GpuSpec(
        name="mi325x",
        display_name="AMD Instinct MI325X",
        memory_bytes=256 * 1024 * MIB,
        bandwidth_bytes_per_s=6.0e12,
        bf16_flops_per_s=1307.4e12,
        source="AMD Instinct MI325X data sheet; memory from the ROCm GPU specifications table",
    ),
}

ALIASES: dict[str, str] = {
    "4090": "rtx4090",
    "rtx-4090": "rtx4090",
    "geforce-rtx-4090": "rtx4090",
    "nvidia-geforce-rtx-4090": "rtx4090",
    "3090": "rtx3090",
    "rtx-3090": "rtx3090",
    "geforce-rtx-3090": "rtx3090",
    "nvidia-geforce-rtx-3090": "rtx3090",
    "5090": "rtx5090",
    "rtx-5090": "rtx5090",
    "geforce-rtx-5090": "rtx5090",
    "nvidia-geforce-rtx-5090": "rtx5090",
    "a100": "a100-80gb",
    "a100-sxm": "a100-80gb",
    "a100-80gb-sxm": "a100-80gb",
    "a100-sxm4-80gb": "a100-80gb",
    "nvidia-a100-sxm4-80gb": "a100-80gb",
    "a100-40gb-sxm": "a100-40gb",
    "a100-40gb-pcie": "a100-40gb",
    "a100-sxm4-40gb": "a100-40gb",
    "a100-pcie-40gb": "a100-40gb",
    "nvidia-a100-sxm4-40gb": "a100-40gb",
    "nvidia-a100-pcie-40gb": "a100-40gb",
    "a100-pcie-80gb": "a100-80gb-pcie",
    "nvidia-a100-80gb-pcie": "a100-80gb-pcie",
    "h100": "h100-sxm",
    "h100-80gb": "h100-sxm",
    "h100-sxm5": "h100-sxm",
    "h100-80gb-hbm3": "h100-sxm",
    "nvidia-h100-80gb-hbm3": "h100-sxm",
    "h100-pcie-80gb": "h100-pcie",
    "nvidia-h100-pcie": "h100-pcie",
    "h200-sxm": "h200",
    "nvidia-h200": "h200",
    "nvidia-l40s": "l40s",
    "nvidia-l4": "l4",
    "nvidia-a10g": "a10g",
    "amd-instinct-mi300x": "mi300x",
    "instinct-mi300x": "mi300x",
    "amd-instinct-mi325x": "mi325x",
    "instinct-mi325x": "mi325x",
}

# nvidia-smi's ``name`` for each entry (normalised by ``_key``), as the driver prints it: each string is
# taken from public nvidia-smi output (see the entries' comments). Exact names only, so that a sibling part
# with other numbers (RTX 4090 D, H100 NVL, H200 NVL, L40, A10) stays unknown rather than borrowing these.
NVIDIA_SMI_NAMES: dict[str, str] = {
    "nvidia-geforce-rtx-3090": "rtx3090",
    "nvidia-geforce-rtx-4090": "rtx4090",
    "nvidia-geforce-rtx-5090": "rtx5090",
    "nvidia-a100-sxm4-40gb": "a100-40gb",
    "nvidia-a100-pcie-40gb": "a100-40gb",
    "nvidia-a100-sxm4-80gb": "a100-80gb",
    "nvidia-a100-80gb-pcie": "a100-80gb-pcie",
    "nvidia-h100-80gb-hbm3": "h100-sxm",
    "nvidia-h100-pcie": "h100-pcie",
    "nvidia-h200": "h200",
    "nvidia-l40s": "l40s",
    "nvidia-l4": "l4",
    "nvidia-a10g": "a10g",
}

# nvidia-smi's memory.total for one model moves by a few MiB between drivers and ECC settings; a reading
# further than this from the entry's is another board (or a MIG slice / vGPU profile), not this entry.
MEMORY_MATCH_TOLERANCE = 0.02


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


def match_nvidia_smi(name: str, memory_mib: float | None = None) -> GpuSpec | None:
    """The datasheet entry for one ``nvidia-smi --query-gpu=name,memory.total`` line, or None when unknown.

    ``name`` must be one of the exact names the driver prints for a bundled card (``NVIDIA H100 80GB HBM3``,
    ``NVIDIA A100-SXM4-40GB``, ``NVIDIA GeForce RTX 4090``); ``memory_mib`` (MiB, as ``nounits`` prints it),
    when given, must be within 2 % of the entry's, so a MIG slice or a relabelled board is not mistaken for
    the full card.
    """
    key = NVIDIA_SMI_NAMES.get(_key(name))
    if key is None:
        return None
    spec = GPUS[key]
    if memory_mib is not None and spec.memory_bytes is not None:
        expected_mib = spec.memory_bytes / MIB
        if abs(memory_mib - expected_mib) > MEMORY_MATCH_TOLERANCE * expected_mib:
            return None
    return spec


def match_rocm_smi(name: str, memory_mib: float | None = None) -> GpuSpec | None:
    """The datasheet entry for one card of ``rocm-smi --showproductname --showmeminfo vram``: its Card
    Series (``AMD Instinct MI300X``) equal to an entry's display name, its VRAM (MiB), when given, within
    the same 2 % as ``match_nvidia_smi`` asks; None when unknown."""
    spec = next((g for g in GPUS.values() if _key(g.display_name) == _key(name)), None)
    if spec is None or spec.memory_bytes is None or memory_mib is None:
        return spec
    expected_mib = spec.memory_bytes / MIB
    return spec if abs(memory_mib - expected_mib) <= MEMORY_MATCH_TOLERANCE * expected_mib else None


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
