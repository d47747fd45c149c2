"""A /metrics page stored at a bounded size (collector.raw.metric_families): verbatim up to the bound, else
the families analysis reads kept whole and the rest counted — and that list is the one analysis reads by."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from analysis.parse.prometheus import parse_prometheus_text
from collector.raw.metric_families import BoundedPage, kept

ROOT = Path(__file__).resolve().parent.parent

VLLM_PART = (
    "# HELP vllm:request_queue_time_seconds Histogram of time spent in WAITING phase.\n"
    "# TYPE vllm:request_queue_time_seconds histogram\n"
    'vllm:request_queue_time_seconds_bucket{le="0.3",model_name="m"} 2.0\n'
    'vllm:request_queue_time_seconds_bucket{le="+Inf",model_name="m"} 3.0\n'
    'vllm:request_queue_time_seconds_sum{model_name="m"} 0.5\n'
    'vllm:request_queue_time_seconds_count{model_name="m"} 3.0\n'
    "# TYPE vllm:num_preemptions counter\n"
    'vllm:num_preemptions_total{model_name="m"} 7.0\n'
)
OTHER = "".join(f'# TYPE tenant_{i} counter\ntenant_{i}_total{{t="{i:040d}"}} 1\n' for i in range(200))


def _fed(text: str, bound: int, chunk: int = 7) -> BoundedPage:
    page = BoundedPage(bound)
    data = text.encode()
    for i in range(0, len(data), chunk):  # odd chunk sizes: lines cut across chunks
        page.feed(data[i : i + chunk])
    return page


def test_a_page_within_the_bound_is_stored_verbatim():
    page = _fed(OTHER + VLLM_PART, bound=1 << 20)
    assert page.value().decode() == OTHER + VLLM_PART
    assert not page.filtering and page.dropped_bytes is None


def test_a_larger_page_keeps_the_read_families_whole_and_counts_the_rest():
    cut = OTHER.index("\n", 5000) + 1
    text = OTHER[:cut] + VLLM_PART + OTHER[cut:] + "\n# a comment\n"
    page = _fed(text, bound=2000)
    stored = page.value().decode()
    assert stored == VLLM_PART  # every bucket, HELP and TYPE of the kept families, in order
    assert page.dropped_series == 200 and page.dropped_bytes == len(text) - len(stored)
    snap = parse_prometheus_text(stored, "bounded")
    assert {s.name for s in snap.samples} >= {
        "vllm:num_preemptions_total",
        "vllm:request_queue_time_seconds_sum",
    }


def test_kept_families_larger_than_the_bound_are_refused():
    many = "".join(f'vllm:num_requests_running{{pod="{i:060d}"}} 1\n' for i in range(100))
    with pytest.raises(OverflowError, match="kept metric families alone are larger than 3000 bytes"):
        _fed(OTHER + many, bound=3000, chunk=4096).value()


def test_every_metric_name_analysis_and_the_checks_read_is_kept():
    """One list: a name read anywhere in analysis/ or the collector's checks is in the kept families (a new
    one added there without adding it to metric_families would be dropped from a bounded page)."""
    names = set()
    for path in [*ROOT.joinpath("analysis").rglob("*.py"), ROOT / "collector" / "protocol" / "checks.py"]:
        names |= set(re.findall(r"[\"']((?:vllm|llamacpp):[a-z_]+)[\"']", path.read_text()))
    assert names and all(kept(n) for n in names), sorted(n for n in names if not kept(n))
