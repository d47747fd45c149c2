"""No secret reaches raw/ or the terminal: credentials planted in every place a run can meet them (the
collector's environment, the API key a server quotes back in its 401 body, literal secrets in the plan's
``[server]`` table and headers) are looked for in every file the run wrote and in everything it printed."""

from __future__ import annotations

import json
import os

from tests.cli import collector_cli

KEY = "k3y-9x"  # a short key under a name that looks like nothing (the scrub must not rely on either)
PLANTED_ENV = {
    "DATABASE_URL": "postgres://admin:pw@h/db",
    "MY_PASS": "hunter2-pass",
    "HF_AUTH": "hf-auth-value",
    "ANATOMY_T_SERVICE": KEY,
    "NCCL_TEST_URL": "https://nccl-user:nccl-pw@example.org/x",  # allow-listed name, its password scrubbed
    "OMP_NUM_THREADS": "1",  # allow-listed and harmless: kept
}
LITERALS = {
    "[server] env": "literal-env-secret",
    "[server] args --api-key": "literal-arg-secret",
    "[load] headers": "literal-header-secret",
}


def test_planted_credentials_reach_no_file_and_no_terminal(tmp_path, make_plan):
    plan = make_plan(
        tmp_path,
        server_args=["--reject-key", "--api-key", LITERALS["[server] args --api-key"]],
        extra=f'api_key_env = "ANATOMY_T_SERVICE"\nheaders = {{X-Api-Key = "{LITERALS["[load] headers"]}"}}',
    )
    text = plan.read_text().replace(
        "stop_timeout_s = 5\n", f'stop_timeout_s = 5\nenv = {{HF_TOKEN = "{LITERALS["[server] env"]}"}}\n'
    )
    plan.write_text(text)
    raw = tmp_path / "raw"
    r = collector_cli("run", plan, "--raw", raw, env={**os.environ, **PLANTED_ENV})
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert "HTTP 401" in r.stderr and "<redacted>" in r.stderr  # the reason is told, the key is not
    secrets = [KEY, "admin:pw", "hunter2-pass", "hf-auth-value", "nccl-pw", *LITERALS.values()]
    files = [p for p in raw.rglob("*") if p.is_file()]
    assert {"requests.jsonl", "events.jsonl", "manifest.json", "plan.toml", "environment.json"} <= {
        p.name for p in files
    }
    where = {(s, str(p.relative_to(raw))) for p in files for s in secrets if s.encode() in p.read_bytes()}
    where |= {(s, "terminal") for s in secrets if s in r.stdout + r.stderr}
    assert where == set()
    run = next(p.parent for p in files if p.name == "manifest.json")
    assert "<redacted>" in (run / "requests.jsonl").read_text()  # the 401 body quoting the key was kept
    env = json.loads((run / "fingerprint" / "environment.json").read_text())
    assert env["OMP_NUM_THREADS"] == "1" and env["NCCL_TEST_URL"] == "https://<redacted>@example.org/x"
    assert not {"DATABASE_URL", "MY_PASS", "HF_AUTH", "ANATOMY_T_SERVICE", "PATH"} & set(env)
