#!/usr/bin/env bash
# The H200 campaign of issue #6, device side. Run from the repository root ON THE DEVICE MACHINE, with
# `.device-carry` carried (made here by scripts/h200/bundle.sh) and $OUT set by the device tool:
#
#   scripts/h200/campaign.sh build       wheels, ceilings, llama.cpp CUDA build || F16 GGUF, then Q4_K_M (~6 min)
#   scripts/h200/campaign.sh run q4      collector run plans/h200-llamacpp-q4km-sweep.toml, pack it (~4-5 min)
#   scripts/h200/campaign.sh run f16     collector run plans/h200-llamacpp-f16-sweep.toml, pack it (~3-4 min)
#   scripts/h200/campaign.sh bench       optional: llama-bench pp512/tg128 of both models, into the log (~1 min)
#   scripts/h200/campaign.sh pack DIR... tar sealed run folders (RAW/<campaign>/<run>) into $OUT
#   (wheels, ceilings: those steps of `build` alone)
#
# Phases chain in one call (`build run q4`, `run q4 run f16`). Everything lives under $H200_WORK
# (.engines/h200, git-ignored), which a warm device machine keeps between calls; a `run` on a fresh machine
# builds first and then runs only if the call still has time for it. Each `collector run` gets the time left
# in the call (CALL_LIMIT_S minus PACK_RESERVE_S): at the deadline it gets SIGTERM, seals what it has as a
# failed run, and the run is packed all the same. Runs come back as $OUT/<run>.tar.gz, split into
# <run>.tar.gz.partNN when over PART_BYTES; bring them home with scripts/h200/unpack.py.
# The output of every step goes to $OUT/campaign.log as well; a table of steps and seconds ends it.
set -euo pipefail

# root (the repository, the working directory from here on), $OUT (made, absolute), step/record/summary/on_exit,
# start_log, build_llama, stop_leftover_servers, pack_runs (PART_BYTES, MAX_OUT_FILES)
source "$(dirname "$0")/lib.sh"

W=${H200_WORK:-.engines/h200}
CARRY=${CARRY_DIR:-.device-carry}
RAW=$W/raw
CAMPAIGN=h200-qwen2.5-7b-random
PY=${PYTHON:-python3}
SITE=${WHEEL_SITE:-/tmp/site}
CALL_LIMIT_S=${CALL_LIMIT_S:-590}     # the device call's timeout_s (600 at most), minus a little
PACK_RESERVE_S=${PACK_RESERVE_S:-50}  # SIGTERM grace (server stop + seal) and packing after a cut run
MIN_RUN_S=${MIN_RUN_S:-240}           # a run with less time than this is not started (a plan takes ~4 min)
# Dry run on a CPU machine (tests the glue, not the GPU): BUILD_CUDA=0 MODEL_SHAPE=tiny.
BUILD_CUDA=${BUILD_CUDA:-1}
LLAMA_BUILD_FLAGS=(--bench)
if [[ $BUILD_CUDA == 1 ]]; then LLAMA_BUILD_FLAGS=(--cuda --bench); fi
MODEL_SHAPE=${MODEL_SHAPE:-qwen2.5-7b}
F16=$W/models/qwen2.5-7b-random-f16.gguf
Q4=$W/models/qwen2.5-7b-random-q4_k_m.gguf
SERVER_BIN=$W/bin/llama-server
export PYTHONUNBUFFERED=1
# For collector.protocol.fingerprint to copy the measured ceilings into each run's fingerprint/ (once it reads this).
export ANATOMY_CEILINGS_JSON=$root/$W/ceilings.json

start_log "$OUT/campaign.log"

# --------------------------------------------------------------------------------------------------- steps
gpu_state() {
  if command -v nvidia-smi >/dev/null; then
    nvidia-smi --query-gpu=name,driver_version,memory.used,memory.total,clocks.sm,clocks.mem,power.draw --format=csv
  else
    echo "no nvidia-smi here"
  fi
}

install_wheels() {
  compgen -G "$CARRY/whl/*.whl" >/dev/null || { echo "no wheels in $CARRY/whl (carry .device-carry)" >&2; return 1; }
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" "$CARRY"/whl/*.whl
  export PYTHONPATH=$SITE${PYTHONPATH:+:$PYTHONPATH}
  "$PY" -c 'import gguf, importlib.metadata as m; print("gguf", m.version("gguf"))'
}

measure_ceilings() {
  if [[ -f $W/ceilings.json ]]; then echo "measured earlier in this lease: $W/ceilings.json"; return; fi
  local before
  before=$(list_runs)
  # Not fatal: the runs matter more than the ceilings (KINDS.md has earlier readings of both).
  if ! "$PY" -m collector.protocol.ceilings --out "$W/ceilings.json" --raw "$RAW" --campaign "$CAMPAIGN"; then
    NOTES+=("ceilings NOT measured (see the log above); the runs go on without them")
    return 0
  fi
  pack_runs $(new_runs "$before")
}

