"""The card's measured ceilings (``ceilings.json``, written by ``collector.protocol.ceilings`` in the same
lease as the
runs) against its datasheet peaks (``analysis.core.gpus``): device-to-device copy bandwidth and a large bf16
matmul's FLOP/s.

A datasheet figure is a peak no program reaches, so the tolerance is not "equal within noise" but "as close as
a healthy card gets": a plain device copy sustains about 85–92 % of the HBM/GDDR peak, and a large cuBLAS bf16
GEMM about 75–85 % of the dense tensor peak. A measurement further below than that says the card ran
throttled (power cap, clocks, a MIG slice, a neighbour on the GPU) or the datasheet entry is the wrong part,
and it reads as a mismatch; a measurement above the datasheet is a mismatch too (the entry is wrong).
error_pct = (measured − datasheet) ÷ datasheet × 100, as for every finding (``findings.measured``).
Campaigns without a ``ceilings.json`` (imported results, CPU smoke runs) get no ceiling findings at all.
"""

from __future__ import annotations

from analysis.core import findings as fnd
from analysis.core.keys import At
from analysis.reconcile import Section, SectionInput

COPY_TOLERANCE_PCT = 15.0
MATMUL_TOLERANCE_PCT = 25.0


def run(s: SectionInput) -> Section:
    th = s.th
    c = th.ceilings
    if c is None:
        return Section(name="ceilings")
    gpu = th.gpu if th.gpu is not None and th.gpu.has_datasheet else None
    src = th.ceilings_source[0] if th.ceilings_source else ""
    out = []
    for key, field, unit, value, peak, tol, what in (
        (
            At(topic="ceilings")("copy_bytes_per_s"),
            "copy_bytes_per_s",
            "bytes/s",
            c.copy_bytes_per_s,
            gpu.bandwidth_bytes_per_s if gpu else None,
            COPY_TOLERANCE_PCT,
            "device-to-device copy, bytes read + written per s, against the datasheet memory bandwidth",
        ),
        (
            At(topic="ceilings")("bf16_matmul_flops_per_s"),
            "bf16_matmul_flops_per_s",
            "FLOP/s",
            c.bf16_matmul_flops_per_s,
            gpu.bf16_flops_per_s if gpu else None,
            MATMUL_TOLERANCE_PCT,
            "bf16 matmul (2 n^3 FLOPs per call) per s, against the datasheet dense bf16 tensor peak",
        ),
    ):
        sources = [f"{src}:{field}"] if src else []
        if peak is None or gpu is None:
            why = th.gpu_reason or "the GPU has no bundled datasheet"
            out.append(
                fnd.measured(key, value, unit, sources, detail=f"{what}; no datasheet to compare: {why}")
            )
            continue
        detail = (
            f"{what} ({gpu.display_name}); a datasheet peak is not reachable, so the tolerance is how far "
            f"below it a healthy card still lands (±{tol:g} %); further off means a throttled card or a "
            "wrong datasheet entry"
        )
        out.append(
            fnd.measured(
                key,
                value,
                unit,
                sources,
                theory=peak,
                tolerance_pct=tol,
                detail=detail,
                datasheet_source=gpu.source,
            )
        )
    return Section(name="ceilings", findings=out)
