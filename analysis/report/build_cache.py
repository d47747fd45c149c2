"""What the report keeps between builds, in a folder of its own (``nox -s site``: build/cache/report): the
figures vl-convert drew and the templates jinja compiled. Both are pure functions of their inputs, so each
file is named by the sha256 of everything that decides it and reused while none changed:

- a figure (``figures/``): the spec, vl-convert's version and the fonts it measured text with
  (figures.converter_identity);
- a template's compiled code (``templates/``): the template's name, file and source, the jinja version and
  the environment's syntax settings (env.make_env).

Each file holds a first line with the sha256 of the bytes after it; a file that does not match it is not
used (one line says so) and the figure converted, the template compiled, afresh.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import jinja2

from collector.raw.store import TMP_PREFIX


def spec_key(spec: dict[str, Any], converter: str) -> str:
    """A figure's name in the cache: sha256 of the spec (keys sorted) and the converter's identity."""
    text = json.dumps(spec, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(f"{converter}\n{text}".encode()).hexdigest()


class CheckedFiles:
    """``<root>/<key[:2]>/<key><suffix>``: a sha256 line, then the data."""

    def __init__(self, root: Path, suffix: str):
        self.root = Path(root)
        self.suffix = suffix

    def path(self, key: str) -> Path:
        return self.root / key[:2] / f"{key}{self.suffix}"

    def get(self, key: str) -> tuple[bytes | None, str | None]:
        """(the data, None), or (None, why it cannot be used: "" when there is none)."""
        p = self.path(key)
        try:
            raw = p.read_bytes()
        except FileNotFoundError:
            return None, ""
        except OSError as err:
            return None, f"{p}: unreadable ({err.strerror})"
        want, _, data = raw.partition(b"\n")
        if hashlib.sha256(data).hexdigest() != want.decode("ascii", "replace"):
            return None, f"{p}: its content does not match its sha256 line"
        return data, None

    def put(self, key: str, data: bytes) -> None:
        p = self.path(key)
        p.parent.mkdir(parents=True, exist_ok=True)
        tmp = p.with_name(f"{TMP_PREFIX}{p.name}.{os.getpid()}")
        tmp.write_bytes(hashlib.sha256(data).hexdigest().encode("ascii") + b"\n" + data)
        tmp.replace(p)  # atomic: a reader sees the old file or the whole new one


class SvgCache:
    """Converted figures by spec_key; the lines about files that could not be used are kept in ``notes``."""

    def __init__(self, root: Path):
        self.files = CheckedFiles(root, ".svg")
        self.notes: list[str] = []

    def get(self, key: str) -> str | None:
        data, problem = self.files.get(key)
        if problem:
            self.notes.append(f"figure cache: {problem}; converted afresh")
        return data.decode("utf-8") if data is not None else None

    def put(self, key: str, svg: str) -> None:
        self.files.put(key, svg.encode("utf-8"))


class TemplateCache(jinja2.BytecodeCache):
    """jinja's compiled templates, checked as every file here is; ``identity``: what besides the template
    decides its code (the jinja version, the environment's syntax settings). jinja itself drops code whose
    template source changed (the bucket's checksum)."""

    def __init__(self, root: Path, identity: str):
        self.files = CheckedFiles(root, ".jinja")
        self.identity = identity
        self.notes: list[str] = []

    def _key(self, bucket: jinja2.bccache.Bucket) -> str:
        return hashlib.sha256(f"{self.identity}\n{bucket.key}\n{bucket.checksum}".encode()).hexdigest()

    def load_bytecode(self, bucket: jinja2.bccache.Bucket) -> None:
        data, problem = self.files.get(self._key(bucket))
        if problem:
            self.notes.append(f"template cache: {problem}; compiled afresh")
        if data is not None:
            bucket.bytecode_from_string(data)

    def dump_bytecode(self, bucket: jinja2.bccache.Bucket) -> None:
        self.files.put(self._key(bucket), bucket.bytecode_to_string())
