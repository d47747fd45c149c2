"""What the measurement ran on: one function per source, each returning verbatim text for ``fingerprint/``.

Sources: OS, CPU, memory, GPUs (nvidia-smi, else AMD's rocm-smi, when present), Python, the engine's
version/build, the engine environment's ``pip freeze``, the exact server command line (secret arguments
redacted), and the environment variables that change how an engine runs (an allow-list, values scrubbed:
``perf_env``).
``summary.json`` repeats the few facts a reader looks for first.
"""

from __future__ import annotations

import json
import os
import platform
import re
import shlex
import shutil
import sys
from pathlib import Path
from typing import Any

from collector import __version__
from collector.protocol.server import Adapter, run_capture
from collector.raw.plan import ServerPlan
from collector.raw.secrets import REDACTED, scrub

_SECRET_NAME = re.compile(r"TOKEN|KEY|SECRET|PASSWORD|PASSWD|PASS|AUTH|CREDENTIAL", re.IGNORECASE)
_SECRET_VALUE = (
    re.compile(r"^\s*bearer\s+\S+", re.IGNORECASE),
    re.compile(r"^(hf_|sk-|ghp_|gho_|ghs_|github_pat_|glpat-|xox[abprs]-|AKIA|ASIA)[A-Za-z0-9_\-]{8,}"),
    re.compile(r"^eyJ[A-Za-z0-9_\-]+\.[A-Za-z0-9_\-]+\.[A-Za-z0-9_\-]*$"),  # JWT
)
# user:password@ in a URL (postgres://admin:pw@host/db, http://u:p@proxy): the part before the @
_URL_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.\-]*://)([^/\s@]+)@")
_SECRET_ARGS = ("--api-key", "--hf-token", "--api-key-file")
# The environment variables that change how an engine runs (recorded in environment.json; nothing else is):
# CUDA/NVIDIA/ROCm devices and libraries, NCCL, vLLM, llama.cpp/ggml, the OpenMP and BLAS thread pools,
# PyTorch/Triton, tokenizers' threads, the allocator, the Hugging Face offline switches.
PERF_ENV_PREFIXES = (
    "CUDA_",
    "CUBLAS_",
    "CUBLASLT_",
    "CUDNN_",
    "NVIDIA_",
    "NCCL_",
    "HIP_",
    "ROCM_",
    "ROCR_",
    "HSA_",
    "VLLM_",
    "GGML_",
    "LLAMA_",
    "OMP_",
    "GOMP_",
    "KMP_",
    "MKL_",
    "OPENBLAS_",
    "BLIS_",
    "PYTORCH_",
    "TORCH_",
    "TORCHINDUCTOR_",
    "TRITON_",
    "TOKENIZERS_",
    "MALLOC_",
)
PERF_ENV_NAMES = frozenset(
    {
        "HF_HUB_OFFLINE",
        "HF_DATASETS_OFFLINE",
        "TRANSFORMERS_OFFLINE",
        "HF_HUB_ENABLE_HF_TRANSFER",
        "LD_PRELOAD",
        "LD_LIBRARY_PATH",
    }
)
NVIDIA_SMI_GPU_QUERY = (
    "index,name,uuid,pci.bus_id,driver_version,memory.total,clocks.max.sm,clocks.max.mem,clocks.sm,"
    "clocks.mem,power.limit,persistence_mode,compute_mode"
)


def looks_like_secret(value: str) -> bool:
    """A bearer token, a known token prefix, a JWT, or one long opaque word mixing upper, lower and digits."""
    if any(p.search(value) for p in _SECRET_VALUE):
        return True
    v = value.strip()
    return (
        len(v) >= 32
        and re.fullmatch(r"[A-Za-z0-9_\-+=.]+", v) is not None
        and any(c.isupper() for c in v)
        and any(c.islower() for c in v)
        and any(c.isdigit() for c in v)
    )


