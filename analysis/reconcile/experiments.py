"""Issue #15's controlled experiments: one knob varied between runs, everything else fixed; each arm's
numbers, the repeat spread, the difference between arms with the spread beside it, the plan's prediction and a
verdict.

How a run declares its experiment and arm (the one rule): an arm IS a run name. A run belongs to an arm when
its name is the arm's run name, or that name plus a repeat suffix ``-r<k>`` (the H200 plans) or ``-<k>`` (what
``collector run`` appends when the name exists), k ≥ 2 being the k-th repeat. Which arms an experiment
compares, and which knob it varies, is data in ``EXPERIMENTS`` below, each citing its plans; one run may be an
arm of several experiments (the ``-np 256`` Q4_K_M run is the baseline of the slot, sampling and CUDA-graph
experiments). The knob is then read from the run's own plan.toml copy and must state the arm's value; a run
whose plan disagrees is reported as a failed check, never silently compared.

The predictions are data here too, each citing the plan.toml line that states it (``Prediction.plan``): the
plan headers were written as prose before the runs (raw/ is append-only, so they stay as written), not as
machine-readable fields. Where the plan derived its number from the byte ledger (KV quantization), the number
is recomputed here from ``analysis.theory`` and the plan's figure kept beside it (``stated``).

Numbers: every point's metric comes from ``BenchPoint.result`` — ``analysis.metrics.point_result`` over the
run's requests.jsonl; nothing here computes a percentile. Per arm and point: the mean over its repeats and the
repeat spread (max − min). A difference between two arms carries the larger of their spreads; an arm with one
run borrows the largest relative spread the experiment's repeated arms show at the same point (marked
``spread_borrowed``); a spread in % is relative to the arm's mean. A difference no larger than its spread is
"not distinguishable".

Verdicts (``verdict``): the measurement is the interval [m − s, m + s] (m the value or difference, s its
spread). A bound prediction [lo, hi] is confirmed when the interval lies inside it, refuted when they do not
meet, inconclusive otherwise; a point prediction p (a predicted change) is refuted when p lies outside the
interval, confirmed when inside and the interval excludes 0 (the change is seen), inconclusive when the
interval holds both p and 0; an exact prediction (a buffer size from the block formats) is confirmed when the
log's number equals it to the log's printed precision. A prediction over several points is refuted when any
point refutes it, confirmed when every point confirms it, inconclusive otherwise.

Experiment 6 (vLLM CPU, KV-pool size) predicts counts, so its predictions are exact: the lock-step wave
(``lockstep_preemptions``) gives each pool's preemptions, the output token after which each preempted stream
stops and the requests resident at the peak; measured by the preemption counter across the point, the streams'
longest pauses (requests.jsonl) and the running gauge, in every repeat.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

import pandas as pd

from analysis import findings as fnd
from analysis import fits, theory
from analysis.campaign import BenchPoint, Campaign, RunData
from analysis.keys import At
from analysis.reconcile import Context, Section, SectionInput, run_at
from analysis.reconcile.roofline import mean_context_tokens
from analysis.reconcile.theoryctx import TheoryCtx

H200 = "h200-qwen2.5-7b-random"
CPU = "cpu-tiny-qwen2"
MIB = 2**20
GIB = 2**30
# the KV pool of issue #6's H200 run (-np 256 × 6,144 tokens of f16 KV): the fixed budget the KV-quantization
# plan states capacity at
KV_BUDGET_GIB = 84.0
# llama.cpp prints buffer sizes with two decimals
LOG_MIB_RESOLUTION = 0.005
VERDICTS = ("confirmed", "refuted", "inconclusive")
_REPEAT = re.compile(r"^(?P<base>.+)-r?(?P<k>\d+)$")


# --- the rule: runs, arms, knobs ---------------------------------------------------------------------------


def repeat_of(run_name: str, arm_run: str) -> int | None:
    """The repeat number of ``run_name`` as a run of the arm ``arm_run``: 1 for the name itself, k for
    ``<arm_run>-r<k>`` or ``<arm_run>-<k>`` (k ≥ 2); None when the run is not of this arm."""
    if run_name == arm_run:
        return 1
    m = _REPEAT.match(run_name)
    if m and m["base"] == arm_run and int(m["k"]) >= 2:
        return int(m["k"])
    return None


@dataclass(frozen=True)
class Knob:
    """The one setting an experiment varies, as a run's plan.toml states it: a server flag's value (``arg``),
    a flag's presence (``flag``: "on"/"off") or an environment variable of the server (``env``: "unset" when
    absent)."""

    kind: str  # "arg" | "flag" | "env"
    name: str
    default: str | None = None  # an arg the plan may leave out (llama.cpp's default KV type is f16)

    def value(self, plan) -> str | None:
        args = list(plan.server.args)
        if self.kind == "arg":
            if self.name in args and args.index(self.name) + 1 < len(args):
                return args[args.index(self.name) + 1]
            return self.default
        if self.kind == "flag":
            return "on" if self.name in args else "off"
        if self.kind == "env":
            return plan.server.env.get(self.name, "unset")
        raise ValueError(f"unknown knob kind {self.kind!r}")


@dataclass(frozen=True)
class Arm:
    variant: str  # what the knob is set to, as a label key (labels_zh.EXPERIMENT_VARIANTS)
    run: str  # the arm's run name (without a repeat suffix)
    value: str  # the knob's value its plan must state
    weight_format: str


@dataclass(frozen=True)
class Experiment:
    name: str  # the finding topic is exp_<name>
    item: str  # issue #15's item ("1", "1b" …)
    campaign: str
    engine: str
    knob: Knob
    arms: tuple[Arm, ...]
    pairs: tuple[tuple[str, str], ...]  # (treatment arm run, baseline arm run): the differences it is about

    @property
    def topic(self) -> str:
        return f"exp_{self.name}"

    def arm(self, run: str) -> Arm:
        return next(a for a in self.arms if a.run == run)


def _arm(variant: str, run: str, value: str, fmt: str) -> Arm:
    return Arm(variant=variant, run=run, value=value, weight_format=fmt)


EXPERIMENTS: tuple[Experiment, ...] = (
    Experiment(
        "slots",
        "1",
        H200,
        "llamacpp",
        Knob("arg", "-np"),
        (
            _arm("np256", "exp-slots-np256-q4km", "256", "q4_k_m"),
            _arm("np64", "exp-slots-np64-q4km", "64", "q4_k_m"),
            _arm("np256", "exp-slots-np256-f16", "256", "fp16"),
            _arm("np64", "exp-slots-np64-f16", "64", "fp16"),
        ),
        (("exp-slots-np64-q4km", "exp-slots-np256-q4km"), ("exp-slots-np64-f16", "exp-slots-np256-f16")),
    ),
    Experiment(
        "sampling",
        "1b",
        H200,
        "llamacpp",
        Knob("flag", "-bs"),
        (
            _arm("sampling_cpu", "exp-slots-np256-q4km", "off", "q4_k_m"),
            _arm("sampling_gpu", "exp-sampling-backend-q4km", "on", "q4_k_m"),
            _arm("sampling_cpu", "exp-slots-np256-f16", "off", "fp16"),
            _arm("sampling_gpu", "exp-sampling-backend-f16", "on", "fp16"),
        ),
        (
            ("exp-sampling-backend-q4km", "exp-slots-np256-q4km"),
            ("exp-sampling-backend-f16", "exp-slots-np256-f16"),
        ),
    ),
    Experiment(
        "graphs",
        "2",
        H200,
        "llamacpp",
        Knob("env", "GGML_CUDA_DISABLE_GRAPHS"),
        (
            _arm("graphs_on", "exp-slots-np256-q4km", "unset", "q4_k_m"),
            _arm("graphs_off", "exp-graphs-off-q4km", "1", "q4_k_m"),
        ),
        (("exp-graphs-off-q4km", "exp-slots-np256-q4km"),),
    ),
    Experiment(
        "kv_quant",
        "3",
        H200,
        "llamacpp",
        Knob("arg", "-ctk", default="f16"),
        (
            _arm("kv_f16", "exp-kvf16-q4km", "f16", "q4_k_m"),
            _arm("kv_q8_0", "exp-kvq8-q4km", "q8_0", "q4_k_m"),
            _arm("kv_q4_0", "exp-kvq4-q4km", "q4_0", "q4_k_m"),
        ),
        (("exp-kvq8-q4km", "exp-kvf16-q4km"), ("exp-kvq4-q4km", "exp-kvf16-q4km")),
    ),
    Experiment(
        "kv_pool",
        "6",
        CPU,
        "vllm",
        Knob("arg", "--num-gpu-blocks-override"),
        tuple(_arm(f"pool_{n}", f"exp-kvpool-{n}blk", str(n), "bf16") for n in (32, 48, 64, 65)),
        tuple((f"exp-kvpool-{n}blk", "exp-kvpool-32blk") for n in (48, 64, 65)),
    ),
)
# Experiment 6's plans state their prediction table at these lines (the row of each pool size) and the
# formulas
# at POOL_FORMULA_LINES; every arm's plan.toml copy holds the same header.
POOL_TABLE_LINES = {32: 27, 48: 28, 64: 29, 65: 30}
POOL_FORMULA_LINES = {"residents": 14, "preemptions": 15, "onset": 16, "log": 21, "max_running": 24}

# Experiments the campaign could not run, and why (labels_zh.REASONS codes): n/a findings, so the page says
# so. Experiment 4 (model size) ran: analysis.reconcile.model_size. Speculative decoding (by its mechanism:
# step costs, the theory, server runs at natural and synthetic acceptance) and llama.cpp's chunked prefill
# (-b/-ub) ran in issue #26: analysis.reconcile.speculative and ladder, the campaign's ladder page.
NOT_RUN: dict[str, tuple[tuple[str, str, str], ...]] = {
    H200: (
        (
            "two_gpus",
            "exp_not_run_two_gpus",
            "experiment 5 not run: no nvidia-h200-x2 machine was lent in the session",
        ),
    ),
}


# --- predictions: data, each citing the plan.toml line that states it ---------------------------------------

INF = math.inf


@dataclass(frozen=True)
class Target:
    """Where a prediction is tested and what it says there: a point (test kind, concurrency, input length;
    None = every point of the arm) and a bound [lo, hi] or a point value. ``value`` None with kind ``ledger``:
    computed here from the byte ledger."""

    concurrency: int | None = None
    input_len: int | None = None
    lo: float = -INF
    hi: float = INF
    value: float | None = None


@dataclass(frozen=True)
class Prediction:
    name: str  # the finding's metric
    experiment: str
    arm: str  # the run of the arm the quantity belongs to (the treatment of a difference)
    versus: str | None  # the baseline arm of a difference
    quantity: (
        str  # p50_itl_ms | p50_itl_delta_ms | p50_itl_delta_pct | output_throughput_tokens_per_s | itl_slope
    )
    kind: str  # "bound" | "point" | "ledger" (a point value from analysis.theory)
    targets: tuple[Target, ...]
    plan: tuple[str, int, str]  # (run, line, words the line holds) of the plan.toml copy that states it
    stated: str  # the plan's words (as written, English)


def _slots(fmt: str) -> tuple[Prediction, ...]:
    np256, np64 = f"exp-slots-np256-{fmt}", f"exp-slots-np64-{fmt}"
    every_c = (1, 4, 8, 16, 32, 64)
    return (
        Prediction(
            "cells_scanned_model",
            "slots",
            np64,
            np256,
            "p50_itl_delta_ms",
            "point",
            tuple(Target(concurrency=c, value=-15.7) for c in every_c),
            (np256, 11, "np256 - np64 = +15.7 ms"),
            "It predicts np256 - np64 = +15.7 ms per step at EVERY concurrency, c=1 included. "
            "We expect it to FAIL",
        ),
        Prediction(
            "np64_not_slower",
            "slots",
            np64,
            np256,
            "p50_itl_delta_pct",
            "bound",
            tuple(Target(concurrency=c, lo=-10.0, hi=0.0) for c in (1, 4, 8))
            + tuple(Target(concurrency=c, lo=-20.0, hi=0.0) for c in (16, 32, 64)),
            (np256, 18, "np64 <= np256, difference <= 10 %"),
            "np64 <= np256, difference <= 10 % at c <= 8 and <= 20 % at c = 16..64",
        ),
        Prediction(
            "np64_c64_far_from_4090",
            "slots",
            np64,
            None,
            "p50_itl_ms",
            "bound",
            (Target(concurrency=64, lo=60.0),),
            (np256, 19, "(predicted >= 60 ms)"),
            "np64 does NOT bring c=64 near the 4090's 35 ms (predicted >= 60 ms)",
        ),
    )


def _sampling(fmt: str) -> tuple[Prediction, ...]:
    gpu, cpu = f"exp-sampling-backend-{fmt}", f"exp-slots-np256-{fmt}"
    return (
        Prediction(
            "c1_itl_drop",
            "sampling",
            gpu,
            cpu,
            "p50_itl_delta_ms",
            "point",
            (Target(concurrency=1, value=-1.0),),
            (gpu, 12, "p50 ITL c=1: ~4.3 -> ~3.3 ms (-1 ms)"),
            "p50 ITL c=1: ~4.3 -> ~3.3 ms (-1 ms)",
        ),
        Prediction(
            "c64_itl_bound",
            "sampling",
            gpu,
            None,
            "p50_itl_ms",
            "bound",
            (Target(concurrency=64, hi=15.0),),
            (gpu, 12, "c=64: ~76 -> <= 15 ms"),
            "c=64: ~76 -> <= 15 ms",
        ),
        Prediction(
            "c64_throughput_bound",
            "sampling",
            gpu,
            None,
            "output_throughput_tokens_per_s",
            "bound",
            (Target(concurrency=64, lo=3000.0),),
            (gpu, 12, "output tok/s at c=64: ~590 -> >= 3,000"),
            "output tok/s at c=64: ~590 -> >= 3,000",
        ),
        Prediction(
            "slope_bound",
            "sampling",
            gpu,
            None,
            "itl_slope_ms_per_stream",
            "bound",
            (Target(hi=0.15),),
            (gpu, 13, "<= 0.15 ms/stream"),
            "ITL(c) ~ a + b*c with b falling from ~1.1 ms/stream to <= 0.15 ms/stream",
        ),
        Prediction(
            "sampling_is_per_slot_cost",
            "sampling",
            gpu,
            None,
            "p50_itl_ms",
            "bound",
            (Target(concurrency=64, hi=60.0),),
            (gpu, 14, "If c=64 stays >= 60 ms"),
            "If c=64 stays >= 60 ms, sampling is not the per-slot cost",
        ),
    )


_GRAPHS = "exp-graphs-off-q4km"
_ON = "exp-slots-np256-q4km"
_KV16 = "exp-kvf16-q4km"


def _kv_ledger(arm: str, line: int) -> tuple[Prediction, ...]:
    return (
        Prediction(
            "itl_change_from_ledger",
            "kv_quant",
            arm,
            _KV16,
            "p50_itl_delta_ms",
            "ledger",
            (
                Target(concurrency=8, input_len=16384),
                Target(concurrency=8, input_len=8192),
                Target(concurrency=1, input_len=16384),
            ),
            (arm, line, "p50 ITL q8_0 -0.83 ms, q4_0 -1.27 ms vs f16"),
            "p50 ITL q8_0 -0.83 ms, q4_0 -1.27 ms vs f16 [c=8, 16,384 in]; at c=8, 8,192 in: -0.41 / -0.64 "
            "ms; at c=1, 16,384 in: -0.10 / -0.16 ms (inside the noise)",
        ),
        Prediction(
            "slower_than_f16",
            "kv_quant",
            arm,
            _KV16,
            "p50_itl_delta_ms",
            "bound",
            (Target(concurrency=8, input_len=16384, lo=0.0),),
            (arm, 18, "the quantized arms come out SLOWER than f16"),
            "If the quantized flash-attention kernels are not bandwidth-bound here (dequantization in the "
            "kernel), the quantized arms come out SLOWER than f16 and the ledger fails for time while "
            "holding for size.",
        ),
    )


PREDICTIONS: tuple[Prediction, ...] = (
    *_slots("q4km"),
    *_slots("f16"),
    *_sampling("q4km"),
    *_sampling("f16"),
    Prediction(
        "c1_launch_cost",
        "graphs",
        _GRAPHS,
        _ON,
        "p50_itl_delta_ms",
        "bound",
        (Target(concurrency=1, lo=0.5, hi=1.5),),
        (_GRAPHS, 14, "p50 ITL +0.5..1.5 ms"),
        "At c=1 (GPU step ~3 ms) that shows: p50 ITL +0.5..1.5 ms (+10..35 %)",
    ),
    Prediction(
        "high_c_unchanged",
        "graphs",
        _GRAPHS,
        _ON,
        "p50_itl_delta_pct",
        "bound",
        tuple(Target(concurrency=c, lo=-5.0, hi=5.0) for c in (16, 32, 64)),
        (_GRAPHS, 15, "within +-5 % of graphs on"),
        "At c=16..64 ... within +-5 % of graphs on",
    ),
    *_kv_ledger("exp-kvq8-q4km", 15),
    *_kv_ledger("exp-kvq4-q4km", 15),
)

# The ledger numbers the KV-quantization plan wrote (ms, vs f16), checked against the recomputation in tests.
KV_LEDGER_STATED_MS: dict[tuple[str, int, int], float] = {
    ("q8_0", 8, 16384): -0.83,
    ("q4_0", 8, 16384): -1.27,
    ("q8_0", 8, 8192): -0.41,
    ("q4_0", 8, 8192): -0.64,
    ("q8_0", 1, 16384): -0.10,
    ("q4_0", 1, 16384): -0.16,
}


# --- pure formulas ------------------------------------------------------------------------------------------


def mean(values: Sequence[float]) -> float:
    """An arm's value at a point: the arithmetic mean over its repeats (units of the metric)."""
    return math.fsum(values) / len(values)


