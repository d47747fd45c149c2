"""「与参考研究不同之处」: each place where our reading of the reference campaign's files differs from the
reference study's own reports, with both numbers and the evidence that decides. Rendered when the build has
the reference campaign; each difference has a stable anchor (``ANCHORS``) that other pages and the ledger of
reference claims link to, and is argued from findings (its rows on this page: the findings of topic
``differences`` have their home here)."""

from __future__ import annotations

from typing import Any

from analysis.report.context import SiteState, render_template
from analysis.report.markdown import Page
from analysis.report.results import CampaignResults

TEMPLATE = "differences.md.j2"
PATH = "differences.md"
# where the reference study's reports live (its public repository), for the quotes' sources
REFERENCE_REPORTS = (
    "https://github.com/daleiyang/llm-inference-anatomy/blob/main/01-decode-latency-anatomy/Reports/"
)
# anchor id -> the finding key that decides it (the ledger of reference claims points at these)
ANCHORS: dict[str, str] = {
    "ttft-growth": "round2.differences.vllm.ttft_growth_queue_share_pct",
    "round1-c4-p99-itl": "round1.differences.vllm.p99_itl_repeat_max_spread_pct",
    "littles-law": "round2.overload.littles_law_waiting",
    "q4km-bytes": "round2.single_stream_step_ratio",
    "flops-model": "round2.overload.flops_counter_excess_pct",
    "ignore-eos": "round2.gates.output_shortfall_total_pct",
    "throughput-fork": "round2.length.vllm.input_equals_output_throughput_at_input_tokens",
}


def render(site: SiteState, reference: CampaignResults, **common: Any) -> Page:
    return render_template(
        site, TEMPLATE, PATH, reference, reports=REFERENCE_REPORTS, anchors=ANCHORS, **common
    )
