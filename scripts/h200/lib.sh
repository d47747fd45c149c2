# Sourced first by campaign.sh and exp.sh (device side): the repository root and $OUT, the step bookkeeping and
# its summary, the log, the llama.cpp build, the leftover-server stop and the packing both use. The functions
# read W, RAW, CARRY and SERVER_BIN (the caller sets them after sourcing) and, optionally, SUMMARY_WIDTH (the
# step column, default 28), LLAMA_BUILD_FLAGS (build_llama_server.sh flags), PACK_GZIP (gzip level, default
# 9), PART_BYTES.

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root"
: "${OUT:?OUT must name the folder whose files come back (the device tool sets it)}"
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)

PART_BYTES=${PART_BYTES:-15728640}    # 15 MiB: the device returns files of at most 16 MiB
MAX_OUT_FILES=8                       # ... and at most 8 of them per call

# --------------------------------------------------------------------------------------- step bookkeeping
S_NAME=() S_SECS=() S_STATUS=() NOTES=()
current="" step_t0=0 tee_pid=""

start_log() {  # start_log FILE: all output from here on goes to FILE as well; a table of steps ends it
  exec > >(tee -a "$1") 2>&1
  tee_pid=$!
  trap on_exit EXIT
}

record() { S_NAME+=("$1"); S_SECS+=("$2"); S_STATUS+=("$3"); }

step() {  # step NAME COMMAND...: run, time and record; a failure ends the script (set -e), the trap records it
  current=$1
  shift
  step_t0=$SECONDS
  echo "=== [$current] start $(date -u +%H:%M:%S) (t=${SECONDS}s)"
  "$@"
  record "$current" $((SECONDS - step_t0)) ok
  echo "=== [$current] done in $((SECONDS - step_t0)) s"
  current=""
}

summary() {
  local w=${SUMMARY_WIDTH:-28} i
  echo
  echo "=== summary ($(date -u +%Y-%m-%dT%H:%M:%SZ), ${SECONDS} s in this call)"
  printf "%-${w}s %8s  %s\n" step seconds status
  for i in "${!S_NAME[@]}"; do printf "%-${w}s %8s  %s\n" "${S_NAME[$i]}" "${S_SECS[$i]}" "${S_STATUS[$i]}"; done
  for i in "${!NOTES[@]}"; do echo "note: ${NOTES[$i]}"; done
  echo "files in \$OUT:"
  (cd "$OUT" && find . -maxdepth 1 -type f -printf '  %P %s bytes\n' | sort)
}

on_exit() {
  local rc=$?
  if [[ -n $current ]]; then record "$current" $((SECONDS - step_t0)) "FAILED (exit $rc)"; fi
  summary
  exec 1>&- 2>&-
  wait "$tee_pid" 2>/dev/null || true
}

# ---------------------------------------------------------------------------------------------- llama.cpp
build_stamp() { cat "$CARRY/llama-src.tar.gz" scripts/build_llama_server.sh | sha256sum | cut -d' ' -f1; }

build_llama() {  # from $CARRY/llama-src.tar.gz into $W/bin, flags LLAMA_BUILD_FLAGS; the caller's llama_built skips it
  if llama_built; then echo "built earlier in this lease: $W/bin"; return; fi
  rm -rf "$W/src" "$W/build"
  mkdir -p "$W/src"
  tar -xzf "$CARRY/llama-src.tar.gz" -C "$W/src"
  if [[ " ${LLAMA_BUILD_FLAGS[*]} " == *" --cuda "* ]]; then nvcc --version | tail -2; fi
  bash scripts/build_llama_server.sh "$W/src/llama.cpp" "$W" "${LLAMA_BUILD_FLAGS[@]}" --jobs "$(nproc)" --build-dir "$W/build"
  build_stamp >"$W/bin/STAMP"
}

stop_leftover_servers() {
  # The collector stops its server; if it was killed outright the server (its own session) lives on and
  # holds GPU memory the next run needs. Only our own binary, by process id.
  local pid
  for pid in $(pgrep -f -- "$SERVER_BIN" || true); do
    echo "stopping leftover llama-server pid $pid"
    kill -TERM "$pid" 2>/dev/null || true
    sleep 3
    kill -KILL "$pid" 2>/dev/null || true
  done
}

# ------------------------------------------------------------------------------------------------ packing
pack_runs() {  # pack_runs RUN_DIR...: one <run>.tar.gz per run in $OUT (or PACK_DIR), split into .partNN above PART_BYTES
  local d dest=${PACK_DIR:-$OUT}
  mkdir -p "$dest"
  for d in "$@"; do
    d=${d%/}
    [[ -f $d/run.json ]] || { echo "pack: $d is not a run (no run.json)" >&2; return 1; }
    [[ -f $d/SEALED ]] || echo "pack: WARNING: $d is not sealed (interrupted); packed as it is"
    local run campaign rawroot tarball size
    run=$(basename "$d")
    campaign=$(basename "$(dirname "$d")")
    rawroot=$(dirname "$(dirname "$d")")
    tarball=$dest/$run.tar.gz
    [[ ! -e $tarball && ! -e $tarball.part00 ]] || { echo "pack: $tarball exists already" >&2; return 1; }
    tar -C "$rawroot" --sort=name --owner=0 --group=0 --numeric-owner -cf - "$campaign/$run" | gzip "-${PACK_GZIP:-9}" >"$tarball.tmp"
    size=$(stat -c %s "$tarball.tmp")
    if ((size > PART_BYTES)); then
      split -b "$PART_BYTES" -d -a 2 "$tarball.tmp" "$tarball.part"
      rm -f "$tarball.tmp"
      echo "packed $campaign/$run: $size bytes in $(ls "$tarball".part* | wc -l) parts ($(du -sb "$d" | cut -f1) unpacked)"
    else
      mv "$tarball.tmp" "$tarball"
      echo "packed $campaign/$run: $size bytes ($(du -sb "$d" | cut -f1) unpacked)"
    fi
  done
  [[ -z ${PACK_DIR:-} ]] || return 0  # exp.sh bundles PACK_DIR into one archive at the end (bundle_out)
  local n
  n=$(find "$OUT" -maxdepth 1 -type f | wc -l)
  if ((n > MAX_OUT_FILES)); then
    echo "pack: WARNING: $n files in \$OUT, more than the $MAX_OUT_FILES that come back" >&2
    NOTES+=("$n files in \$OUT: more than $MAX_OUT_FILES come back")
  fi
}
