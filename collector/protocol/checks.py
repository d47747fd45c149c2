"""Self-checks: at start-up (is the server what the protocol needs?) and after each point (did the point
measure what it claims?). Each check is a pass/fail/not-applicable verdict with a one-line detail; the run
records every one in ``events.jsonl`` and shows it live. A failed check never stops the run: the record of
the failure is the point.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from analysis.parse.llamacpp_log import parse_llamacpp_log_bytes
from analysis.parse.prometheus import PromSnapshot, parse_prometheus_text
from analysis.parse.vllm_log import parse_vllm_log_bytes
from collector.raw.errors import ParseError
from collector.raw.metric_families import LLAMACPP_GAUGES, VLLM_CACHE_CONFIG, VLLM_COUNTERS, VLLM_GAUGES
from collector.raw.plan import PointPlan, ServerPlan
from collector.raw.records import CheckResult, RequestRecord

PREEMPTIONS, PREFIX_HITS = VLLM_COUNTERS["preemptions"], VLLM_COUNTERS["prefix_hits"]
# Request fields that would make sampling non-greedy or change what is generated.
SAMPLING_KEYS = (
    "temperature",
    "top_k",
    "top_p",
    "min_p",
    "repetition_penalty",
    "presence_penalty",
    "frequency_penalty",
    "seed",
    "n",
    "best_of",
    "logit_bias",
)


def _scrape(text: str | None) -> PromSnapshot | None:
    """The project's one Prometheus parser; an empty or malformed scrape leaves a check undecided (None)."""
    if text is None:
        return None
    try:
        return parse_prometheus_text(text, "/metrics")
    except ParseError:
        return None


def metric_total(text: str | None, name: str) -> float | None:
    """Sum of one sample name over its label sets in a Prometheus exposition; None when absent or no text."""
    snap = _scrape(text)
    vals = [s.value for s in snap.find(name)] if snap else []
    return float(sum(vals)) if vals else None


def metric_labels(text: str | None, name: str) -> dict[str, str] | None:
    """Labels of the first sample called ``name`` (vLLM's ``*_info`` gauges carry their facts as labels)."""
    snap = _scrape(text)
    found = snap.find(name) if snap else []
    return dict(found[0].labels) if found else None


# engines whose start-up and per-point checks this module knows (a declared "openai" server is checked as one
# of them when its /metrics names it)
CHECKED_ENGINES = ("vllm", "llamacpp")
ENGINE_NAMES = {"vllm": "vLLM", "llamacpp": "llama.cpp", "sglang": "SGLang", "tgi": "TGI"}


def checked_engine(declared: str, metrics_text: str | None) -> str | None:
    """The engine whose checks apply: the declared vLLM or llama.cpp, else (an ``openai`` server) the one
    its /metrics names when it is one of those; None when no engine-specific check applies."""
    if declared in CHECKED_ENGINES:
        return declared
    snap = _scrape(metrics_text)
    seen = snap.engine if snap else None
    return seen if seen in CHECKED_ENGINES else None


def check_engine_identity(declared: str, metrics_text: str | None) -> CheckResult:
    """Which engine answers, from its /metrics names (``PromSnapshot.engine``), against the plan's
    ``[server] engine``. A declared vLLM or llama.cpp whose metrics name another engine fails; a declared
    ``openai`` server is recorded as what its metrics say (or unknown), unjudged. ``facts["checked_as"]`` is
    the engine whose checks apply (None: engine-specific checks are skipped and say so)."""
    snap = _scrape(metrics_text)
    seen = snap.engine if snap else None
    seen_name = ENGINE_NAMES.get(seen or "", "no known engine")
    if declared in CHECKED_ENGINES:
        ok = None if seen is None else seen == declared
        detail = f"declared {ENGINE_NAMES[declared]}; /metrics names {seen_name}"
        facts = {"declared": declared, "metrics_engine": seen, "checked_as": declared}
        return CheckResult("startup", "engine_identity", ok, detail, facts=facts)
    checked_as = checked_engine(declared, metrics_text)
    then = (
        f"its {seen_name} checks apply"
        if checked_as
        else "engine-specific checks (KV pool, preemptions, prefix-cache counters) skipped"
    )
    detail = f"OpenAI-compatible server; /metrics names {seen_name}: {then}"
    facts = {"declared": declared, "metrics_engine": seen, "checked_as": checked_as}
    return CheckResult("startup", "engine_identity", None, detail, facts=facts)


