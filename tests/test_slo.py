"""Goodput (per request, against SLOs) and the SLO planner (issue #14, items 2 and 3).

Goodput is checked on a hand-made point whose every latency is worked out below; the planner on the reference
campaign (imported from the shared seed runs) with the reference study's 730 ms p99 TTFT budget, against the
bench files it interpolates between (read here, the interpolation redone by hand); a budget every point
meets gives a "measure next" stanza that the plan loader's phase schema accepts.
"""

from __future__ import annotations

import json
import math
import re
import shutil
import tomllib
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from analysis.core import metrics
from analysis.loading.campaign import load_campaign
from analysis.pipeline.analyze import gated_context, slo_answers
from analysis.reconcile import SectionInput, rates, slo
from analysis.reconcile.theoryctx import build as build_theory
from collector.cli import main
from collector.raw.errors import PlanError
from collector.raw.plan import _phase, _Table, parse_plan
from collector.raw.records import RequestRecord
from tests.by_hand import request_lines, ttft_ms
from tests.seed import SEED

MS = 1_000_000
REF = "rtx4090-qwen2.5-7b"
BUDGET_MS = 730.0


def rec(i, send_ms, chunks, end_ms, completion=None, error=None):
    """One requests.jsonl line; chunks = [(receive ms, tokens), ...]."""
    return RequestRecord.from_obj({
        "v": 1, "request_id": f"r{i}", "phase": "p", "phase_kind": "concurrency", "point": "pt",
        "point_index": 0, "index": i, "worker": i % 2, "concurrency": 2, "seed": 1, "input_len": 10,
        "max_tokens": 4, "send_mono_ns": send_ms * MS, "send_unix_ns": send_ms * MS,
        "headers_mono_ns": None, "end_mono_ns": end_ms * MS, "end_unix_ns": end_ms * MS,
        "http_status": 200 if error is None else 500,
        "chunk_mono_ns": [t * MS for t, _ in chunks], "chunk_unix_ns": [t * MS for t, _ in chunks],
        "chunk_tokens": [n for _, n in chunks], "token_count_source": "usage", "done": error is None,
        "usage": None if completion is None else {"prompt_tokens": 10, "completion_tokens": completion},
        "finish_reason": "length", "engine_timings": None, "response_id": None,
        "error": None if error is None else {"kind": "http", "message": error},
    })  # fmt: skip


# By hand (send, token chunks, end; ms):
#   A: TTFT 100, TPOT (130 − 100) ÷ 3 = 10, E2E 140
#   B: TTFT 250 − 50 = 200, TPOT (270 − 250) ÷ 3 = 6.67, E2E 230
#   C: failed (never good)
#   D: TTFT 40, one token: TPOT 0 for goodput (vLLM's all_tpots), E2E 50
#   E: TTFT 60 − 20 = 40, TPOT 100, E2E 150
# duration = last end 280 − first send 0 = 0.28 s
A = rec(0, 0, [(100, 1), (110, 1), (130, 2), (132, 0)], 140, completion=4)
B = rec(1, 50, [(250, 3), (270, 1)], 280, completion=4)
C = rec(2, 60, [], 90, error="HTTP 500: boom")
D = rec(3, 0, [(30, 0), (40, 1), (45, 0)], 50, completion=1)
E = rec(4, 20, [(60, 1), (160, 1)], 170, completion=2)
POINT = [A, B, C, D, E]
DURATION_S = 0.28


@pytest.mark.parametrize(
    ("slos", "good"),
    [
        ({"ttft_ms": 100}, ["A", "D", "E"]),  # ≤ is good: A's 100 ms meets a 100 ms SLO
        ({"ttft_ms": 99.9}, ["D", "E"]),
        ({"ttft_ms": 100, "tpot_ms": 50}, ["A", "D"]),  # D's one token: TPOT 0 (vLLM's all_tpots); E's 100
        ({"itl_ms": 10}, ["A", "B", "D"]),  # per request, ITL is the mean gap: TPOT
        ({"e2e_ms": 150}, ["A", "D", "E"]),
        ({"ttft_ms": 1e9, "tpot_ms": 1e9, "e2e_ms": 1e9}, ["A", "B", "D", "E"]),  # all but the failed one
    ],
)
def test_goodput_by_hand(slos, good):
    names = dict(zip("ABCDE", POINT, strict=True))
    assert [n for n, r in names.items() if metrics.meets_slos(r, slos)] == good
    assert metrics.good_requests(POINT, slos) == len(good)
    assert metrics.duration_s(POINT) == pytest.approx(DURATION_S)
    assert metrics.goodput_req_s(len(good), DURATION_S) == pytest.approx(len(good) / 0.28)