def repeat_spread(values: Sequence[float]) -> float | None:
    """The repeat spread of one arm at one point: max − min over its runs (units of the metric); None for one
    run."""
    return max(values) - min(values) if len(values) > 1 else None


def spread_pct(spread: float, base: float) -> float:
    """A spread relative to a value, %: spread ÷ base × 100."""
    return spread / base * 100.0


def difference(treatment: float, baseline: float) -> float:
    """Treatment − baseline (units of the metric)."""
    return treatment - baseline


def difference_pct(treatment: float, baseline: float) -> float:
    """(treatment − baseline) ÷ baseline × 100, %."""
    return (treatment - baseline) / baseline * 100.0


def distinguishable(delta: float, spread: float | None) -> bool | None:
    """A difference is distinguishable when it is larger than the spread: |Δ| > s; None without a spread."""
    return None if spread is None else abs(delta) > spread


def consecutive_runs(ids: Sequence[int]) -> int:
    """Maximal runs of consecutive integers in a set of slot ids: {0,1,2, 60,61, 63} → 3."""
    s = sorted(set(ids))
    return (1 + sum(1 for a, b in zip(s, s[1:], strict=False) if b != a + 1)) if s else 0


def kv_buffer_mib(n_ctx_tokens: int, kv_bytes_per_token: float) -> float:
    """llama.cpp's KV buffer, MiB = −c (cells, all slots) × KV bytes per token (all layers, K + V) ÷ 2^20."""
    return n_ctx_tokens * kv_bytes_per_token / MIB