def check_skipped(name: str, engine: str | None) -> CheckResult:
    """A start-up check that needs to know the engine, recorded as skipped (not failed) for a server whose
    engine is not one the checks know."""
    what = ENGINE_NAMES.get(engine or "", "an unrecognised engine")
    return CheckResult(
        "startup", name, None, f"skipped: OpenAI-compatible server ({what}); no check for it here"
    )


def _complete_lines(path: Path) -> bytes:
    """The log up to its last newline: the server may be mid-line while we read."""
    data = path.read_bytes()
    return data[: data.rfind(b"\n") + 1]


def flag_value(args: Sequence[str], *names: str) -> str | None:
    """The value of a server flag (``-c 8192`` or ``--ctx-size=8192``); the last one wins, as in the
    engines."""
    value = None
    for i, a in enumerate(args):
        for n in names:
            if a == n and i + 1 < len(args):
                value = args[i + 1]
            elif a.startswith(n + "="):
                value = a.split("=", 1)[1]
    return value


# --------------------------------------------------------------------------------------- start-up


def check_health(waited_s: float, url: str) -> CheckResult:
    return CheckResult("startup", "health", True, f"{url}/health answered 200 after {waited_s:.1f} s")


def check_metrics_format(text: str | None, url: str) -> CheckResult:
    """The start-up /metrics is Prometheus text the project's parser reads: otherwise every counter the run
    scrapes is unreadable, and the run says so now rather than at analysis."""
    if text is None:
        return CheckResult("startup", "metrics_format", None, f"{url}: no /metrics text to check")
    try:
        parse_prometheus_text(text, url)
    except ParseError as err:
        return CheckResult("startup", "metrics_format", False, f"not Prometheus text: {err}"[:300])
    return CheckResult("startup", "metrics_format", True, f"{url}: Prometheus text")


# the server's own gauges of requests it is serving or holding (running, queued), per engine
IN_FLIGHT = {
    "vllm": (VLLM_GAUGES["running"], VLLM_GAUGES["waiting"]),
    "llamacpp": (LLAMACPP_GAUGES["running"], LLAMACPP_GAUGES["waiting"]),
}


def requests_in_flight(text: str | None, engine: str) -> int | None:
    """Requests the server says it is serving or holding (its in-flight gauges summed); None without them."""
    vals = [metric_total(text, name) for name in IN_FLIGHT.get(engine, ())]
    found = [v for v in vals if v is not None]
    return round(sum(found)) if found else None


def check_pool_vllm(log_path: Path | None, metrics_text: str | None) -> CheckResult:
    """KV pool tokens and maximum concurrency, from the log lines and from /metrics' cache_config_info."""
    facts: dict[str, Any] = {}
    if log_path is not None and log_path.exists():
        log = parse_vllm_log_bytes(_complete_lines(log_path), log_path)
        facts.update(
            log_kv_cache_tokens=log.kv_cache_tokens,
            log_max_concurrency_x=log.max_concurrency_x,
            log_max_concurrency_tokens_per_request=log.max_concurrency_tokens_per_request,
            log_kv_cache_memory_gib=log.kv_cache_memory_gib,
        )
    info = metric_labels(metrics_text, VLLM_CACHE_CONFIG) or {}
    for k in ("num_gpu_blocks", "block_size", "kv_cache_size_tokens", "num_cpu_blocks"):
        if k in info:
            facts[f"metrics_{k}"] = info[k]
    have_log = facts.get("log_kv_cache_tokens") is not None and facts.get("log_max_concurrency_x") is not None
    ok = have_log or "metrics_num_gpu_blocks" in facts
    detail = (
        f"KV cache {facts.get('log_kv_cache_tokens')} tokens, max concurrency "
        f"{facts.get('log_max_concurrency_x')}x for {facts.get('log_max_concurrency_tokens_per_request')} "
        f"tokens/request; /metrics blocks {facts.get('metrics_num_gpu_blocks')} x "
        f"{facts.get('metrics_block_size')}"
    )
    return CheckResult(
        "startup", "kv_pool", ok, detail if ok else "no KV pool lines in the log nor in /metrics", facts=facts
    )


