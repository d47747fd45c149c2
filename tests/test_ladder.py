"""Issue #26 on the committed H200 runs (analysis/reconcile/ladder.py, speculative.py): goodput, held
rates and step verdicts of the deployment ladder recomputed by hand from requests.jsonl; the plan lines the
predictions cite; the speculative runs' acceptance from the raw /metrics text and their speedup from the
requests; the step costs from llama-bench's own samples; the theory's formulas on hand-checkable numbers;
collector.protocol.stepcost end to end with a stand-in llama-bench."""

from __future__ import annotations

import json
import re
import statistics
import sys
from pathlib import Path

import pytest

from analysis.loading.campaign import load_campaign
from analysis.reconcile import Context, SectionInput, ladder, ladder_endpoint, slot_history, speculative
from collector.protocol import stepcost
from collector.raw.store import open_run
from tests.by_hand import itls_ms, request_lines, ttft_ms

REPO = Path(__file__).resolve().parents[1]
H200 = REPO / "raw" / ladder.H200
RUNS = (
    *ladder.ARMS,
    "ladder-0-baseline-r2",
    "spec-stepcost",
    "spec-off-f16",
    "spec-k3-f16",
    "spec-k3-a08-f16",
)
SLO = {"ttft_ms": 1000.0, "itl_ms": 50.0}  # the ladder plans' [slo]

pytestmark = pytest.mark.skipif(
    not (H200 / "ladder-3-f16").is_dir(), reason="the ladder runs are not in raw/"
)


@pytest.fixture(scope="module")
def campaign(tmp_path_factory):
    """The campaign with only issue #26's runs (links to the committed folders): loads in seconds."""
    root = tmp_path_factory.mktemp("raw")
    (root / ladder.H200).mkdir()
    for run in RUNS:
        (root / ladder.H200 / run).symlink_to(H200 / run)
    return load_campaign([root], ladder.H200)


@pytest.fixture(scope="module")
def lad(campaign):
    return ladder.run(SectionInput(campaign, Context(campaign=campaign), None))


@pytest.fixture(scope="module")
def spec(campaign):
    return speculative.run(SectionInput(campaign, None, None))


def _tpot_ms(line: dict) -> float | None:
    """(last token chunk − first token chunk) ÷ (tokens − 1), ms."""
    toks = [(t, n) for t, n in zip(line["chunk_mono_ns"], line["chunk_tokens"], strict=True) if n > 0]
    n = sum(k for _, k in toks)
    return (toks[-1][0] - toks[0][0]) / 1e6 / (n - 1) if n > 1 else None


def _goodput_by_hand(run: str, rate: float) -> tuple[int, int, float]:
    """(good requests, requests, goodput req/s) of one rate point, from requests.jsonl alone."""
    lines = [x for x in request_lines(H200 / run) if x["phase_kind"] == "rate" and x["request_rate"] == rate]
    good = sum(
        1
        for x in lines
        if x["error"] is None
        and (t := ttft_ms(x)) is not None
        and t <= SLO["ttft_ms"]
        and (_tpot_ms(x) or 0.0) <= SLO["itl_ms"]
    )
    dur = (max(x["end_mono_ns"] for x in lines) - min(x["send_mono_ns"] for x in lines)) / 1e9
    return good, len(lines), good / dur


def test_goodput_and_held_rate_by_hand(lad):
    pts = lad.tables["ladder_points"]
    for run in ("ladder-0-baseline-r2", "ladder-3-f16", "ladder-4-prefixcache"):
        shares = []
        for rate in (3.0, 6.0, 10.0, 15.0):
            good, n, gp = _goodput_by_hand(run, rate)
            row = pts[(pts.run == run) & (pts.request_rate_req_s == rate)].iloc[0]
            assert (row.good_requests, row.requests) == (good, n)
            assert row.goodput_req_s == pytest.approx(gp, rel=1e-9)
            shares.append((rate, good / n))
        held = max((r for r, s in shares if s >= 0.9), default=0.0)
        steps = lad.tables["ladder_steps"]
        arm = re.sub(r"-r\d+$", "", run)
        assert steps[steps.arm == arm].iloc[0].held_rate_req_s <= held


