"""Mutated real files (byte flips, truncation, dropped/duplicated lines, inserted garbage) fed to every
parser: each may refuse with ParseError, nothing else, and must return promptly (hypothesis deadline +
pytest-timeout)."""

from __future__ import annotations

import os
from datetime import timedelta

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from analysis.parse.bench_json import parse_bench_json_bytes
from analysis.parse.fingerprint_txt import parse_fingerprint_bytes
from analysis.parse.llamacpp_log import parse_llamacpp_log_bytes
from analysis.parse.prometheus import parse_prometheus_bytes
from analysis.parse.sampler_csv import parse_sampler_csv_bytes
from analysis.parse.sweep_log import parse_sweep_log_bytes
from analysis.parse.vllm_log import parse_vllm_log_bytes
from collector.raw.errors import ParseError
from tests.seed import SEED

pytestmark = [
    pytest.mark.skipif(not SEED.is_dir(), reason="reference campaign not on this machine"),
    pytest.mark.timeout(300),
]

CASES = {
    "bench_json": (
        parse_bench_json_bytes,
        ["Round1/05-perf-test/llamacpp_c32.json", "Round2/04-perf-test/stress.json"],
    ),
    "vllm_log": (parse_vllm_log_bytes, ["Round2/01-02-perf-test/vllm-server.head.log"]),
    "llamacpp_log": (parse_llamacpp_log_bytes, ["Round2/05-perf-test/llamacpp-server.head.log"]),
    "sampler_csv": (parse_sampler_csv_bytes, ["Round2/04-perf-test/metrics_sweep.csv"]),
    "prometheus": (parse_prometheus_bytes, ["Round1/01-perf-test/metrics.log"]),
    "sweep_log": (
        parse_sweep_log_bytes,
        ["Round2/05-perf-test/sweep_llamacpp.log", "Round2/04-perf-test/sweep_vllm.log"],
    ),
    "fingerprint_txt": (parse_fingerprint_bytes, ["Round2/05-perf-test/fingerprint.txt"]),
}
GARBAGE = st.one_of(
    st.binary(min_size=1, max_size=40),
    st.sampled_from(
        [
            b"\r",
            b"\n",
            b"\x00",
            b"\xff\xfe",
            b"=" * 30 + b"\n",
            b"Namespace(",
            b"{",
            b"}",
            b",",
            b'"',
            "你好\n".encode(),
            b"slot print_timing: id 1 | task 1 | eval time = 1 ms\n",
            b"# TYPE x histogram\n",
        ]
    ),
)


@st.composite
def mutated(draw, data: bytes) -> bytes:
    lines = data.split(b"\n")
    for _ in range(draw(st.integers(1, 3))):
        op = draw(st.sampled_from(["flip", "truncate", "delete_line", "dup_line", "insert"]))
        n = len(data)
        if op == "flip" and n:
            i = draw(st.integers(0, n - 1))
            data = data[:i] + bytes([data[i] ^ draw(st.integers(1, 255))]) + data[i + 1 :]
        elif op == "truncate":
            data = data[: draw(st.integers(0, n))]
        elif op in ("delete_line", "dup_line") and len(lines) > 1:
            lines = data.split(b"\n")
            i = draw(st.integers(0, len(lines) - 1))
            lines = lines[:i] + lines[i + 1 :] if op == "delete_line" else lines[: i + 1] + lines[i:]
            data = b"\n".join(lines)
        else:
            i = draw(st.integers(0, n))
            data = data[:i] + draw(GARBAGE) + data[i:]
    return data


@pytest.mark.parametrize("kind", sorted(CASES))
def test_mutations_raise_only_parse_error(kind):
    parser, rels = CASES[kind]
    originals = [(SEED / rel).read_bytes() for rel in rels]
    for data in originals:
        parser(data, "original")  # the unmutated file must parse

    @settings(
        max_examples=int(os.environ.get("ANATOMY_FUZZ_EXAMPLES", "60")),
        deadline=timedelta(seconds=5),
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
        database=None,
    )
    @given(st.sampled_from(range(len(originals))).flatmap(lambda k: mutated(originals[k])))
    def check(data: bytes) -> None:
        try:
            parser(data, "fuzzed")
        except ParseError as err:
            assert err.path == "fuzzed" and str(err).startswith("fuzzed")
            assert err.line is None or 1 <= err.line <= data.count(b"\n") + 1

    check()
