#!/usr/bin/env bash
# Issue #15, the GPU part: one-knob experiments on the lent H200, device side. The sibling of campaign.sh
# (same build, same deadline machinery, same packing), but it runs a LIST of plans in order, each once per
# lease, and it runs from a frozen snapshot of the committed code (other work may leave the live tree
# mid-edit while a device call ships it):
#
#   here:   git archive HEAD collector analysis lab scripts plans pyproject.toml | tar -x -C .device-carry/src
#           (+ the new plans), .device-carry/llama-src.tar.gz and .device-carry/whl/gguf-*.whl as bundle.sh makes
#   device: cd .device-carry/src && bash scripts/h200/exp.sh build run RUN [RUN ...]
#   here, around the device calls: scripts/h200/device_tree.sh hide / restore (raw/ alone is over the 64 MiB
#   the device tool ships; no device command needs it)
#
# RUN is a run name; its plan is plans/h200-<RUN>.toml. Three other words may stand in the list (experiment 4,
# model size, whose F16 files do not all fit the 64 GiB disk at once): gen:SHAPE generates SHAPE's F16 file now,
# quantize:SHAPE makes its Q4_K_M file now, drop:SHAPE-f16 deletes SHAPE's F16 file (a model file under $W/models, never anything in raw/);
# pair:RUN_A+RUN_B runs two plans at once (issue #27's two replicas, one server per GPU).
# SHAPES (default qwen2.5-7b) names the lab.modelgen shapes the build step generates in F16, side by side
# beside the build, and quantizes to Q4_K_M, except those in Q4_LATER (quantized by a quantize: word instead). A run already in $RAW (done earlier in this lease) is
# skipped, so the same command can be sent again on a warm machine and picks up where the last call stopped.
# Runs go in the order given; the first one whose estimate (EST below) no longer fits the time left in this
# call stops the list (order matters: arms are interleaved and the baseline repeated). Each collector run
# gets the time left minus PACK_RESERVE_S: at that deadline it gets SIGTERM and seals itself as failed.
# Every run that ended comes back as $OUT/<run>.tar.gz (bring home with scripts/h200/unpack.py).
#
# The work dir ($W) lives OUTSIDE .device-carry, which each call's carry replaces: .engines/ at the device
# checkout's root, reached through a link .engines -> ../../.engines made here each call.
#
# Issue #26 added: the 0.5B shape beside the 7B one (the speculative draft; never quantized), each shape's
# tokenizer.json beside its GGUF (the chat endpoint decodes random prompts to text with it), llama-bench in the
# build, a stepcost:RUN word (collector.protocol.stepcost: llama-bench step costs of the 7B F16 target and the 0.5B F16
# draft, STEPCOST_* below), and the runs of one call packed into ONE archive $OUT/runs-<time>.tar (split into
# .partNN above PART_BYTES; each member is the usual <run>.tar.gz), so a call may bring back more than 8 runs:
# here, `tar -xf` it and give the members to unpack.py.
set -euo pipefail

# root (the repository, the working directory from here on), $OUT (made, absolute), step/record/summary/on_exit,
# start_log, build_llama, stop_leftover_servers, pack_runs (PART_BYTES, MAX_OUT_FILES)
source "$(dirname "$0")/lib.sh"

CARRY=${CARRY_DIR:-$(cd "$root/.." && pwd)}     # .device-carry (this snapshot lives in .device-carry/src)
if [[ -z ${H200_WORK:-} ]]; then                 # .engines -> the device checkout's own .engines/
  mkdir -p "$root/../../.engines"
  [[ -L .engines || ! -e .engines ]] && ln -sfn ../../.engines .engines