def scrub_value(value: str) -> str:
    """An environment value as recorded: ``<redacted>`` when it looks like a secret, a URL's ``user:pw@``
    replaced by ``<redacted>@``, else as is."""
    if looks_like_secret(value):
        return REDACTED
    return _URL_USERINFO.sub(rf"\1{REDACTED}@", value)


def perf_env(env: dict[str, str]) -> dict[str, str]:
    """The environment as ``environment.json`` records it: only the variables that change how an engine runs
    (``PERF_ENV_PREFIXES``, ``PERF_ENV_NAMES``: an allow-list, so ``DATABASE_URL`` or ``MY_PASS`` never
    reach raw/), secret-named ones (``VLLM_API_KEY``) as ``<redacted>``, the values scrubbed
    (``scrub_value``)."""
    kept = {k: v for k, v in env.items() if k in PERF_ENV_NAMES or k.startswith(PERF_ENV_PREFIXES)}
    return {k: REDACTED if _SECRET_NAME.search(k) else scrub_value(v) for k, v in sorted(kept.items())}


def redact_args(argv: list[str]) -> list[str]:
    out: list[str] = []
    hide_next = False
    for a in argv:
        if hide_next:
            out.append(REDACTED)
            hide_next = False
        elif a in _SECRET_ARGS:
            out.append(a)
            hide_next = True
        elif a.startswith(tuple(f"{s}=" for s in _SECRET_ARGS)):
            out.append(a.split("=", 1)[0] + "=" + REDACTED)
        elif looks_like_secret(a):
            out.append(REDACTED)
        else:
            out.append(a)
    return out


# a header is secret by the names an environment variable is (_SECRET_NAME), and by HTTP's own auth headers
_SECRET_HEADER = re.compile(rf"AUTHORIZATION|COOKIE|{_SECRET_NAME.pattern}", re.IGNORECASE)


def plan_secrets(api_key: str | None, headers: dict[str, str], server: ServerPlan | None = None) -> list[str]:
    """Every value of a run that must never reach raw/ nor the terminal: the API key (read from the
    environment variable the plan names), each extra header whose name or value looks secret
    (``Authorization``, ``X-Api-Key``, a bearer token ...), and the literal secrets of ``[server]``: an
    ``env`` value whose name or value looks secret, a password in a URL, the value after ``--api-key`` in
    ``args``. Longest first, so a value inside another is scrubbed after it."""
    found = [api_key] if api_key else []
    for name, value in headers.items():
        if _SECRET_HEADER.search(name) or looks_like_secret(value):
            found.append(value)
            found += value.split()[1:]  # "Bearer <token>": the token alone too
    if server is not None:
        found += _server_secrets(server)
    return sorted({s for s in found if len(s) >= 4}, key=len, reverse=True)


def _server_secrets(sp: ServerPlan) -> list[str]:
    """The literal secrets a ``[server]`` table holds: secret-named or secret-looking ``env`` values, the
    password of a URL (in ``env`` or ``url``), the value of a secret argument (``--api-key X``)."""
    found = [v for k, v in sp.env.items() if _SECRET_NAME.search(k) or looks_like_secret(v)]
    for value in [*sp.env.values(), sp.url or ""]:
        for m in _URL_USERINFO.finditer(value):
            found += [m.group(2), m.group(2).partition(":")[2]]
    args = [str(a) for a in sp.args]
    for i, a in enumerate(args):
        if a in _SECRET_ARGS and i + 1 < len(args):
            found.append(args[i + 1])
        elif a.startswith(tuple(f"{s}=" for s in _SECRET_ARGS)):
            found.append(a.partition("=")[2])
    return found


def _read(path: str) -> str:
    try:
        return Path(path).read_text(errors="replace")
    except OSError as err:
        return f"unreadable: {err}"


def os_info() -> str:
    u = platform.uname()
    return f"platform: {platform.platform()}\nuname: {' '.join(u)}\n\n{_read('/etc/os-release')}"


