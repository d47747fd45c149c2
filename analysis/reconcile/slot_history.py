"""Issue #26 item 3: does -np 64 slow the c=32 wave down against -np 256, and does it depend on the request
history? One c=32 wave (32 requests, 1,024 in / 256 out) is sent three times in each server's life
(plans/h200-slots-hist-np{64,256}-q4km.toml): ``fresh`` right after the warm-up, ``sweep`` after c=1…16 (the
order issue #15 measured), ``after`` right after that; both arms run twice in one lease.

Per history (the wave's phase name, read from the point label ``pNN-<phase>-c032-…``) and repeat k:

- ``p50_itl_diff_pct`` = (np64's p50 ITL ÷ np256's − 1) × 100, repeat k of one arm against repeat k of the
  other (same lease, run back to back); over the repeats the mean and the spread (max − min);
- ``throughput_diff_pct`` the same for output tokens/s;
- ``busy_slot_runs``: how many runs of consecutive ids the wave's 32 slots form in each arm (server.log's
  ``launch_slot_`` lines, ``experiments.llamacpp.slot_runs_by_point``); a non-unified KV cache splits a batch
  into ubatches of consecutive sequence ids, so each run is one more pass over the weights (inferred: the log
  does not count ubatches).

Predictions are the np64 plan's ``# PREDICT <quantity>_<history> <lo> <hi>`` lines (quantities
``p50_itl_diff_pct`` and ``throughput_diff_pct``), judged by ``experiments.verdict`` on [m − s, m + s].
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import mean
from typing import Any

import pandas as pd

from analysis.core import findings as fnd
from analysis.core.keys import At
from analysis.loading.campaign import RunData
from analysis.reconcile import Section, SectionInput
from analysis.reconcile import experiments as ex
from analysis.reconcile.experiments.llamacpp import slot_runs_by_point
from analysis.reconcile.ladder import plan_predictions, predicted, prediction_row

NAME = "slot_history"
TOPIC = "slot_history"
H200 = "h200-qwen2.5-7b-random"
ARM_FEW, ARM_MANY = "slots-hist-np64-q4km", "slots-hist-np256-q4km"  # 64 and 256 slots
HISTORIES = ("fresh", "sweep", "after")  # the c=32 wave's phase, in the order the server lived them
WAVE_CONCURRENCY = 32
LABEL = re.compile(r"^p\d+-(?P<phase>[a-z]+)-c(?P<c>\d+)-")
QUANTITIES = ("p50_itl_diff_pct", "throughput_diff_pct")


def diff_pct(value: float, reference: float) -> float:
    """(value ÷ reference − 1) × 100 [%]: how much larger the 64-slot arm's number is than the 256-slot
    arm's."""
    return (value / reference - 1.0) * 100.0


@dataclass(frozen=True)
class Wave:
    """One c=32 wave of one run: its p50 ITL [ms], output throughput [tok/s], runs of consecutive busy slot
    ids (None without launch lines) and the citations."""

    run: str
    repeat: int
    history: str
    p50_itl_ms: float
    throughput_tok_s: float
    slot_runs: int | None
    slot_ids: tuple[int, ...]
    source: str
    slot_source: str | None


def _waves(run: RunData, repeat: int) -> dict[str, Wave]:
    """The run's c=32 waves by history (phase name)."""
    slots = slot_runs_by_point(run) or {}
    out = {}
    for p in run.points:
        m = LABEL.match(p.label)
        if p.warmup or not m or int(m["c"]) != WAVE_CONCURRENCY or m["phase"] not in HISTORIES:
            continue
        r = p.result
        if not r.completed or r.output_throughput_tok_s is None or r.itl.p50_ms is None:
            continue
        ids, n_runs, cite = slots.get(p.label, ([], None, None))
        out[m["phase"]] = Wave(
            run.name,
            repeat,
            m["phase"],
            r.itl.p50_ms,
            r.output_throughput_tok_s,
            n_runs,
            tuple(ids),
            p.cite(),
            cite,
        )
    return out


def _arm(runs: Sequence[RunData], arm: str) -> dict[int, tuple[RunData, dict[str, Wave]]]:
    """The arm's runs by repeat number, each with its waves."""
    out = {}
    for r in runs:
        k = ex.repeat_of(r.name, arm)
        if k is not None:
            out[k] = (r, _waves(r, k))
    return out


@dataclass(frozen=True)
class History:
    """One history over the repeats both arms ran: per-repeat waves of each arm and the paired differences."""

    name: str
    few: list[Wave]  # np64, by repeat
    many: list[Wave]  # np256, same repeats

    def diffs(self, quantity: str) -> list[float]:
        col = "p50_itl_ms" if quantity == "p50_itl_diff_pct" else "throughput_tok_s"
        return [diff_pct(getattr(a, col), getattr(b, col)) for a, b in zip(self.few, self.many, strict=True)]

    def mean_spread(self, quantity: str) -> tuple[float, float | None]:
        d = self.diffs(quantity)
        return mean(d), ex.repeat_spread(d)


