"""The package's house rules, read from its source: small modules, and layers
that import only downwards (the command line on top; recipes and views below
it, the console and the workers; the run loop below them all)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "orchestra"
MAX_LINES = 800

ABOVE = {
    # a package: what it must never import (those sit above it)
    "_recipes": ("_cli", "console", "distributed", "_views"),
    "_views": ("_cli", "console", "distributed", "_recipes"),
    "console": ("_cli",),
    "distributed": ("_cli", "console"),
    "_scripted": ("_cli", "console", "distributed", "_recipes", "_views", "testing"),
    "_core": (
        "_cli",
        "console",
        "distributed",
        "_recipes",
        "_views",
        "_telemetry",
        "_runner",
        "_keeper",
        "_hub",
        "aio",
        "testing",
    ),
}


def modules() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def imported(path: Path) -> set[str]:
    """The ``orchestra`` subpackages and modules ``path`` imports (first level)."""
    package = path.relative_to(PACKAGE.parent).with_suffix("").parts[:-1]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = list(package[: len(package) - node.level + 1])
                parts = [*base, *(node.module or "").split(".")]
            else:
                parts = (node.module or "").split(".")
            names = [parts] if node.module else [[*parts, a.name] for a in node.names]
        elif isinstance(node, ast.Import):
            names = [a.name.split(".") for a in node.names]
        else:
            continue
        found |= {p[1] for p in names if len(p) > 1 and p[0] == "orchestra" and p[1]}
    return found


def test_no_module_is_over_800_lines() -> None:
    long = {
        str(p.relative_to(PACKAGE)): n
        for p in modules()
        if (n := len(p.read_text().splitlines())) > MAX_LINES
    }
    assert long == {}


@pytest.mark.parametrize("layer", sorted(ABOVE))
def test_no_import_runs_back_up(layer: str) -> None:
    back = {
        str(path.relative_to(PACKAGE)): sorted(imported(path) & set(ABOVE[layer]))
        for path in (PACKAGE / layer).rglob("*.py")
    }
    assert {k: v for k, v in back.items() if v} == {}


def test_only_the_command_line_imports_the_command_line() -> None:
    users = {
        str(p.relative_to(PACKAGE))
        for p in modules()
        if "_cli" in imported(p) and p.parent.name != "_cli"
    }
    assert users == {"__main__.py"}


def test_production_code_imports_nothing_from_testing() -> None:
    users = {
        str(p.relative_to(PACKAGE))
        for p in modules()
        if "testing" in imported(p) and "testing" not in p.relative_to(PACKAGE).parts
    }
    assert users == set()


def test_the_checker_sees_imports() -> None:
    # the rules above can fail: the checker finds imports of every form
    assert {"_cli", "_views"} <= imported(PACKAGE / "_cli" / "start.py")
    assert "_recipes" in imported(PACKAGE / "console" / "_reads.py")


def _classes() -> dict[str, tuple[ast.ClassDef, str]]:
    """Every class of the package by name (last wins), with its module."""
    found: dict[str, tuple[ast.ClassDef, str]] = {}
    for path in modules():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                found[node.name] = (node, str(path.relative_to(PACKAGE)))
    return found


def _private_methods(node: ast.ClassDef) -> set[str]:
    return {
        f.name
        for f in node.body
        if isinstance(f, ast.FunctionDef | ast.AsyncFunctionDef)
        and f.name.startswith("_")
        and not f.name.startswith("__")
    }


def _is_hook(method: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """A method its base declares for subclasses to implement: its body only says
    what it is for (a docstring, ``...``, ``pass``) or raises ``NotImplementedError``."""
    body = [
        n
        for n in method.body
        if not (isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant))
        and not isinstance(n, ast.Pass)
    ]
    if not body:
        return True
    raised = body[0]
    return (
        len(body) == 1
        and isinstance(raised, ast.Raise)
        and "NotImplementedError" in ast.unparse(raised)
    )


def _behaviour(node: ast.ClassDef) -> set[str]:
    """The private methods of ``node`` that do something (not hooks to implement)."""
    return {
        f.name
        for f in node.body
        if isinstance(f, ast.FunctionDef | ast.AsyncFunctionDef) and not _is_hook(f)
    } & _private_methods(node)


def test_no_class_overrides_a_private_method_of_its_base() -> None:
    classes = _classes()
    overrides = []
    for name, (node, where) in classes.items():
        for base in node.bases:
            base_name = base.id if isinstance(base, ast.Name) else None
            if base_name in classes and base_name != name:
                shared = _private_methods(node) & _behaviour(classes[base_name][0])
                overrides += [f"{where}: {name}.{m} overrides {base_name}.{m}" for m in shared]
    assert overrides == []


def test_no_private_name_is_imported_from_another_package() -> None:
    """``from .._x import _y`` across packages reaches into another's insides."""
    crossings = []
    for path in modules():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level > 1:
                crossings += [
                    f"{path.relative_to(PACKAGE)}: {a.name}"
                    for a in node.names
                    if a.name.startswith("_") and not a.name.startswith("__")
                ]
    assert crossings == []


def test_the_checkers_see_overrides_and_private_imports() -> None:
    tree = ast.parse(
        "class A:\n    def _x(self): return 1\n    def _h(self): raise NotImplementedError\n"
        "class B(A):\n    def _x(self): return 2\n    def _h(self): return 3\n"
    )
    a, b = (n for n in tree.body if isinstance(n, ast.ClassDef))
    assert _private_methods(b) & _behaviour(a) == {"_x"}  # _h is a hook to implement


LOOP = ("run", "execute", "loop", "dispatch", "budget", "budget_note", "wind_down", "fair")
LOOP_TOO = ("shape", "answers", "stops")


@pytest.mark.parametrize("name", [*LOOP, *LOOP_TOO])
def test_the_loop_lives_in_its_package(name: str) -> None:
    assert (PACKAGE / "_core" / f"{name}.py").exists()
    assert not (PACKAGE / f"_{name}.py").exists()