def check_pool_llamacpp(log_path: Path | None, props: dict[str, Any] | None) -> CheckResult:
    """Slots and per-slot context, from the log (``n_slots``, ``n_ctx_slot``) and from /props."""
    facts: dict[str, Any] = {}
    if log_path is not None and log_path.exists():
        log = parse_llamacpp_log_bytes(_complete_lines(log_path), log_path)
        facts.update(log_n_slots=log.n_slots, log_n_ctx_slot=log.n_ctx_slot)
    if props:
        facts["props_total_slots"] = props.get("total_slots")
        facts["props_n_ctx"] = (props.get("default_generation_settings") or {}).get("n_ctx")
    ok = facts.get("log_n_slots") is not None or facts.get("props_total_slots") is not None
    slots = facts.get("log_n_slots") or facts.get("props_total_slots")
    per_slot = facts.get("log_n_ctx_slot") or facts.get("props_n_ctx")
    detail = f"slots {slots}, context per slot {per_slot} tokens"
    return CheckResult(
        "startup", "kv_pool", ok, detail if ok else "no n_slots/n_ctx_slot in the log nor /props", facts=facts
    )


def check_prefix_cache(sp: ServerPlan, log_path: Path | None) -> CheckResult:
    """The engine's prefix cache against the plan's ``[server] prefix_cache``. ``off`` (check
    ``prefix_caching_off``, an analysis gate): vLLM ``--no-enable-prefix-caching`` given (V1 turns it on by
    default) and the engine config line agrees; llama.cpp ``--cache-ram 0`` and ``--slot-prompt-similarity 0``
    (no reuse of an earlier prompt; requests also say ``cache_prompt: false``). ``on`` (check
    ``prefix_caching_on``): vLLM without ``--no-enable-prefix-caching`` and the config line not saying
    False; llama.cpp with a host prompt cache (``--cache-ram`` not 0) or slots picked by prompt similarity
    (``--slot-prompt-similarity`` not 0; requests say ``cache_prompt: true``). ``any``: not checked."""
    setting = sp.prefix_cache
    name = {"off": "prefix_caching_off", "on": "prefix_caching_on"}.get(setting, "prefix_caching")
    if setting == "any":
        return CheckResult("startup", name, None, "prefix_cache = any in the plan: not checked")
    if sp.attach:
        return CheckResult(
            "startup", name, None, "attached server: flags unknown; see the per-point counters"
        )
    if sp.engine == "vllm":
        flag_off = "--no-enable-prefix-caching" in sp.args
        logged = None
        if log_path is not None and log_path.exists():
            cfg = parse_vllm_log_bytes(_complete_lines(log_path), log_path).engine_config
            logged = cfg.enable_prefix_caching if cfg is not None else None
        if setting == "off":
            ok = flag_off and logged is not True
            given = "given" if flag_off else "MISSING"
        else:
            ok = not flag_off and logged is not False
            given = "given: cache off" if flag_off else "not given"
        return CheckResult(
            "startup",
            name,
            ok,
            f"--no-enable-prefix-caching {given}; engine config enable_prefix_caching={logged}",
        )
    cram = flag_value(sp.args, "--cache-ram", "-cram")
    sps = flag_value(sp.args, "--slot-prompt-similarity", "-sps")
    off = cram == "0" and sps is not None and float(sps) == 0.0
    return CheckResult(
        "startup",
        name,
        off if setting == "off" else not off,
        f"--cache-ram {cram}, --slot-prompt-similarity {sps}",
    )


def check_greedy(extra_body: dict[str, Any]) -> CheckResult:
    """Every request says temperature 0 and nothing in the plan's extra body changes sampling."""
    overridden = {k: v for k, v in extra_body.items() if k in SAMPLING_KEYS}
    ok = not overridden or overridden == {"temperature": 0} or overridden == {"temperature": 0.0}
    detail = "temperature=0 in every request" + (
        f"; plan extra_body sets {json.dumps(overridden)}" if overridden else ""
    )
    return CheckResult("startup", "greedy_sampling", ok, detail)