llama_built() {  # binaries from this source and build script (without the carry, trust what is there)
  [[ -x $SERVER_BIN && -x $W/bin/llama-quantize && -f $W/bin/STAMP ]] || return 1
  [[ ! -f $CARRY/llama-src.tar.gz ]] || [[ $(cat "$W/bin/STAMP") == "$(build_stamp)" ]]
}

generate_f16() {  # CPU and disk only: runs beside the build
  if [[ -f $F16 ]]; then echo "generated earlier in this lease: $F16"; return; fi
  "$PY" -m lab.modelgen --shape "$MODEL_SHAPE" --format gguf --seed 0 --out "$F16"
}

build_and_generate() {  # the CUDA build (all cores) and the F16 GGUF (one core + disk) side by side
  mkdir -p "$W/models" "$W/logs"
  local mg_pid mg_rc=0
  generate_f16 >"$W/logs/modelgen.log" 2>&1 &
  mg_pid=$!
  build_llama
  wait "$mg_pid" || mg_rc=$?
  echo "--- modelgen (ran beside the build):"
  cat "$W/logs/modelgen.log"
  return "$mg_rc"
}

quantize_q4() {
  if [[ -f $Q4 ]]; then echo "quantized earlier in this lease: $Q4"; return; fi
  "$W/bin/llama-quantize" "$F16" "$Q4.partial" Q4_K_M "$(nproc)"
  mv "$Q4.partial" "$Q4"
  ls -l "$W/models"
}

build_phase() {
  step gpu-state gpu_state
  step wheels install_wheels
  step ceilings measure_ceilings         # first: the GPU idle, the CPUs quiet
  step build+modelgen build_and_generate
  step quantize-q4_k_m quantize_q4
}

ensure_built() {
  if llama_built && [[ -f $F16 && -f $Q4 ]]; then return; fi
  NOTES+=("$W was incomplete (a fresh machine?): building first")
  build_phase
}

list_runs() { if [[ -d $RAW ]]; then find "$RAW" -mindepth 2 -maxdepth 2 -type d | sort; fi; }

new_runs() { comm -13 <(printf '%s\n' "$1") <(list_runs) | sed '/^$/d'; }

run_plan() {  # run_plan q4|f16
  local which=$1 plan
  case $which in
    q4) plan=plans/h200-llamacpp-q4km-sweep.toml ;;
    f16) plan=plans/h200-llamacpp-f16-sweep.toml ;;
    *) echo "run: unknown model $which (q4 or f16)" >&2; return 2 ;;
  esac
  ensure_built
  local budget=$((CALL_LIMIT_S - PACK_RESERVE_S - SECONDS))
  if ((budget < MIN_RUN_S)); then
    NOTES+=("run $which NOT started: ${budget} s left in this call (< ${MIN_RUN_S}); call 'campaign.sh run $which' again")
    return 0
  fi
  local before rc=0
  before=$(list_runs)
  echo "collector run $plan (up to ${budget} s)"
  current="run-$which"
  step_t0=$SECONDS
  timeout --signal=TERM --kill-after=30 "$budget" "$PY" -m collector.cli run "$plan" --raw "$RAW" || rc=$?
  current=""
  record "run-$which" $((SECONDS - step_t0)) "$( ((rc == 0)) && echo ok || echo "exit $rc (124: cut at the deadline)")"
  stop_leftover_servers
  local runs
  runs=$(new_runs "$before")
  [[ -n $runs ]] || { NOTES+=("run $which left no run folder"); return 0; }
  step "pack-$which" pack_runs $runs
  local d
  for d in $runs; do
    NOTES+=("$(basename "$d"): $("$PY" -c 'import json,sys; m=json.load(open(sys.argv[1])); print(m["status"], m.get("points_done"), "/", m.get("points_planned"), "points;", "note:", m.get("note"), "; checks failed:", len(m.get("checks_failed") or []))' "$d/manifest.json" 2>/dev/null || echo "not sealed")")
  done
}

bench() {
  ensure_built
  "$W/bin/llama-bench" -m "$Q4" -m "$F16" -ngl 99 -p 512 -n 128 -r 3 -o md
}

# ---------------------------------------------------------------------------------------------------- main
[[ $# -gt 0 ]] || { echo "usage: $0 build | run q4|f16 | bench | wheels | ceilings | pack RUN_DIR... (phases chain)" >&2; exit 2; }
echo "campaign.sh $* — $(date -u +%Y-%m-%dT%H:%M:%SZ) on ${HOSTNAME:-?}, work dir $W, raw $RAW"
while [[ $# -gt 0 ]]; do
  case $1 in
    build) build_phase; shift ;;
    wheels) step wheels install_wheels; shift ;;
    ceilings) step ceilings measure_ceilings; shift ;;
    run) [[ $# -ge 2 ]] || { echo "run needs q4 or f16" >&2; exit 2; }; run_plan "$2"; shift 2 ;;
    bench) step bench bench; shift ;;
    pack) shift; step pack pack_runs "$@"; set -- ;;
    *) echo "unknown phase $1 (build, run q4|f16, bench, pack DIR...)" >&2; exit 2 ;;
  esac
done