def capacity_tokens(budget_bytes: float, kv_bytes_per_token: float) -> int:
    """Tokens a KV budget holds, tokens = floor(budget bytes ÷ KV bytes per token)."""
    return math.floor(budget_bytes / kv_bytes_per_token)


def ledger_itl_change_ms(
    concurrency: int,
    mean_context: float,
    kv_bytes_per_token: float,
    kv_bytes_per_token_base: float,
    bw: float,
) -> float:
    """The change of a decode step the byte ledger predicts when only the KV bytes per token change, ms:
    concurrency × mean context [tokens] × (bytes/token − baseline bytes/token) ÷ bandwidth [B/s] × 1000."""
    return (
        theory.kv_bytes_read_per_step(kv_bytes_per_token - kv_bytes_per_token_base, concurrency, mean_context)
        / bw
        * 1000.0
    )


def lockstep_preemptions(
    n_blocks: int, block_tokens: int, concurrency: int, input_len: int, output_len: int
) -> tuple[list[int], int]:
    """One lock-step wave of ``concurrency`` equal requests in a vLLM pool of ``n_blocks`` blocks (one is the
    null block, so n − 1 hold KV), each admitted with its prompt and grown a token per step, the newest
    preempted (recompute) when the running ones need one block more than is free: (the output token after
    which each preempted stream stops, in order; the requests still running at the wave's peak).

    With m requests running at context T each, they need m × ceil(T ÷ B) blocks; the next preemption comes at
    T = B × floor((n − 1) ÷ m) + 1, i.e. after output token T − prompt, if T stays within the request's
    largest context (prompt + output − 1; the last token is never cached); then m − 1 requests run on."""
    usable = n_blocks - 1
    peak = input_len + output_len - 1
    stops: list[int] = []
    m = concurrency
    while m > 0:
        t = block_tokens * (usable // m) + 1
        if t > peak:
            break
        stops.append(t - input_len)
        m -= 1
    return stops, m


def demand_over_pool(
    concurrency: int, input_len: int, output_len: int, block_tokens: int, n_blocks: int
) -> float:
    """KV demand of a wave over the pool, ratio = concurrency × ceil((prompt + output − 1) ÷ B) ÷ n blocks."""
    return concurrency * math.ceil((input_len + output_len - 1) / block_tokens) / n_blocks


def log_max_concurrency(pool_tokens: int, tokens_per_request: int) -> float:
    """vLLM's start-up "Maximum concurrency for T tokens per request: X x" = pool tokens ÷ T (it counts the
    null block as usable)."""
    return pool_tokens / tokens_per_request


def stop_tokens(records: Sequence, n: int) -> list[tuple[int, float, int]]:
    """The n streams whose largest gap between two chunks is longest — preempted streams stop for whole
    seconds while the others decode on —: (output tokens received before that gap, the gap's start [mono ns],
    the request's line), sorted by the token count. The count n comes from the server's preemption counter."""
    gaps = []
    for r in records:
        c, k = r.chunk_mono_ns, r.chunk_tokens
        if len(c) < 2:
            continue
        i = max(range(len(c) - 1), key=lambda j: c[j + 1] - c[j])
        gaps.append((c[i + 1] - c[i], sum(k[: i + 1]), c[i], r))
    top = sorted(gaps, key=lambda g: -g[0])[:n]
    return sorted((tokens, start, r.index) for _, tokens, start, r in top)


def share_removed_pct(slope_treatment: float, slope_baseline: float) -> float:
    """Share of the per-stream cost a change removes, %: (1 − slope_treatment ÷ slope_baseline) × 100."""
    return (1.0 - slope_treatment / slope_baseline) * 100.0


def verdict(
    kind: str, m: float, s: float | None, lo: float = -INF, hi: float = INF, value: float | None = None
) -> str:
    """One point's verdict (see the module docstring): the measurement is [m − s, m + s]."""
    if kind == "exact":
        assert value is not None
        return "confirmed" if abs(m - value) <= LOG_MIB_RESOLUTION else "refuted"
    if s is None:
        return "inconclusive"
    a, b = m - s, m + s
    if kind == "bound":
        if lo <= a and b <= hi:
            return "confirmed"
        if b < lo or a > hi:
            return "refuted"
        return "inconclusive"
    assert value is not None
    if not a <= value <= b:
        return "refuted"
    return "inconclusive" if a <= 0.0 <= b else "confirmed"


def combine(verdicts: Sequence[str]) -> str:
    """Several points: refuted if any point refutes, confirmed if every point confirms, else inconclusive."""
    if "refuted" in verdicts:
        return "refuted"
    if verdicts and all(v == "confirmed" for v in verdicts):
        return "confirmed"
    return "inconclusive"


# --- reading the runs ---------------------------------------------------------------------------------------

METRICS = ("p50_itl_ms", "p50_tpot_ms", "output_throughput_tokens_per_s")


def point_metrics(p: BenchPoint) -> dict[str, float | None]:
    """The point's numbers, as analysis.metrics computed them (point_result over its requests)."""
    r = p.result
    return {
        "p50_itl_ms": r.itl.p50_ms if r.completed else None,
        "p50_tpot_ms": r.tpot.p50_ms if r.completed else None,
        "output_throughput_tokens_per_s": r.output_throughput_tok_s,
    }


def point_id(p: BenchPoint) -> tuple[str, int, int, int | None]:
    """What makes two runs' points the same point: test kind, concurrency, prompt and requested output
    length."""
    return (
        p.test_kind,
        int(p.concurrency or 0),
        int(round(p.input_len_tokens or 0)),
        p.requested_output_len_tokens,
    )


@dataclass
class ArmRuns:
    """An arm's runs in this campaign, by repeat number, and the plan check."""

    experiment: Experiment
    arm: Arm
    runs: dict[int, RunData] = field(default_factory=dict)
    knob_values: dict[int, str | None] = field(default_factory=dict)

    @property
    def first(self) -> RunData:
        return self.runs[min(self.runs)]

    @property
    def plan_ok(self) -> bool:
        return all(v == self.arm.value for v in self.knob_values.values())


def arm_runs(campaign: Campaign, exp: Experiment) -> dict[str, ArmRuns]:
    """The experiment's arms with their runs (the rule in the module docstring), by arm run name."""
    out: dict[str, ArmRuns] = {}
    for arm in exp.arms:
        ar = ArmRuns(exp, arm)
        for run in campaign.all_runs:
            k = repeat_of(run.name, arm.run)
            if k is None:
                continue
            ar.runs[k] = run
            plan = run.docs.plan
            ar.knob_values[k] = exp.knob.value(plan) if plan is not None else None
        if ar.runs:
            out[arm.run] = ar
    return out


def slot_runs_by_point(run: RunData) -> dict[str, tuple[list[int], int, str]] | None:
    """Per point label: the slot ids its requests took (server.log ``launch_slot_ … processing task`` lines),
    how many runs of consecutive ids they form, and the citation of the point's first launch line. Launches
    follow the requests' arrival and the points run one after another (the next point starts when the last one
    has drained), so the launches, in log order, split into the points by their request counts. None when the
    log has no launch lines or their count differs from the requests'."""
    rel, log = run.server_log
    _, req = run.requests
    launches = getattr(log, "launches", None)
    if not launches or req is None:
        return None
    counts: dict[tuple[int, str], int] = {}
    for r in req.records:
        counts[(r.point_index, r.point)] = counts.get((r.point_index, r.point), 0) + 1
    if sum(counts.values()) != len(launches):
        return None
    out: dict[str, tuple[list[int], int, str]] = {}
    i = 0
    for (_, label), n in sorted(counts.items()):
        chunk = launches[i : i + n]
        i += n
        ids = sorted(x.slot_id for x in chunk)
        out[label] = (ids, consecutive_runs(ids), run.cite(rel, chunk[0].line))
    return out


# --- the section --------------------------------------------------------------------------------------------


@dataclass
class ArmPoint:
    """One arm at one point: its runs' values per metric."""

    experiment: str
    arm: ArmRuns
    pid: tuple
    points: dict[int, BenchPoint]  # repeat -> point
    values: dict[str, list[float]]

    def value(self, metric: str) -> float | None:
        v = self.values.get(metric) or []
        return mean(v) if v else None

    def spread(self, metric: str) -> float | None:
        v = self.values.get(metric) or []
        return repeat_spread(v) if v else None


class _Exp:
    """One experiment's arms and points in this campaign, with the spread rules."""

    def __init__(self, exp: Experiment, arms: dict[str, ArmRuns], ctx: Context):
        self.exp = exp
        self.arms = arms
        self.at: dict[tuple[str, tuple], ArmPoint] = {}
        for run_name, ar in arms.items():
            by_pid: dict[tuple, dict[int, BenchPoint]] = {}
            for k, run in ar.runs.items():
                for p in run.points:
                    if not p.warmup:
                        by_pid.setdefault(point_id(p), {})[k] = p
            for pid, pts in by_pid.items():
                vals: dict[str, list[float]] = {}
                for m in METRICS:
                    vs = [point_metrics(pts[k])[m] for k in sorted(pts)]
                    vals[m] = [v for v in vs if v is not None]
                self.at[(run_name, pid)] = ArmPoint(exp.name, ar, pid, pts, vals)

    def point(self, arm: str, pid: tuple) -> ArmPoint | None:
        return self.at.get((arm, pid))

    def pids(self, arm: str) -> list[tuple]:
        return sorted(pid for a, pid in self.at if a == arm)

    def find(self, arm: str, t: Target) -> list[tuple]:
        return [
            pid
            for pid in self.pids(arm)
            if (t.concurrency is None or pid[1] == t.concurrency)
            and (t.input_len is None or pid[2] == t.input_len)
        ]

    def borrowed_pct(self, metric: str, pid: tuple) -> float | None:
        """The largest relative repeat spread of the experiment's repeated arms at this point, %."""
        pcts = []
        for (_a, q), ap in self.at.items():
            if q != pid:
                continue
            s, v = ap.spread(metric), ap.value(metric)
            if s is not None and v:
                pcts.append(spread_pct(s, v))
        return max(pcts) if pcts else None

    def spread(self, arm: str, pid: tuple, metric: str) -> tuple[float | None, bool]:
        """(absolute spread, borrowed?) of one arm at one point."""
        ap = self.point(arm, pid)
        if ap is None:
            return None, False
        s = ap.spread(metric)
        if s is not None:
            return s, False
        pct, v = self.borrowed_pct(metric, pid), ap.value(metric)
        return (None, False) if pct is None or v is None else (pct / 100.0 * v, True)


def _label_point(pid: tuple) -> dict:
    return {
        "test_kind": pid[0],
        "concurrency": pid[1],
        "input_len_tokens": pid[2],
        "output_len_tokens": pid[3],
    }


def _points_rows(e: _Exp, ctx: Context) -> list[dict]:
    rows = []
    for (arm, pid), ap in sorted(e.at.items(), key=lambda x: (x[0][0], x[0][1])):
        for k, p in sorted(ap.points.items()):
            m = point_metrics(p)
            rows.append(
                {
                    "experiment": e.exp.name,
                    "arm": arm,
                    "variant": ap.arm.arm.variant,
                    "run": p.run.name,
                    "repeat": k,
                    "engine": p.run.engine,
                    "weight_format": ap.arm.arm.weight_format,
                    **_label_point(pid),
                    **m,
                    "gate_ok": ctx.gate_ok(p),
                    "source": p.cite(),
                }
            )
    return rows


def _arm_rows(e: _Exp) -> list[dict]:
    rows = []
    for (arm, pid), ap in sorted(e.at.items(), key=lambda x: (x[0][0], x[0][1])):
        row = {
            "experiment": e.exp.name,
            "arm": arm,
            "variant": ap.arm.arm.variant,
            "weight_format": ap.arm.arm.weight_format,
            **_label_point(pid),
            "runs": len(ap.points),
        }
        for m in ("p50_itl_ms", "output_throughput_tokens_per_s"):
            v = ap.value(m)
            s, borrowed = e.spread(arm, pid, m)
            row[m] = v
            row[f"{m}_spread"] = s
            row[f"{m}_spread_pct"] = spread_pct(s, v) if s is not None and v else None
            row[f"{m}_spread_borrowed"] = borrowed
        rows.append(row)
    return rows


@dataclass
class Diff:
    delta: float
    delta_pct: float
    spread: float | None
    spread_pct: float | None
    borrowed: bool
    treatment: ArmPoint
    baseline: ArmPoint

    @property
    def distinguishable(self) -> bool | None:
        return distinguishable(self.delta, self.spread)


def diff(e: _Exp, treatment: str, baseline: str, pid: tuple, metric: str = "p50_itl_ms") -> Diff | None:
    """Treatment − baseline at one point, with the larger of the two arms' spreads beside it."""
    t, b = e.point(treatment, pid), e.point(baseline, pid)
    if t is None or b is None or t.value(metric) is None or b.value(metric) is None:
        return None
    tv, bv = t.value(metric), b.value(metric)
    st, bt = e.spread(treatment, pid, metric)
    sb, bb = e.spread(baseline, pid, metric)
    spreads = [s for s in (st, sb) if s is not None]
    s = max(spreads) if spreads else None
    return Diff(
        delta=difference(tv, bv),
        delta_pct=difference_pct(tv, bv),
        spread=s,
        spread_pct=spread_pct(s, bv) if s is not None else None,
        borrowed=bt or bb,
        treatment=t,
        baseline=b,
    )


def _diff_rows(e: _Exp) -> list[dict]:
    rows = []
    for treatment, baseline in e.exp.pairs:
        for pid in e.pids(treatment):
            for metric in ("p50_itl_ms", "output_throughput_tokens_per_s"):
                d = diff(e, treatment, baseline, pid, metric)
                if d is None:
                    continue
                rows.append(
                    {
                        "experiment": e.exp.name,
                        "arm": treatment,
                        "versus": baseline,
                        "variant": e.exp.arm(treatment).variant,
                        "versus_variant": e.exp.arm(baseline).variant,
                        "weight_format": e.exp.arm(treatment).weight_format,
                        **_label_point(pid),
                        "metric": metric,
                        "treatment": d.treatment.value(metric),
                        "baseline": d.baseline.value(metric),
                        "delta": d.delta,
                        "delta_pct": d.delta_pct,
                        "spread": d.spread,
                        "spread_pct": d.spread_pct,
                        "spread_borrowed": d.borrowed,
                        "distinguishable": d.distinguishable,
                    }
                )
    return rows


# --- slopes (the per-extra-stream cost) ---------------------------------------------------------------------

SLOPE_CONCURRENCIES = (8, 16, 32, 64)


def itl_slope(points: Sequence[BenchPoint]) -> fits.LinearFit | None:
    """p50 ITL [ms] against concurrency over c = 8..64 of one run, least squares: the slope is the step time
    each extra stream adds, ms/stream."""
    xs, ys = [], []
    for p in points:
        if p.warmup or p.test_kind != "concurrency_sweep" or p.concurrency not in SLOPE_CONCURRENCIES:
            continue
        v = point_metrics(p)["p50_itl_ms"]
        if v is not None:
            xs.append(float(p.concurrency))
            ys.append(v)
    return fits.least_squares(xs, ys) if len(xs) >= 2 else None


@dataclass
class Slope:
    arm: ArmRuns
    fits: dict[int, fits.LinearFit]

    @property
    def value(self) -> float:
        return mean([f.slope for f in self.fits.values()])

    @property
    def spread(self) -> float | None:
        return repeat_spread([f.slope for f in self.fits.values()])


def slopes(e: _Exp) -> dict[str, Slope]:
    out = {}
    for arm, ar in e.arms.items():
        fs = {k: f for k, run in ar.runs.items() if (f := itl_slope(run.points)) is not None}
        if fs:
            out[arm] = Slope(ar, fs)
    return out


def slope_spread(sl: dict[str, Slope], arm: str) -> tuple[float | None, bool]:
    """An arm's slope spread: its repeats' (max − min), else the largest relative one of the repeated arms."""
    s = sl[arm].spread
    if s is not None:
        return s, False
    pcts = [spread_pct(x.spread, x.value) for x in sl.values() if x.spread is not None and x.value]
    return (max(pcts) / 100.0 * sl[arm].value, True) if pcts else (None, False)


# --- predictions evaluated ----------------------------------------------------------------------------------


@dataclass
class Evaluated:
    prediction: Prediction
    rows: list[dict]
    verdict: str


def _ledger_value(th: TheoryCtx, pred: Prediction, e: _Exp, pid: tuple) -> float | None:
    """The KV ledger's predicted step change at this point (see ``ledger_itl_change_ms``)."""
    if th.cfg is None or th.ceilings is None:
        return None
    t_kv = e.exp.arm(pred.arm).value
    b_kv = e.exp.arm(pred.versus).value if pred.versus else None
    if b_kv is None:
        return None
    out_len = pid[3] or 0
    return ledger_itl_change_ms(
        pid[1],
        mean_context_tokens(pid[2], out_len),
        theory.kv_bytes_per_token(th.cfg, t_kv),
        theory.kv_bytes_per_token(th.cfg, b_kv),
        th.ceilings.copy_bytes_per_s,
    )


def evaluate(pred: Prediction, e: _Exp, th: TheoryCtx, sl: dict[str, Slope]) -> Evaluated | None:
    rows: list[dict] = []
    if pred.arm not in e.arms or (pred.versus and pred.versus not in e.arms):
        return None
    for t in pred.targets:
        if pred.quantity == "itl_slope_ms_per_stream":
            if pred.arm not in sl:
                continue
            m = sl[pred.arm].value
            s, borrowed = slope_spread(sl, pred.arm)
            rows.append(_pred_row(pred, None, m, s, borrowed, "bound", t.lo, t.hi, None))
            continue
        for pid in e.find(pred.arm, t):
            if pred.quantity in ("p50_itl_delta_ms", "p50_itl_delta_pct"):
                d = diff(e, pred.arm, pred.versus, pid)
                if d is None:
                    continue
                pct = pred.quantity.endswith("_pct")
                m, s = (d.delta_pct, d.spread_pct) if pct else (d.delta, d.spread)
                borrowed = d.borrowed
            else:
                metric = pred.quantity
                ap = e.point(pred.arm, pid)
                if ap is None or ap.value(metric) is None:
                    continue
                m = ap.value(metric)
                s, borrowed = e.spread(pred.arm, pid, metric)
            kind, value = pred.kind, t.value
            if kind == "ledger":
                kind, value = "point", _ledger_value(th, pred, e, pid)
                if value is None:
                    continue
            rows.append(_pred_row(pred, pid, m, s, borrowed, kind, t.lo, t.hi, value))
    if not rows:
        return None
    return Evaluated(pred, rows, combine([r["verdict"] for r in rows]))


def _pred_row(pred, pid, m, s, borrowed, kind, lo, hi, value) -> dict:
    v = verdict(kind, m, s, lo, hi, value)
    return {
        "experiment": pred.experiment,
        "prediction": pred.name,
        "arm": pred.arm,
        "versus": pred.versus,
        "quantity": pred.quantity,
        "kind": kind,
        **(_label_point(pid) if pid else {"test_kind": None, "concurrency": None, "input_len_tokens": None}),
        "predicted_lo": None if lo == -INF else lo,
        "predicted_hi": None if hi == INF else hi,
        "predicted_value": value,
        "measured": m,
        "spread": s,
        "spread_borrowed": borrowed,
        "interval_lo": None if s is None else m - s,
        "interval_hi": None if s is None else m + s,
        "verdict": v,
    }


def _margin(r: dict) -> float:
    """How far a refuting point's interval lies from the prediction (units of the quantity)."""
    a, b = r["interval_lo"], r["interval_hi"]
    if a is None:
        return 0.0
    if r["kind"] == "point":
        return max(r["predicted_value"] - b, a - r["predicted_value"])
    lo = -INF if r["predicted_lo"] is None else r["predicted_lo"]
    hi = INF if r["predicted_hi"] is None else r["predicted_hi"]
    return max(lo - b, a - hi)


def _decisive(ev: Evaluated) -> dict:
    """The point that decides the verdict: the refuting point farthest from the prediction in units of its
    spread (the clearest refutation), else the first inconclusive point, else the first point."""
    refuting = [r for r in ev.rows if r["verdict"] == "refuted"]
    if refuting:
        return max(refuting, key=lambda r: _margin(r) / r["spread"] if r["spread"] else _margin(r))
    return next((r for r in ev.rows if r["verdict"] == "inconclusive"), ev.rows[0])


QUANTITY_UNITS = {
    "p50_itl_ms": "ms",
    "p50_itl_delta_ms": "ms",
    "p50_itl_delta_pct": "%",
    "output_throughput_tokens_per_s": "token/s",
    "itl_slope_ms_per_stream": "ms/request",
}


def _plan_cite(campaign: Campaign, pred: Prediction) -> str:
    """The plan.toml line stating the prediction, cited in the run whose plan copy it is."""
    run = next((r for r in campaign.all_runs if r.name == pred.plan[0]), None)
    return run.cite("plan.toml", pred.plan[1]) if run else f"{pred.plan[0]}/plan.toml:{pred.plan[1]}"


def _cites(e: _Exp, arms: Sequence[str | None], pid: tuple | None) -> list[str]:
    """The citations of the arms' points (requests.jsonl#point of each repeat); every point without a pid."""
    out = []
    for arm in arms:
        if not arm or arm not in e.arms:
            continue
        for q in e.pids(arm):
            if pid is None or q[:3] == pid[:3]:
                out += [p.cite() for p in e.point(arm, q).points.values()]
    return out


def _prediction_finding(ev: Evaluated, e: _Exp, campaign: Campaign) -> fnd.Finding:
    pred = ev.prediction
    ar = e.arms[pred.arm]
    at = run_at(ar.first, ar.arm.weight_format, topic=e.exp.topic)
    d = _decisive(ev)
    plan_cite = _plan_cite(campaign, pred)
    srcs = [plan_cite]
    for r in ev.rows:
        pid = None if r["concurrency"] is None else (r["test_kind"], r["concurrency"], r["input_len_tokens"])
        srcs += _cites(e, (pred.arm, pred.versus), pid)
    return fnd.Finding(
        at=at(pred.name),
        value=d["measured"],
        unit=QUANTITY_UNITS[pred.quantity],
        sources=tuple(dict.fromkeys(srcs)),
        status="mismatch" if ev.verdict == "refuted" else "ok",
        detail=f"plan: {pred.stated}",
        extra={
            "verdict": ev.verdict,
            "experiment": pred.experiment,
            "quantity": pred.quantity,
            "kind": d["kind"],
            "baseline_arm": pred.versus,
            "concurrency": d["concurrency"],
            "input_len_tokens": d["input_len_tokens"],
            "predicted_lo": d["predicted_lo"],
            "predicted_hi": d["predicted_hi"],
            "predicted_value": d["predicted_value"],
            "spread": d["spread"],
            "spread_borrowed": d["spread_borrowed"],
            "interval_lo": d["interval_lo"],
            "interval_hi": d["interval_hi"],
            "points": [
                {
                    k: r[k]
                    for k in (
                        "concurrency",
                        "input_len_tokens",
                        "measured",
                        "spread",
                        "predicted_value",
                        "verdict",
                    )
                }
                for r in ev.rows
            ],
            "plan_source": plan_cite,
        },
    )


# --- what each experiment adds beyond its predictions -------------------------------------------------------


def _buffer_findings(e: _Exp, th: TheoryCtx, rows: list[dict]) -> list[fnd.Finding]:
    """Per run: llama.cpp's KV buffer (log) against −c × KV bytes per token of the plan's cache type, and the
    per-slot context (log) against −c ÷ −np; both exact."""
    out: list[fnd.Finding] = []
    if th.cfg is None:
        return out
    for arm, ar in sorted(e.arms.items()):
        for k, run in sorted(ar.runs.items()):
            rel, log = run.server_log
            plan = run.docs.plan
            if log is None or plan is None:
                continue
            args = list(plan.server.args)
            n_ctx = int(Knob("arg", "-c").value(plan) or 0)
            n_par = int(Knob("arg", "-np").value(plan) or 1)
            kv_type = Knob("arg", "-ctk", default="f16").value(plan) or "f16"
            kvb = theory.kv_bytes_per_token(th.cfg, kv_type)
            at = run_at(run, ar.arm.weight_format, topic=e.exp.topic)
            plan_src = run.cite("plan.toml")
            kv_lines = [b for b in log.buffers if b.kind == "KV"]
            if n_ctx and kv_lines:
                pred = kv_buffer_mib(n_ctx, kvb)
                got = log.kv_buffer_mib
                out.append(
                    fnd.measured(
                        at("kv_buffer_mib"),
                        got,
                        "MiB",
                        [run.cite(rel, b.line) for b in kv_lines] + [plan_src],
                        theory=pred,
                        tolerance_pct=LOG_MIB_RESOLUTION / pred * 100.0,
                        detail=(
                            "llama.cpp KV buffer (log) vs -c x KV bytes per token of -ctk/-ctv "
                            "(block formats)"
                        ),
                        verdict=verdict("exact", got, None, value=pred),
                        n_ctx_tokens=n_ctx,
                        kv_type=kv_type,
                        kv_bytes_per_token=kvb,
                        repeat=k,
                    )
                )
                rows.append(
                    {
                        "experiment": e.exp.name,
                        "arm": arm,
                        "variant": ar.arm.variant,
                        "run": run.name,
                        "n_ctx_tokens": n_ctx,
                        "slots": n_par,
                        "kv_type": kv_type,
                        "kv_bytes_per_token": kvb,
                        "kv_buffer_mib_theory": pred,
                        "kv_buffer_mib_log": got,
                        "source": run.cite(rel, kv_lines[0].line),
                    }
                )
            if n_ctx and log.n_ctx_slot is not None and "-np" in args:
                out.append(
                    fnd.measured(
                        at("ctx_per_slot_tokens"),
                        log.n_ctx_slot,
                        "tokens",
                        [run.cite(rel, log.lines.get("n_ctx_slot")), plan_src],
                        theory=n_ctx / n_par,
                        tolerance_pct=0.0,
                        detail="per-slot context (log n_ctx_slot) vs -c / -np",
                        verdict=verdict("exact", float(log.n_ctx_slot), None, value=n_ctx / n_par),
                        slots=n_par,
                        repeat=k,
                    )
                )
    return out


def _slot_evidence(e: _Exp, rows: list[dict]) -> dict[tuple[str, int, int], tuple[int, str]]:
    """Per (arm, repeat, concurrency) of one-wave points: runs of consecutive busy slot ids and the
    citation."""
    found: dict[tuple[str, int, int], tuple[int, str]] = {}
    for arm, ar in sorted(e.arms.items()):
        for k, run in sorted(ar.runs.items()):
            by_label = slot_runs_by_point(run)
            if by_label is None:
                continue
            for p in run.points:
                if p.warmup or p.label not in by_label:
                    continue
                ids, n_runs, cite = by_label[p.label]
                one_wave = p.result.num_prompts is not None and p.result.num_prompts <= (p.concurrency or 0)
                rows.append(
                    {
                        "experiment": e.exp.name,
                        "arm": arm,
                        "variant": ar.arm.variant,
                        "run": run.name,
                        "repeat": k,
                        "weight_format": ar.arm.weight_format,
                        "concurrency": p.concurrency,
                        "requests": len(ids),
                        "one_wave": one_wave,
                        "slot_id_min": ids[0],
                        "slot_id_max": ids[-1],
                        "busy_slot_runs": n_runs if one_wave else None,
                        "source": cite,
                    }
                )
                if one_wave:
                    found[(arm, k, int(p.concurrency))] = (n_runs, cite)
    return found


def _slots_findings(e: _Exp, slot_rows: list[dict]) -> list[fnd.Finding]:
    """The concurrency-32 anomaly: -np 64 slower than -np 256, the difference beside its spread, and the busy
    slot ids of each arm at that point (how many runs of consecutive ids)."""
    out: list[fnd.Finding] = []
    ev = _slot_evidence(e, slot_rows)
    for treatment, baseline in e.exp.pairs:
        for pid in e.find(treatment, Target(concurrency=32)):
            d = diff(e, treatment, baseline, pid)
            if d is None:
                continue
            ar = e.arms[treatment]
            at = run_at(ar.first, ar.arm.weight_format, topic=e.exp.topic)
            runs_t = {
                k: ev[(treatment, k, 32)][0] for k in e.arms[treatment].runs if (treatment, k, 32) in ev
            }
            runs_b = {k: ev[(baseline, k, 32)][0] for k in e.arms[baseline].runs if (baseline, k, 32) in ev}
            cites = [
                ev[(a, k, 32)][1] for a in (treatment, baseline) for k in e.arms[a].runs if (a, k, 32) in ev
            ]
            out.append(
                fnd.measured(
                    at("c32_p50_itl_delta_pct"),
                    d.delta_pct,
                    "%",
                    _cites(e, (treatment, baseline), pid) + cites,
                    detail="p50 ITL at concurrency 32, -np 64 vs -np 256 (mean over repeats), with the "
                    "repeat spread; busy slot ids from server.log launch_slot_ lines",
                    spread_pct=d.spread_pct,
                    spread_borrowed=d.borrowed,
                    distinguishable=d.distinguishable,
                    treatment_ms=d.treatment.value("p50_itl_ms"),
                    baseline_ms=d.baseline.value("p50_itl_ms"),
                    busy_slot_runs=[runs_t[k] for k in sorted(runs_t)],
                    busy_slot_runs_baseline=[runs_b[k] for k in sorted(runs_b)],
                )
            )
    return out


def _slope_rows_and_findings(e: _Exp, rows: list[dict]) -> list[fnd.Finding]:
    """The step time each extra stream adds (c = 8..64) per arm, and the share of it GPU sampling removes."""
    out: list[fnd.Finding] = []
    sl = slopes(e)
    for arm, s in sorted(sl.items()):
        sp, borrowed = slope_spread(sl, arm)
        for k, f in sorted(s.fits.items()):
            rows.append(
                {
                    "experiment": e.exp.name,
                    "arm": arm,
                    "variant": s.arm.arm.variant,
                    "run": s.arm.runs[k].name,
                    "repeat": k,
                    "weight_format": s.arm.arm.weight_format,
                    "slope_ms_per_stream": f.slope,
                    "intercept_ms": f.intercept,
                    "r2": f.r2,
                    "n": f.n,
                }
            )
        at = run_at(s.arm.first, s.arm.arm.weight_format, topic=e.exp.topic)
        out.append(
            fnd.measured(
                at("itl_slope_ms_per_stream"),
                s.value,
                "ms/request",
                [
                    p.cite()
                    for run in s.arm.runs.values()
                    for p in run.points
                    if p.concurrency in SLOPE_CONCURRENCIES
                ],
                detail=(
                    "least-squares slope of p50 ITL over concurrency 8..64 (analysis.fits), mean over repeats"
                ),
                spread=sp,
                spread_borrowed=borrowed,
                r2=[f.r2 for _, f in sorted(s.fits.items())],
            )
        )
    for treatment, baseline in e.exp.pairs:
        if treatment not in sl or baseline not in sl:
            continue
        t, b = sl[treatment], sl[baseline]
        st, _ = slope_spread(sl, treatment)
        sb, _ = slope_spread(sl, baseline)
        st, sb = st or 0.0, sb or 0.0
        share = share_removed_pct(t.value, b.value)
        # the share's range over the two slopes' spread intervals
        ends = [share_removed_pct(t.value + a, b.value + c) for a in (-st, st) for c in (-sb, sb)]
        at = run_at(t.arm.first, t.arm.arm.weight_format, topic=e.exp.topic)
        out.append(
            fnd.measured(
                at("per_stream_cost_removed_pct"),
                share,
                "%",
                [t.arm.first.cite("requests.jsonl"), b.arm.first.cite("requests.jsonl")],
                detail="1 - slope(-bs) / slope(CPU sampling), slopes of p50 ITL over c = 8..64",
                share_lo=min(ends),
                share_hi=max(ends),
                slope_ms_per_stream=t.value,
                slope_baseline_ms_per_stream=b.value,
            )
        )
    return out


def _delta_finding(
    e: _Exp, treatment: str, baseline: str, c: int, metric_name: str, input_len: int | None = None
) -> fnd.Finding | None:
    """The p50 ITL difference at one point (and the throughput's), with the spread beside it."""
    pids = e.find(treatment, Target(concurrency=c, input_len=input_len))
    d = diff(e, treatment, baseline, pids[0]) if pids else None
    if d is None:
        return None
    ar = e.arms[treatment]
    at = run_at(ar.first, ar.arm.weight_format, topic=e.exp.topic)
    thr = diff(e, treatment, baseline, pids[0], "output_throughput_tokens_per_s")
    return fnd.measured(
        at(metric_name),
        d.delta_pct,
        "%",
        _cites(e, (treatment, baseline), pids[0]),
        detail=f"p50 ITL at concurrency {c}: arm vs baseline (means over repeats), with the repeat spread",
        spread_pct=d.spread_pct,
        spread_borrowed=d.borrowed,
        distinguishable=d.distinguishable,
        treatment_ms=d.treatment.value("p50_itl_ms"),
        baseline_ms=d.baseline.value("p50_itl_ms"),
        delta_ms=d.delta,
        concurrency=c,
        throughput_delta_pct=thr.delta_pct if thr else None,
        treatment_tokens_per_s=thr.treatment.value("output_throughput_tokens_per_s") if thr else None,
        baseline_tokens_per_s=thr.baseline.value("output_throughput_tokens_per_s") if thr else None,
    )


def _repeat_spread_findings(e: _Exp, metric: str) -> list[fnd.Finding]:
    """Per repeated arm: the largest repeat spread of a metric over its points, % of the first run."""
    out: list[fnd.Finding] = []
    for arm, ar in sorted(e.arms.items()):
        pcts = []
        for pid in e.pids(arm):
            ap = e.point(arm, pid)
            s, v = ap.spread(metric), ap.value(metric)
            if s is not None and v:
                pcts.append((spread_pct(s, v), pid[1]))
        if pcts:
            worst = max(pcts)
            at = run_at(ar.first, ar.arm.weight_format, topic=e.exp.topic)
            out.append(
                fnd.measured(
                    at(f"max_repeat_spread_pct_{'itl' if metric == 'p50_itl_ms' else 'throughput'}"),
                    worst[0],
                    "%",
                    _cites(e, (arm,), None),
                    detail=(
                        f"largest repeat spread of {metric} over the arm's points: (max - min) / "
                        "mean of the repeats"
                    ),
                    concurrency=worst[1],
                )
            )
    return out


def _graphs_findings(e: _Exp) -> list[fnd.Finding]:
    """The repeat spread of each arm (largest over points) beside the effect, and llama.cpp's own graph-reuse
    counter (print_timing "graphs reused"), which does not see CUDA graphs."""
    out = _repeat_spread_findings(e, "p50_itl_ms")
    for _arm, ar in sorted(e.arms.items()):
        at = run_at(ar.first, ar.arm.weight_format, topic=e.exp.topic)
        zero, total, srcs = 0, 0, []
        for run in ar.runs.values():
            rel, log = run.server_log
            if log is None:
                continue
            blocks = [t for t in log.timings if t.graphs_reused is not None]
            total += len(blocks)
            zero += sum(1 for t in blocks if t.graphs_reused == 0)
            srcs.append(run.cite(rel))
        if total:
            out.append(
                fnd.measured(
                    at("graphs_reused_zero_blocks"),
                    zero,
                    "count",
                    srcs,
                    detail=(
                        "print_timing blocks whose 'graphs reused' (llama.cpp graph reuse, not CUDA "
                        "graphs) is 0"
                    ),
                    blocks=total,
                )
            )
    return out


def _kv_quant_findings(e: _Exp, th: TheoryCtx) -> list[fnd.Finding]:
    """Theory per KV type: bytes per token from the block formats and the tokens a fixed 84 GiB holds; and
    whether f16's step grows from 8k to 16k of context at all (are KV reads visible in the step?)."""
    out: list[fnd.Finding] = []
    if th.cfg is None:
        return out
    for _arm, ar in sorted(e.arms.items()):
        kvb = theory.kv_bytes_per_token(th.cfg, ar.arm.value)
        at = run_at(ar.first, ar.arm.weight_format, topic=e.exp.topic)
        src = ar.first.cite("plan.toml", 13)
        out.append(
            fnd.measured(
                at("kv_bytes_per_token"),
                kvb,
                "bytes/token",
                [src],
                detail="2 x L x K x d x bytes per element",
                kv_type=ar.arm.value,
                theory_only=True,
            )
        )
        out.append(
            fnd.measured(
                at("capacity_tokens_at_budget"),
                capacity_tokens(KV_BUDGET_GIB * GIB, kvb),
                "tokens",
                [src],
                detail=(
                    f"floor({KV_BUDGET_GIB:g} GiB / KV bytes per token): the tokens issue #6's KV "
                    "pool would hold"
                ),
                budget_gib=KV_BUDGET_GIB,
                kv_type=ar.arm.value,
                theory_only=True,
            )
        )
    base = next((a for a in e.arms if e.exp.arm(a).variant == "kv_f16"), None)
    if base is not None:
        p8 = e.find(base, Target(concurrency=8, input_len=8192))
        p16 = e.find(base, Target(concurrency=8, input_len=16384))
        if p8 and p16:
            a8, a16 = e.point(base, p8[0]), e.point(base, p16[0])
            v8, v16 = a8.value("p50_itl_ms"), a16.value("p50_itl_ms")
            s = max(x for x in (a8.spread("p50_itl_ms"), a16.spread("p50_itl_ms"), 0.0) if x is not None)
            ar = e.arms[base]
            at = run_at(ar.first, ar.arm.weight_format, topic=e.exp.topic)
            out.append(
                fnd.measured(
                    at("f16_itl_growth_8k_to_16k_pct"),
                    difference_pct(v16, v8),
                    "%",
                    _cites(e, (base,), p8[0]) + _cites(e, (base,), p16[0]),
                    detail=(
                        "p50 ITL at concurrency 8: 16,384 vs 8,192 input tokens, f16 KV (mean over repeats)"
                    ),
                    spread_pct=spread_pct(s, v8),
                    distinguishable=distinguishable(v16 - v8, s),
                    itl_8k_ms=v8,
                    itl_16k_ms=v16,
                )
            )
    return out


def _pool_row(run: RunData, p: BenchPoint, ctx: Context, n_blocks: int) -> dict | None:
    """Experiment 6, one run: the pool from the log, the prediction for its size, and what the streams, the
    preemption counter and the running gauge show."""
    rel, log = run.server_log
    _, req = run.requests
    w = ctx.window(p)
    if log is None or log.kv_cache_tokens is None or req is None or w is None:
        return None
    block = log.kv_cache_tokens // n_blocks
    c, inp, out = int(p.concurrency), int(round(p.input_len_tokens)), int(p.requested_output_len_tokens)
    stops_pred, residents_pred = lockstep_preemptions(n_blocks, block, c, inp, out)
    recs = p.records
    pre = w.delta("preemptions")
    stops = stop_tokens(recs, int(pre)) if pre is not None else []
    t0 = min(r.send_mono_ns for r in recs)
    # residents at the peak: the running gauge's lowest sample after it first showed its highest and before
    # the
    # first request ended (the survivors of the wave; preempted ones wait)
    residents = None
    max_running = w.gauges["running"].max if "running" in w.gauges else None
    if run.name in ctx.sampler_series and max_running is not None:
        ts, cols = ctx.sampler_series[run.name]
        first_end = min(r.end_mono_ns for r in recs) / 1e9
        idx = [i for i in range(w.first_row, w.last_row + 1) if not math.isnan(cols["running"][i])]
        top = next((i for i in idx if cols["running"][i] == max_running), None)
        peak = [cols["running"][i] for i in idx if top is not None and i >= top and ts[i] <= first_end]
        residents = int(min(peak)) if peak else None
    log_x = log.max_concurrency_x
    return {
        "experiment": "kv_pool",
        "run": run.name,
        "test_kind": p.test_kind,
        "concurrency": c,
        "input_len_tokens": inp,
        "output_len_tokens": out,
        "n_blocks": n_blocks,
        "block_tokens": block,
        "pool_tokens_log": log.kv_cache_tokens,
        "demand_over_pool": demand_over_pool(c, inp, out, block, n_blocks),
        "log_max_concurrency": log_x,
        "log_max_concurrency_theory": log_max_concurrency(
            n_blocks * block, log.max_concurrency_tokens_per_request
        )
        if log.max_concurrency_tokens_per_request
        else None,
        "preemptions_predicted": len(stops_pred),
        "preemptions": int(pre) if pre is not None else None,
        "stop_tokens_predicted": stops_pred,
        "stop_tokens": [t for t, _, _ in stops],
        "first_stop_s": (stops[0][1] - t0) / 1e9 if stops else None,
        "residents_predicted": residents_pred,
        "residents": residents,
        "max_running": int(max_running) if max_running is not None else None,
        "log_source": run.cite(rel, log.lines.get("max_concurrency_x")),
        "counter_source": ctx.sample_cite(run, w.first_row) if run.name in ctx.sample_lines else None,
        "source": p.cite(),
    }


def _exact_finding(
    at: At, got: list, pred, unit: str, detail: str, srcs: list[str], plan: str, extra: dict
) -> fnd.Finding:
    """A count predicted exactly, measured in every repeat: confirmed when every repeat equals it."""
    ok = all(g == pred for g in got)
    return fnd.Finding(
        at=at,
        value=got[0],
        unit=unit,
        sources=tuple(dict.fromkeys(srcs)),
        status="ok" if ok else "mismatch",
        detail=detail,
        extra={
            "verdict": "confirmed" if ok else "refuted",
            "predicted_value": pred,
            "per_repeat": got,
            "plan_source": plan,
            **extra,
        },
    )


def _kv_pool_findings(e: _Exp, ctx: Context, rows: list[dict]) -> list[fnd.Finding]:
    """Experiment 6: per pool size, preemptions (count, onset, stop points) against the lock-step prediction
    and demand ÷ pool, and the requests resident at the wave's peak against the log's max-concurrency line."""
    out: list[fnd.Finding] = []
    for arm, ar in sorted(e.arms.items(), key=lambda x: int(x[1].arm.value)):
        n_blocks = int(ar.arm.value)
        per_run = []
        for k, run in sorted(ar.runs.items()):
            p = next((q for q in run.points if q.test_kind == "overload" and not q.warmup), None)
            row = _pool_row(run, p, ctx, n_blocks) if p is not None else None
            if row is None:
                continue
            row |= {"arm": arm, "variant": ar.arm.variant, "repeat": k}
            # the table is a CSV the page prints: token lists as text, not a Python list's repr
            rows.append(
                row | {c: ", ".join(map(str, row[c])) for c in ("stop_tokens", "stop_tokens_predicted")}
            )
            per_run.append(row)
        if not per_run:
            continue
        first = per_run[0]
        at = run_at(ar.first, ar.arm.weight_format, topic=e.exp.topic)
        plan = ar.first.cite("plan.toml", POOL_TABLE_LINES.get(n_blocks))
        srcs = [plan] + [r["source"] for r in per_run] + [r["log_source"] for r in per_run]
        srcs += [r["counter_source"] for r in per_run if r["counter_source"]]
        common = {
            "n_blocks": n_blocks,
            "demand_over_pool": first["demand_over_pool"],
            "repeats": len(per_run),
        }

        residents_minus_log = (
            first["residents"] - first["log_max_concurrency"]
            if first["residents"] is not None and first["log_max_concurrency"] is not None
            else None
        )
        exact = (
            (
                "preemptions",
                "preemptions",
                "preemptions_predicted",
                "count",
                "vllm:num_preemptions_total across the overload point vs the lock-step prediction",
                {},
            ),
            (
                "stop_tokens",
                "stop_tokens",
                "stop_tokens_predicted",
                "list",
                "output tokens each preempted stream had before it stopped (its longest gap), requests.jsonl",
                {"first_stop_s": [r["first_stop_s"] for r in per_run]},
            ),
            (
                "residents_at_peak",
                "residents",
                "residents_predicted",
                "requests",
                "running requests at the wave's peak (running gauge) vs floor((N - 1) / blocks per request)",
                {
                    "log_max_concurrency": first["log_max_concurrency"],
                    "residents_minus_log": residents_minus_log,
                },
            ),
            (
                "max_running",
                "max_running",
                "concurrency",
                "requests",
                "the running gauge's highest sample in the point: every request admitted with its prompt",
                {},
            ),
        )
        for metric, key, pred_key, unit, detail, extra in exact:
            got = [r[key] for r in per_run]
            out.append(
                _exact_finding(at(metric), got, first[pred_key], unit, detail, srcs, plan, common | extra)
            )
        out.append(
            fnd.measured(
                at("log_max_concurrency"),
                first["log_max_concurrency"],
                "x",
                [first["log_source"], plan],
                theory=first["log_max_concurrency_theory"],
                tolerance_pct=0.5,  # the log prints two decimals: 8.12 for 8.125
                detail=(
                    "the log's 'Maximum concurrency for T tokens per request' vs pool tokens / T "
                    "(null block counted)"
                ),
                **common,
            )
        )
    return out


def _plan_check(e: _Exp, campaign: Campaign) -> fnd.Finding:
    """Every arm's runs state the arm's knob value in their plan.toml (the rule's second half)."""
    bad = {
        ar.runs[k].name: {"expected": ar.arm.value, "plan": v}
        for ar in e.arms.values()
        for k, v in ar.knob_values.items()
        if v != ar.arm.value
    }
    return fnd.checked(
        At(topic=e.exp.topic)("arms_match_plans"),
        not bad,
        [r.cite("plan.toml") for ar in e.arms.values() for r in ar.runs.values()],
        detail=f"knob {e.exp.knob.kind} {e.exp.knob.name}: each arm's plan.toml states the arm's value",
        mismatched=bad,
        runs=sorted(r.name for ar in e.arms.values() for r in ar.runs.values()),
        arms=len(e.arms),
        item=e.exp.item,
    )


def run(s: SectionInput) -> Section:
    campaign, ctx, th = s.campaign, s.ctx, s.th
    tables: dict[str, list[dict]] = {
        "experiment_runs": [],
        "experiment_points": [],
        "experiment_arms": [],
        "experiment_diffs": [],
        "experiment_predictions": [],
        "experiment_buffers": [],
        "experiment_slots": [],
        "experiment_slopes": [],
        "experiment_pool": [],
    }
    out: list[fnd.Finding] = []
    for exp in EXPERIMENTS:
        if exp.campaign != campaign.name:
            continue
        arms = arm_runs(campaign, exp)
        if len(arms) < 2:
            out.append(
                fnd.not_available(
                    At(topic=exp.topic)("arms_match_plans"),
                    "bool",
                    "exp_runs_missing",
                    f"experiment {exp.name}: fewer than two of its arms "
                    f"({', '.join(a.run for a in exp.arms)}) have runs in this campaign",
                )
            )
            continue
        e = _Exp(exp, arms, ctx)
        out.append(_plan_check(e, campaign))
        for arm, ar in sorted(arms.items()):
            for k, r in sorted(ar.runs.items()):
                tables["experiment_runs"].append(
                    {
                        "experiment": exp.name,
                        "item": exp.item,
                        "arm": arm,
                        "variant": ar.arm.variant,
                        "run": r.name,
                        "repeat": k,
                        "weight_format": ar.arm.weight_format,
                        "knob": exp.knob.name,
                        "knob_value": ar.knob_values.get(k),
                        "expected_value": ar.arm.value,
                        "source": r.cite("plan.toml"),
                    }
                )
        tables["experiment_points"] += _points_rows(e, ctx)
        tables["experiment_arms"] += _arm_rows(e)
        tables["experiment_diffs"] += _diff_rows(e)
        sl = slopes(e)
        for pred in PREDICTIONS:
            if pred.experiment != exp.name:
                continue
            ev = evaluate(pred, e, th, sl)
            if ev is None:
                continue
            tables["experiment_predictions"] += ev.rows
            out.append(_prediction_finding(ev, e, campaign))
        if exp.name in ("slots", "kv_quant"):
            out += _buffer_findings(e, th, tables["experiment_buffers"])
        if exp.name == "slots":
            out += _slots_findings(e, tables["experiment_slots"])
        if exp.name == "sampling":
            out += _slope_rows_and_findings(e, tables["experiment_slopes"])
            for treatment, baseline in exp.pairs:
                f = _delta_finding(e, treatment, baseline, 64, "c64_p50_itl_delta_pct")
                if f is not None:
                    out.append(f)
        if exp.name == "graphs":
            out += _graphs_findings(e)
            for treatment, baseline in exp.pairs:
                for c in (1, 32):
                    f = _delta_finding(e, treatment, baseline, c, f"c{c}_p50_itl_delta_pct")
                    if f is not None:
                        out.append(f)
        if exp.name == "kv_pool":
            out += _kv_pool_findings(e, ctx, tables["experiment_pool"])
            out += _repeat_spread_findings(e, "output_throughput_tokens_per_s")
        if exp.name == "kv_quant":
            out += _kv_quant_findings(e, th)
            for treatment, baseline in exp.pairs:
                f = _delta_finding(e, treatment, baseline, 8, "c8_16k_p50_itl_delta_pct", input_len=16384)
                if f is not None:
                    out.append(f)
    for name, reason, detail in NOT_RUN.get(campaign.name, ()):
        out.append(fnd.not_available(At(topic="experiments")(name), "", reason, detail))
    frames = {name: pd.DataFrame(rows) for name, rows in tables.items() if rows}
    return Section(name="experiments", tables=frames, findings=out)
