"""Import floors: every module of collector/, analysis/ and site/ sits in one layer and imports only from its
own layer or lower ones; the module-level import graph has no cycle; a project import inside a function
carries a comment saying why (``# local import: <why>`` on its line or the line above).

The layer map below is the one definition; README's "Layout" section shows the same text (checked here).
"""

from __future__ import annotations

import ast
import importlib
import textwrap
from pathlib import Path

import pytest

from collector.raw.errors import AnatomyError

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("collector", "analysis", "lab")  # importable project packages; site/ holds scripts, MkDocs hooks
SHIPPED = ("collector", "analysis")  # what the wheel carries; not lab/ (engine builds, random-weight models)
LOCAL_MARK = "# local import:"

# (floor, what it is, folders). A module's floor is its folder's: the tree shows the layers. Lower floors
# never import higher ones. A package root's __init__ sits on its package's lowest floor; collector/cli.py is
# the one module on top.
LAYERS: tuple[tuple[int, str, tuple[str, ...]], ...] = (
    (0, "raw contract, the error root", ("collector/__init__.py", "collector/raw/")),
    (
        1,
        "parsers, theory, formulas, labels, chart specs",
        ("analysis/__init__.py", "analysis/core/", "analysis/parse/"),
    ),
    (2, "collector protocol, campaign loading", ("collector/protocol/", "analysis/loading/")),
    (3, "reconcile", ("analysis/reconcile/",)),
    (4, "pipeline", ("analysis/pipeline/",)),
    (5, "report", ("analysis/report/", "site/")),
    (6, "CLI, lab tooling (tests, benchmarks, scripts only)", ("collector/cli.py", "lab/")),
)


def layer_map_text() -> str:
    """The map as README shows it: ``L<n> <what>: <patterns>``, wrapped at 110 columns."""
    return "\n".join(
        textwrap.fill(
            f"L{n} {what}: {', '.join(pats)}", 110, subsequent_indent="    ", break_on_hyphens=False
        )
        for n, what, pats in LAYERS
    )


def _modules() -> dict[str, Path]:
    """Repository-relative path → file, for every Python module the map covers."""
    files = [p for pkg in PACKAGES for p in (REPO / pkg).rglob("*.py")]
    files += [p for p in (REPO / "site").rglob("*.py") if "docs" not in p.parts]
    return {p.relative_to(REPO).as_posix(): p for p in sorted(files)}


def _in(rel: str, place: str) -> bool:
    """A folder (``x/``) holds every module under it; a file path names one module."""
    return rel.startswith(place) if place.endswith("/") else rel == place


def _layers_of(rel: str) -> list[int]:
    return [n for n, _, places in LAYERS if any(_in(rel, p) for p in places)]


def _layer(rel: str) -> int | None:
    found = _layers_of(rel)
    return found[0] if len(found) == 1 else None


def _module_name(rel: str) -> str | None:
    """Dotted name of an importable module (None for site/ scripts)."""
    parts = rel[: -len(".py")].split("/")
    if parts[0] not in PACKAGES:
        return None
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = _modules()
NAMES = {name: rel for rel in MODULES if (name := _module_name(rel))}


def _resolve(name: str) -> str | None:
    """The project module an import of ``name`` loads (longest dotted prefix that is a module)."""
    parts = name.split(".")
    while parts:
        if ".".join(parts) in NAMES:
            return NAMES[".".join(parts)]
        parts.pop()
    return None


def _targets(node: ast.Import | ast.ImportFrom, rel: str) -> list[str]:
    """Repository-relative paths of the project modules one import statement loads."""
    if isinstance(node, ast.Import):
        return [t for a in node.names if (t := _resolve(a.name))]
    base = node.module or ""
    if node.level:
        pkg = (_module_name(rel) or "").split(".")
        if not rel.endswith("__init__.py"):
            pkg = pkg[:-1]
        pkg = pkg[: len(pkg) - (node.level - 1)]
        base = ".".join(pkg + ([base] if base else []))
    out = []
    for a in node.names:
        sub = f"{base}.{a.name}"
        t = NAMES.get(sub) or _resolve(base)  # `from pkg import submodule` loads the submodule
        if t:
            out.append(t)
    return out


def _imports(rel: str) -> tuple[list[tuple[int, str]], list[tuple[int, str, bool]]]:
    """(module-level imports, function-local imports with whether they carry the marker comment)."""
    src = MODULES[rel].read_text(encoding="utf-8")
    lines = src.splitlines()
    tree = ast.parse(src, filename=rel)
    local_nodes: set[int] = set()
    local: list[tuple[int, str, bool]] = []
    for fn in ast.walk(tree):
        if isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
            for node in ast.walk(fn):
                if isinstance(node, ast.Import | ast.ImportFrom) and id(node) not in local_nodes:
                    local_nodes.add(id(node))
                    here = lines[node.lineno - 1]
                    above = lines[node.lineno - 2] if node.lineno > 1 else ""
                    marked = LOCAL_MARK in here or above.strip().startswith(LOCAL_MARK)
                    local += [(node.lineno, t, marked) for t in _targets(node, rel)]
    top = [
        (node.lineno, t)
        for node in ast.walk(tree)
        if isinstance(node, ast.Import | ast.ImportFrom) and id(node) not in local_nodes
        for t in _targets(node, rel)
    ]
    return top, local


