#!/usr/bin/env bash
# Issue #24: the load client's fidelity bench (benchmarks/bench_fidelity.py) on the lent GPU host's CPUs — 16
# quiet cores, where this project's own 2-core box is shared and loaded. No GPU is used. The host reaches no
# package index, so what its python3 (3.12) lacks travels as wheels in .whl/ (AIPerf 0.13 and the parts of its
# dependencies a `profile` run imports; orjson, altair; aiohttp and uvloop at the versions tested here) with
# the tiny Qwen2 tokenizer AIPerf is given (.whl/tiny-qwen2). vllm bench serve is not carried (vLLM is
# hundreds of MB): it is measured on the 2-core box only.
#
#   device: bash scripts/h200/fidelity.sh NAME [bench_fidelity.py arguments ...]
#   -> $OUT/NAME.json (the bench's JSON), $OUT/NAME.log (every row as measured, kept if the call is cut)
set -uo pipefail
name=$1
shift
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 BENCH_PEER_PYTHON=python3
mkdir -p .engines/models && cp -r .whl/tiny-qwen2 .engines/models/
echo "host: $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg), $(python3 -V)"
# one short point of ours first: a collector that cannot run here ends the call now, with its log
if ! timeout 90 python3 benchmarks/bench_fidelity.py --points 1 --repeats 1 --tools ours 2>&1 | tee "$OUT/$name-preflight.log" \
  | grep -q '^| inference-anatomy collector | 1 '; then
  tail -40 "$OUT/$name-preflight.log"
  exit 1
fi
timeout "${BENCH_LIMIT_S:-540}" python3 benchmarks/bench_fidelity.py "$@" 2>&1 | tee "$OUT/$name.log"
cp build/bench/fidelity.json "$OUT/$name.json" 2>/dev/null || echo "no fidelity.json: the bench was cut (rows in $name.log)"
