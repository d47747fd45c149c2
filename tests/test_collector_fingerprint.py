"""Fingerprint: secrets never reach the raw store; the verbatim sources are all there."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from collector.protocol.fingerprint import collect, looks_like_secret, perf_env, plan_secrets, redact_args
from collector.protocol.server import adapter_for
from collector.raw.plan import ServerPlan
from collector.raw.secrets import REDACTED


def test_environment_is_an_allow_list_with_values_scrubbed():
    env = {
        "DATABASE_URL": "postgres://admin:pw@h/db",
        "MY_PASS": "hunter2",
        "HF_AUTH": "abc",
        "HF_TOKEN": "abc",
        "OPENAI_API_KEY": "x",
        "ANATOMY_SERVICE": "short",  # another run's key under a name that looks like nothing
        "PATH": "/usr/local/bin:/usr/bin",
        "HOME": "/root",
        "VLLM_API_KEY": "k",
        "VLLM_CPU_KVCACHE_SPACE": "1",
        "OMP_NUM_THREADS": "2",
        "CUDA_VISIBLE_DEVICES": "0,1",
        "HF_HUB_OFFLINE": "1",
        "NCCL_DEBUG_FILE": "https://u:secretpw@example.org/x",
        "TORCH_OPAQUE": "aZ3kQ9vX2mP7tL1wR8yN4bC6dF0gH5jK",
        "GGML_GH": "ghp_0123456789abcdefghij",
    }
    assert perf_env(env) == {
        "CUDA_VISIBLE_DEVICES": "0,1",
        "GGML_GH": REDACTED,
        "HF_HUB_OFFLINE": "1",
        "NCCL_DEBUG_FILE": f"https://{REDACTED}@example.org/x",
        "OMP_NUM_THREADS": "2",
        "TORCH_OPAQUE": REDACTED,
        "VLLM_API_KEY": REDACTED,
        "VLLM_CPU_KVCACHE_SPACE": "1",
    }
    assert looks_like_secret("Bearer abc.def") and looks_like_secret("eyJhbGciOi.eyJzdWIiOiIx.sig-nature")
    assert not looks_like_secret("/work/main/.engines/models/tiny-qwen2-f16.gguf")


def test_literal_secrets_of_the_server_table_are_plan_secrets():
    env = {"HF_TOKEN": "hf-literal", "PROXY": "http://bob:pw99@proxy:3128", "OMP_NUM_THREADS": "2"}
    args = ("--api-key", "literal-arg-key", "-c", "512")
    sp = ServerPlan(
        engine="llamacpp",
        port=1,
        binary=Path("/bin/echo"),
        model="m.gguf",
        served_model_name="m",
        args=args,
        env=env,
    )
    found = plan_secrets("the-api-key", {"X-Trace": "on"}, sp)
    assert {"the-api-key", "literal-arg-key", "hf-literal", "bob:pw99", "pw99"} <= set(found)
    assert "2" not in found and "on" not in found and "512" not in found


def test_secret_arguments_are_redacted():
    argv = ["vllm", "--api-key", "s3cr3t", "--hf-token=hf_abcdefghijklmnop", "--port", "8000"]
    assert redact_args(argv) == ["vllm", "--api-key", REDACTED, f"--hf-token={REDACTED}", "--port", "8000"]


def test_collect_writes_every_source(monkeypatch):
    monkeypatch.setenv("COLLECTOR_TEST_TOKEN", "do-not-record-me")
    sp = ServerPlan(
        engine="llamacpp", port=1, binary=Path("/bin/echo"), model="m.gguf", served_model_name="m"
    )
    files = collect(
        adapter_for("llamacpp"), sp, ["/bin/echo", "-m", "m.gguf"], dict(__import__("os").environ)
    )
    assert {"os.txt", "cpu.txt", "memory.txt", "python.txt", "pip-freeze-collector.txt", "engine-version.txt",
            "command.json", "environment.json", "summary.json"} <= set(files)  # fmt: skip
    assert "do-not-record-me" not in "".join(files.values())
    assert "COLLECTOR_TEST_TOKEN" not in json.loads(files["environment.json"])
    assert "click==" in files["pip-freeze-collector.txt"].lower()
    summary = json.loads(files["summary.json"])
    meminfo = Path("/proc/meminfo").read_text().split("\n")[0].split()
    assert summary["mem_total_kib"] == int(meminfo[1]) and summary["engine"] == "llamacpp"
    assert json.loads(files["command.json"])["shell"] == "/bin/echo -m m.gguf"


# rocm-smi 6.x on two MI300X, as `--showproductname --showmeminfo vram --json` prints it (a warning first)
ROCM_SMI_JSON = (
    "WARNING: AMD GPU device(s) is/are in a low-power state. Check power control/runtime_status\n"
    + json.dumps(
        {
            "card0": {
                "Card Series": "AMD Instinct MI300X",
                "Card Model": "0x74a1",
                "Card Vendor": "Advanced Micro Devices, Inc. [AMD/ATI]",
                "Card SKU": "M3000100",
                "VRAM Total Memory (B)": "206141652992",
                "VRAM Total Used Memory (B)": "299008000",
            },
            # before ROCm 6 the key was spelt "Card series"
            "card1": {
                "Card series": "AMD Instinct MI300X",
                "VRAM Total Memory (B)": "206141652992",
                "VRAM Total Used Memory (B)": "0",
            },
        }
    )
    + "\n"
)


def test_an_amd_gpu_is_fingerprinted_through_rocm_smi(tmp_path, monkeypatch):
    """Before: no nvidia-smi meant no GPU in the fingerprint and a CPU plan from init, on an AMD machine
    too. A fake rocm-smi on PATH (JSON for the query, its concise table otherwise): both texts kept verbatim,
    the summary lists both cards, init finds the MI300X."""
    from collector.protocol.fingerprint import gpu_info, summary
    from collector.protocol.init import detect_gpu

    if shutil.which("nvidia-smi", path="/usr/bin:/bin"):
        pytest.skip("nvidia-smi is installed here: the fingerprint reads it first")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "query.txt").write_text(ROCM_SMI_JSON)
    fake = bin_dir / "rocm-smi"
    fake.write_text(
        '#!/bin/sh\nif [ "$*" = "--showproductname --showmeminfo vram --json" ]; then\n'
        f'  cat "{bin_dir}/query.txt"\nelse\n  echo "ROCm System Management Interface"\nfi\n'
    )
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    files = gpu_info()
    assert files is not None and files["rocm-smi-gpus.json"] == ROCM_SMI_JSON
    assert files["rocm-smi.txt"].startswith("ROCm System Management Interface")
    base = {"cpu.txt": "", "memory.txt": "", "engine-version.txt": ""}
    gpus = summary({**base, **files}, ServerPlan(engine="llamacpp", port=1, url="http://127.0.0.1:1"))["gpus"]
    assert gpus == [
        {"name": "AMD Instinct MI300X", "memory.total [MiB]": "196592 MiB", "memory.used [MiB]": "285 MiB"},
        {"name": "AMD Instinct MI300X", "memory.total [MiB]": "196592 MiB", "memory.used [MiB]": "0 MiB"},
    ]
    # collector init plans for the card it finds the same way (was: a CPU run)
    gpu = detect_gpu()
    assert (gpu.spec.name, gpu.count, gpu.smi_memory_mib) == ("mi300x", 2, 196592)
