"""Issue #26 item 2: speculative decoding on the H200, by its mechanism.

Theory (Leviathan et al. 2023; llama.cpp's draft-simple): k one-token draft steps, then ONE target step over
k + 1 tokens; each drafted token accepted with probability α given the ones before it. Per target step:

- tokens  ``expected_tokens(α, k)`` = (1 − α^(k+1)) ÷ (1 − α)  (k + 1 at α = 1);
- time    ``step_ms(k)`` = k · t_draft(1) + t_target(k + 1), from the step costs
``collector.protocol.stepcost``
  measured with llama-bench (``STEP_DEPTH`` tokens in the KV cache, no sampling, no server);
- speedup ``speedup(α, k)`` = expected_tokens · t_target(1) ÷ step time; break-even α where it is 1
  (``break_even_alpha``), best k the k that maximizes it at a given α.

The check: llama-server runs with the draft model (``spec-*`` runs; acceptance from the server's own
counters, ``llamacpp:spec_decode_num_accepted_tokens_total`` ÷ ``…num_draft_tokens_total`` at the run's last
scrape), against the run without a draft (``OFF_RUN``): measured speedup = p50 TPOT without ÷ p50 TPOT with,
at one stream. The server's step time = its p50 TPOT × the tokens each target step yielded (1 + accepted ÷
drafts); what it adds over the llama-bench step is the server's own work per speculative step.
Predictions: the ``# PREDICT`` lines of each run's plan (``ladder.plan_predictions``).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Any

import pandas as pd

from analysis.core import findings as fnd
from analysis.core.keys import At
from analysis.loading.campaign import RunData
from analysis.parse.llama_bench import LlamaBenchLog
from analysis.parse.scrapes_jsonl import counter_total, metric_samples
from analysis.reconcile import Section, SectionInput
from analysis.reconcile import experiments as ex
from analysis.reconcile.ladder import H200, gpu_busy_pct, plan_predictions
from collector.raw.metric_families import LLAMACPP_SPEC_ACCEPTED, LLAMACPP_SPEC_DRAFTED, LLAMACPP_SPEC_DRAFTS

NAME = "speculative"
TOPIC = "speculative"
STEPCOST_RUN = "spec-stepcost"
OFF_RUN = "spec-off-f16"
TARGET_TAG, DRAFT_TAG = "target-7b-f16", "draft-0.5b-f16"
STEP_DEPTH = 512  # the spec runs' prompts: 512 tokens, then up to 256 generated
ALPHAS = (0.0, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95)  # the reader's table
KS = tuple(range(1, 9))
DRAFTED, ACCEPTED, DRAFTS = LLAMACPP_SPEC_DRAFTED, LLAMACPP_SPEC_ACCEPTED, LLAMACPP_SPEC_DRAFTS
LLAMACPP_DEFAULT_DRAFT_MAX = 3  # llama-server --spec-draft-n-max's default (tools/server/README.md)


def expected_tokens(alpha: float, k: int) -> float:
    """Tokens one target step yields: (1 − α^(k+1)) ÷ (1 − α); k + 1 at α = 1 (dimensionless)."""
    return float(k + 1) if alpha >= 1.0 else (1.0 - alpha ** (k + 1)) / (1.0 - alpha)


def step_ms(k: int, draft_ms: float, target_k1_ms: float) -> float:
    """One speculative step, ms = k × t_draft(1) [ms] + t_target(k + 1) [ms]."""
    return k * draft_ms + target_k1_ms


def speedup(alpha: float, k: int, target_1_ms: float, spec_step_ms: float) -> float:
    """Tokens per ms with the draft ÷ without = expected_tokens(α, k) × t_target(1) ÷ step time."""
    return expected_tokens(alpha, k) * target_1_ms / spec_step_ms


def break_even_alpha(k: int, target_1_ms: float, spec_step_ms: float) -> float | None:
    """The α at which ``speedup`` = 1 (bisection; expected_tokens rises with α); None when even α = 1 loses
    (k + 1 tokens do not pay for the step)."""
    need = spec_step_ms / target_1_ms
    if expected_tokens(1.0, k) < need:
        return None
    lo, hi = 0.0, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2.0
        lo, hi = (mid, hi) if expected_tokens(mid, k) < need else (lo, mid)
    return (lo + hi) / 2.0


# --- the measurements ---------------------------------------------------------------------------------------


def step_costs(run: RunData) -> dict[tuple[str, int, int], float]:
    """(model tag, tokens, depth) → median step time [ms] over llama-bench's repeats."""
    out = {}
    for rel, rec in run.records.items():
        if not isinstance(rec, LlamaBenchLog):
            continue
        tag = rel.rsplit("/", 1)[-1].removeprefix("llama-bench-").removesuffix(".jsonl")
        for t in rec.tests:
            out[(tag, t.n_prompt, t.n_depth)] = statistics.median(t.samples_ns) / 1e6
    return out


def _flag(args: tuple[str, ...] | list[str], name: str) -> str | None:
    """A server flag's value in a plan's args (the last wins), None when absent."""
    vals = [args[i + 1] for i, a in enumerate(args[:-1]) if a == name]
    return vals[-1] if vals else None