def _histories(
    few: dict[int, tuple[RunData, dict[str, Wave]]], many: dict[int, tuple[RunData, dict[str, Wave]]]
) -> list[History]:
    out = []
    for h in HISTORIES:
        ks = sorted(k for k in few if k in many and h in few[k][1] and h in many[k][1])
        if ks:
            out.append(History(h, [few[k][1][h] for k in ks], [many[k][1][h] for k in ks]))
    return out


def _wave_rows(hs: list[History]) -> list[dict[str, Any]]:
    return [
        {
            "history": h.name,
            "run": w.run,
            "repeat": w.repeat,
            "slots": 64 if arm == "few" else 256,
            "p50_itl_ms": w.p50_itl_ms,
            "output_throughput_tok_s": w.throughput_tok_s,
            "busy_slot_runs": w.slot_runs,
            "slot_id_min": min(w.slot_ids) if w.slot_ids else None,
            "slot_id_max": max(w.slot_ids) if w.slot_ids else None,
            "source": w.source,
        }
        for h in hs
        for arm, waves in (("few", h.few), ("many", h.many))
        for w in waves
    ]


def _diff_findings(hs: list[History]) -> list[fnd.Finding]:
    out = []
    for h in hs:
        srcs = [w.source for w in (*h.few, *h.many)] + [w.slot_source for w in h.few if w.slot_source]
        runs_few = [w.slot_runs for w in h.few]
        runs_many = [w.slot_runs for w in h.many]
        for q in QUANTITIES:
            m, s = h.mean_spread(q)
            out.append(
                fnd.measured(
                    At(topic=TOPIC)(f"{q}_{h.name}"),
                    m,
                    "%",
                    srcs,
                    spread=s,
                    repeats=len(h.few),
                    per_repeat=h.diffs(q),
                    history=h.name,
                    order=HISTORIES.index(h.name),
                    slot_runs_np64=runs_few,
                    slot_runs_np256=runs_many,
                )
            )
    return out


def by_slot_runs(hs: list[History]) -> dict[int, list[float]]:
    """np64's p50 ITL difference [%] of every wave (all histories and repeats), grouped by how many runs of
    consecutive ids np64's 32 busy slots formed in that wave (waves without launch lines left out)."""
    out: dict[int, list[float]] = {}
    for h in hs:
        for w, d in zip(h.few, h.diffs("p50_itl_diff_pct"), strict=True):
            if w.slot_runs is not None:
                out.setdefault(w.slot_runs, []).append(d)
    return dict(sorted(out.items()))


def _slot_run_findings(hs: list[History]) -> list[fnd.Finding]:
    """Per count of id runs: the mean difference and its range; then whether the mean rises with every
    added run (the fragmentation reading predicts it; False when any count's mean is not above the last)."""
    groups = by_slot_runs(hs)
    srcs = [w.slot_source for h in hs for w in h.few if w.slot_source]
    out = [
        fnd.measured(
            At(topic=TOPIC)(f"p50_itl_diff_pct_slot_runs_{n}"),
            mean(d),
            "%",
            srcs,
            slot_runs=n,
            waves=len(d),
            lo=min(d),
            hi=max(d),
        )
        for n, d in groups.items()
    ]
    means = [mean(d) for d in groups.values()]
    rises = len(means) > 1 and all(b > a for a, b in zip(means, means[1:], strict=False))
    out.append(
        fnd.measured(
            At(topic=TOPIC)("slowdown_rises_with_slot_runs"),
            rises,
            "",
            srcs,
            slot_run_counts=list(groups),
            mean_diff_pct=means,
        )
    )
    return out


def _prediction_rows(
    few: dict[int, tuple[RunData, dict[str, Wave]]], hs: list[History]
) -> list[dict[str, Any]]:
    if not few:
        return []
    by_name = {h.name: h for h in hs}
    rows = []
    for pr in plan_predictions(few[min(few)][0], ARM_FEW):
        q, _, h = pr.quantity.rpartition("_")
        hist = by_name.get(h)
        m, s = hist.mean_spread(q) if hist is not None and q in QUANTITIES else (None, None)
        rows.append(prediction_row(pr, m, s))
    return rows


def _prediction_findings(rows: list[dict[str, Any]]) -> list[fnd.Finding]:
    at = At(level="run", run=ARM_FEW, engine="llamacpp", topic=TOPIC)
    return [predicted(at(f"predicted_{r['quantity']}"), r, "%") for r in rows]


def run(s: SectionInput) -> Section:
    campaign = s.campaign
    if campaign.name != H200:
        return Section(name=NAME)
    runs = campaign.experiment_runs
    few, many = _arm(runs, ARM_FEW), _arm(runs, ARM_MANY)
    hs = _histories(few, many)
    if not hs:
        return Section(name=NAME)
    preds = _prediction_rows(few, hs)
    tables = {"slot_history_waves": _wave_rows(hs), "slot_history_predictions": preds}
    return Section(
        name=NAME,
        tables={k: pd.DataFrame(v) for k, v in tables.items() if v},
        findings=[*_diff_findings(hs), *_slot_run_findings(hs), *_prediction_findings(preds)],
    )