def test_step_ratios_and_verdicts(lad):
    steps = lad.tables["ladder_steps"].set_index("arm")
    gp = {}
    for arm in ladder.ARMS:
        runs = [arm] + (["ladder-0-baseline-r2"] if arm == "ladder-0-baseline" else [])
        per_run = [max(_goodput_by_hand(r, rate)[2] for rate in (3.0, 6.0, 10.0)) for r in runs]
        gp[arm] = statistics.mean(per_run)
        assert steps.loc[arm].goodput_max_req_s == pytest.approx(gp[arm], rel=1e-9)
    for prev, arm in zip(ladder.ARMS, ladder.ARMS[1:], strict=False):
        assert steps.loc[arm].step_ratio == pytest.approx(gp[arm] / gp[prev], rel=1e-9)
        # every arm served all its 3 req/s requests within the SLO and no arm held 6 req/s: capped
        assert steps.loc[arm].verdict == "capped"
    total = next(f for f in lad.findings if f.metric == "ladder_total_ratio")
    assert total.value == pytest.approx(gp[ladder.ARMS[-1]] / gp[ladder.ARMS[0]], rel=1e-9)


def test_step_verdict_rule():
    assert ladder.step_verdict(1.10, 0.03) == "paid"
    assert ladder.step_verdict(0.90, 0.03) == "cost"
    assert ladder.step_verdict(1.02, 0.03) == "within_spread"
    assert ladder.step_verdict(1.50, 0.03, capped=True) == "capped"
    assert ladder.held_rate_req_s([(3.0, 1.0), (6.0, 0.2), (10.0, 0.95)]) == 10.0
    assert ladder.held_rate_req_s([(3.0, 0.5)]) == 0.0


def test_every_prediction_cites_its_plan_line(lad, spec):
    rows = [
        *lad.tables["ladder_predictions"].to_dict("records"),
        *spec.tables["spec_predictions"].to_dict("records"),
    ]
    assert len(rows) >= 20
    for r in rows:
        path, line = re.match(r"^(.*):(\d+)$", r["plan"]).groups()
        run = next(
            x for x in RUNS if f"/{x}/" in path or path.startswith(f"{x}/") or f"{x}/plan.toml" in path
        )
        text = (H200 / run / "plan.toml").read_text().splitlines()[int(line) - 1]
        assert text == f"# PREDICT {r['quantity']} {r['predicted_lo']:g} {r['predicted_hi']:g}"


def _last_counter(run: str, name: str) -> float:
    scrapes = [json.loads(x) for x in (H200 / run / "scrapes.jsonl").read_text().splitlines() if x.strip()]
    last = max((s for s in scrapes if s["source"] == "metrics" and s["text"]), key=lambda s: s["end_mono_ns"])
    return float(re.search(rf"^{re.escape(name)} (\S+)$", last["text"], re.M).group(1))


def _p50_tpot_c1(run: str) -> float:
    return statistics.median(
        t for x in request_lines(H200 / run) if x["concurrency"] == 1 and x["phase_kind"] != "warmup"
        if (t := _tpot_ms(x)) is not None
    )  # fmt: skip


def test_speculative_runs_by_hand(spec):
    rows = spec.tables["spec_runs"].set_index("run")
    off = _p50_tpot_c1("spec-off-f16")
    for run in ("spec-k3-f16", "spec-k3-a08-f16"):
        acc = _last_counter(run, speculative.ACCEPTED) / _last_counter(run, speculative.DRAFTED)
        assert rows.loc[run].acceptance == pytest.approx(acc, rel=1e-12)
        assert rows.loc[run].speedup_measured == pytest.approx(off / _p50_tpot_c1(run), rel=1e-9)
    # random weights: the draft almost never agrees; the synthetic rate 0.8 per position at k = 3 keeps
    # (0.8 + 0.64 + 0.512) / 3 = 0.65 of the drafted tokens
    assert rows.loc["spec-k3-f16"].acceptance < 0.01
    assert rows.loc["spec-k3-a08-f16"].acceptance == pytest.approx(0.65, abs=0.03)


def test_step_costs_are_llama_bench_medians(spec):
    costs = spec.tables["spec_step_costs"]
    for tag in (speculative.TARGET_TAG, speculative.DRAFT_TAG):
        for line in (H200 / "spec-stepcost" / f"llama-bench-{tag}.jsonl").read_text().splitlines():
            o = json.loads(line)
            row = costs[
                (costs.model == tag) & (costs.tokens == o["n_prompt"]) & (costs.depth == o["n_depth"])
            ]
            assert row.iloc[0].median_ms == pytest.approx(statistics.median(o["samples_ns"]) / 1e6, rel=1e-12)


