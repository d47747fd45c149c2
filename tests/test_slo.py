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
import tomllib
from pathlib import Path

import pytest

from analysis import metrics
from analysis.campaign import load_campaign
from analysis.reconcile import slo
from collector.raw.plan import _phase, _Table
from collector.raw.records import RequestRecord
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
def ref_root(tmp_path_factory):
    if not SEED.is_dir():
        pytest.skip("the reference campaign is not beside the checkout")
    from collector.importer import import_results

    root = tmp_path_factory.mktemp("ref")
    list(import_results(SEED, REF, root))
    return root


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
    answers = slo.plan(ref, BUDGET_MS)
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
    assert r2.settings["max_num_seqs"] == math.floor(r2.concurrency)
    # the KV pool line of the server log the sweep ran against, and 1,024 + 256 tokens a request
    log = (SEED / "Round2" / "01-02-perf-test" / "vllm-server.head.log").read_text()
    pool = int(re.search(r"KV cache size: ([\d,]+) tokens", log).group(1).replace(",", ""))
    assert r2.settings["residents_pool"] == pool // 16 // math.ceil((1024 + 256) / 16)
    assert r2.settings["half_residents_pool"] == r2.settings["residents_pool"]  # memory sizes the pool


def test_planner_not_bracketed_measure_next(ref, tmp_path):
    answers = slo.plan(ref, 1e7, engine="vllm")
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
    low = slo.plan(ref, 1.0, engine="vllm")
    assert all(a.status == "none_meet" and a.next_concurrency is None and a.stanza is None for a in low)


CPU = Path(__file__).resolve().parents[1] / "raw" / "cpu-tiny-qwen2"


@pytest.mark.skipif(not CPU.is_dir(), reason="the CPU smoke campaign is not committed in raw/")
def test_goodput_exact_on_our_requests():
    """Per point of our own llama.cpp sweep, goodput against a per-request TTFT SLO equals the count worked
    out from requests.jsonl's lines here (TTFT = first chunk carrying a token − send) ÷ (last end − first
    send)."""
    lines = [
        json.loads(x) for x in (CPU / "llamacpp" / "requests.jsonl").read_text().splitlines() if x.strip()
    ]
    by_point: dict[str, list[dict]] = {}
    for o in lines:
        by_point.setdefault(o["point"], []).append(o)

    def ttft_ms(o):
        toks = [t for t, n in zip(o["chunk_mono_ns"], o["chunk_tokens"], strict=True) if n > 0]
        return (toks[0] - o["send_mono_ns"]) / 1e6 if toks and o["error"] is None else None

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
    from click.testing import CliRunner

    from collector.cli import main

    res = CliRunner().invoke(
        main, ["slo", "--raw", str(ref_root), "--ttft-p99-ms", "730", "--engine", "vllm"]
    )
    assert res.exit_code == 0, res.output
    r2 = next(a for a in slo.plan(ref, BUDGET_MS, engine="vllm") if a.round == "round2")
    assert f"highest concurrency meeting it: {r2.concurrency:.2f}" in res.output
    assert r2.lower.source in res.output and r2.upper.source in res.output
    assert "closed-loop only" in res.output and "goodput: n/a" in res.output
    bad = CliRunner().invoke(main, ["analyze", "--raw", str(ref_root), "--slo", "ttft=730"])
    assert bad.exit_code == 1 and "--slo 'ttft=730'" in bad.output