def cpu_info() -> str:
    if shutil.which("lscpu"):
        return run_capture(["lscpu"], 30)[1]
    return _read("/proc/cpuinfo")


def memory_info() -> str:
    return _read("/proc/meminfo")


# rocm-smi's product names and VRAM as JSON ({"card0": {"Card Series": …, "VRAM Total Memory (B)": …}, …})
ROCM_SMI_GPU_QUERY = ["--showproductname", "--showmeminfo", "vram", "--json"]
MIB = 2**20


def rocm_smi_gpus(text: str) -> list[dict[str, str]]:
    """Every card of ``rocm-smi --showproductname --showmeminfo vram --json``, in the summary's shape of an
    nvidia-smi row (name, memory.total [MiB], memory.used [MiB]); the JSON is read from its first ``{``
    (rocm-smi may print warnings before it); [] when there is none."""
    start = text.find("{")
    try:
        data = json.JSONDecoder().raw_decode(text[start:])[0] if start >= 0 else {}
    except ValueError:
        return []
    out = []
    for card, info in sorted(data.items()) if isinstance(data, dict) else []:
        if not card.startswith("card") or not isinstance(info, dict):
            continue
        # the key was "Card series" before ROCm 6, "Card Series" after
        name = info.get("Card Series") or info.get("Card series") or info.get("Card SKU") or card
        row = {"name": str(name).strip()}
        for key, col in (
            ("VRAM Total Memory (B)", "memory.total [MiB]"),
            ("VRAM Total Used Memory (B)", "memory.used [MiB]"),
        ):
            if str(info.get(key, "")).strip().isdigit():
                row[col] = f"{int(info[key]) // MIB} MiB"
        out.append(row)
    return out


def gpu_info() -> dict[str, str] | None:
    """nvidia-smi's header (driver, CUDA), a CSV of every device's name, memory and clocks, and the
    interconnect matrix between devices (``topo -m``: NVLink, PCIe switch or host bridge between each pair,
    which decides what a split model pays to cross GPUs); on an AMD machine rocm-smi's summary and its JSON
    of names and VRAM; None without either."""
    if not shutil.which("nvidia-smi"):
        if shutil.which("rocm-smi"):
            return {
                "rocm-smi.txt": run_capture(["rocm-smi"], 60)[1],
                "rocm-smi-gpus.json": run_capture(["rocm-smi", *ROCM_SMI_GPU_QUERY], 60)[1],
            }
        return None
    return {
        "nvidia-smi.txt": run_capture(["nvidia-smi"], 60)[1],
        "nvidia-smi-gpus.csv": run_capture(
            ["nvidia-smi", f"--query-gpu={NVIDIA_SMI_GPU_QUERY}", "--format=csv"], 60
        )[1],
        "nvidia-smi-topo.txt": run_capture(["nvidia-smi", "topo", "-m"], 60)[1],
    }


def python_info() -> str:
    return f"python: {sys.version}\nexecutable: {sys.executable}\ncollector: {__version__}\n"


# how long the engine may take to say its version: `llama-server --version` answers at once (a binary silent
# for 10 s hangs); vLLM's is an `import vllm`, tens of seconds on a CPU box
VERSION_TIMEOUT_S = {"llamacpp": 10.0}


def engine_version(adapter: Adapter, sp: ServerPlan, env: dict[str, str]) -> str:
    cmd = adapter.version_command(sp)
    if cmd is None:
        return "unknown: attached server, no local binary to ask\n"
    rc, text = run_capture(cmd, VERSION_TIMEOUT_S.get(adapter.engine, 180.0), env)
    return f"$ {shlex.join(cmd)}\nexit: {rc}\n{text}"


