"""The product uses its dependencies through their public APIs only (STYLE.md, 13).

An AST walk over ``app/`` and ``reprompt_sim/``: no ``obj._name`` whose name the project
does not define itself, no import of ``lib._module`` or ``from lib import _name``, no
``_keyword=`` the project's own functions do not take, no ``import_module("lib._x")``.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("app", "reprompt_sim")


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _trees() -> dict[Path, ast.Module]:
    return {
        path: ast.parse(path.read_text(), str(path))
        for package in PACKAGES
        for path in sorted((ROOT / package).rglob("*.py"))
    }


def _defined(trees: dict[Path, ast.Module]) -> tuple[set[str], set[str]]:
    """Names the project defines (module globals, classes' members, ``self._x``), and the
    parameters of its own functions."""
    names: set[str] = set()
    params: set[str] = set()
    for tree in trees.values():
        bodies = [tree.body] + [n.body for n in ast.walk(tree) if isinstance(n, ast.ClassDef)]
        for body in bodies:
            for statement in body:
                if isinstance(statement, ast.Assign):
                    names.update(t.id for t in statement.targets if isinstance(t, ast.Name))
                elif isinstance(statement, ast.AnnAssign) and isinstance(
                    statement.target, ast.Name
                ):
                    names.add(statement.target.id)
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                names.add(node.name)
            elif isinstance(node, ast.alias):
                names.add((node.asname or node.name).split(".")[-1])
            elif (
                isinstance(node, ast.Attribute)
                and isinstance(node.ctx, ast.Store)
                and isinstance(node.value, ast.Name)
                and node.value.id in ("self", "cls")
            ):
                names.add(node.attr)
            elif isinstance(node, ast.arguments):
                params.update(a.arg for a in [*node.posonlyargs, *node.args, *node.kwonlyargs])
    return names, params


def _foreign(module: str) -> bool:
    return module.split(".")[0] not in PACKAGES


def _calls(node: ast.Call, params: set[str]) -> list[str]:
    found = [
        f"{keyword.arg}= to {ast.unparse(node.func)}"
        for keyword in node.keywords
        if keyword.arg and _private(keyword.arg) and keyword.arg not in params
    ]
    first = node.args[0] if node.args else None
    if (
        ast.unparse(node.func).endswith("import_module")
        and isinstance(first, ast.Constant)
        and isinstance(first.value, str)
        and any(map(_private, first.value.split(".")))
    ):
        found.append(f"import_module({first.value!r})")
    return found


def _imports(node: ast.Import | ast.ImportFrom) -> list[str]:
    if isinstance(node, ast.Import):
        return [
            f"import {alias.name}"
            for alias in node.names
            if _foreign(alias.name) and any(map(_private, alias.name.split(".")))
        ]
    module = node.module or ""
    if node.level or not _foreign(module):
        return []
    private = [alias.name for alias in node.names if _private(alias.name)]
    if any(map(_private, module.split("."))) or private:
        return [f"from {module} import {', '.join(private) or '...'}"]
    return []


def _uses(path: Path, tree: ast.Module, names: set[str], params: set[str]) -> list[str]:
    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _private(node.attr) and node.attr not in names:
            uses = [ast.unparse(node)]
        elif isinstance(node, ast.Import | ast.ImportFrom):
            uses = _imports(node)
        elif isinstance(node, ast.Call):
            uses = _calls(node, params)
        else:
            continue
        found += [f"{path.relative_to(ROOT)}:{node.lineno}: {use}" for use in uses]
    return found


def test_no_private_attribute_or_module_of_a_dependency_is_used() -> None:
    trees = _trees()
    names, params = _defined(trees)
    found = [use for path, tree in trees.items() for use in _uses(path, tree, names, params)]
    assert found == []


def test_the_check_finds_what_it_looks_for() -> None:
    code = (
        "import logging, importlib\n"
        "from starlette._utils import is_async_callable\n"
        "from opentelemetry.trace import _TRACER_PROVIDER\n"
        "logging._srcfile = None\n"
        "def f(client, validator):\n"
        "    client._cookies.clear()\n"
        "    validator.evolve(_resolver=None)\n"
        "    importlib.import_module('re._parser')\n"
    )
    tree = ast.parse(code)
    found = _uses(ROOT / "x.py", tree, {"f", "logging", "importlib"}, {"client", "validator"})
    assert sorted(use.split(": ", 1)[1] for use in found) == sorted(
        [
            "from starlette._utils import ...",
            "from opentelemetry.trace import _TRACER_PROVIDER",
            "logging._srcfile",
            "client._cookies",
            "_resolver= to validator.evolve",
            "import_module('re._parser')",
        ]
    )
