"""Open-loop load against the real engines (issue #14): a short Poisson sweep of two rates on llama.cpp and on
vLLM's CPU build (plans/cpu-tiny-*-rate.toml), the records it leaves (scheduled and actual send times, the
seeded schedule itself), the rate-sweep analysis on that run (achieved vs offered) and its page."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest

from analysis.parse.events_jsonl import parse_events_jsonl
from analysis.parse.requests_jsonl import parse_requests_jsonl
from analysis.pipeline.analyze import analyze
from analysis.reconcile.rates import SATURATION_SHORTFALL_PCT
from analysis.report.render import render_site
from collector.protocol.loadgen import arrival_offsets_ns
from collector.protocol.run import execute_run
from collector.raw.plan import load_plan
from tests import engine_cache

pytestmark = pytest.mark.engines


def _rate_run(tmp_path: Path, local_plan, shipped: str) -> tuple[Path, Path, list]:
    raw = tmp_path / "raw"
    plan_file = local_plan(tmp_path, shipped)
    res = execute_run(plan_file, raw)
    assert res.status == "complete" and res.points_done == 3, str(res)
    # completed_vs_sent, failures, output and input tokens: every scheduled request came back whole
    assert not res.checks_failed, str(res)
    reqs = parse_requests_jsonl(res.path / "requests.jsonl")
    plan = load_plan(plan_file)
    rate_pts = [p for p in plan.points if p.rate is not None]
    for pt in rate_pts:
        recs = [r for r in reqs if r.point == pt.point_id]
        offsets = arrival_offsets_ns(pt.rate, pt.seed)
        assert len(recs) == len(offsets) and all(r.ok for r in recs)
        sched = sorted(r.scheduled_mono_ns for r in recs)
        # the seeded schedule, laid on the monotonic clock from one start: the same gaps to the nanosecond
        assert np.array_equal(np.diff(sched), np.diff(offsets))
        assert all(r.request_rate == pt.rate.request_rate for r in recs)
        late_ms = [(r.send_mono_ns - r.scheduled_mono_ns) / 1e6 for r in recs]
        assert min(late_ms) >= 0  # never sent early
    assert all(
        r.scheduled_mono_ns is None and r.request_rate is None for r in reqs if r.phase_kind == "warmup"
    )
    ev = parse_events_jsonl(res.path / "events.jsonl")
    starts = [e for e in ev if e.kind == "point_start" and e.fields.get("phase_kind") == "rate"]
    assert [e.fields["rate"]["request_rate"] for e in starts] == [p.rate.request_rate for p in rate_pts]
    return raw, res.path, rate_pts


def _analysed_rows(raw: Path, out: Path) -> tuple[list[dict], dict]:
    lines = list(analyze([raw], out, None))
    assert lines and "cpu-tiny-qwen2" in lines[0]
    camp = out / "cpu-tiny-qwen2"
    with (camp / "tables" / "rate_points.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    findings = json.loads((camp / "findings.json").read_text())
    return rows, findings.get("findings", findings)


def _check_sweep(rows: list[dict], findings: dict, rates: list[float]) -> None:
    assert [float(r["request_rate_req_s"]) for r in rows] == sorted(rates)
    low = rows[0]
    # the gentle rate is kept up with: completions come at the rate the schedule offered them (a client that
    # sent everything at once, or one paced wrong, would show a burst of completions far above it)
    assert abs(float(low["shortfall_pct"])) < 25, low
    assert float(low["lateness_p50_ms"]) < 50, low
    sat = next(v for k, v in findings.items() if k.endswith(".rate.saturation_rate_req_s"))
    behind = [r for r in rows if float(r["shortfall_pct"]) > SATURATION_SHORTFALL_PCT]
    if behind:
        assert sat["value"] == pytest.approx(float(behind[0]["request_rate_req_s"]))
    else:
        assert sat["value"] is None and sat["reason"] == "not_saturated"


def test_llamacpp_poisson_rate_sweep(tmp_path, local_plan, engines):
    engine_cache.require(engines.llama_server, engines.tiny_gguf, engines.tiny_config_json)
    raw, run, pts = _rate_run(tmp_path, local_plan, "cpu-tiny-llamacpp-rate.toml")
    rows, findings = _analysed_rows(raw, tmp_path / "results")
    _check_sweep(rows, findings, [p.rate.request_rate for p in pts])
    # the page: answer, figures, evidence table
    render_site(tmp_path / "results", tmp_path / "docs")
    page = (tmp_path / "docs" / "campaigns" / "cpu-tiny-qwen2" / "rates.md").read_text()
    assert page.startswith("# 请求速率扫描") and "figures/rate_throughput.svg" in page
    assert "figures/rate_latency.svg" in page and "p01-rate-r8-i64-o32" in page
    assert (tmp_path / "docs" / "campaigns" / "cpu-tiny-qwen2" / "figures" / "rate_throughput.svg").is_file()


def test_vllm_poisson_rate_sweep(tmp_path, local_plan, engines):
    engine_cache.require(engines.vllm_python, engines.tiny_hf_dir, engines.tiny_config_json)
    raw, run, pts = _rate_run(tmp_path, local_plan, "cpu-tiny-vllm-rate.toml")
    rows, findings = _analysed_rows(raw, tmp_path / "results")
    _check_sweep(rows, findings, [p.rate.request_rate for p in pts])