IMPORTS = {rel: _imports(rel) for rel in MODULES}


def test_every_module_is_in_exactly_one_layer():
    bad = {rel: _layers_of(rel) for rel in MODULES if len(_layers_of(rel)) != 1}
    assert not bad, f"modules in no layer or several (add them to LAYERS and README's layout): {bad}"


def test_no_import_from_a_higher_layer():
    up = []
    for rel, (top, local) in IMPORTS.items():
        mine = _layer(rel)
        for line, target in top + [(ln, t) for ln, t, _ in local]:
            theirs = _layer(target)
            if mine is not None and theirs is not None and theirs > mine:
                up.append(f"{rel}:{line}: L{mine} imports {target} (L{theirs})")
    assert not up, "imports from a higher layer:\n" + "\n".join(up)


def test_no_import_cycle_between_modules():
    graph = {rel: sorted({t for _, t in top if t != rel}) for rel, (top, _) in IMPORTS.items()}
    cycles, state, stack = [], {}, []

    def visit(node: str) -> None:  # depth-first search; a grey node met again closes a cycle
        state[node] = "grey"
        stack.append(node)
        for nxt in graph[node]:
            if state.get(nxt) == "grey":
                cycles.append(" -> ".join(stack[stack.index(nxt) :] + [nxt]))
            elif nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = "black"

    for rel in graph:
        if rel not in state:
            visit(rel)
    assert not cycles, "import cycles:\n" + "\n".join(cycles)


def test_function_local_project_imports_say_why():
    hidden = [
        f"{rel}:{line}: imports {t} inside a function without a '{LOCAL_MARK} <why>' comment"
        for rel, (_, local) in IMPORTS.items()
        for line, t, marked in local
        if not marked
    ]
    assert not hidden, "\n".join(hidden)


def test_readme_layout_shows_this_map():
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert layer_map_text() in readme, "README's layout section differs from LAYERS:\n" + layer_map_text()


@pytest.mark.parametrize(
    "rel, target",
    [
        ("analysis/parse/bench_json.py", "collector/raw/errors.py"),
        ("collector/cli.py", "analysis/pipeline/analyze.py"),
    ],
)
def test_the_graph_sees_real_edges(rel, target):
    """The checks above are only as good as the import graph: known edges must be in it (the CLI imports the
    pipeline inside its commands, to keep `collector --help` light)."""
    top, local = IMPORTS[rel]
    assert target in {t for _, t in top} | {t for _, t, _ in local}


# Exceptions that are control flow, not errors (they unwind to a handler that stops the run cleanly).
NOT_ERRORS = {"collector.protocol.interrupts.Interrupted"}


def test_one_error_root():
    """Every exception class the project defines is an AnatomyError (the CLI's one-line message), except
    control flow listed in NOT_ERRORS."""
    stray = []
    for name in sorted(NAMES):
        module = importlib.import_module(name)
        for obj in vars(module).values():
            if (
                isinstance(obj, type)
                and issubclass(obj, BaseException)
                and obj.__module__ == name
                and not issubclass(obj, AnatomyError)
                and f"{name}.{obj.__name__}" not in NOT_ERRORS
            ):
                stray.append(f"{name}.{obj.__name__}({', '.join(b.__name__ for b in obj.__bases__)})")
    assert not stray, "exception classes outside the AnatomyError tree: " + ", ".join(stray)


def test_floors_are_folders():
    """Every place in the map is a folder on disk (or one of the three named files), so the tree shows the
    floors; each folder sits on one floor."""
    places = [p for _, _, ps in LAYERS for p in ps]
    files = {"collector/__init__.py", "analysis/__init__.py", "collector/cli.py"}
    assert all((REPO / p).is_dir() for p in places if p not in files), places
    assert len(places) == len(set(places))


def test_shipped_packages_never_import_the_lab():
    """lab/ is not in the wheel: nothing shipped may import it."""
    bad = [
        f"{rel}:{line}: imports {t}"
        for rel, (top, local) in IMPORTS.items()
        if rel.split("/")[0] in SHIPPED
        for line, t in top + [(ln, t) for ln, t, _ in local]
        if t.startswith("lab/")
    ]
    assert not bad, "\n".join(bad)
