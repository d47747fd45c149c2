"""Issue #15's experiments (analysis/reconcile/experiments/) on the committed H200 runs: the KV buffer
predicted from the block formats equals the log's line; the repeat spread and an arm difference, computed here
by hand from two runs' requests.jsonl, equal the findings; the slot ids behind the concurrency-32 anomaly,
read here from server.log, equal the analysis'; every cited plan line says what the prediction says; the
verdicts on the real runs; the parser's launch records on the real log."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from analysis.core.labels_zh import VERDICTS as X_VERDICT_ZH
from analysis.loading.campaign import load_campaign
from analysis.parse.llamacpp_log import parse_llamacpp_log
from analysis.pipeline.analyze import align, analyze
from analysis.reconcile import Context, SectionInput, gates, theoryctx
from analysis.reconcile import experiments as X
from analysis.reconcile.experiments import spec
from analysis.report.markdown import anchor_of
from analysis.report.render import render_site
from tests.by_hand import p50_itl_ms

REPO = Path(__file__).resolve().parents[1]
RAW = REPO / "raw"
H200_NAME, CPU_NAME = "h200-qwen2.5-7b-random", "cpu-tiny-qwen2"
H200 = RAW / H200_NAME

pytestmark = pytest.mark.skipif(not H200.is_dir(), reason="the H200 campaign is not committed in raw/")


@pytest.fixture(scope="module")
def campaign():
    return load_campaign([RAW], H200_NAME)


@pytest.fixture(scope="module")
def section(campaign):
    ctx = Context(campaign=campaign)
    gates.evaluate(campaign, ctx)
    return X.run(SectionInput(campaign, ctx, theoryctx.build(campaign)))


@pytest.fixture(scope="module")
def experiments(campaign):
    return {e.name: e for e in X.load_experiments(campaign)}


def _finding(section, metric: str, run: str | None = None, topic: str | None = None):
    hits = [
        f
        for f in section.findings
        if f.metric == metric and (run is None or f.run == run) and (topic in (None, f.topic))
    ]
    assert len(hits) == 1, [f.key for f in hits]
    return hits[0]


# --- by hand from the raw files -----------------------------------------------------------------------------


def _p50_itl_ms(run: str, concurrency: int) -> float:
    """The p50 inter-token interval at one sweep point of an H200 run, from its requests.jsonl by hand."""
    return p50_itl_ms(H200 / run, concurrency)


def test_repeat_spread_and_difference_by_hand(section):
    """np64 vs np256 (Q4_K_M) at concurrency 32, each arm run twice: the means, the spreads (max − min) and
    the difference with the larger spread beside it, from the JSON lines."""
    a1, a2 = _p50_itl_ms("exp-slots-np64-q4km", 32), _p50_itl_ms("exp-slots-np64-q4km-r2", 32)
    b1, b2 = _p50_itl_ms("exp-slots-np256-q4km", 32), _p50_itl_ms("exp-slots-np256-q4km-r2", 32)
    a, b = (a1 + a2) / 2, (b1 + b2) / 2
    spread = max(abs(a1 - a2), abs(b1 - b2))
    f = _finding(section, "c32_p50_itl_delta_pct", run="exp-slots-np64-q4km")
    assert f.value == pytest.approx((a - b) / b * 100, rel=1e-9)
    assert f.extra["spread_pct"] == pytest.approx(spread / b * 100, rel=1e-9)
    assert f.extra["distinguishable"] is (abs(a - b) > spread)
    assert f.extra["spread_borrowed"] is False
    # the arm table's repeat spread of the baseline, relative to its first run
    arms = section.tables["experiment_arms"]
    row = arms[(arms.experiment == "slots") & (arms.arm == "exp-slots-np256-q4km") & (arms.concurrency == 32)]
    assert row["p50_itl_ms_spread"].item() == pytest.approx(abs(b1 - b2), rel=1e-9)
    assert row["p50_itl_ms"].item() == pytest.approx(b, rel=1e-9)


def _log_kv_mib(run: str) -> float:
    text = (H200 / run / "server.log").read_text(errors="replace")
    (mib,) = re.findall(r"llama_kv_cache: +CUDA0 KV buffer size = +([\d.]+) MiB", text)
    return float(mib)


@pytest.mark.parametrize(
    ("run", "n_ctx", "bytes_per_32_values"),
    [
        ("exp-kvf16-q4km", 135_168, 64),  # f16: 32 × 2 bytes
        ("exp-kvq8-q4km", 135_168, 34),  # q8_0: 32 int8 + an fp16 scale
        ("exp-kvq4-q4km", 135_168, 18),  # q4_0: 32 nibbles + an fp16 scale
        ("exp-slots-np256-q4km", 1_572_864, 64),
        ("exp-slots-np64-q4km", 262_144, 64),
    ],
)
def test_kv_buffer_predicted_exactly(section, run, n_ctx, bytes_per_32_values):
    values_per_token = 2 * 28 * 4 * 128  # K and V × layers × KV heads × head dim (Qwen2.5-7B)
    predicted = n_ctx * values_per_token // 32 * bytes_per_32_values / 2**20
    f = _finding(section, "kv_buffer_mib", run=run)
    assert f.theory == predicted
    assert f.value == _log_kv_mib(run) == predicted
    assert f.extra["verdict"] == "confirmed" and f.status == "ok"
    assert {7392.0, 3927.0, 2079.0, 86016.0, 14336.0} >= {predicted}


def test_capacity_at_fixed_budget(section):
    for run, per_token in (("exp-kvf16-q4km", 57_344), ("exp-kvq8-q4km", 30_464), ("exp-kvq4-q4km", 16_128)):
        f = _finding(section, "capacity_tokens_at_budget", run=run)
        assert f.value == 84 * 2**30 // per_token


def test_ledger_matches_the_plan(section, experiments):
    """The ITL change the byte ledger predicts, recomputed from analysis.core.theory and the campaign's
    measured
    copy bandwidth, is the number the plan wrote before the run (each target's ``stated``)."""
    stated_ms = {
        (p.arm, t.concurrency, t.input_len): t.stated
        for p in experiments["kv_quant"].predictions
        if p.kind == "ledger"
        for t in p.targets
    }
    rows = section.tables["experiment_predictions"]
    ledger = rows[rows.prediction == "itl_change_from_ledger"]
    assert len(ledger) == 6 == len(stated_ms)
    for _, r in ledger.iterrows():
        stated = stated_ms[(r["arm"], r["concurrency"], r["input_len_tokens"])]
        # the plan rounded to 0.01 ms (and took 8,192 rather than 8,256 tokens of mean context at 8k)
        assert r["predicted_value"] == pytest.approx(stated, abs=0.01)
        assert r["verdict"] == "refuted" and r["measured"] > 0  # quantized KV came out slower


def _cited_line(cite: str) -> str:
    """The text of the line ``<run>/plan.toml:<line>`` cites in the committed raw store."""
    path, line = cite.rsplit(":", 1)
    run = next(p for p in RAW.glob(f"*/{path}"))
    return run.read_text().splitlines()[int(line) - 1]


def test_every_prediction_cites_its_plan_line(campaign, section, experiments):
    """Each prediction's words stand on the line its finding cites: a comment line of the sealed plan copy,
    written before the run (the copies predate the [[experiment]] tables, read from plans/)."""
    preds = [p for e in experiments.values() for p in e.predictions]
    assert len(preds) == 22 + 10 + 12  # experiments 1-3; experiment 4: 10 table rows, 12 predictions
    for pred in preds:
        line = _cited_line(spec.plan_cite(campaign, pred.plan))
        assert pred.plan[1] in line and line.startswith("#"), (pred.name, line)
    for f in section.findings:
        if "plan_source" in f.extra:
            assert _cited_line(f.extra["plan_source"]).startswith("#"), f.key


def _busy_slot_runs(run: str, concurrency: int) -> int:
    """From server.log: the slot ids launched for the sweep point at this concurrency (launches follow the
    requests' order; the points run one after another), as runs of consecutive ids."""
    text = (H200 / run / "server.log").read_text(errors="replace")
    slots = [int(s) for s in re.findall(r"launch_slot_: id +(\d+) \| task \d+ \| processing task", text)]
    order: dict[int, int] = {}
    for line in (H200 / run / "requests.jsonl").read_text().splitlines():
        r = json.loads(line)
        order.setdefault(r["point_index"], 0)
        order[r["point_index"]] += 1
        if r["phase_kind"] == "concurrency" and r["concurrency"] == concurrency:
            want = r["point_index"]
    start = sum(n for i, n in order.items() if i < want)
    ids = sorted(slots[start : start + order[want]])
    return 1 + sum(1 for a, b in zip(ids, ids[1:], strict=False) if b != a + 1)


def test_slot_ids_behind_the_c32_anomaly(section):
    f = _finding(section, "c32_p50_itl_delta_pct", run="exp-slots-np64-q4km")
    assert f.extra["busy_slot_runs"] == [
        _busy_slot_runs(r, 32) for r in ("exp-slots-np64-q4km", "exp-slots-np64-q4km-r2")
    ]
    assert f.extra["busy_slot_runs_baseline"] == [
        _busy_slot_runs(r, 32) for r in ("exp-slots-np256-q4km", "exp-slots-np256-q4km-r2")
    ]
    assert min(f.extra["busy_slot_runs"]) > 1 == max(f.extra["busy_slot_runs_baseline"])
    assert f.extra["distinguishable"] is True and f.value > 0  # np64 slower, beyond the spread
    f16 = _finding(section, "c32_p50_itl_delta_pct", run="exp-slots-np64-f16")
    assert f16.extra["busy_slot_runs"] == [_busy_slot_runs("exp-slots-np64-f16", 32)]
    assert f16.extra["spread_borrowed"] is True  # one run per F16 arm: the Q4_K_M repeats' spread


def test_launch_records_on_the_real_log():
    log = parse_llamacpp_log(H200 / "exp-slots-np64-q4km" / "server.log")
    lines = (H200 / "exp-slots-np64-q4km" / "server.log").read_text(errors="replace").splitlines()
    assert len(log.launches) == len(
        (H200 / "exp-slots-np64-q4km" / "requests.jsonl").read_text().splitlines()
    )
    first = log.launches[0]
    assert f"id {first.slot_id:2d} | task {first.task_id} | processing task" in lines[first.line - 1]
    # chunked by the points' request counts (the analysis' rule), no point's launches reach into the next's
    counts: dict[int, int] = {}
    for line in (H200 / "exp-slots-np64-q4km" / "requests.jsonl").read_text().splitlines():
        i = json.loads(line)["point_index"]
        counts[i] = counts.get(i, 0) + 1
    start, chunks = 0, []
    for i in sorted(counts):
        chunks.append([x.task_id for x in log.launches[start : start + counts[i]]])
        start += counts[i]
    assert all(max(a) < min(b) for a, b in zip(chunks, chunks[1:], strict=False))


VERDICTS = {
    ("cells_scanned_model", "exp-slots-np64-q4km"): "refuted",
    ("cells_scanned_model", "exp-slots-np64-f16"): "refuted",
    ("np64_not_slower", "exp-slots-np64-q4km"): "refuted",
    ("np64_not_slower", "exp-slots-np64-f16"): "refuted",
    ("np64_c64_far_from_4090", "exp-slots-np64-q4km"): "inconclusive",
    ("c1_itl_drop", "exp-sampling-backend-q4km"): "refuted",
    ("c64_itl_bound", "exp-sampling-backend-q4km"): "refuted",
    ("c64_throughput_bound", "exp-sampling-backend-q4km"): "refuted",
    ("slope_bound", "exp-sampling-backend-q4km"): "refuted",
    ("sampling_is_per_slot_cost", "exp-sampling-backend-q4km"): "confirmed",
    ("sampling_is_per_slot_cost", "exp-sampling-backend-f16"): "confirmed",
    ("c1_launch_cost", "exp-graphs-off-q4km"): "inconclusive",
    ("high_c_unchanged", "exp-graphs-off-q4km"): "inconclusive",
    ("itl_change_from_ledger", "exp-kvq8-q4km"): "refuted",
    ("slower_than_f16", "exp-kvq4-q4km"): "confirmed",
}


def test_verdicts_on_the_real_runs(section):
    for (metric, run), want in VERDICTS.items():
        f = _finding(section, metric, run=run)
        assert f.extra["verdict"] == want, (metric, run, f.value, f.extra)
        assert (f.status == "mismatch") is (want == "refuted")
    # the refuting point of the slot bound is the concurrency-32 anomaly
    assert _finding(section, "np64_not_slower", run="exp-slots-np64-q4km").extra["concurrency"] == 32
    # CUDA graphs: the two graphs-off runs differ by more than the effect
    spread = _finding(section, "max_repeat_spread_pct_itl", run="exp-graphs-off-q4km").value
    c32 = _finding(section, "c32_p50_itl_delta_pct", run="exp-graphs-off-q4km")
    assert abs(c32.value) < spread and c32.extra["distinguishable"] is False
    for f in section.findings:
        if f.metric == "arms_match_plans":
            assert f.value is True, f.extra
            # the committed runs' plan copies predate the [[experiment]] table: read from plans/
            assert f.extra["definitions"] and all(d.startswith("plans/") for d in f.extra["definitions"])


def test_sampling_slope_and_share(section):
    """The per-extra-stream slope (least squares over c = 8..64) per arm, and the share GPU sampling
    removes."""
    slopes = section.tables["experiment_slopes"]
    cpu = slopes[slopes.arm == "exp-slots-np256-q4km"]["slope_ms_per_stream"].mean()
    gpu = slopes[slopes.arm == "exp-sampling-backend-q4km"]["slope_ms_per_stream"].mean()
    share = _finding(section, "per_stream_cost_removed_pct", run="exp-sampling-backend-q4km")
    assert share.value == pytest.approx((1 - gpu / cpu) * 100, rel=1e-9)
    assert share.extra["share_lo"] <= share.value <= share.extra["share_hi"]
    assert 0 < gpu < cpu


@pytest.mark.parametrize(
    ("kind", "m", "s", "lo", "hi", "value", "want"),
    [
        ("bound", 10.0, 1.0, 0.0, 20.0, None, "confirmed"),
        ("bound", 10.0, 1.0, 12.0, 20.0, None, "refuted"),
        ("bound", 10.0, 3.0, 12.0, 20.0, None, "inconclusive"),
        ("point", 5.0, 1.0, -X.INF, X.INF, 5.5, "confirmed"),
        ("point", 5.0, 1.0, -X.INF, X.INF, -1.0, "refuted"),
        ("point", 0.5, 1.0, -X.INF, X.INF, 1.0, "inconclusive"),
        ("bound", 10.0, None, 0.0, 20.0, None, "inconclusive"),
    ],
)
def test_verdict_rule(kind, m, s, lo, hi, value, want):
    assert X.verdict(kind, m, s, lo, hi, value) == want


def test_arm_rule():
    assert X.repeat_of("exp-slots-np64-q4km", "exp-slots-np64-q4km") == 1
    assert X.repeat_of("exp-slots-np64-q4km-r2", "exp-slots-np64-q4km") == 2
    assert X.repeat_of("exp-kvpool-32blk-2", "exp-kvpool-32blk") == 2
    assert X.repeat_of("exp-slots-np64-q4km", "exp-slots-np64") is None
    assert X.repeat_of("exp-slots-np64-q4km-r1", "exp-slots-np64-q4km") is None
    assert X.consecutive_runs([0, 1, 2, 60, 61, 63]) == 3


# --- experiment 6 (vLLM CPU, KV-pool size) ------------------------------------------------------------------

CPU = RAW / CPU_NAME


@pytest.fixture(scope="module")
def cpu_campaign():
    if not (CPU / "exp-kvpool-65blk").is_dir():
        pytest.skip("experiment 6's runs are not committed")
    return load_campaign([RAW], CPU_NAME)


@pytest.fixture(scope="module")
def pool_section(cpu_campaign):
    ctx = Context(campaign=cpu_campaign)
    align(cpu_campaign, ctx)
    gates.evaluate(cpu_campaign, ctx)
    return X.run(SectionInput(cpu_campaign, ctx, theoryctx.build(cpu_campaign)))


def test_lockstep_prediction_is_the_plans_table(cpu_campaign):
    """The plan's table (the row each arm's ``quote`` finds): residents at peak, preemptions and stop tokens
    per pool."""
    (pool,) = [e for e in X.load_experiments(cpu_campaign) if e.name == "kv_pool"]
    assert [a.run for a in pool.arms] == [f"exp-kvpool-{n}blk" for n in (32, 48, 64, 65)]
    for arm in pool.arms:
        n = int(arm.value)
        run = next(r for r in cpu_campaign.all_runs if r.name == arm.run)
        row = (CPU / arm.run / "plan.toml").read_text().splitlines()[spec.quote_line(run, arm.quote) - 1]
        cells = row.lstrip("#").split()
        stops, residents = X.lockstep_preemptions(n, 128, 8, 256, 768)
        assert int(cells[0]) == n and int(cells[5]) == residents and int(cells[6]) == len(stops), row
        assert [int(t) for t in re.findall(r"\d+", " ".join(cells[7:]).split("(")[0])] == stops, row


def _stops_by_hand(run: str, n: int) -> list[int]:
    """The n streams with the longest pause between two chunks: output tokens received before the pause."""
    pauses = []
    for line in (CPU / run / "requests.jsonl").read_text().splitlines():
        r = json.loads(line)
        if r["phase_kind"] != "overload":
            continue
        c = r["chunk_mono_ns"]
        i = max(range(len(c) - 1), key=lambda j: c[j + 1] - c[j])
        pauses.append((c[i + 1] - c[i], sum(r["chunk_tokens"][: i + 1])))
    return sorted(t for _, t in sorted(pauses, reverse=True)[:n])


def test_pool_preemptions_on_the_real_runs(pool_section):
    got = {}
    for f in pool_section.findings:
        if f.topic == "exp_kv_pool" and f.metric in (
            "preemptions",
            "stop_tokens",
            "residents_at_peak",
            "max_running",
        ):
            assert f.extra["verdict"] == "confirmed", (f.key, f.value, f.extra)
            got[(f.run, f.metric)] = f
    assert {r: got[(r, "preemptions")].value for r, _ in got} == {
        "exp-kvpool-32blk": 5,
        "exp-kvpool-48blk": 3,
        "exp-kvpool-64blk": 1,
        "exp-kvpool-65blk": 0,
    }
    assert got[("exp-kvpool-32blk", "preemptions")].extra["per_repeat"] == [5, 5]  # the repeat: same count
    for run, n in (("exp-kvpool-32blk", 5), ("exp-kvpool-48blk", 3), ("exp-kvpool-64blk", 1)):
        assert got[(run, "stop_tokens")].value == _stops_by_hand(run, n)
    # the sharp case: the log promises 8 requests of 1,024 tokens at 64 blocks; the null block leaves 7
    r64 = got[("exp-kvpool-64blk", "residents_at_peak")]
    assert r64.value == 7 and r64.extra["log_max_concurrency"] == 8.0
    assert got[("exp-kvpool-65blk", "residents_at_peak")].value == 8


# --- the pages ----------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    res = tmp_path_factory.mktemp("results")
    list(analyze([RAW], res, [H200_NAME, CPU_NAME]))
    docs = tmp_path_factory.mktemp("docs") / "docs"
    render_site(res, docs)
    return res, docs


def test_pages_render(site):
    """Every verdict finding is a row of its campaign's experiments page, with its verdict; each experiment
    has its section and figure; the home page's "实验" section links to each experiment."""
    res, docs = site
    home = (docs / "index.md").read_text(encoding="utf-8")
    assert "## 实验 { #experiments }" in home
    for campaign, sections in (
        (H200_NAME, ("slots", "sampling", "graphs", "kv-quant", "model-size", "not-run")),
        (CPU_NAME, ("kv-pool",)),
    ):
        page = docs / "campaigns" / campaign / "experiments.md"
        text = page.read_text(encoding="utf-8")
        for anchor in sections:
            assert "{ #" + anchor + " }" in text, (campaign, anchor)
            assert f"campaigns/{campaign}/experiments.md#{anchor}" in home, (campaign, anchor)
        found = json.loads((res / campaign / "findings.json").read_text(encoding="utf-8"))
        verdicts = {
            k: f["verdict"]
            for k, f in found.items()
            if f.get("topic", "").startswith("exp_") and "verdict" in f
        }
        assert verdicts
        rows = {line.split('"')[1]: line for line in text.splitlines() if line.startswith('| <span id="f-')}
        for key, v in verdicts.items():
            row = rows[anchor_of(key)]
            assert X_VERDICT_ZH[v] in row, (key, row)
        for f in (docs / "campaigns" / campaign / "figures").glob("experiment_*.svg"):
            assert f.stat().st_size > 1000
        assert sorted(
            p.stem for p in (docs / "campaigns" / campaign / "figures").glob("experiment_*.svg")
        ) == sorted(
            p.name.removesuffix(".vl.json") for p in (res / campaign / "figures").glob("experiment_*.vl.json")
        )
