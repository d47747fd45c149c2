"""Fingerprint: secrets never reach the raw store; the verbatim sources are all there."""

from __future__ import annotations

import json
from pathlib import Path

from collector.fingerprint import REDACTED, collect, looks_like_secret, redact_args, redact_env
from collector.raw.plan import ServerPlan
from collector.server import adapter_for


def test_secret_names_and_values_are_redacted():
    env = {
        "HF_TOKEN": "abc",
        "OPENAI_API_KEY": "x",
        "MY_SECRET": "y",
        "DB_PASSWORD": "z",
        "aws_secret_access_key": "w",
        "AUTH": "Bearer abc.def",
        "GH": "ghp_0123456789abcdefghij",
        "JWT": "eyJhbGciOi.eyJzdWIiOiIx.sig-nature",
        "OPAQUE": "aZ3kQ9vX2mP7tL1wR8yN4bC6dF0gH5jK",
        "PATH": "/usr/local/bin:/usr/bin",
        "VLLM_CPU_KVCACHE_SPACE": "1",
        "HOME": "/root",
        "SHA": "0c1e57098",
        "MODEL": "Qwen/Qwen2.5-7B-Instruct",
    }
    out = redact_env(env)
    hidden = {k for k, v in out.items() if v == REDACTED}
    assert hidden == {
        "HF_TOKEN",
        "OPENAI_API_KEY",
        "MY_SECRET",
        "DB_PASSWORD",
        "aws_secret_access_key",
        "AUTH",
        "GH",
        "JWT",
        "OPAQUE",
    }
    assert out["PATH"] == env["PATH"] and out["MODEL"] == env["MODEL"]
    assert not looks_like_secret("/work/main/.engines/models/tiny-qwen2-f16.gguf")


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
    assert json.loads(files["environment.json"])["COLLECTOR_TEST_TOKEN"] == REDACTED
    assert "click==" in files["pip-freeze-collector.txt"].lower()
    summary = json.loads(files["summary.json"])
    meminfo = Path("/proc/meminfo").read_text().split("\n")[0].split()
    assert summary["mem_total_kib"] == int(meminfo[1]) and summary["engine"] == "llamacpp"
    assert json.loads(files["command.json"])["shell"] == "/bin/echo -m m.gguf"