fi
W=${H200_WORK:-.engines/h200x}
RAW=$W/raw
CAMPAIGN=h200-qwen2.5-7b-random
PY=${PYTHON:-python3}
SITE=${WHEEL_SITE:-/tmp/site}
CALL_LIMIT_S=${CALL_LIMIT_S:-585}
PACK_RESERVE_S=${PACK_RESERVE_S:-35}
SHAPES=${SHAPES:-qwen2.5-7b qwen2.5-0.5b}
Q4_LATER=${Q4_LATER:-qwen2.5-0.5b}   # the draft stays F16
f16_of() { echo "$W/models/$1-random-f16.gguf"; }
tok_of() { echo "$W/models/$1-random.tokenizer.json"; }
q4_of() { echo "$W/models/$1-random-q4_k_m.gguf"; }
SERVER_BIN=$W/bin/llama-server
export PYTHONUNBUFFERED=1
export ANATOMY_CEILINGS_JSON=$root/$W/ceilings.json

# Seconds each run needs (measured ~x1.2 where known); a run is started only if this much is left.
declare -A EST=(
  [exp-slots-np256-q4km]=90 [exp-slots-np64-q4km]=90 [exp-sampling-backend-q4km]=80
  [exp-graphs-off-q4km]=80 [exp-slots-np256-q4km-r2]=90
  [exp-kvf16-q4km]=95 [exp-kvq8-q4km]=95 [exp-kvq4-q4km]=95 [exp-kvf16-q4km-r2]=95
  [exp-slots-np256-f16]=90 [exp-slots-np64-f16]=90 [exp-sampling-backend-f16]=80
  [quantize:qwen2.5-14b]=150 [quantize:qwen2.5-7b]=75 [gen:qwen2.5-7b]=150
  # issue #26: open-loop ladder arms (4 rates, <= 12 s of sends each + drain; the CPU-sampling arms drain an
  # overload), the speculative runs (c=1 and c=4, 256 tokens), the slot-history runs, the step costs
  [ladder-0-baseline]=110 [ladder-1-gpusampling]=95 [ladder-2-slots]=90 [ladder-3-f16]=80
  [ladder-4-prefixcache]=80 [ladder-5-batch]=80 [ladder-0-baseline-r2]=110 [ladder-3-f16-r2]=80
  [ladder-4-prefixcache-r2]=80 [ladder-5-batch-r2]=80
  [spec-off-f16]=30 [spec-k3-f16]=35 [spec-k8-f16]=40 [spec-k3-a08-f16]=30 [spec-k8-a08-f16]=30
  [slots-hist-np64-q4km]=80 [slots-hist-np256-q4km]=80
  # issue #26 leftovers (the slot re-test's repeats, the ladder baseline on completions beside a chat repeat, the
  # baseline's chat arm took 118-136 s last lease)
  [slots-hist-np64-q4km-r2]=80 [slots-hist-np256-q4km-r2]=80
  [ladder-0-completions]=120 [ladder-0-completions-r2]=120 [ladder-0-baseline-r3]=135 [spec-off-f16-r2]=30
  [stepcost:spec-stepcost]=60
)
# collector.protocol.stepcost's grid: tokens per step 1..9 (k + 1 for k = 0..8 drafted tokens at one stream) and the
# token counts of 4 and 16 streams verifying k + 1 each; two KV depths; the 0.5B draft on the same grid
STEPCOST_TOKENS=${STEPCOST_TOKENS:-1,2,3,4,5,6,7,8,9,12,16,20,24,28,32,36,48,64,80,96,112,128,144}
STEPCOST_DEPTHS=${STEPCOST_DEPTHS:-512,4096}
STEPCOST_REPS=${STEPCOST_REPS:-4}
EST_SIZE_RUN=40   # an exp-size-* run: one slot, 2 + 4 requests of 256 tokens (the 14B load time included)

