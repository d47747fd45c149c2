"""Where the tests find the reference campaign: ``$ANATOMY_SEED_RUNS`` or ``../shared/seed-runs`` beside the
checkout (CI clones the repository with a copy of shared/ next to it). Never committed into the project."""

from __future__ import annotations

import os
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SEED_RUNS = Path(os.environ.get("ANATOMY_SEED_RUNS", REPO.parent / "shared" / "seed-runs"))
SEED = SEED_RUNS / "rtx4090-qwen2.5-7b"