def check_sampling_overrides(engine: str, log_path: Path | None) -> CheckResult:
    """vLLM warns when the model's generation_config replaces its default sampling parameters; requests set
    temperature explicitly, but other knobs (repetition_penalty, top_k) from that config would still apply."""
    if engine != "vllm" or log_path is None or not log_path.exists():
        return CheckResult(
            "startup", "engine_sampling_overrides", None, "only vLLM logs default-sampling overrides"
        )
    ovr = parse_vllm_log_bytes(_complete_lines(log_path), log_path).sampling_overrides
    if not ovr:
        return CheckResult(
            "startup", "engine_sampling_overrides", True, "no default-sampling override in the log"
        )
    params = [o.params for o in ovr]
    return CheckResult(
        "startup",
        "engine_sampling_overrides",
        False,
        f"model generation_config overrides sampling: {params}",
        facts={"overrides": params},
    )


# The checks whose failure means the run did not measure what its plan asked, so the point (or, at start-up,
# every point) is not usable: analysis gives the gates these checks stand for severity ``exclude``
# (analysis.reconcile.gates.SEVERITY; tests/test_cli_quick checks the two agree). The run's exit status is
# decided from these (collector.protocol.run.verdict), not from analysis.
POINT_EXCLUDING = frozenset({"completed_vs_sent", "failures", "input_tokens", "prefix_cache_hits"})
STARTUP_EXCLUDING = frozenset({"prefix_caching_off"})
CLIENT_FIX = (
    "the load client, not the server, set the pace: give it more processes ([load] shards) on more cores, or "
    "run it on another machine"
)


# ----------------------------------------------------------------------------------------- per point


def point_checks(
    point: PointPlan,
    records: Sequence[RequestRecord],
    sent: int,
    engine: str,
    metrics_before: str | None,
    metrics_after: str | None,
    prefix_cache: str = "off",
) -> list[CheckResult]:
    """Did the point measure what it claims? Lengths are each request's own (``max_tokens``, and ``input_len``
    when ids were sent; a prompt sent as text has only the server's count: n/a). Prefix-cache hits must be
    zero when the plan's ``prefix_cache`` is off; otherwise their count is recorded, unjudged (ok None). An
    ``openai`` server is checked as the engine its /metrics name (``checked_engine``) where they name one."""
    engine = checked_engine(engine, metrics_after or metrics_before) or engine
    ok_recs = [r for r in records if r.error_kind is None]
    out = _count_checks(point, records, len(ok_recs), sent)
    out += _length_checks(point, records, ok_recs)
    if engine == "vllm":
        out += _vllm_counter_checks(point, metrics_before, metrics_after, prefix_cache)
    else:
        out.append(
            CheckResult("point", "preemptions", None, f"{engine} has no preemption counter", point.point_id)
        )
        out.append(_llamacpp_prompt_reuse(point.point_id, ok_recs, prefix_cache))
    return out


def _count_checks(
    point: PointPlan, records: Sequence[RequestRecord], completed: int, sent: int
) -> list[CheckResult]:
    """Every planned request sent and completed; none failed (the failures by kind)."""
    errors: dict[str, int] = {}
    for r in records:
        if r.error_kind is not None:
            errors[r.error_kind] = errors.get(r.error_kind, 0) + 1
    return [
        CheckResult(
            "point",
            "completed_vs_sent",
            completed == sent == point.requests,
            f"{completed} completed of {sent} sent ({point.requests} planned)",
            point.point_id,
        ),
        CheckResult(
            "point",
            "failures",
            not errors,
            f"{sum(errors.values())} failed: {errors}" if errors else "none",
            point.point_id,
        ),
    ]


def _usage(r: RequestRecord, key: str) -> Any:
    return (r.usage or {}).get(key)


