"""Sampler CSV parser on the three real round-2 files; the MFU-less column variant; malformed rows."""

from __future__ import annotations

import pytest

from analysis.parse.sampler_csv import CUMULATIVE, parse_sampler_csv, parse_sampler_csv_bytes
from collector.raw.errors import ParseError
from tests.seed import SEED

pytestmark = pytest.mark.skipif(not SEED.is_dir(), reason="reference campaign not on this machine")
R2 = SEED / "Round2"


def test_first_row_read_by_eye():
    t = parse_sampler_csv(R2 / "01-02-perf-test/metrics_sweep.csv")
    assert len(t.rows) == 969 and len(t.columns) == 19  # 970 lines with the header
    r = t.rows[0]
    assert r.line == 2 and r.ts_ns == 1787692641557021565
    assert (r.running_reqs, r.waiting_reqs, r.kv_usage_frac, r.preemptions_total) == (0.0, 0.0, 0.0, 0.0)
    assert r.queue_time_sum_s == 2.365652471780777e-05 and r.queue_time_count == 1.0
    assert (r.iteration_tokens_sum, r.iteration_tokens_count) == (40.0, 10.0)
    assert (r.flops_total, r.read_bytes_total) == (5.34516785152e11, 1.69868432384e11)
    assert (r.gpu_mem_used_mib, r.gpu_util_pct, r.power_w, r.temp_c) == (22465.0, 0.0, 31.86, 37.0)
    assert r.extra == {}


def test_counters_stay_cumulative_across_the_shared_server():
    """One vLLM server served round 2's tests 01-04: each file starts where the previous one ended."""
    a, b, c = (
        parse_sampler_csv(R2 / d / "metrics_sweep.csv")
        for d in ("01-02-perf-test", "03-perf-test", "04-perf-test")
    )
    assert a.rows[-1].queue_time_count == b.rows[0].queue_time_count == 1365.0
    assert b.rows[-1].iteration_tokens_sum == c.rows[0].iteration_tokens_sum == 3.22052e06
    last = c.rows[-1]
    assert last.preemptions_total == 38.0 and last.iteration_tokens_sum == 4.269096e06
    for t in (a, b, c):
        for name in CUMULATIVE:
            col = t.column(name)
            assert all(x <= y for x, y in zip(col, col[1:], strict=False)), name
    df = c.to_frame()
    assert df.shape == (670, 21) and df["ts_ns"].dtype == "int64" and df["kv_usage_frac"].max() <= 1.0


HEADER_NO_MFU = (
    "ts,running,waiting,kv_usage,preemptions,queue_sum,queue_cnt,prefill_sum,prefill_cnt,"
    "decode_sum,decode_cnt,iter_tok_sum,iter_tok_cnt,gpu_mem_used_mib,gpu_util,power_w,"
    "temp_c,fan_pct"
)


def test_variant_without_mfu_columns_and_unknown_columns_kept():
    text = (
        HEADER_NO_MFU
        + "\n1786999014.177235103,8.0,0.0,0.1,0.0,1.5,2.0,0.1,2.0,3.0,2.0,40.0,10.0,20673,100,[N/A],32,41\n"
    )
    t = parse_sampler_csv_bytes(text.encode(), "metrics.csv")
    r = t.rows[0]
    assert (
        r.flops_total is None and r.read_bytes_total is None and r.power_w is None
    )  # "[N/A]" from nvidia-smi
    assert r.extra == {"fan_pct": 41.0} and t.column("fan_pct") == [41.0]
    assert r.ts_ns == 1786999014177235103 and r.running_reqs == 8.0


@pytest.mark.parametrize(
    ("mutate", "line", "what"),
    [
        (lambda ls: ls[:5] + [ls[5].rsplit(",", 1)[0]] + ls[6:], 6, "18 fields, header has 19"),
        (lambda ls: ls[:3] + [ls[3].replace(",0.0,", ",zero,", 1)] + ls[4:], 4, "is not a number"),
        (lambda ls: ls[:3] + ["17876926x4.5,1" + ",0" * 17] + ls[4:], 4, "is not epoch seconds"),
        (lambda ls: ["time" + ls[0][2:]] + ls[1:], 1, "first column should be 'ts'"),
        (lambda ls: ls[:7] + [""] + ls[7:], 8, "empty line"),
    ],
)
def test_malformed(mutate, line, what):
    lines = (R2 / "03-perf-test/metrics_sweep.csv").read_text().split("\n")[:-1]
    data = ("\n".join(mutate(lines)) + "\n").encode()
    with pytest.raises(ParseError) as exc:
        parse_sampler_csv_bytes(data, "metrics_sweep.csv")
    assert exc.value.line == line and what in exc.value.what


def test_truncated_mid_row(tmp_path):
    data = (R2 / "04-perf-test/metrics_sweep.csv").read_bytes()
    p = tmp_path / "metrics_sweep.csv"
    p.write_bytes(data[:5000])
    with pytest.raises(ParseError, match="no newline"):
        parse_sampler_csv(p)