def test_slo_parsing():
    assert slo.parse_slos(["ttft_ms=730", "tpot_ms=50"]) == {"ttft_ms": 730.0, "tpot_ms": 50.0}
    for bad in ("ttft=730", "ttft_ms", "ttft_ms=fast", "e2e_ms=-1"):
        with pytest.raises(slo.SloError, match="--slo"):
            slo.parse_slos([bad])


@pytest.fixture(scope="module")
def ref_root(reference_raw):
    """The reference campaign, imported once per session (tests/conftest.py's ``reference_raw``)."""
    if reference_raw is None:
        pytest.skip("the reference campaign is not beside the checkout")
    return reference_raw


@pytest.fixture(scope="module")
def ref(ref_root):
    return load_campaign([ref_root], REF)


def _sweep_files(answer) -> list[tuple[int, float, float, Path]]:
    """(concurrency, p99 TTFT, request throughput, file) of the sweep the answer read, from the files."""
    folder = SEED / Path(answer.points[0].source.split(":")[0]).parent
    out = []
    for f in folder.glob("*.json"):
        d = json.loads(f.read_text())
        if "warmup" in f.name or not d.get("max_concurrency"):
            continue
        out.append((d["max_concurrency"], d["p99_ttft_ms"], d["request_throughput"], f))
    return sorted(out)


def test_planner_reference_730ms(ref):
    answers = slo.answer_concurrency(ref, BUDGET_MS)
    assert {(a.round, a.engine) for a in answers} >= {("round2", "vllm"), ("round2", "llamacpp")}
    for a in answers:
        files = _sweep_files(a)
        # the highest concurrency within the budget and the next one up
        upper = 1 + max(i for i, (_, p99, _, _) in enumerate(files) if p99 <= BUDGET_MS)
        assert upper < len(files), "the reference's sweeps all end over 730 ms"
        (c_lo, y_lo, rt_lo, f_lo), (c_hi, y_hi, rt_hi, f_hi) = files[upper - 1], files[upper]
        assert a.status == "bracketed" and a.binding == "ttft"
        assert a.lower.source == f"{f_lo.relative_to(SEED).as_posix()}:p99_ttft_ms"
        assert a.upper.source == f"{f_hi.relative_to(SEED).as_posix()}:p99_ttft_ms"
        x = math.log2(c_lo) + (BUDGET_MS - y_lo) / (y_hi - y_lo) * (math.log2(c_hi) - math.log2(c_lo))
        assert a.concurrency == pytest.approx(2**x, rel=1e-12)
        assert c_lo <= a.concurrency <= c_hi
        frac = (x - math.log2(c_lo)) / (math.log2(c_hi) - math.log2(c_lo))
        assert a.request_throughput_req_s == pytest.approx(rt_lo + frac * (rt_hi - rt_lo), rel=1e-12)
        # percentiles only: goodput is n/a, with its reason, never a number
        assert a.goodput_req_s is None
        gp = next(f for f in slo.answer_findings(a) if f.metric == "slo_goodput_req_s")
        assert gp.status == "n/a" and gp.reason == "no_request_records"
        assert a.load == "closed-loop only"
        assert a.non_monotone == [c for c, p99, _, _ in files[: upper - 1] if p99 > BUDGET_MS]
    r2 = next(a for a in answers if (a.round, a.engine) == ("round2", "vllm"))
    assert (r2.lower.concurrency, r2.upper.concurrency) == (4, 8)
    assert r2.settings["admission_limit"] == math.floor(r2.concurrency)
    # the KV pool line of the server log the sweep ran against, and 1,024 + 256 tokens a request
    log = (SEED / "Round2" / "01-02-perf-test" / "vllm-server.head.log").read_text()
    pool = int(re.search(r"KV cache size: ([\d,]+) tokens", log).group(1).replace(",", ""))
    assert r2.settings["residents_pool"] == pool // 16 // math.ceil((1024 + 256) / 16)
    # --max-num-seqs at the KV capacity: the log's max concurrency (full 8,192-token requests), rounded down
    line = float(re.search(r"Maximum concurrency for [\d,]+ tokens per request: ([\d.]+)x", log).group(1))
    assert r2.settings["max_num_seqs"] == math.floor(line) == 14
    assert r2.settings["half_residents_pool"] == r2.settings["residents_pool"]  # memory sizes the pool


