"""Issue #22: every quantitative claim of the reference study is accounted for on the built site — shown on
the page it names, corrected on the differences page, or an n/a naming the missing file — and the numbers
computed for the claims match the reference's raw files read here by hand (not through the project's
parsers)."""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import pytest

from analysis.report import reference_claims as rc
from tests.seed import SEED


@pytest.fixture(scope="module")
def built():
    import browser as br  # tests/browser.py: one build per test session, shared with the other site tests

    site = br.built_site()
    if br.REFERENCE_CAMPAIGN not in site.campaigns:
        pytest.skip(f"reference campaign {SEED} not present")
    return site


def _findings(built) -> dict:
    return json.loads((built.results / "rtx4090-qwen2.5-7b" / "findings.json").read_text(encoding="utf-8"))


def test_every_claim_resolves_on_the_built_site(built):
    claims = rc.load()
    bad = rc.check(claims, built.results, built.docs, "rtx4090-qwen2.5-7b")
    unresolved = [f"{c.id} ({c.status} → {c.page} {c.ref}): {why}" for c, why in bad if c.status != "todo"]
    assert not unresolved, "claims that do not resolve:\n" + "\n".join(unresolved)
    # a todo claim names no number: it must not pretend to be shown
    assert all(not c.ref for c in claims if c.status == "todo")


def test_methodology_states_the_ledger_counts(built):
    counts = rc.counts(rc.load())
    page = (built.docs / "methodology.md").read_text(encoding="utf-8")
    assert "reference-claims-counts" not in page
    stated = dict(re.findall(r"(已展示|已更正|无法复现|尚未核对) (\d+) 条", page))
    assert stated == {
        "已展示": str(counts["shown"]),
        "已更正": str(counts["corrected"]),
        "无法复现": str(counts["na"]),
        "尚未核对": str(counts["todo"]),
    }
    ledger = (built.docs / "reference_claims.md").read_text(encoding="utf-8")
    assert sum(1 for ln in ledger.splitlines() if re.match(r"^\| (R\d|S)-", ln)) == sum(counts.values())


def test_a_malformed_ledger_line_is_one_clear_error(tmp_path):
    text = rc.LEDGER.read_text(encoding="utf-8")
    lines = text.splitlines()
    i = next(n for n, ln in enumerate(lines) if ln.startswith("R0-01\t"))
    lines[i] = lines[i].replace("\tshown\t", "\tproven\t")
    bad = tmp_path / "ledger.tsv"
    bad.write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(
        rc.LedgerError, match=rf"^{re.escape(str(bad))}:{i + 1}: claim R0-01: status 'proven'"
    ):
        rc.load(bad)
    lines[i] = lines[i].replace("\tproven\t", "\tna\t")  # an n/a without its missing file
    bad.write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(rc.LedgerError, match="needs the missing file"):
        rc.load(bad)


def test_counts_reproduced_from_the_raw_files(built):
    """The request total, llama.cpp's memory and output shortfall, the preemption cadence and the MHA pool,
    each from the reference's raw files read with the standard library."""
    f = _findings(built)
    jsons = [p for p in SEED.rglob("*.json") if "warmup" not in p.name]
    assert f["inventory.requests_total"]["value"] == sum(
        json.loads(p.read_text())["num_prompts"] for p in jsons
    )

    fp = (SEED / "Round2" / "05-perf-test" / "fingerprint.txt").read_text()
    used_mib = int(re.search(r"memory\.used \[MiB\]\n(\d+) MiB", fp).group(1))
    assert f["round2.telemetry.llamacpp.gpu_memory_used_gib"]["value"] == pytest.approx(used_mib / 1024)

    llama = [json.loads(p.read_text()) for p in (SEED / "Round2" / "05-perf-test").glob("llamacpp_c*.json")]
    got = sum(r["total_output_tokens"] for r in llama)
    asked = sum(r["completed"] * 256 for r in llama)
    key = "round2.gates.llamacpp.output_tokens_shortfall_total_pct"
    assert f[key]["value"] == pytest.approx((1 - got / asked) * 100)

    rows = list(csv.DictReader((SEED / "Round2" / "04-perf-test" / "metrics_sweep.csv").open()))
    steps = [
        (float(b["ts"]), float(b["preemptions"]) - float(a["preemptions"]))
        for a, b in zip(rows, rows[1:], strict=False)
    ]
    steps = [(t, d) for t, d in steps if d > 0]
    n = sum(d for _, d in steps)
    assert f["round2.overload.preemptions"]["value"] == n
    assert f["round2.overload.preemption_interval_s"]["value"] == pytest.approx(
        (steps[-1][0] - steps[0][0]) / (n - 1), abs=0.01
    )

    log = (SEED / "Round2" / "01-02-perf-test" / "vllm-server.head.log").read_text()
    pool = int(re.search(r"GPU KV cache size: ([\d,]+) tokens", log).group(1).replace(",", ""))
    cfg = json.loads(Path("analysis/core/models/Qwen2.5-7B-Instruct.json").read_text())
    mha = pool * cfg["num_key_value_heads"] / cfg["num_attention_heads"]
    assert f["round2.kv_pool_tokens_mha"]["value"] == pytest.approx(mha)
    assert f["round2.max_input_len_mha_at_length_sweep"]["value"] == int(mha // 16 - 256)


def test_power_share_from_the_sampler_by_hand(built):
    """The median power over the C=64 point's window (the point's own window in the pipeline; here the samples
    between the bench file's start and end, read by hand) against the 450 W board power."""
    f = _findings(built)["round2.telemetry.vllm.power_share_of_board_power_at_max_concurrency_pct"]
    rows = list(csv.DictReader((SEED / "Round2" / "01-02-perf-test" / "metrics_sweep.csv").open()))
    running = [float(r["power_w"]) for r in rows if float(r["running"]) > 32]  # only C=64 runs above 32
    running.sort()
    median = running[len(running) // 2]
    assert f["power_w_p50"] == pytest.approx(median, rel=0.02)
    assert f["value"] == pytest.approx(f["power_w_p50"] / 450 * 100)


def test_claims_closed_last_by_hand(built):
    """Two of the numbers that closed the last todo claims, from the raw files with the standard library: the
    last KV block of a round-1 request (the reference's 8 tokens assumed 1,000-token prompts) and the KV the
    length sweep would need at twice its longest prompt."""
    f = _findings(built)
    c1 = json.loads((SEED / "Round1" / "01-perf-test" / "c001.json").read_text())
    context = c1["total_input_tokens"] // c1["completed"] + 256
    assert f["round1.ttft.vllm.block_rounding_tokens_per_request"]["value"] == -context % 16 == 0
    log = (SEED / "Round2" / "03-perf-test" / "vllm-server.head.log").read_text()
    pool = int(re.search(r"GPU KV cache size: ([\d,]+) tokens", log).group(1).replace(",", ""))
    longest = json.loads((SEED / "Round2" / "03-perf-test" / "len_4096.json").read_text())
    need = longest["max_concurrency"] * (2 * longest["total_input_tokens"] // longest["completed"] + 256)
    key = "round2.length.vllm.kv_demand_at_double_longest_input_pct"
    assert f[key]["value"] == pytest.approx(need / pool * 100)