@dataclass
class SpecRun:
    run: RunData
    k: int  # drafted tokens per step (0: no draft)
    synth_alpha: float | None  # the first synthetic acceptance rate, None: natural acceptance
    tpot_c1_ms: float
    drafted: float | None
    accepted: float | None
    drafts: float | None

    @property
    def acceptance(self) -> float | None:
        """Accepted ÷ drafted tokens (the share of drafted tokens the target kept)."""
        return self.accepted / self.drafted if self.drafted and self.accepted is not None else None

    @property
    def tokens_per_step(self) -> float | None:
        """1 + accepted ÷ drafts: the tokens each target step yielded."""
        return 1.0 + self.accepted / self.drafts if self.drafts and self.accepted is not None else None


def _last_counters(run: RunData) -> tuple[float | None, float | None, float | None]:
    rel, scrapes = run.scrapes
    if scrapes is None or rel is None:
        return None, None, None
    ok = [r for r in scrapes.records if r.source == "metrics" and r.ok]
    if not ok:
        return None, None, None
    s = metric_samples(max(ok, key=lambda r: r.end_mono_ns), str(run.info.path / rel))
    return counter_total(s, DRAFTED), counter_total(s, ACCEPTED), counter_total(s, DRAFTS)


def _spec_run(run: RunData) -> SpecRun | None:
    plan = run.docs.plan
    c1 = next((p for p in run.points if p.concurrency == 1 and not p.warmup), None)
    if plan is None or c1 is None:
        return None
    tpot = c1.result.tpot.median_ms
    if tpot is None:
        return None
    args = list(plan.server.args)
    # llama.cpp drafts 3 tokens per step unless --spec-draft-n-max says otherwise
    k = int(_flag(args, "--spec-draft-n-max") or LLAMACPP_DEFAULT_DRAFT_MAX) if _flag(args, "-md") else 0
    rates = _flag(args, "--spec-synth-rates")
    return SpecRun(run, k, float(rates.split(",")[0]) if rates else None, tpot, *_last_counters(run))


# --- tables and findings ------------------------------------------------------------------------------------


@dataclass
class Costs:
    t1: float  # target, one token [ms]
    target: dict[int, float]  # tokens -> target step [ms] at STEP_DEPTH
    draft1: float  # draft, one token [ms]

    def step(self, k: int) -> float:
        return step_ms(k, self.draft1, self.target[k + 1])


def _costs(table: dict[tuple[str, int, int], float]) -> Costs | None:
    target = {n: v for (tag, n, d), v in table.items() if tag == TARGET_TAG and d == STEP_DEPTH}
    draft1 = table.get((DRAFT_TAG, 1, STEP_DEPTH))
    if draft1 is None or not all(n in target for n in range(1, max(KS) + 2)):
        return None
    return Costs(target[1], target, draft1)


def _run_rows(runs: list[SpecRun], off: SpecRun, costs: Costs) -> list[dict[str, Any]]:
    rows = []
    for sr in runs:
        tps = sr.tokens_per_step
        bench = costs.step(sr.k) if sr.k else costs.t1
        server = sr.tpot_c1_ms * tps if tps is not None else sr.tpot_c1_ms
        rows.append(
            {
                "run": sr.run.name,
                "k": sr.k,
                "synthetic_alpha": sr.synth_alpha,
                "acceptance": sr.acceptance,
                "tokens_per_step": tps,
                "p50_tpot_c1_ms": sr.tpot_c1_ms,
                "speedup_measured": off.tpot_c1_ms / sr.tpot_c1_ms,
                "speedup_kernels": (tps or 1.0) * costs.t1 / bench,
                "step_kernels_ms": bench,
                "step_server_ms": server,
                "server_overhead_ms": server - bench,
                "gpu_busy_pct": gpu_busy_pct(sr.run, [p for p in sr.run.points if not p.warmup]),
                "source": sr.run.cite(sr.run.requests[0] or "requests.jsonl"),
            }
        )
    return rows


def _overhead_ms(rows: list[dict[str, Any]]) -> float | None:
    """The server's own time per speculative step over the llama-bench step, ms: mean over the draft runs."""
    vals = [r["server_overhead_ms"] for r in rows if r["k"]]
    return math.fsum(vals) / len(vals) if vals else None


def _gain_rows(costs: Costs, overhead: float | None, t1_server_ms: float) -> list[dict[str, Any]]:
    """The reader's table: speedup by α and k, from the kernels alone (llama-bench's steps) and as the server
    runs it (its own one-token step ``t1_server_ms``, the no-draft run's p50 TPOT, against the kernel step
    plus the server's measured overhead per speculative step, taken as the same for every k)."""
    rows = []
    for k in KS:
        kern = costs.step(k)
        row: dict[str, Any] = {"k": k, "step_kernels_ms": kern}
        row["break_even_alpha_kernels"] = break_even_alpha(k, costs.t1, kern)
        if overhead is not None:
            row["break_even_alpha_server"] = break_even_alpha(k, t1_server_ms, kern + overhead)
        for a in ALPHAS:
            row[f"speedup_kernels_a{a:g}"] = speedup(a, k, costs.t1, kern)
            if overhead is not None:
                row[f"speedup_server_a{a:g}"] = speedup(a, k, t1_server_ms, kern + overhead)
        rows.append(row)
    return rows