def test_planner_not_bracketed_measure_next(ref, tmp_path):
    answers = slo.answer_concurrency(ref, 1e7, engine="vllm")
    for a in answers:
        top = _sweep_files(a)[-1]
        assert a.status == "highest_meets" and a.concurrency is None
        assert a.next_concurrency == 2 * top[0]
        table = tomllib.loads(a.stanza)["phase"][0]
        phase = _phase(_Table(table, tmp_path / "plan.toml", "[[phase]] #1"), 0, set())
        assert phase.kind == "concurrency"
        assert [p.concurrency for p in phase.points] == [a.next_concurrency]
        assert phase.points[0].input_len == 1024 and phase.points[0].output_len == 256
        f = slo.answer_findings(a)[0]
        assert f.status == "n/a" and f.reason == "slo_not_bracketed" and f.extra["stanza"] == a.stanza
    # no point meets a budget below concurrency 1's p99 TTFT: nothing lower to measure
    low = slo.answer_concurrency(ref, 1.0, engine="vllm")
    assert all(a.status == "none_meet" and a.next_concurrency is None and a.stanza is None for a in low)


CPU = Path(__file__).resolve().parents[1] / "raw" / "cpu-tiny-qwen2"


@pytest.mark.skipif(not CPU.is_dir(), reason="the CPU smoke campaign is not committed in raw/")
def test_goodput_exact_on_our_requests():
    """Per point of our own llama.cpp sweep, goodput against a per-request TTFT SLO equals the count worked
    out from requests.jsonl's lines here (TTFT = first chunk carrying a token − send) ÷ (last end − first
    send)."""
    lines = request_lines(CPU / "llamacpp")
    by_point: dict[str, list[dict]] = {}
    for o in lines:
        by_point.setdefault(o["point"], []).append(o)

    all_ttfts = sorted(t for o in lines if o["phase_kind"] == "concurrency" and (t := ttft_ms(o)) is not None)
    limit = all_ttfts[len(all_ttfts) // 2]  # the median: some requests meet it, some do not
    campaign = load_campaign([CPU.parent], CPU.name)
    found = {
        f.test: f
        for f in slo.goodput_findings(campaign, {"ttft_ms": limit})
        if f.metric == "goodput_req_s" and f.engine == "llamacpp"
    }
    checked = 0
    for point, recs in by_point.items():
        if recs[0]["phase_kind"] != "concurrency" or point not in found:
            continue
        good = sum(1 for o in recs if (t := ttft_ms(o)) is not None and t <= limit)
        dur_s = (max(o["end_mono_ns"] for o in recs) - min(o["send_mono_ns"] for o in recs)) / 1e9
        assert found[point].value == pytest.approx(good / dur_s, rel=1e-12), point
        assert found[point].extra["good_requests"] == good
        checked += 1
    assert checked >= 2
    assert (
        0
        < sum(f.extra["good_requests"] for f in found.values())
        < sum(f.extra["completed"] for f in found.values())
    )


def test_slo_command(ref, ref_root):
    """`collector slo` prints the library's answer (gated points, as the pages use), bracketing files
    cited."""

    res = CliRunner().invoke(main, ["slo", "--raw", str(ref_root), "--p99", "ttft:730", "--engine", "vllm"])
    assert res.exit_code == 0, res.output
    # the first spelling still answers the same; a key the planner has no budget for is one line
    old = CliRunner().invoke(
        main, ["slo", "--raw", str(ref_root), "--ttft-p99-ms", "730", "--engine", "vllm"]
    )
    assert old.output == res.output
    typo = CliRunner().invoke(main, ["slo", "--raw", str(ref_root), "--p99", "tpot:50"])
    assert typo.exit_code != 0 and "--p99 'tpot:50': want KEY:MS with KEY one of ttft, itl" in typo.output
    r2 = next(a for a in slo.answer_concurrency(ref, BUDGET_MS, engine="vllm") if a.round == "round2")
    assert f"highest concurrency meeting it: {r2.concurrency:.2f}" in res.output
    assert r2.lower.source in res.output and r2.upper.source in res.output
    assert "closed-loop only" in res.output and "goodput: n/a" in res.output
    bad = CliRunner().invoke(main, ["analyze", "--raw", str(ref_root), "--slo", "ttft=730"])
    assert bad.exit_code == 1 and "--slo 'ttft=730'" in bad.output


# --- issue #14 leftovers: rate answers, SLOs in plan.toml ---------------------------------------------------

RATE_RUN = CPU / "llamacpp-rate"


def _rate_answers(campaign, budget_ms: float) -> list:
    """The planner's rate answers for the run these tests recompute by hand (the campaign may hold other rate
    runs: a repeat of the plan is a run of its own)."""
    return [a for a in slo.answer_rates(campaign, budget_ms) if a.run == RATE_RUN.name]


def _rate_points_by_hand() -> dict[float, tuple[float, list[dict]]]:
    """Per offered rate of the committed two-rate run: (p99 TTFT ms, numpy's linear percentile over the
    completed requests' TTFT = first chunk carrying a token − send; the records), from requests.jsonl."""
    lines = request_lines(RATE_RUN)
    out: dict[float, tuple[float, list[dict]]] = {}
    for rate in sorted({o["request_rate"] for o in lines if o["phase_kind"] == "rate"}):
        recs = [o for o in lines if o.get("request_rate") == rate]
        ttfts = [t for o in recs if (t := ttft_ms(o)) is not None]
        out[rate] = (float(np.percentile(ttfts, 99)), recs)
    return out


@pytest.mark.skipif(not RATE_RUN.is_dir(), reason="the two-rate run is not committed in raw/")
def test_rate_planner_interpolates_between_the_two_measured_rates():
    """Ungated (both rates), a budget between the two points' p99 TTFT: the answer is the log2 interpolation
    between them, redone here from requests.jsonl; the bracketing points are cited."""
    campaign = load_campaign([CPU.parent], CPU.name)
    (r_lo, (y_lo, _)), (r_hi, (y_hi, _)) = sorted(_rate_points_by_hand().items())
    budget = math.sqrt(y_lo * y_hi)  # strictly between the two
    (a,) = _rate_answers(campaign, budget)
    assert a.status == "bracketed" and a.binding == "ttft" and a.run == "llamacpp-rate"
    assert (a.lower.request_rate_req_s, a.upper.request_rate_req_s) == (r_lo, r_hi)
    assert (a.lower.p99_ttft_ms, a.upper.p99_ttft_ms) == (pytest.approx(y_lo), pytest.approx(y_hi))
    x = math.log2(r_lo) + (budget - y_lo) / (y_hi - y_lo) * (math.log2(r_hi) - math.log2(r_lo))
    assert a.request_rate_req_s == pytest.approx(2**x, rel=1e-9)
    assert r_lo < a.request_rate_req_s < r_hi
    f = slo.rate_answer_findings(a)[0]
    assert f.value == a.request_rate_req_s and list(f.sources) == [a.lower.source, a.upper.source]
    assert all("llamacpp-rate/requests.jsonl#" in src for src in f.sources)
    text = "\n".join(slo.describe_rate(a))
    assert f"{a.request_rate_req_s:.2f} req/s" in text and a.lower.source in text


@pytest.mark.skipif(not RATE_RUN.is_dir(), reason="the two-rate run is not committed in raw/")
def test_rate_planner_not_bracketed_names_the_next_rate_as_a_phase(tmp_path):
    """Budgets the points do not bracket: every point meets it (double the highest rate) or none does (halve
    the lowest); the stanza is a rate phase the plan schema accepts, with the run's lengths and stops. The
    pipeline's gated answer (what `collector slo` and the page show) names the points the checks excluded."""
    campaign = load_campaign([CPU.parent], CPU.name)
    by_hand = _rate_points_by_hand()
    offered = sorted(by_hand)
    for budget, status, nxt in ((1e7, "highest_meets", 2 * offered[-1]), (1e-3, "none_meet", offered[0] / 2)):
        (a,) = _rate_answers(campaign, budget)
        assert a.status == status and a.request_rate_req_s is None and a.next_rate_req_s == nxt
        table = tomllib.loads(a.stanza)["phase"][0]
        phase = _phase(_Table(table, tmp_path / "plan.toml", "[[phase]] #1"), 0, set())
        assert phase.kind == "rate" and [p.rate.request_rate for p in phase.points] == [nxt]
        assert (phase.points[0].input_len, phase.points[0].output_len) == (64, 32)
        assert phase.points[0].rate.duration_s == 3 and phase.points[0].rate.max_requests == 96
        f = slo.rate_answer_findings(a)[0]
        assert f.status == "n/a" and f.reason == "slo_not_bracketed" and f.extra["stanza"] == a.stanza
    answers = slo_answers([CPU.parent], 1e7, campaigns=[CPU.name])
    gated = [a for a in answers if isinstance(a, slo.RateAnswer) and a.run == RATE_RUN.name]
    assert len(gated) == 1
    kept = {m.request_rate_req_s for m in gated[0].points}
    assert kept <= set(offered) and len(kept) + len(gated[0].excluded) == len(offered)


def test_plan_slo_table_parsed_and_refused(tmp_path):
    """[slo] in plan.toml: the per-request SLOs by their --slo names; nonsense is one line naming the file."""
    base = (Path(__file__).resolve().parents[1] / "plans" / "cpu-tiny-llamacpp-rate.toml").read_text()
    f = tmp_path / "p.toml"
    plan = parse_plan(base + "\n[slo]\nttft_ms = 50\ntpot_ms = 10\n", f)
    assert plan.slo == {"ttft_ms": 50.0, "tpot_ms": 10.0}
    assert parse_plan(base, f).slo == {}
    for bad, what in (
        ("ttft_ms = 0", "[slo].ttft_ms"),
        ("ttft = 50", "[slo].ttft"),
        ('e2e_ms = "1s"', "e2e_ms"),
    ):
        with pytest.raises(PlanError) as err:
            parse_plan(base + f"\n[slo]\n{bad}\n", f)
        assert str(err.value).startswith(f"{f}: ") and what in str(err.value) and "\n" not in str(err.value)


@pytest.mark.skipif(not RATE_RUN.is_dir(), reason="the two-rate run is not committed in raw/")
def test_plan_slo_read_from_the_run_copy_and_the_flag_wins(tmp_path):
    """A real run whose plan copy states [slo] ttft_ms: goodput per rate point counts the requests meeting
    it (by hand from requests.jsonl) over the point's duration, basis "plan"; --slo given wins ("given")."""
    by_hand = _rate_points_by_hand()
    limit = sorted(by_hand.items())[0][1][0]  # the low rate's p99: some requests of each point meet it
    root = tmp_path / "raw"
    shutil.copytree(RATE_RUN, root / CPU.name / RATE_RUN.name)
    plan = root / CPU.name / RATE_RUN.name / "plan.toml"
    plan.write_text(plan.read_text() + f"\n[slo]\nttft_ms = {limit!r}\n")
    campaign = load_campaign([root], CPU.name, verified=False)
    assert campaign.runs[0].docs.plan.slo == {"ttft_ms": limit}
    ctx, th = gated_context(campaign), build_theory(campaign)
    table = rates.run(SectionInput(campaign, ctx, th)).tables["rate_points"]
    assert set(table["slo_basis"]) == {"plan"}
    for rate, (_, recs) in by_hand.items():
        row = table[table["request_rate_req_s"] == rate].iloc[0]
        good = sum((t := ttft_ms(o)) is not None and t <= limit for o in recs)
        dur_s = (max(o["end_mono_ns"] for o in recs) - min(o["send_mono_ns"] for o in recs)) / 1e9
        assert row["good_requests"] == good and row["goodput_req_s"] == pytest.approx(good / dur_s, rel=1e-12)
    flag = rates.run(SectionInput(campaign, ctx, th, slos_ms={"ttft_ms": 1e9})).tables["rate_points"]
    assert set(flag["slo_basis"]) == {"given"} and list(flag["good_requests"]) == list(flag["completed"])