def test_theory_formulas():
    assert speculative.expected_tokens(0.0, 3) == 1.0
    assert speculative.expected_tokens(0.5, 3) == pytest.approx(1 + 0.5 + 0.25 + 0.125)
    assert speculative.expected_tokens(1.0, 3) == 4.0
    assert speculative.speedup(0.5, 3, 6.0, 15.0) == pytest.approx(1.875 * 6.0 / 15.0)
    a = speculative.break_even_alpha(3, 6.0, 12.0)  # needs 2 tokens per step: 1 + a + a² + a³ = 2
    assert 1 + a + a**2 + a**3 == pytest.approx(2.0, abs=1e-9)
    assert speculative.break_even_alpha(3, 6.0, 30.0) is None  # 5 tokens needed, 4 at most


def test_stepcost_cli_with_a_stand_in_bench(tmp_path):
    """collector.protocol.stepcost runs the binary it is given once per model and seals what it printed."""
    fake = tmp_path / "llama-bench"
    line = {"n_prompt": 2, "n_gen": 0, "n_depth": 512, "n_batch": 2048, "n_ubatch": 512, "model_size": 10,
            "samples_ns": [3, 1, 2], "model_filename": "m.gguf"}  # fmt: skip
    fake.write_text(f"#!{sys.executable}\nprint({json.dumps(json.dumps(line))})\n")
    fake.chmod(0o755)
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")
    rc = stepcost.main(["--bench", str(fake), "--model", f"t={model}", "--tokens", "2", "--depths", "512",
                        "--raw", str(tmp_path / "raw"), "--campaign", "c", "--run", "sc"])  # fmt: skip
    assert rc == 0
    info = open_run(tmp_path / "raw" / "c" / "sc")
    assert info.state == "sealed-complete" and info.kind == stepcost.RUN_KIND
    from analysis.parse.llama_bench import parse_llama_bench_jsonl

    (t,) = parse_llama_bench_jsonl(info.path / "llama-bench-t.jsonl").tests
    assert (t.n_prompt, t.n_depth, t.samples_ns) == (2, 512, (3, 1, 2))


# --- issue #26's leftovers: the slot re-test under request histories, the baseline on completions ---------

SLOT_RUNS = tuple(f"slots-hist-np{n}-q4km{r}" for n in (64, 256) for r in ("", "-r2"))
ENDPOINT_RUNS = (
    *(f"ladder-0-baseline{r}" for r in ("", "-r2", "-r3")),
    *(f"ladder-0-completions{r}" for r in ("", "-r2")),
)


def _section(tmp_path_factory, runs, module):
    root = tmp_path_factory.mktemp("raw")
    (root / ladder.H200).mkdir()
    for run in runs:
        (root / ladder.H200 / run).symlink_to(H200 / run)
    c = load_campaign([root], ladder.H200)
    return module.run(SectionInput(c, Context(campaign=c), None))


@pytest.fixture(scope="module")
def hist(tmp_path_factory):
    return _section(tmp_path_factory, SLOT_RUNS, slot_history)


@pytest.fixture(scope="module")
def endpoint(tmp_path_factory):
    return _section(tmp_path_factory, ENDPOINT_RUNS, ladder_endpoint)


def _wave_p50_itl_ms(run: str, label: str) -> float:
    return statistics.median(
        g for x in request_lines(H200 / run) if x["point"] == label and x["error"] is None for g in itls_ms(x)
    )


def _slot_id_runs(run: str) -> list[int]:
    """Runs of consecutive busy slot ids of each c=32 wave (fresh, sweep, after), from server.log's
    'launch_slot_ … processing task' lines alone: in log order, 8 warm-up requests, the fresh wave's 32, the
    sweep's 3 + 4 + 8 + 16 + 32, the after wave's 32."""
    ids = [int(m[1]) for m in re.finditer(r"launch_slot_: id +(\d+) \| task \d+ \| processing task",
                                          (H200 / run / "server.log").read_text())]  # fmt: skip
    assert len(ids) == 8 + 32 + 3 + 4 + 8 + 16 + 32 + 32
    waves = [ids[8:40], ids[71:103], ids[103:135]]
    return [1 + sum(b != a + 1 for a, b in zip(s, s[1:], strict=False)) for s in map(sorted, waves)]


