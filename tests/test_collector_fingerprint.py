"""Fingerprint: secrets never reach the raw store; the verbatim sources are all there."""

from __future__ import annotations

import json
from pathlib import Path

from collector.fingerprint import collect, looks_like_secret, perf_env, plan_secrets, redact_args
from collector.raw.plan import ServerPlan
from collector.raw.secrets import REDACTED
from collector.server import adapter_for


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
