"""The documents a `collector run` keeps beside its measurements: the plan it ran (plan.toml, read with the
collector's own plan parser), the theory it wrote before the first request (prediction.json), the machine's
headline facts (fingerprint/summary.json) and the card's measured ceilings (ceilings.json, from
``collector.protocol.ceilings``: a run of its own or a copy inside a run).

These are not measurement streams, so ``analysis.parse`` has no parser for them; each is read here by one
function that checks the few keys the analysis uses and names the file in every error.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from collector.raw.errors import AnatomyError
from collector.raw.plan import Plan, parse_plan
from collector.raw.prediction import PredictionDoc

PLAN_FILE = "plan.toml"
PREDICTION_FILE = "prediction.json"
CEILINGS_FILE = "ceilings.json"
FINGERPRINT_SUMMARY = "fingerprint/summary.json"
# The model's own config.json, when the collector kept a copy in the run.
MODEL_CONFIG_FILES = ("model-config.json", "model/config.json", "fingerprint/model-config.json")


class RunDocError(AnatomyError):
    """A run document that cannot be read: message `path: what`."""


def _json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except OSError as err:
        raise RunDocError(f"{path}: cannot read ({err.strerror or err})") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise RunDocError(f"{path}: not JSON ({err})") from None


def read_prediction(path: Path) -> PredictionDoc:
    """prediction.json through the raw contract's schema (``collector.raw.prediction``): ``inputs`` (what
    `collector plan` was asked), ``prediction`` (its numbers, or None when it refused: ``error`` says why)."""
    return PredictionDoc.from_dict(_json(path), path)


@dataclass(frozen=True)
class Ceilings:
    """The card's measured ceilings (``collector.protocol.ceilings``): copy bandwidth (read + written bytes /
    s) and a
    large bf16 matmul's FLOP/s."""

    copy_bytes_per_s: float
    bf16_matmul_flops_per_s: float
    device_name: str | None


def read_ceilings(path: Path) -> Ceilings:
    d = _json(path)
    if not isinstance(d, dict):
        raise RunDocError(f"{path}: expected a JSON object")
    vals = {}
    for k in ("copy_bytes_per_s", "bf16_matmul_flops_per_s"):
        v = d.get(k)
        if isinstance(v, bool) or not isinstance(v, int | float) or v <= 0:
            raise RunDocError(f"{path}: key {k!r} should be a positive number, got {v!r}")
        vals[k] = float(v)
    return Ceilings(device_name=d.get("device_name"), **vals)


def read_fingerprint_summary(path: Path) -> dict[str, Any]:
    d = _json(path)
    if not isinstance(d, dict):
        raise RunDocError(f"{path}: expected a JSON object")
    return d


def gpu_name_from_summary(summary: dict[str, Any]) -> str | None:
    """nvidia-smi's `name` of the first GPU in fingerprint/summary.json (None on a machine without one)."""
    gpus = summary.get("gpus")
    if isinstance(gpus, list) and gpus and isinstance(gpus[0], dict):
        name = gpus[0].get("name")
        return str(name).strip() if name else None
    return None


def read_plan(path: Path) -> Plan:
    """plan.toml as the collector typed it (``collector.raw.plan.Plan``)."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as err:
        raise RunDocError(f"{path}: cannot read ({err.strerror or err})") from None
    return parse_plan(text, path)


@dataclass
class RunDocs:
    """What a run kept besides measurements; each field with the run-relative file it came from."""

    plan: Plan | None = None
    prediction: PredictionDoc | None = None
    ceilings: Ceilings | None = None
    fingerprint_summary: dict[str, Any] | None = None
    model_config_file: str | None = None
    files: dict[str, str] = field(default_factory=dict)  # doc name -> run-relative file


def read_run_docs(run_path: Path, rels: list[str]) -> RunDocs:
    docs = RunDocs()
    present = set(rels)
    if PLAN_FILE in present:
        docs.plan, docs.files["plan"] = read_plan(run_path / PLAN_FILE), PLAN_FILE
    if PREDICTION_FILE in present:
        docs.prediction, docs.files["prediction"] = (
            read_prediction(run_path / PREDICTION_FILE),
            PREDICTION_FILE,
        )
    for rel in sorted(present):
        if Path(rel).name == CEILINGS_FILE:
            docs.ceilings, docs.files["ceilings"] = read_ceilings(run_path / rel), rel
            break
    if FINGERPRINT_SUMMARY in present:
        docs.fingerprint_summary = read_fingerprint_summary(run_path / FINGERPRINT_SUMMARY)
        docs.files["fingerprint_summary"] = FINGERPRINT_SUMMARY
    for rel in MODEL_CONFIG_FILES:
        if rel in present:
            docs.model_config_file = rel
            break
    return docs