def _prediction_rows(runs: list[SpecRun], run_rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    by_run = {r["run"]: r for r in run_rows}
    rows = []
    for sr in runs:
        for pr in plan_predictions(sr.run, sr.run.name):
            r = by_run[sr.run.name]
            m = {"speedup_c1": r["speedup_measured"], "acceptance": r["acceptance"]}.get(pr.quantity)
            # one run per arm: the verdict takes the measurement as exact (no repeat spread: s = 0)
            v = None if m is None else ex.verdict("bound", m, 0.0, pr.lo, pr.hi)
            rows.append(
                {
                    "run": sr.run.name,
                    "quantity": pr.quantity,
                    "predicted_lo": pr.lo,
                    "predicted_hi": pr.hi,
                    "measured": m,
                    "verdict": v,
                    "plan": pr.cite,
                }
            )
    return rows


def _findings(
    run_rows: list[dict[str, Any]],
    gain: list[dict[str, Any]],
    pred_rows: list[dict[str, Any]],
    costs: Costs,
    cost_src: list[str],
    overhead: float | None,
) -> list[fnd.Finding]:
    at = At(topic=TOPIC)
    out = [
        fnd.measured(at("target_step_1_ms"), costs.t1, "ms", cost_src, depth=STEP_DEPTH),
        fnd.measured(
            at("target_step_2_over_1"),
            costs.target[2] / costs.t1,
            "x",
            cost_src,
            target_step_2_ms=costs.target[2],
            target_step_9_ms=costs.target[9],
        ),
        fnd.measured(at("draft_step_1_ms"), costs.draft1, "ms", cost_src, depth=STEP_DEPTH),
    ]
    for r in run_rows:
        rat = At(level="run", run=r["run"], engine="llamacpp", weight_format="fp16", topic=TOPIC)
        extra = {
            k: r[k]
            for k in (
                "k",
                "synthetic_alpha",
                "acceptance",
                "tokens_per_step",
                "speedup_kernels",
                "step_server_ms",
                "step_kernels_ms",
            )
        }
        out.append(fnd.measured(rat("speedup_measured"), r["speedup_measured"], "x", [r["source"]], **extra))
        if r["gpu_busy_pct"] is not None:
            out.append(fnd.measured(rat("gpu_busy_pct"), r["gpu_busy_pct"], "%", [r["source"]], k=r["k"]))
    if overhead is not None:
        out.append(fnd.measured(at("server_overhead_ms"), overhead, "ms", [r["source"] for r in run_rows]))
    for g in gain:
        for basis in ("kernels", "server"):
            v = g.get(f"break_even_alpha_{basis}")
            key = at(f"break_even_alpha_{basis}", test=f"k{g['k']}")
            if v is None and f"break_even_alpha_{basis}" in g:
                why = "k + 1 accepted tokens do not pay for the step"
                out.append(fnd.not_available(key, "", "unknown", why, cost_src, k=g["k"]))
            elif v is not None:
                out.append(fnd.measured(key, v, "", cost_src, k=g["k"]))
    for p in pred_rows:
        pat = At(level="run", run=p["run"], engine="llamacpp", topic=TOPIC)(f"predicted_{p['quantity']}")
        extra = {k: p[k] for k in ("predicted_lo", "predicted_hi", "verdict")}
        out.append(fnd.measured(pat, p["measured"], "", [p["plan"]], **extra))
    return out


def run(s: SectionInput) -> Section:
    campaign = s.campaign
    if campaign.name != H200:
        return Section(name=NAME)
    by_name = {r.name: r for r in campaign.all_runs}
    sc, off_run = by_name.get(STEPCOST_RUN), by_name.get(OFF_RUN)
    costs = _costs(step_costs(sc)) if sc is not None else None
    off = _spec_run(off_run) if off_run is not None else None
    if sc is None or costs is None or off is None:
        return Section(name=NAME)
    runs = [sr for r in campaign.experiment_runs if r.name.startswith("spec-") and (sr := _spec_run(r))]
    runs.sort(key=lambda sr: (sr.k, sr.synth_alpha or 0.0))
    run_rows = _run_rows(runs, off, costs)
    overhead = _overhead_ms(run_rows)
    gain, preds = _gain_rows(costs, overhead, off.tpot_c1_ms), _prediction_rows(runs, run_rows)
    cost_src = [sc.cite(rel) for rel in sorted(sc.records)]
    tables = {
        "spec_step_costs": [
            {"model": t, "tokens": n, "depth": d, "median_ms": v}
            for (t, n, d), v in sorted(step_costs(sc).items())
        ],
        "spec_runs": run_rows,
        "spec_gain": gain,
        "spec_predictions": preds,
    }
    found = _findings(run_rows, gain, preds, costs, cost_src, overhead)
    return Section(name=NAME, tables={k: pd.DataFrame(v) for k, v in tables.items() if v}, findings=found)