def _length_checks(
    point: PointPlan, records: Sequence[RequestRecord], ok_recs: Sequence[RequestRecord]
) -> list[CheckResult]:
    """Output tokens (the server's usage and the streamed count) equal to ``max_tokens``; no impossible
    streamed count; the server's prompt count equal to the ids sent."""
    pid = point.point_id
    fixed_out = all(r.max_tokens == point.output_len for r in records)
    want_out = str(point.output_len) if fixed_out else "max_tokens"
    bad_out = [r.request_id for r in ok_recs if _usage(r, "completion_tokens") != r.max_tokens]
    bad_chunks = [r.request_id for r in ok_recs if sum(r.chunk_tokens) != r.max_tokens]
    odd = [r for r in records if r.token_count_problem]
    id_recs = [r for r in ok_recs if r.prompt_format is None]
    fixed_in = all(r.input_len == point.input_len for r in id_recs)
    want_in = str(point.input_len) if fixed_in else "the ids sent"
    bad_in = [r.request_id for r in id_recs if _usage(r, "prompt_tokens") != r.input_len]
    return [
        CheckResult(
            "point",
            "output_tokens",
            (not bad_out and not bad_chunks) if ok_recs else None,
            f"usage.completion_tokens != {want_out} in {len(bad_out)}, streamed tokens != "
            f"{want_out} in {len(bad_chunks)} of {len(ok_recs)} completed",
            pid,
        ),
        CheckResult(
            "point",
            "token_counts",
            not odd if records else None,
            f"{len(odd)} of {len(records)} requests streamed an impossible token count"
            + (f" (first, {odd[0].request_id}: {odd[0].token_count_problem})" if odd else ""),
            pid,
        ),
        CheckResult(
            "point",
            "input_tokens",
            not bad_in if id_recs else None,
            f"usage.prompt_tokens != {want_in} in {len(bad_in)} of {len(id_recs)} completed"
            if id_recs or not ok_recs
            else "prompts sent as text: the server's usage is their only count",
            pid,
        ),
    ]


def _vllm_counter_checks(
    point: PointPlan, metrics_before: str | None, metrics_after: str | None, prefix_cache: str
) -> list[CheckResult]:
    """vLLM's counters over the point: preemptions as the plan expects, prefix-cache hits."""
    pid = point.point_id
    out = []
    before, after = metric_total(metrics_before, PREEMPTIONS), metric_total(metrics_after, PREEMPTIONS)
    if before is None or after is None:
        out.append(
            CheckResult("point", "preemptions", None, "no preemption counter (a /metrics scrape failed)", pid)
        )
    else:
        d = after - before
        want = {"none": d == 0, "some": d > 0, "any": True}[point.expect_preemptions]
        out.append(
            CheckResult(
                "point",
                "preemptions",
                want,
                f"{d:g} preemptions (expected {point.expect_preemptions})",
                pid,
                facts={"preemptions_delta": d},
            )
        )
    hb, ha = metric_total(metrics_before, PREFIX_HITS), metric_total(metrics_after, PREFIX_HITS)
    if hb is None or ha is None:
        out.append(
            CheckResult("point", "prefix_cache_hits", None, "no prefix-cache counter in /metrics", pid)
        )
    else:
        out.append(_prefix_hits(pid, ha - hb, f"{ha - hb:g} prefix-cache hit tokens", prefix_cache))
    return out


def _llamacpp_prompt_reuse(pid: str, ok_recs: Sequence[RequestRecord], prefix_cache: str) -> CheckResult:
    """llama.cpp's timings say how many prompt tokens it evaluated: fewer than sent means reused cache."""
    prompt_n = [(r.engine_timings or {}).get("prompt_n") for r in ok_recs]
    sent_n = [r.prompt_tokens if r.prompt_tokens is not None else r.input_len for r in ok_recs]
    evaluated = [n for n in prompt_n if n is not None]
    if not ok_recs or len(evaluated) < len(prompt_n):
        return CheckResult("point", "prefix_cache_hits", None, "no timings.prompt_n to compare", pid)
    reused = sum(s - n for s, n in zip(sent_n, evaluated, strict=True))
    return _prefix_hits(pid, reused, f"{reused} prompt tokens not evaluated (taken from cache)", prefix_cache)


def _prefix_hits(pid: str, hits: float, detail: str, prefix_cache: str) -> CheckResult:
    """The point's ``prefix_cache_hits`` check from its count of reused prompt tokens (either engine's):
    judged zero when the plan's ``prefix_cache`` is off, else recorded unjudged (reuse allowed)."""
    if prefix_cache != "off":
        detail += f" (prefix_cache = {prefix_cache} in the plan: reuse allowed)"
    return CheckResult(
        "point",
        "prefix_cache_hits",
        hits == 0 if prefix_cache == "off" else None,
        detail,
        pid,
        facts={"prefix_cache_hits_delta": hits},
    )