SUMMARY_WIDTH=34 PACK_GZIP=6 LLAMA_BUILD_FLAGS=(--cuda --bench)
[[ $W == /* ]] && PACK_DIR=$W || PACK_DIR=$root/$W
PACK_DIR+=/pack-$(date -u +%H%M%S)   # this call's <run>.tar.gz files, bundled at exit
start_log "$OUT/exp.log"

bundle_out() {  # every run this call packed, as ONE $OUT/runs-<time>.tar (+ .partNN above PART_BYTES)
  [[ -d $PACK_DIR ]] && compgen -G "$PACK_DIR/*" >/dev/null || return 0
  local tarball=$OUT/runs-$(basename "$PACK_DIR").tar size
  tar -C "$PACK_DIR" -cf "$tarball" .
  size=$(stat -c %s "$tarball")
  if ((size > PART_BYTES)); then
    split -b "$PART_BYTES" -d -a 2 "$tarball" "$tarball.part"
    rm -f "$tarball"
  fi
  echo "bundled $(find "$PACK_DIR" -type f | wc -l) archive(s), $size bytes, into $(basename "$tarball")"
}
exp_exit() {
  local rc=$?
  bundle_out || echo "bundle_out FAILED: the packed runs stay in $PACK_DIR on this machine"
  (exit "$rc")
  on_exit
}
trap exp_exit EXIT

gpu_state() {
  nvidia-smi --query-gpu=name,driver_version,memory.used,memory.total,clocks.sm,clocks.mem,power.draw,power.limit --format=csv
  df -h "$root/../.." | tail -1
  nproc
}

install_wheels() {
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" "$CARRY"/whl/*.whl
  "$PY" -c "import sys; sys.path.insert(0, '$SITE'); import gguf, orjson, altair, importlib.metadata as m; print(*(f'{d} {m.version(d)}' for d in ('gguf', 'orjson', 'altair')))"
}

measure_ceilings() {  # JSON only (no run folder: the campaign has its ceilings run); into each fingerprint
  if [[ -f $W/ceilings.json ]]; then echo "measured earlier in this lease"; return; fi
  "$PY" -m collector.protocol.ceilings --out "$W/ceilings.json" || NOTES+=("ceilings NOT measured")
  cat "$W/ceilings.json" 2>/dev/null || true
}

llama_built() {
  [[ -x $SERVER_BIN && -x $W/bin/llama-quantize && -x $W/bin/llama-bench && -f $W/bin/STAMP ]] && [[ $(cat "$W/bin/STAMP") == "$(build_stamp)" ]]
}
generate_f16() {  # generate_f16 SHAPE
  local f16
  f16=$(f16_of "$1")
  if [[ -f $f16 || -f $(q4_of "$1") ]]; then echo "generated earlier in this lease: $1"; return; fi
  PYTHONPATH=$SITE${PYTHONPATH:+:$PYTHONPATH} "$PY" -m lab.modelgen --shape "$1" --format gguf --seed 0 --out "$f16" \
    --tokenizer-out "$(tok_of "$1")"
}
build_and_generate() {  # every shape in its own process beside the build (numpy draws on one core each)
  mkdir -p "$W/models" "$W/logs"
  local shape pids=() mg_rc=0 pid
  for shape in $SHAPES; do
    generate_f16 "$shape" >"$W/logs/modelgen-$shape.log" 2>&1 &
    pids+=($!)
  done
  build_llama
  for pid in "${pids[@]}"; do wait "$pid" || mg_rc=$?; done
  echo "--- modelgen (ran beside the build):"
  for shape in $SHAPES; do tail -2 "$W/logs/modelgen-$shape.log"; done
  return "$mg_rc"
}
quantize_q4() {  # quantize_q4 SHAPE
  local f16 q4
  f16=$(f16_of "$1") q4=$(q4_of "$1")
  if [[ -f $q4 ]]; then echo "quantized earlier in this lease: $q4"; return; fi
  "$W/bin/llama-quantize" "$f16" "$q4.partial" Q4_K_M "$(nproc)" >"$W/logs/quantize-$1.log" 2>&1 || { tail -20 "$W/logs/quantize-$1.log"; return 1; }
  grep -E "model size|quant size" "$W/logs/quantize-$1.log" || true
  mv "$q4.partial" "$q4"
  ls -l "$W/models"
  df -h "$W/models" | tail -1
}
quantize_now() {
  local shape
  for shape in $SHAPES; do
    [[ " $Q4_LATER " == *" $shape "* ]] || quantize_q4 "$shape"
  done
}
models_here() {  # every shape has its F16 or its Q4_K_M file (a dropped F16 is not missing)
  local shape
  for shape in $SHAPES; do [[ -f $(f16_of "$shape") || -f $(q4_of "$shape") ]] || return 1; done
}
build_phase() {
  step gpu-state gpu_state
  step wheels install_wheels
  step ceilings measure_ceilings
  step build+modelgen build_and_generate
  step quantize-q4_k_m quantize_now
}

directive() {  # gen:SHAPE, quantize:SHAPE or drop:SHAPE-f16 in the run list: 0 = done or skipped, 1 = did not fit
  local word=$1 shape
  local est=${EST[$word]:-120} budget=$((CALL_LIMIT_S - PACK_RESERVE_S - SECONDS))
  case $word in
    gen:*)
      shape=${word#gen:}
      [[ -f $(f16_of "$shape") || -f $(q4_of "$shape") ]] && { echo "$word: done earlier in this lease"; return 0; }
      if ((budget < est)); then NOTES+=("$word NOT started: ${budget} s left < estimate ${est} s"); return 1; fi
      step "$word" generate_f16 "$shape" ;;
    quantize:*)
      shape=${word#quantize:}
      [[ -f $(q4_of "$shape") ]] && { echo "$word: done earlier in this lease"; return 0; }
      if ((budget < est)); then NOTES+=("$word NOT started: ${budget} s left < estimate ${est} s"); return 1; fi
      step "$word" quantize_q4 "$shape" ;;
    stepcost:*)
      local name=${word#stepcost:}
      [[ -d $RAW/$CAMPAIGN/$name ]] && { echo "$word: done earlier in this lease"; return 0; }
      if ((budget < est)); then NOTES+=("$word NOT started: ${budget} s left < estimate ${est} s"); return 1; fi
      step "$word" "$PY" -m collector.protocol.stepcost --bench "$W/bin/llama-bench" \
        --model "target-7b-f16=$(f16_of qwen2.5-7b)" --model "draft-0.5b-f16=$(f16_of qwen2.5-0.5b)" \
        --tokens "$STEPCOST_TOKENS" --depths "$STEPCOST_DEPTHS" --repetitions "$STEPCOST_REPS" \
        --raw "$RAW" --campaign "$CAMPAIGN" --run "$name" || NOTES+=("$word failed (exit $?)")
      [[ -d $RAW/$CAMPAIGN/$name ]] && pack_runs "$RAW/$CAMPAIGN/$name" ;;
    drop:*-f16)
      shape=${word#drop:}
      shape=${shape%-f16}
      rm -f -- "$(f16_of "$shape")"
      echo "$word: $(df -h "$W/models" | tail -1)" ;;
    pair:*+*) run_pair "${word#pair:}" || return 1 ;;
    *) NOTES+=("$word: not a run or a known word"); ;;
  esac
  return 0
}

run_pair() {  # run_pair A+B: two replicas' runs at once, each starting its own server on its own GPU
  # (issue #27; the plans' CUDA_VISIBLE_DEVICES and ports differ). Both get the same deadline; leftover servers
  # are stopped only once both have ended (stop_leftover_servers would take the other replica's server too).
  local a=${1%%+*} b=${1#*+} r pids=() rc=0 t0=$SECONDS
  for r in "$a" "$b"; do
    [[ -f plans/h200-$r.toml ]] || { NOTES+=("$r: no plan plans/h200-$r.toml"); return 0; }
    [[ -d $RAW/$CAMPAIGN/$r ]] && { echo "$r: done earlier in this lease"; return 0; }
  done
  local est=$((${EST[$a]:-120})) budget=$((CALL_LIMIT_S - PACK_RESERVE_S - SECONDS))
  if ((budget < est)); then NOTES+=("pair:$1 NOT started: ${budget} s left < estimate ${est} s"); return 1; fi
  echo "=== [pair $a + $b] two collector runs at once (estimate ${est} s, deadline ${budget} s) t=${SECONDS}s"
  for r in "$a" "$b"; do
    timeout --signal=TERM --kill-after=20 "$budget" "$PY" -m collector.cli run "plans/h200-$r.toml" --raw "$RAW" &
    pids+=($!)
  done
  for r in "${pids[@]}"; do wait "$r" || rc=$?; done
  stop_leftover_servers
  record "pair:$1" $((SECONDS - t0)) "$( ((rc == 0)) && echo ok || echo "exit $rc")"
  for r in "$a" "$b"; do
    if [[ -d $RAW/$CAMPAIGN/$r ]]; then pack_runs "$RAW/$CAMPAIGN/$r"; else NOTES+=("$r left no run folder"); fi
  done
  return 0
}

run_one() {  # run_one RUN: 0 = ran or skipped, 1 = did not fit (stop the list)
  local run=$1 plan=plans/h200-$1.toml
  [[ $run == *:* ]] && { directive "$run"; return; }
  [[ -f $plan ]] || { NOTES+=("$run: no plan $plan"); return 0; }
  if [[ -d $RAW/$CAMPAIGN/$run ]]; then echo "$run: done earlier in this lease"; return 0; fi
  local est=${EST[$run]:-120}
  [[ $run == exp-size-* ]] && est=${EST[$run]:-$EST_SIZE_RUN}
  local budget=$((CALL_LIMIT_S - PACK_RESERVE_S - SECONDS))
  if ((budget < est)); then
    NOTES+=("$run NOT started: ${budget} s left < estimate ${est} s; send the same command again")
    return 1
  fi
  local rc=0 t0=$SECONDS
  echo "=== [$run] collector run $plan (estimate ${est} s, deadline ${budget} s) t=${SECONDS}s"
  timeout --signal=TERM --kill-after=20 "$budget" "$PY" -m collector.cli run "$plan" --raw "$RAW" || rc=$?
  stop_leftover_servers
  record "$run" $((SECONDS - t0)) "$( ((rc == 0)) && echo ok || echo "exit $rc (124: cut at the deadline)")"
  if [[ -d $RAW/$CAMPAIGN/$run ]]; then
    pack_runs "$RAW/$CAMPAIGN/$run"
    NOTES+=("$run: $("$PY" -c 'import json,sys; m=json.load(open(sys.argv[1])); print(m["status"], m.get("points_done"), "/", m.get("points_planned"), "points; note:", m.get("note"), "; checks failed:", m.get("checks_failed"))' "$RAW/$CAMPAIGN/$run/manifest.json" 2>/dev/null || echo "not sealed")")
    grep -h -E "KV buffer size|llama_kv_cache: size|initializing, n_slots|USE_GRAPHS|backend sampl|CUDA graph" "$RAW/$CAMPAIGN/$run/server.log" | head -8 || true
    "$PY" - "$RAW/$CAMPAIGN/$run" <<'EOF' || true
import json, sys, pathlib
for f in sorted(pathlib.Path(sys.argv[1], "bench").glob("*.json")):
    d = json.loads(f.read_text())
    print(f"  {f.stem:34s} ok {d['completed']:3d} p50 ITL {d['p50_itl_ms']:8.2f} ms  p50 TPOT {d['p50_tpot_ms']:8.2f} ms"
          f"  out {d['output_throughput']:8.1f} tok/s  p50 TTFT {d['p50_ttft_ms']:9.1f} ms")
EOF
  else
    NOTES+=("$run left no run folder (exit $rc)")
  fi
  return 0
}

[[ $# -gt 0 ]] || { echo "usage: $0 [build] [run RUN...]" >&2; exit 2; }
echo "exp.sh $* — $(date -u +%Y-%m-%dT%H:%M:%SZ), work dir $W, raw $RAW, carry $CARRY"
if [[ $1 == build ]]; then
  if llama_built && models_here; then echo "build: everything is here from earlier in this lease"
  else build_phase; fi
  shift
fi
export PYTHONPATH=$SITE${PYTHONPATH:+:$PYTHONPATH}
if [[ ${1:-} == run ]]; then
  shift
  llama_built || { echo "not built: add 'build'" >&2; exit 1; }
  for r in "$@"; do run_one "$r" || break; done
fi