def test_slot_history_by_hand(hist):
    waves = hist.tables["slot_history_waves"]
    labels = {"fresh": "p01-fresh-c032-i1024-o256", "sweep": "p06-sweep-c032-i1024-o256",
              "after": "p07-after-c032-i1024-o256"}  # fmt: skip
    for run in SLOT_RUNS:
        runs = _slot_id_runs(run)
        for h, n_runs in zip(slot_history.HISTORIES, runs, strict=True):
            row = waves[(waves.run == run) & (waves.history == h)].iloc[0]
            assert row.p50_itl_ms == pytest.approx(_wave_p50_itl_ms(run, labels[h]), rel=1e-9)
            assert row.busy_slot_runs == n_runs
    # 256 slots never wrap around (135 requests): one run of ids per wave; 64 slots: fresh 1, later scattered
    assert [_slot_id_runs(r) for r in SLOT_RUNS] == [[1, 3, 3], [1, 2, 3], [1, 1, 1], [1, 1, 1]]
    f = {x.metric: x for x in hist.findings}
    for h in slot_history.HISTORIES:
        few = [_wave_p50_itl_ms(f"slots-hist-np64-q4km{r}", labels[h]) for r in ("", "-r2")]
        many = [_wave_p50_itl_ms(f"slots-hist-np256-q4km{r}", labels[h]) for r in ("", "-r2")]
        d = [(a / b - 1) * 100 for a, b in zip(few, many, strict=True)]
        assert f[f"p50_itl_diff_pct_{h}"].value == pytest.approx(statistics.mean(d), rel=1e-9)
        assert f[f"p50_itl_diff_pct_{h}"].extra["spread"] == pytest.approx(max(d) - min(d), rel=1e-9)
    # measured: fresh -2.5 % (1 run of ids), after the sweep +26 / +13 % (3 / 2 runs), once more +42 % (3, 3)
    assert f["p50_itl_diff_pct_fresh"].value == pytest.approx(-2.5, abs=0.1)
    assert f["p50_itl_diff_pct_after"].value == pytest.approx(42.3, abs=0.1)
    assert f["slowdown_rises_with_slot_runs"].value is True
    preds = hist.tables["slot_history_predictions"].set_index("quantity")
    assert preds.loc["p50_itl_diff_pct_fresh"].verdict == "confirmed"
    assert preds.loc["p50_itl_diff_pct_after"].verdict == "refuted"  # predicted at most +30 %


def test_completions_endpoint_against_chat(endpoint):
    rows = endpoint.tables["ladder_endpoint"].set_index("endpoint")
    for end, runs in (("chat", ENDPOINT_RUNS[:3]), ("completions", ENDPOINT_RUNS[3:])):
        per_run = [max(_goodput_by_hand(r, rate)[2] for rate in (3.0, 6.0, 10.0, 15.0)) for r in runs]
        assert rows.loc[end].goodput_max_req_s == pytest.approx(statistics.mean(per_run), rel=1e-9)
        assert rows.loc[end].goodput_max_req_s_spread == pytest.approx(max(per_run) - min(per_run), rel=1e-9)
    # the completions runs sent token ids (no endpoint field: the default), the chat runs text
    assert all("endpoint" not in x for x in request_lines(H200 / "ladder-0-completions"))
    assert {x.get("endpoint") for x in request_lines(H200 / "ladder-0-baseline-r3")} == {"chat"}
    f = {x.metric: x for x in endpoint.findings}
    # the lead needed completions to raise the GPU's busy share and goodput beyond the spread: neither rose
    assert f["gpu_busy_pct"].value == pytest.approx(63.9, abs=0.1)
    assert f["gpu_busy_pct_ratio"].extra["verdict"] == "within_spread"
    assert f["goodput_max_req_s_ratio"].extra["verdict"] == "within_spread"
    assert f["chat_endpoint_caps"].value is False
    r, s = ladder_endpoint.ratio_spread(2.0, 0.2, 1.0, None)
    assert (r, s) == (2.0, pytest.approx(0.2))
