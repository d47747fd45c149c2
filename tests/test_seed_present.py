"""In CI the reference campaign must be there: the tests that read it skip elsewhere, never silently in CI."""

from __future__ import annotations

import os

import pytest

from tests.seed import SEED


@pytest.mark.skipif(not os.environ.get("CI"), reason="only CI guarantees ../shared beside the checkout")
def test_reference_campaign_is_present_in_ci():
    assert (SEED / "Round2" / "01-02-perf-test" / "vllm_c001.json").is_file(), (
        f"reference campaign missing at {SEED}"
    )
