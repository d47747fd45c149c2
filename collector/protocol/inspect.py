"""``collector inspect``: what the parsers find in each run of the raw store (read-only, never crashes on a
file).

Per run: engine and version, KV pool in tokens, the engine's max-concurrency figure, result files with their
completed/failed requests, sampler rows, sweep points, and every file that failed to parse with the parser's
own ``file:line: what`` reason.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from analysis.parse import parser_for
from analysis.parse.bench_json import BenchResult
from analysis.parse.fingerprint_txt import Fingerprint
from analysis.parse.llamacpp_log import LlamacppServerLog
from analysis.parse.prometheus import PromSnapshot
from analysis.parse.sampler_csv import SamplerTable
from analysis.parse.sweep_log import SweepLog
from analysis.parse.vllm_log import VllmServerLog
from collector.raw.errors import ParseError
from collector.raw.store import RawStore


def _at(rel: str, line: int | None) -> str:
    return f"{rel}:{line}" if line else rel


def parse_run_files(run_dir: Path, rel_files: Iterable[str]) -> tuple[dict[str, Any], list[str], list[str]]:
    """Parse every file that has a parser: ({rel: record}, [failure lines], [files without a parser])."""
    parsed: dict[str, Any] = {}
    failures: list[str] = []
    skipped: list[str] = []
    for rel in rel_files:
        parser = parser_for(rel)
        if parser is None:
            skipped.append(rel)
            continue
        try:
            parsed[rel] = parser(run_dir / rel)
        except ParseError as err:
            where = _at(rel, err.line)
            failures.append(f"{where}: {err.what}")
        except Exception as err:  # noqa: BLE001 - a parser bug must not hide the other files
            failures.append(f"{rel}: parser crashed ({type(err).__name__}: {err})")
    return parsed, failures, skipped


def _summarise(parsed: dict[str, Any]) -> list[str]:
    """One or a few lines per parsed file (what it is, its key facts, where), then the results' totals."""
    out: list[str] = []
    results = {r: v for r, v in parsed.items() if isinstance(v, BenchResult)}
    for rel, v in parsed.items():
        if isinstance(v, VllmServerLog):
            out += _vllm_lines(rel, v)
        elif isinstance(v, LlamacppServerLog):
            out += _llamacpp_lines(rel, v)
        elif isinstance(v, PromSnapshot):
            out.append(_scrape_line(rel, v))
        elif isinstance(v, SamplerTable):
            out.append(f"sampler     {len(v.rows)} rows, {len(v.columns)} columns  ({rel})")
        elif isinstance(v, SweepLog):
            done = sum(1 for p in v.points if p.result is not None)
            out.append(f"sweep log   {len(v.points)} points, {done} with results  ({rel})")
        elif isinstance(v, Fingerprint):
            out.append(_fingerprint_line(rel, v))
        elif isinstance(v, list):  # the collector's JSONL streams parse to lists of records
            out.append(f"records     {len(v):,} in {rel}")
    if results:
        completed = sum(r.completed for r in results.values())
        failed = sum(r.failed or 0 for r in results.values())
        out.append(f"results     {len(results)} files, {completed:,} requests completed, {failed:,} failed")
    return out


def _vllm_lines(rel: str, v: VllmServerLog) -> list[str]:
    ver = f"vLLM {v.version}" if v.version else "vLLM (version not logged)"
    out = [f"engine      {ver}  ({_at(rel, v.lines.get('version'))})"]
    if v.kv_cache_tokens is not None:
        dev = v.kv_cache_device or "?"
        out.append(
            f"KV pool     {v.kv_cache_tokens:,} tokens ({dev}), {v.kv_cache_memory_gib} GiB  "
            f"({_at(rel, v.lines.get('kv_cache_tokens'))})"
        )
    if v.max_concurrency_x is not None:
        out.append(
            f"max conc.   {v.max_concurrency_x}x at {v.max_concurrency_tokens_per_request:,} "
            f"tokens/request  ({_at(rel, v.lines.get('max_concurrency_x'))})"
        )
    if v.engine_stats:
        out.append(f"stats lines {len(v.engine_stats)}  ({rel})")
    return out


def _llamacpp_lines(rel: str, v: LlamacppServerLog) -> list[str]:
    build = f"build {v.build_number} ({v.build_commit})" if v.build_number is not None else "build not logged"
    out = [f"engine      llama.cpp, {build}  ({rel})"]
    if v.n_slots is not None and v.n_ctx_slot is not None:
        kv = v.kv_buffer_mib
        kv_s = f", KV buffers {kv:.2f} MiB" if kv is not None else ""
        out.append(
            f"KV pool     {v.n_slots} slots x {v.n_ctx_slot:,} = {v.n_slots * v.n_ctx_slot:,} tokens "
            f"(kv_unified={v.kv_unified}){kv_s}  ({_at(rel, v.lines.get('n_slots'))})"
        )
    out.append(f"timings     {len(v.timings)} print_timing blocks, {len(v.releases)} slot releases  ({rel})")
    return out


def _scrape_line(rel: str, v: PromSnapshot) -> str:
    cc = v.cache_config() if v.engine == "vllm" else None
    desc = f"{len(v.samples)} samples, engine {v.engine or '?'}"
    if cc is not None and cc.kv_cache_size_tokens is not None:
        desc += (
            f"; cache_config_info: {cc.num_gpu_blocks} blocks x {cc.block_size} = "
            f"{cc.kv_cache_size_tokens:,} tokens, max concurrency {cc.kv_cache_max_concurrency}"
        )
    return f"scrape      {desc}  ({_at(rel, cc.line if cc else None)})"


def _fingerprint_line(rel: str, v: Fingerprint) -> str:
    gpu = v.gpus[0].name if v.gpus else "no GPU line"
    drv = v.smi_driver_version or (v.gpus[0].driver_version if v.gpus else "?")
    sw = ", ".join(f"{k} {val}" for k, val in v.packages.items()) or "no python versions"
    if v.llamacpp_commit:
        sw += f", llama.cpp {v.llamacpp_commit}"
    empty = f"; empty sections: {', '.join(v.empty_sections)}" if v.empty_sections else ""
    return f"fingerprint {gpu}, driver {drv}, CUDA {v.smi_cuda_version}, {sw}{empty}  ({rel})"


def inspect(raw_root: Path, campaign: str | None) -> Iterator[str]:
    store = RawStore(Path(raw_root))
    n = 0
    for run in store.iter_runs(campaign):
        n += 1
        state = "sealed" if run.sealed else "UNSEALED"
        meta = run.meta or {}
        tags = " ".join(f"{k}={meta[k]}" for k in ("engine", "round", "test_kind") if meta.get(k))
        yield f"{run.campaign}/{run.name}  [{state}]  kind={run.kind} {tags}".rstrip()
        parsed, failures, skipped = parse_run_files(run.path, run.data_files())
        for line in _summarise(parsed):
            yield f"  {line}"
        for f in failures:
            yield f"  FAILED      {f}"
        if skipped:
            yield f"  no parser   {', '.join(skipped)}"
    if n == 0:
        yield f"no runs under {raw_root}" + (f" in campaign {campaign}" if campaign else "")
