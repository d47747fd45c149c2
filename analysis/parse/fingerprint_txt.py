"""``fingerprint.txt``: ``=== section ===`` blocks written by a bash script before a campaign.

Sections: ``date`` (``date -u``), ``gpu`` (``nvidia-smi --query-gpu=name,driver_version,memory.total
--format=csv``), ``nvidia-smi header`` (first lines of ``nvidia-smi``), ``python/torch/vllm``, ``llama.cpp``
(commit), ``cpu/mem`` (``nproc``; ``free -g | head -2``), and optionally a ``memory.used [MiB]`` CSV appended
after a server started. A section may be empty (the command failed) and is reported in ``empty_sections``.
Lines the parser does not understand are kept in ``unparsed`` with their line numbers, never dropped; a value
that is there but malformed is a ParseError.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from analysis.parse.text import split_lines
from collector.raw.errors import ParseError
from collector.raw.jsonl import clip, read_bytes

_SECTION = re.compile(r"^=== (?P<name>.+?) ===$")
_SMI = re.compile(r"Driver Version: (?P<drv>\S+)\s+CUDA Version: (?P<cuda>\S+)")
_TORCH = re.compile(r"^torch (?P<v>\S+)(?: cuda (?P<cuda>\S+))?$")
_PKG = re.compile(r"^(?P<name>vllm|llama[-_]cpp[-_]python|transformers|python) (?P<v>\S+)$")
_MIB = re.compile(r"^(?P<n>\d+) MiB$")


@dataclass
class GpuInfo:
    line: int
    name: str
    driver_version: str
    memory_total_mib: int | None
    extra: dict[str, str] = field(default_factory=dict)  # other queried columns, verbatim


@dataclass
class Fingerprint:
    path: str
    sections: dict[str, list[tuple[int, str]]]  # section -> [(line, text)], verbatim, in file order
    empty_sections: list[str]
    date_utc: str | None = None  # ISO 8601
    gpus: list[GpuInfo] = field(default_factory=list)
    smi_driver_version: str | None = None
    smi_cuda_version: str | None = None  # highest CUDA the driver supports
    torch_version: str | None = None
    torch_cuda_version: str | None = None  # CUDA torch was built with
    packages: dict[str, str] = field(default_factory=dict)  # {"vllm": "0.27.1"}
    llamacpp_commit: str | None = None
    cpu_count: int | None = None
    mem_total_gib: int | None = None
    mem_used_gib: int | None = None
    mem_available_gib: int | None = None
    gpu_memory_used_mib: list[int] = field(default_factory=list)  # appended "memory.used [MiB]" readings
    unparsed: list[tuple[int, str]] = field(default_factory=list)
    lines: dict[str, int] = field(default_factory=dict)

    @property
    def vllm_version(self) -> str | None:
        return self.packages.get("vllm")


def _date(fp: Fingerprint, body: list[tuple[int, str]]) -> None:
    for no, text in body:
        t = text.strip()
        try:
            dt = datetime.strptime(t.replace("UTC", "+0000"), "%a %b %d %H:%M:%S %z %Y")
        except ValueError:
            raise ParseError(fp.path, no, f"date not in `date -u` form: {clip(t)}") from None
        fp.date_utc = dt.astimezone(UTC).isoformat()
        fp.lines["date_utc"] = no
        return


def _csv_row(text: str) -> list[str]:
    return [c.strip() for c in text.split(",")]


def _mib(fp: Fingerprint, no: int, text: str) -> int:
    m = _MIB.match(text.strip())
    if not m:
        raise ParseError(fp.path, no, f"expected 'N MiB', got {clip(text)}")
    return int(m["n"])


def _gpu(fp: Fingerprint, body: list[tuple[int, str]]) -> None:
    if not body:
        return
    hno, htext = body[0]
    header = _csv_row(htext)
    if "name" not in header or "driver_version" not in header:
        raise ParseError(
            fp.path, hno, f"nvidia-smi CSV header should name 'name' and 'driver_version': {clip(htext)}"
        )
    for no, text in body[1:]:
        cells = _csv_row(text)
        if len(cells) != len(header):
            raise ParseError(
                fp.path, no, f"{len(cells)} fields, the GPU header has {len(header)}: {clip(text)}"
            )
        row = dict(zip(header, cells, strict=True))
        mem_key = next((h for h in header if h.startswith("memory.total")), None)
        mem = _mib(fp, no, row.pop(mem_key)) if mem_key else None
        name, drv = row.pop("name"), row.pop("driver_version")
        fp.gpus.append(GpuInfo(no, name, drv, mem, row))


def _smi(fp: Fingerprint, body: list[tuple[int, str]]) -> None:
    for no, text in body:
        if "Driver Version" in text:
            m = _SMI.search(text)
            if not m:
                raise ParseError(fp.path, no, f"nvidia-smi header line not understood: {clip(text)}")
            fp.smi_driver_version, fp.smi_cuda_version = m["drv"], m["cuda"]
            fp.lines["smi_driver_version"] = no


def _python(fp: Fingerprint, body: list[tuple[int, str]]) -> None:
    for no, text in body:
        t = text.strip()
        m = _TORCH.match(t)
        if m:
            fp.torch_version, fp.torch_cuda_version = m["v"], m["cuda"]
            fp.lines["torch_version"] = no
            continue
        m = _PKG.match(t)
        if m:
            fp.packages[m["name"]] = m["v"]
            fp.lines[m["name"]] = no
            continue
        fp.unparsed.append((no, text))


def _llamacpp(fp: Fingerprint, body: list[tuple[int, str]]) -> None:
    for no, text in body:
        t = text.strip()
        if re.fullmatch(r"[0-9a-f]{7,40}", t) and fp.llamacpp_commit is None:
            fp.llamacpp_commit = t
            fp.lines["llamacpp_commit"] = no
        else:
            fp.unparsed.append((no, text))


def _cpu_mem(fp: Fingerprint, body: list[tuple[int, str]]) -> None:
    i = 0
    while i < len(body):
        no, text = body[i]
        t = text.strip()
        if t.isdigit() and fp.cpu_count is None:
            fp.cpu_count = int(t)
            fp.lines["cpu_count"] = no
        elif t.split()[:3] == ["total", "used", "free"]:
            cols = t.split()
            if i + 1 >= len(body) or not body[i + 1][1].startswith("Mem:"):
                raise ParseError(fp.path, no, "`free` header without its 'Mem:' row")
            mno, mtext = body[i + 1]
            vals = mtext.split()[1:]
            if len(vals) != len(cols) or not all(v.isdigit() for v in vals):
                raise ParseError(fp.path, mno, f"`free` Mem: row does not match its header: {clip(mtext)}")
            mem = dict(zip(cols, (int(v) for v in vals), strict=True))
            fp.mem_total_gib, fp.mem_used_gib = mem.get("total"), mem.get("used")
            fp.mem_available_gib = mem.get("available")
            fp.lines["mem_total_gib"] = mno
            i += 1
        elif t.startswith("memory.used"):
            # nvidia-smi --query-gpu=memory.used --format=csv appended after the server started: header +
            # rows.
            j = i + 1
            while j < len(body) and _MIB.match(body[j][1].strip()):
                fp.gpu_memory_used_mib.append(_mib(fp, body[j][0], body[j][1]))
                j += 1
            if j == i + 1:
                raise ParseError(fp.path, no, "'memory.used' header without a 'N MiB' reading")
            fp.lines.setdefault("gpu_memory_used_mib", body[i + 1][0])
            i = j - 1
        else:
            fp.unparsed.append((no, text))
        i += 1


_HANDLERS = {
    "date": _date,
    "gpu": _gpu,
    "nvidia-smi header": _smi,
    "python/torch/vllm": _python,
    "llama.cpp": _llamacpp,
    "cpu/mem": _cpu_mem,
}


def parse_fingerprint_bytes(data: bytes, path: str | Path = "<bytes>") -> Fingerprint:
    path = str(path)
    lines = split_lines(data, path)
    sections: dict[str, list[tuple[int, str]]] = {}
    current: str | None = None
    for no, text in enumerate(lines, 1):
        m = _SECTION.match(text.rstrip())
        if m:
            current = m["name"]
            if current in sections:
                raise ParseError(path, no, f"section {current!r} appears twice")
            sections[current] = []
            continue
        if current is None:
            raise ParseError(path, no, f"text before the first '=== section ===' line: {clip(text)}")
        if text.strip():
            sections[current].append((no, text.rstrip()))
    if not sections:
        raise ParseError(path, 1, "no '=== section ===' line")
    fp = Fingerprint(path=path, sections=sections, empty_sections=[k for k, v in sections.items() if not v])
    for name, body in sections.items():
        handler = _HANDLERS.get(name)
        if handler is None:
            fp.unparsed.extend(body)  # unknown section: kept verbatim in .sections and listed here
        else:
            handler(fp, body)
    return fp


def parse_fingerprint(path: str | Path) -> Fingerprint:
    return parse_fingerprint_bytes(read_bytes(path), path)
