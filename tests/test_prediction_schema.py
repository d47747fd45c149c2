"""prediction.json's schema (collector.raw.prediction): every sealed file reads and writes back unchanged,
what `collector plan` computes today for every bundled shape fits it, and a bad file is one line naming the
file and the key."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from analysis.core.model_config import MODELS_DIR
from analysis.loading.rundocs import read_prediction
from collector.protocol.theory_sheet import SheetInputs, theory_sheet
from collector.raw.errors import AnatomyError
from collector.raw.prediction import PredictionDoc

ROOT = Path(__file__).resolve().parent.parent
SEALED = sorted((ROOT / "raw").rglob("prediction.json"))


def test_every_sealed_prediction_reads_and_writes_back_unchanged():
    assert len(SEALED) >= 48
    for path in SEALED:
        data = json.loads(path.read_text())
        doc = read_prediction(path)
        assert doc.to_dict() == data, path
        assert (
            doc.prediction is not None
            and doc.prediction.kv_pool_tokens == data["prediction"]["kv_pool_tokens"]
        )


@pytest.mark.parametrize("pool", ["given", "estimated", "llama.cpp -c"])
def test_what_collector_plan_computes_for_every_bundled_shape_fits_the_schema(pool):
    """MoE (Mixtral, Qwen3-30B-A3B), MLA (DeepSeek), sliding windows (gemma, gpt-oss), each kind of pool,
    a llama.cpp server's slots: each optional part of the schema is exercised."""
    seen = set()
    for config in sorted(MODELS_DIR.glob("*.json")):
        inputs = {"model": str(config), "gpu": "h200", "kv_pool_gib": 20.0 if pool == "given" else None}
        inputs |= {"max_model_len": None, "kv_dtype": "bf16", "weight_format": "bf16", "block_size": 16}
        if pool == "llama.cpp -c":
            inputs |= {"llama_cpp_ctx_total": 8192, "llama_cpp_slots": 4}
        theory = json.loads(json.dumps(theory_sheet(SheetInputs(**inputs))))
        doc = {"v": 1, "inputs": inputs, "prediction": theory, "error": None}
        assert PredictionDoc.from_dict(doc, config).to_dict() == doc, config
        assert theory["kv_pool_source"] == pool
        seen |= set(theory)
    assert {"moe", "mla", "layer_windows", "theory_notes"} <= seen
    assert ("vllm_kv_cache_tokens_range" in seen) == (pool == "given")
    assert ("kv_pool_estimate" in seen) == (pool == "estimated")
    assert ("llama_cpp_n_ctx_slot" in seen) == (pool == "llama.cpp -c")


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: d["prediction"].pop("kv_pool_tokens"), "key 'prediction.kv_pool_tokens': missing"),
        (
            lambda d: d["prediction"].__setitem__("decode_step_floor_ms", "fast"),
            "key 'prediction.decode_step_floor_ms': expected float, got 'fast'",
        ),
        (
            lambda d: d["prediction"]["decode_by_batch"][2].__setitem__("batch", None),
            "key 'prediction.decode_by_batch[2].batch': expected int, got None",
        ),
        (lambda d: d["inputs"].__setitem__("gpus", "h200"), "key 'inputs.gpus': unknown key"),
        (lambda d: d.__setitem__("v", 2), "key 'v': expected version 1, got 2"),
        (lambda d: d.__setitem__("prediction", []), "key 'prediction': expected an object, got list"),
    ],
)
def test_a_bad_prediction_is_one_line_naming_the_file_and_the_key(tmp_path, change, message):
    data = json.loads((ROOT / "raw" / "cpu-tiny-qwen2" / "vllm" / "prediction.json").read_text())
    change(data)
    path = tmp_path / "prediction.json"
    path.write_text(json.dumps(data))
    with pytest.raises(AnatomyError) as err:
        read_prediction(path)
    assert str(err.value).startswith(f"{path}: {message}") and "\n" not in str(err.value)
