"""Plan values out of any sane range are refused in one line naming the field, before any run folder exists
(before: a run that hung for ever on `requests = 10^9` or `concurrency = 10^7`, tracebacks for a 2^70 token
id, a malformed url and 100,000 nested arrays, a sampler polling every microsecond accepted)."""

from __future__ import annotations

import re

import pytest
from click.testing import CliRunner

from collector.cli import main
from collector.protocol.run import execute_run
from collector.raw.errors import AnatomyError
from tests.cli import collector_cli

RATE_PHASE = """[[phase]]
name = "rate"
kind = "rate"
input_len = 8
output_len = 4
seed = 1
"""
SWEEP = '[[phase]]\nname = "sweep"'
ATTACH = '[server]\nserved_model_name = "x"\nurl = '
CASES = {
    "requests": (
        "requests = 3, seed = 11",
        "requests = 1000000000, seed = 11",
        r"point p01-sweep-c001-i24-o16: requests: must be in 1\.\.1,000,000, got 1,000,000,000",
    ),
    "concurrency": ("{concurrency = 4,", "{concurrency = 10000000,", r"concurrency: must be in 1\.\.65,536"),
    "token ids": (
        "token_id_range = [32, 127]",
        f"token_id_range = [0, {2**70}]",
        r"\[model\].token_id_range high: must be in 1\.\.2,147,483,648, got 1,180,591,620,717,411,303,424",
    ),
    "interval": (
        "interval_s = 0.2",
        "interval_s = 1e-6",
        r"\[sampling\].interval_s: must be in 0\.1\.\.3600",
    ),
    "scrape bound": (
        "interval_s = 0.2",
        "interval_s = 0.2\nscrape_stored_max_bytes = 1000000000000",
        r"\[sampling\]\.scrape_stored_max_bytes: at most 268435456 \(the most a scrape reads\)",
    ),
    "drain": ("drain_s = 0.1", "drain_s = 1e9", r"\[load\].drain_s: must be in 0\.\.3600, got 1e\+09"),
    "timeout": ("request_timeout_s = 20", "request_timeout_s = nan", r"request_timeout_s: must be a finite"),
    "seed": ("seed = 12}", f"seed = {2**70}}}", r"seed: must be in 0\.\.9,223,372,036,854,775,807"),
    "rate": (
        SWEEP,
        RATE_PHASE + f"request_rates = [1e12]\nmax_requests = 3\n{SWEEP}",
        r"point p01-rate-r1e\+12-i8-o4: request_rate: must be in 1e-06\.\.100000",
    ),
    "rate sends": (
        SWEEP,
        RATE_PHASE + f"request_rates = [1000]\nduration_s = 86400\n{SWEEP}",
        r"requests it sends \(max_requests, else request_rate × duration_s\): must be in 1\.\.1,000,000",
    ),
    "url": ("[server]\n", ATTACH + '"http://[::1:80"\n', r"\[server\].url: 'http://\[::1:80' is not a URL"),
    "url port": (
        "[server]\n",
        ATTACH + '"http://h:99999"\n',
        r"url: 'http://h:99999' is not a URL \(Port out",
    ),
    "url host": (
        "[server]\n",
        ATTACH + '"http://:8000"\n',
        r"url: expected http://host:port, got 'http://:8000'",
    ),
    "nesting": (
        'campaign = "fake"',
        'campaign = "fake"\ndescription = ' + "[" * 100_000 + "]" * 100_000,
        r"not a plan: arrays or tables nested too deep",
    ),
}


@pytest.mark.parametrize("case", CASES)
def test_out_of_range_values_are_refused_before_any_run_folder(tmp_path, make_plan, case):
    old, new, pattern = CASES[case]
    plan = make_plan(tmp_path)
    text = plan.read_text()
    assert old in text
    plan.write_text(text.replace(old, new, 1))
    with pytest.raises(AnatomyError, match=f"{re.escape(str(plan))}: .*{pattern}") as err:
        execute_run(plan, tmp_path / "raw")
    assert "\n" not in str(err.value) and not (tmp_path / "raw").exists()
    if case == "nesting":  # a traceback before (RecursionError): the command line too
        r = collector_cli("run", plan, "--raw", tmp_path / "raw")
        assert r.returncode == 1 and "Traceback" not in r.stderr and len(r.stderr.splitlines()) == 1
        assert re.search(pattern, r.stderr) and not (tmp_path / "raw").exists()


@pytest.mark.parametrize(
    "args, pattern",
    [
        (["slo", "--ttft-p99-ms", "nan"], r"'--ttft-p99-ms': must be a finite number > 0, got 'nan'"),
        (
            ["slo", "--ttft-p99-ms", "10", "--itl-p99-ms", "-5"],
            r"'--itl-p99-ms': must be a finite number > 0",
        ),
        (
            ["plan", "--model", "Qwen2.5-7B-Instruct", "--gpu", "h200", "--kv-pool-gib", "nan"],
            r"'--kv-pool-gib'",
        ),
        (
            ["init", "--model", "m.gguf", "--port", "99999"],
            r"'--port': 99999 is not in the range 1<=x<=65535",
        ),
    ],
)
def test_out_of_range_command_line_values_are_refused(args, pattern):
    """Before: `slo --ttft-p99-ms nan` answered as if it were a budget, `plan --kv-pool-gib nan` a
    ValueError traceback, `init --port 99999` wrote a plan pre-flight then refused."""
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 2 and isinstance(r.exception, SystemExit)  # click's usage error, no traceback
    assert re.search(pattern, r.output), r.output
