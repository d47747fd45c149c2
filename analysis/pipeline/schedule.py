"""Where each campaign's analysis comes from: the cache when its inputs and the analysis code are unchanged
(cache.py), else a fresh analysis — several campaigns at once in worker processes, one per core.

Campaigns are independent until the comparison, which reads their summaries; the results of each are
yielded in the campaigns' order whatever order the workers finish in, so the output does not depend on how
many cores did the work.
"""

from __future__ import annotations

import multiprocessing
import os
import shutil
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from analysis.pipeline.cache import AnalysisCache
from collector.raw.errors import AnatomyError

OUT_MARK = "{out}"  # a campaign's output folder in the lines kept in the cache: the folder may move


@dataclass
class Analysed:
    """One campaign analysed into ``out/<name>/``: what analyze prints, the comparison's summary, the least
    trusted state of its runs."""

    lines: list[str]
    summary: Any  # comparison.CampaignSummary
    state: str | None


@dataclass
class WorkerError:
    """An AnatomyError a worker raised, as its one line (its class may not survive pickling)."""

    line: str


def _guarded(analyse: Callable[[str], Analysed], name: str) -> Analysed | WorkerError:
    try:
        return analyse(name)
    except AnatomyError as err:
        return WorkerError(str(err))


def default_jobs(n: int) -> int:
    """Worker processes for ``n`` campaigns: one per core, none beyond the campaigns."""
    return max(1, min(n, os.cpu_count() or 1))


def _fresh(names: list[str], analyse: Callable[[str], Analysed], jobs: int) -> Iterator[Analysed]:
    """Each campaign analysed, in order: in this process, or in ``jobs`` forked workers (fork: the
    libraries are imported once, here; a platform without fork analyses here)."""
    if jobs <= 1 or len(names) <= 1 or "fork" not in multiprocessing.get_all_start_methods():
        yield from (analyse(n) for n in names)
        return
    with ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("fork")) as pool:
        for got in pool.map(_guarded, [analyse] * len(names), names):
            if isinstance(got, WorkerError):
                raise AnatomyError(got.line)
            yield got


def analysed(
    names: list[str],
    analyse: Callable[[str], Analysed],
    out: Path,
    cache: AnalysisCache | None = None,
    key_of: Callable[[str], str] | None = None,
    jobs: int | None = None,
) -> Iterator[tuple[str, Analysed]]:
    """(name, its analysis) for every campaign, in order; each found in ``cache`` under ``key_of(name)``
    (copied into ``out/<name>/``, a line saying so), else analysed by ``analyse`` and kept there."""
    reused: dict[str, Analysed] = {}
    notes: dict[str, str] = {}
    keys = {n: key_of(n) for n in names} if cache is not None and key_of is not None else {}
    for name, key in keys.items():
        assert cache is not None
        problem = cache.problem(name, key)
        where = cache.entry(name, key)
        if problem is None:
            kept = cache.load(name, key)
            shutil.copytree(kept.out, out / name, dirs_exist_ok=True)
            lines = [line.replace(OUT_MARK, str(out / name)) for line in kept.lines]
            reused[name] = Analysed(lines, kept.summary, kept.state)
            notes[name] = f"{name}: inputs and analysis code unchanged: results reused (cache {key[:12]})"
        elif problem:
            notes[name] = f"{name}: cache entry {where} not used ({problem}): analysed afresh"
    todo = [n for n in names if n not in reused]
    fresh = _fresh(todo, analyse, jobs or default_jobs(len(todo)))
    for name in names:
        got = reused[name] if name in reused else next(fresh)
        if name not in reused and cache is not None and name in keys:
            portable = [line.replace(str(out / name), OUT_MARK) for line in got.lines]
            cache.keep(name, keys[name], out / name, portable, got.summary, got.state)
        yield name, Analysed([*([notes[name]] if name in notes else []), *got.lines], got.summary, got.state)
