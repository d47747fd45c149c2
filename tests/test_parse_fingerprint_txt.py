"""Fingerprint parser on every real fingerprint.txt (empty section, appended memory.used) and bad ones."""

from __future__ import annotations

import pytest

from analysis.parse.fingerprint_txt import parse_fingerprint, parse_fingerprint_bytes
from collector.raw.errors import ParseError
from tests.seed import SEED

pytestmark = pytest.mark.skipif(not SEED.is_dir(), reason="reference campaign not on this machine")


def test_round1_01_read_by_eye():
    f = parse_fingerprint(SEED / "Round1/01-perf-test/fingerprint.txt")
    assert f.date_utc == "2026-08-15T12:36:55+00:00"
    [g] = f.gpus
    assert (g.line, g.name, g.driver_version, g.memory_total_mib) == (
        5,
        "NVIDIA GeForce RTX 4090",
        "590.48.01",
        24564,
    )
    assert (f.smi_driver_version, f.smi_cuda_version) == ("590.48.01", "13.1")
    assert (f.torch_version, f.torch_cuda_version, f.vllm_version) == ("2.13.0+cu130", "13.0", "0.27.1")
    assert (f.cpu_count, f.mem_total_gib, f.mem_used_gib, f.mem_available_gib) == (48, 503, 31, 467)
    assert f.llamacpp_commit is None and "llama.cpp" not in f.sections
    assert f.empty_sections == [] and f.unparsed == [] and f.gpu_memory_used_mib == []


def test_empty_section_and_appended_memory_used():
    f = parse_fingerprint(SEED / "Round1/02-perf-test/fingerprint.txt")
    assert f.empty_sections == ["python/torch/vllm"] and f.vllm_version is None and f.torch_version is None
    f5 = parse_fingerprint(SEED / "Round2/05-perf-test/fingerprint.txt")
    f4 = parse_fingerprint(SEED / "Round2/04-perf-test/fingerprint.txt")
    assert f5.llamacpp_commit == f4.llamacpp_commit == "eab8ee41f"
    assert f5.gpu_memory_used_mib == [19089] and f4.gpu_memory_used_mib == []
    assert f5.lines["gpu_memory_used_mib"] == 20
    assert (f4.smi_driver_version, f4.smi_cuda_version, f4.mem_total_gib) == ("580.159.03", "13.0", 251)
    assert f5.date_utc == f4.date_utc  # test 05's file is test 04's plus one reading


@pytest.mark.parametrize(
    ("old", "new", "line", "what"),
    [
        ("Sat Aug 15 12:36:55 UTC 2026\n=== gpu", "yesterday\n=== gpu", 2, "date not in `date -u` form"),
        ("4090, 590.48.01, 24564 MiB", "4090, 590.48.01", 5, "2 fields, the GPU header has 3"),
        ("4090, 590.48.01, 24564 MiB", "4090, 590.48.01, 24 GB", 5, "expected 'N MiB'"),
        ("=== date ===\n", "hello\n=== date ===\n", 1, "text before the first"),
        ("=== cpu/mem ===", "=== gpu ===", 13, "section 'gpu' appears twice"),
        ("Mem:             503", "Swap:             503", 15, "without its 'Mem:' row"),
    ],
)
def test_malformed(old, new, line, what):
    text = (SEED / "Round1/01-perf-test/fingerprint.txt").read_text()
    assert old in text
    with pytest.raises(ParseError) as exc:
        parse_fingerprint_bytes(text.replace(old, new, 1).encode(), "fingerprint.txt")
    assert exc.value.line == line and what in exc.value.what


def test_unknown_section_kept():
    text = (SEED / "Round1/01-perf-test/fingerprint.txt").read_text() + "=== pip freeze ===\nfoo==1.0\n"
    f = parse_fingerprint_bytes(text.encode(), "fingerprint.txt")
    assert f.sections["pip freeze"] == [(18, "foo==1.0")] and (18, "foo==1.0") in f.unparsed
