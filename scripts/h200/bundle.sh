#!/usr/bin/env bash
# Prepare HERE (the CPU machine, which reaches PyPI) what the H200 campaign carries to the device, where
# nothing can be downloaded:
#   .device-carry/llama-src.tar.gz   llama.cpp source (top folder llama.cpp/) from the llama-cpp-python sdist,
#                                    stripped of docs, models, tests, examples and the non-CUDA GPU backends
#                                    (python -m lab.engines strip-source; ~41 MB tree, ~9 MB .tar.gz)
#   .device-carry/whl/*.whl          Python wheels the device's python3 (3.12) lacks: gguf (lab.modelgen),
#                                    orjson (the load client), altair + jsonschema & co. (collector.cli's imports)
#   .device-carry/BUNDLE.txt         what is inside: sizes and sha256
# The device call names `.device-carry` in `carry`; .device-carry/ must be git-ignored (.gitignore or
# .git/info/exclude), or it would travel twice and be committable.
#
# usage: scripts/h200/bundle.sh [make]     build the bundle (downloads the sdist into .engines/ if missing)
#        scripts/h200/bundle.sh check      check an existing bundle: contents and the size limit
# env:   CARRY_DIR (default .device-carry), CARRY_LIMIT_MIB (default 48: the tree and carry share 64 MiB a call),
#        PYTHON (default .venv/bin/python, else python3), ENGINE_CACHE (default .engines)
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
carry=${CARRY_DIR:-.device-carry}
limit_mib=${CARRY_LIMIT_MIB:-48}
cache=${ENGINE_CACHE:-.engines}
if [[ -n ${PYTHON:-} ]]; then py=$PYTHON; elif [[ -x .venv/bin/python ]]; then py=.venv/bin/python; else py=python3; fi
# The device image's packages (/work/.library/device/KINDS.md, "Python packages already there"): a wheel's
# requirement outside this list must be carried too.
device_has=" numpy pyyaml requests tqdm sentencepiece click httpx rich pandas jinja2 prometheus-client safetensors"
device_has+=" attrs narwhals packaging typing-extensions "

die() { echo "bundle: $*" >&2; exit 1; }

check() {
  local tarball=$carry/llama-src.tar.gz
  [[ -f $tarball ]] || die "$tarball missing (run scripts/h200/bundle.sh make)"
  local listing
  listing=$(tar -tzf "$tarball") || die "$tarball: not a readable .tar.gz"
  for need in llama.cpp/CMakeLists.txt llama.cpp/tools/server/ llama.cpp/tools/quantize/ \
              llama.cpp/ggml/src/ggml-cuda/ llama.cpp/ggml/src/ggml-cpu/; do
    grep -qxF -- "$need" <<<"$listing" || grep -q -- "^$need" <<<"$listing" || die "$tarball lacks $need"
  done
  for gone in llama.cpp/docs/ llama.cpp/tests/ llama.cpp/ggml/src/ggml-vulkan/; do
    if grep -q -- "^$gone" <<<"$listing"; then die "$tarball still holds $gone (not stripped)"; fi
  done
  compgen -G "$carry/whl/gguf-*.whl" >/dev/null || die "$carry/whl has no gguf wheel"
  local bytes
  bytes=$(du -sb "$carry" | cut -f1)
  if (( bytes > limit_mib * 1024 * 1024 )); then
    die "$carry is $((bytes / 1024 / 1024)) MiB, over the ${limit_mib} MiB limit (the tree and carry share 64 MiB a call)"
  fi
  local tree=0
  if git rev-parse --git-dir >/dev/null 2>&1; then
    tree=$(git ls-files -co --exclude-standard -z | du -cb --files0-from=- 2>/dev/null | tail -1 | cut -f1)
    if ! git check-ignore -q "$carry/"; then
      echo "bundle: WARNING: $carry/ is not git-ignored: add '/$carry/' to .gitignore or .git/info/exclude" >&2
    fi
  fi
  echo "bundle ok: $carry $((bytes / 1024)) KiB (limit ${limit_mib} MiB); working tree $((tree / 1024)) KiB;" \
       "together $(((bytes + tree) / 1024 / 1024)) MiB of 64 MiB"
}

make_bundle() {
  mkdir -p "$carry/whl"
  local t0=$SECONDS
  echo "== llama.cpp source (stripped) from the llama-cpp-python sdist"
  "$py" -m lab.engines strip-source --cache "$cache" --out "$carry/llama-src.tar.gz.partial"
  mv -f "$carry/llama-src.tar.gz.partial" "$carry/llama-src.tar.gz"

  echo "== wheels the device lacks"
  # gguf (lab.modelgen), orjson (the load client) and altair with its schema validator (collector.cli
  # imports the analysis pipeline): the versions the tests here ran with; orjson has no cp312 wheel for every
  # old version, so the newest 3.x is taken there.
  local pins=() dist
  for dist in gguf altair jsonschema jsonschema-specifications referencing; do
    pins+=("$dist==$("$py" -c 'import importlib.metadata as m, sys; print(m.version(sys.argv[1]))' "$dist")") \
      || die "$py has no $dist installed: cannot tell which version the tests ran with"
  done
  pins+=("orjson>=3.9,<4" "rpds-py")
  local carried=" gguf altair jsonschema jsonschema-specifications referencing orjson rpds-py "
  rm -f "$carry"/whl/*.whl
  "$py" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d "$carry/whl" "${pins[@]}"
  local whl
  for whl in "$carry"/whl/*.whl; do
    # Every requirement (extras aside) must already be on the device, or be carried as well.
    while read -r req; do
      [[ -z $req ]] && continue
      local name
      name=$(sed -E 's/^([A-Za-z0-9_.-]+).*/\1/' <<<"$req" | tr '[:upper:]_.' '[:lower:]--')
      [[ $device_has$carried == *" $name "* ]] || die "$(basename "$whl") needs $name, which the device lacks: carry it too"
    done < <(unzip -p "$whl" '*.dist-info/METADATA' | sed -n 's/^Requires-Dist: //p' | grep -v 'extra ==' || true)
  done

  {
    echo "# H200 carry bundle, made $(date -u +%Y-%m-%dT%H:%M:%SZ) by scripts/h200/bundle.sh"
    (cd "$carry" && find . -type f ! -name BUNDLE.txt -printf '%P\n' | sort | while read -r f; do
       printf '%s  %s  %s\n' "$(sha256sum "$f" | cut -d' ' -f1)" "$(stat -c %s "$f")" "$f"; done)
  } >"$carry/BUNDLE.txt"
  cat "$carry/BUNDLE.txt"
  echo "made in $((SECONDS - t0)) s"
  check
}

case ${1:-make} in
  make) make_bundle ;;
  check) check ;;
  *) die "unknown command ${1}; use make or check" ;;
esac
