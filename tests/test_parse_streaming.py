"""Server logs are parsed as a stream (issue #12: a 200 MB log peaked at 1.47 GB, 7x the file): the streamed
parse reads exactly what the whole-file rules read, refuses the same broken files with the same messages, and
its memory stays about the size of what it keeps, not of the file. (``benchmarks/bench_log_memory.py``
measures a 200 MB log; here a generous bound on a smaller one.)"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest

from analysis.parse import llamacpp_log, parse_server_log, vllm_log
from analysis.parse.text import iter_lines, split_lines
from collector.raw.errors import ParseError

REPO = Path(__file__).resolve().parent.parent
LOGS = sorted(p for p in REPO.glob("raw/*/*/server.log") if (p.parent / "SEALED").exists())  # finished runs
LLAMA_H200 = REPO / "raw" / "h200-qwen2.5-7b-random" / "llamacpp-q4km" / "server.log"


def test_there_are_committed_logs_of_both_engines():
    kinds = {type(parse_server_log(p)).__name__ for p in LOGS}
    assert kinds == {"LlamacppServerLog", "VllmServerLog"}


@pytest.mark.parametrize("path", LOGS, ids=lambda p: "/".join(p.parts[-3:-1]))
def test_streamed_parse_equals_the_in_memory_parse(path):
    data = path.read_bytes()
    streamed = parse_server_log(path)
    if isinstance(streamed, vllm_log.VllmServerLog):
        assert streamed == vllm_log.parse_vllm_log_bytes(data, path)
    else:
        assert streamed == llamacpp_log.parse_llamacpp_log_bytes(data, path)
    assert streamed.line_count == data.count(b"\n")


@pytest.mark.parametrize(
    "data",
    [b"", b"a\nb", b"a\n\xff\xfe\n", b"ok\nstill ok\r\n\xe4\xb8\xad\xe6\x96\x87\n", b"a\r\rb\n\n"],
)
def test_iter_lines_follows_split_lines(tmp_path, data):
    f = tmp_path / "x.log"
    f.write_bytes(data)
    try:
        want = list(enumerate(split_lines(data, f), 1))
    except ParseError as err:
        with pytest.raises(ParseError) as got:
            list(iter_lines(f, f))
        assert str(got.value) == str(err)
        return
    assert list(iter_lines(f, f)) == want == list(iter_lines(data, f))


def test_a_cut_last_line_is_left_out_not_read(tmp_path):
    """A log cut inside a timing block (a server stopped or killed while it printed): the parser never sees
    the half line (it would misread it) and reads every whole line before it, as if the log ended there."""
    text = LLAMA_H200.read_bytes()
    i = text.index(b"prompt eval time")
    cut = tmp_path / "server.log"
    cut.write_bytes(text[: i + 25])
    whole = tmp_path / "whole" / "server.log"
    whole.parent.mkdir()
    whole.write_bytes(text[: text.rindex(b"\n", 0, i + 25) + 1])
    got, want = llamacpp_log.parse_llamacpp_log(cut), llamacpp_log.parse_llamacpp_log(whole)
    assert dataclasses.replace(got, path=want.path) == want


def test_a_missing_log_is_a_parse_error(tmp_path):
    with pytest.raises(ParseError, match=r"nothing.log: cannot read file \(No such file or directory\)"):
        vllm_log.parse_vllm_log(tmp_path / "nothing.log")


_CHILD = """
import json, resource, sys
from analysis.parse.llamacpp_log import parse_llamacpp_log
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
log = parse_llamacpp_log(sys.argv[1])
print(json.dumps({"added_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base,
                  "timings": len(log.timings)}))
"""


def test_memory_stays_below_the_file_size_order(tmp_path):
    """A 40 MB log (the committed H200 log repeated): parsing adds less than 2x the file (measured ~1x; the
    whole- file parse added ~6.6x). Generous on purpose: the number is the benchmark's to report."""
    data = LLAMA_H200.read_bytes()
    big = tmp_path / "server.log"
    with open(big, "wb") as f:
        for _ in range(40 * 2**20 // len(data) + 1):
            f.write(data)
    p = subprocess.run([sys.executable, "-c", _CHILD, str(big)], cwd=REPO, capture_output=True, text=True,
                       check=True)  # fmt: skip
    r = json.loads(p.stdout)
    assert r["timings"] == (40 * 2**20 // len(data) + 1) * len(
        llamacpp_log.parse_llamacpp_log(LLAMA_H200).timings
    )
    assert r["added_kib"] * 1024 < 2 * big.stat().st_size, r
