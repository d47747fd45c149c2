"""Every analysis output of the committed campaigns and the reference is byte-identical to the committed
digest (tests/data/results_digest.json): a refactor changes no number, no sentence, no figure. A commit that
means to change an output regenerates the digest with `python scripts/results_digest.py --write` and says
why."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.seed import SEED

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "scripts"))

import results_digest  # noqa: E402

pytestmark = pytest.mark.skipif(not SEED.is_dir(), reason="reference campaign not beside the checkout")


def test_outputs_match_committed_digest(tmp_path: Path) -> None:
    expected = json.loads(results_digest.DIGEST.read_text(encoding="utf-8"))
    actual = results_digest.compute(tmp_path, seed=SEED)
    moved = results_digest.differences(expected, actual)
    assert not moved, (
        "outputs moved (regenerate with scripts/results_digest.py --write if meant):\n"
        + "\n".join(moved[:40])
    )


def test_a_moved_byte_is_caught(tmp_path: Path) -> None:
    """The comparison itself can fail: one changed file is named."""
    a = tmp_path / "a"
    (a / "c").mkdir(parents=True)
    (a / "c" / "findings.json").write_text("[1]")
    before = results_digest.digest_tree(a)
    (a / "c" / "findings.json").write_text("[2]")
    assert results_digest.differences(before, results_digest.digest_tree(a)) == ["changed: c/findings.json"]
