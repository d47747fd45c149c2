"""The cost of one forward step by how many tokens it carries, measured with llama.cpp's own ``llama-bench``
and kept as a sealed run (kind ``stepcost``): the mechanism speculative decoding rests on (issue #26 item 2).

A target model that verifies k drafted tokens runs ONE step over k + 1 tokens; a draft model proposes them in
k steps of one token each. ``llama-bench -p N -n 0 -d D`` times exactly such a step: a batch of N prompt
tokens after D tokens already in the KV cache, no sampling (llama-bench samples nothing), repeated ``-r``
times after a warm-up. One invocation per model, every N and D in it; the JSONL it prints (one object per
test, ``samples_ns`` the repeats) is stored verbatim as ``llama-bench-<model tag>.jsonl``, its stderr beside
it, and the command lines in the run's meta. Nothing is computed here (analysis.reconcile.speculative reads
the file through analysis.parse.llama_bench).

    python -m collector.protocol.stepcost --bench BIN --model TAG=PATH [--model TAG=PATH ...] \\
        --tokens 1,2,...,9 --depths 512,4096 --repetitions 5 --raw RAW --campaign C --run NAME
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

from collector.raw.store import RawStore

RUN_KIND = "stepcost"
EXIT_BENCH_FAILED = 3


def bench_command(binary: Path, model: Path, tokens: list[int], depths: list[int], reps: int) -> list[str]:
    """The llama-bench command line: every layer on the GPU, prompt tests only (``-n 0``), JSONL out."""
    return [
        str(binary),
        "-m",
        str(model),
        "-ngl",
        "99",
        "-p",
        ",".join(map(str, tokens)),
        "-n",
        "0",
        "-d",
        ",".join(map(str, depths)),
        "-r",
        str(reps),
        "-o",
        "jsonl",
    ]


def _ints(text: str) -> list[int]:
    try:
        vals = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: not a comma-separated list of integers") from None
    if not vals or min(vals) < 0:
        raise argparse.ArgumentTypeError(f"{text!r}: needs at least one integer, none negative")
    return vals


def _model(text: str) -> tuple[str, Path]:
    tag, sep, path = text.partition("=")
    if not sep or not tag or not path:
        raise argparse.ArgumentTypeError(f"{text!r}: expected TAG=PATH")
    return tag, Path(path)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m collector.protocol.stepcost", description=__doc__.splitlines()[0]
    )
    p.add_argument("--bench", type=Path, required=True, help="the llama-bench binary")
    p.add_argument("--model", type=_model, action="append", required=True, help="TAG=GGUF (repeatable)")
    p.add_argument("--tokens", type=_ints, required=True, help="tokens per step, e.g. 1,2,3,4")
    p.add_argument("--depths", type=_ints, required=True, help="tokens already in the KV cache")
    p.add_argument("--repetitions", type=int, default=5)
    p.add_argument("--raw", type=Path, required=True)
    p.add_argument("--campaign", required=True)
    p.add_argument("--run", default="stepcost")
    a = p.parse_args(argv)
    for tag, path in a.model:
        if not path.is_file():
            print(f"stepcost: {path}: no such model file ({tag})", file=sys.stderr)
            return 2
    cmds = {tag: bench_command(a.bench, path, a.tokens, a.depths, a.repetitions) for tag, path in a.model}
    store = RawStore(a.raw)
    name = store.unique_run_name(a.campaign, a.run)
    run = store.create_run(a.campaign, name, kind=RUN_KIND, meta={"test_kind": RUN_KIND, "commands": cmds})
    failed = []
    for tag, cmd in cmds.items():
        t0 = time.monotonic()
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        run.write_text(f"llama-bench-{tag}.jsonl", proc.stdout, source=" ".join(cmd))
        run.write_text(f"llama-bench-{tag}.stderr.txt", proc.stderr, source=" ".join(cmd))
        print(
            f"stepcost {tag}: exit {proc.returncode}, {time.monotonic() - t0:.1f} s, "
            f"{len(proc.stdout.splitlines())} tests"
        )
        if proc.returncode != 0:
            failed.append(f"{tag} exit {proc.returncode}")
    run.seal("failed" if failed else "complete", note="; ".join(failed) or None)
    print(f"stored as {run.path}")
    return EXIT_BENCH_FAILED if failed else 0


if __name__ == "__main__":
    sys.exit(main())