def pip_freeze(python: str, env: dict[str, str] | None = None) -> str:
    rc, text = run_capture([python, "-m", "pip", "freeze", "--all"], 180, env)
    if rc == 0:
        return text
    # venvs made without pip: the installed distributions, in pip freeze's format
    code = (
        "import importlib.metadata as m\n"
        "for d in sorted(m.distributions(), key=lambda d: d.metadata['Name'].lower()):\n"
        "    print(f\"{d.metadata['Name']}=={d.version}\")\n"
    )
    rc2, text2 = run_capture([python, "-c", code], 180, env)
    return f"# pip freeze failed (exit {rc}); listed with importlib.metadata (exit {rc2})\n{text2}"


def command_info(command: list[str] | None, sp: ServerPlan) -> dict[str, Any]:
    if command is None:
        return {"mode": "attach", "url": sp.url, "argv": None, "shell": None}
    argv = redact_args(command)
    return {"mode": "start", "url": sp.base_url, "argv": argv, "shell": shlex.join(argv), "cwd": os.getcwd()}


def collect(
    adapter: Adapter,
    sp: ServerPlan,
    command: list[str] | None,
    env: dict[str, str],
    secrets: list[str] | None = None,
) -> dict[str, str]:
    """Every fingerprint file, name → text (written into ``fingerprint/`` by the run); every file is scrubbed
    of ``secrets`` (``plan_secrets``: the API key wherever it appears, e.g. in the environment under a name
    that does not look secret)."""
    files = {
        "os.txt": os_info(),
        "cpu.txt": cpu_info(),
        "memory.txt": memory_info(),
        "python.txt": python_info(),
        "pip-freeze-collector.txt": pip_freeze(sys.executable),
        "engine-version.txt": engine_version(adapter, sp, env),
        "command.json": json.dumps(command_info(command, sp), indent=2) + "\n",
        "environment.json": json.dumps(perf_env(env), indent=2) + "\n",
    }
    py = adapter.python(sp)
    if py is not None:
        files["pip-freeze-engine.txt"] = pip_freeze(py, env)
    gpus = gpu_info()
    if gpus is not None:
        files.update(gpus)
    # the card's measured ceilings (collector.protocol.ceilings), taken once per lease before the runs
    ceilings = os.environ.get("ANATOMY_CEILINGS_JSON")
    if ceilings and Path(ceilings).is_file():
        files["ceilings.json"] = Path(ceilings).read_text()
    files["summary.json"] = json.dumps(summary(files, sp), indent=2, ensure_ascii=False) + "\n"
    return {name: scrub(text, secrets or []) for name, text in files.items()}


def summary(files: dict[str, str], sp: ServerPlan) -> dict[str, Any]:
    """The headline facts, read back from the verbatim texts above (so both always agree)."""
    cpu_model = next(
        (
            ln.split(":", 1)[1].strip()
            for ln in files["cpu.txt"].splitlines()
            if ln.startswith(("Model name", "model name"))
        ),
        None,
    )
    mem_kib = next(
        (int(ln.split()[1]) for ln in files["memory.txt"].splitlines() if ln.startswith("MemTotal:")), None
    )
    version_lines = [ln for ln in files["engine-version.txt"].splitlines()[2:] if ln.strip()]
    gpus = None
    if "nvidia-smi-gpus.csv" in files:
        rows = [r for r in files["nvidia-smi-gpus.csv"].splitlines() if r.strip()]
        gpus = [dict(zip(rows[0].split(", "), r.split(", "), strict=False)) for r in rows[1:]] if rows else []
    elif "rocm-smi-gpus.json" in files:
        gpus = rocm_smi_gpus(files["rocm-smi-gpus.json"])
    return {
        "os": platform.platform(),
        "cpu_model": cpu_model,
        "cpu_count": os.cpu_count(),
        "mem_total_kib": mem_kib,
        "gpus": gpus,
        "python": sys.version.split()[0],
        "engine": sp.engine,
        "engine_version": version_lines[-1]
        if sp.engine == "vllm" and version_lines
        else "\n".join(version_lines),
        "server_mode": "attach" if sp.attach else "start",
    }
