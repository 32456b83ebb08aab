"""The simulator (reprompt_sim) sits outside the product: it may import app, app never
imports it, and ``reprompt sim`` runs it as its own process."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
APP = ROOT / "app"
SIM = "reprompt_sim"
IMPORTERS = {"import_module", "__import__"}


def _modules() -> list[Path]:
    return sorted(APP.rglob("*.py"))


def _imports_sim(name: str | None) -> bool:
    return name is not None and (name == SIM or name.startswith(f"{SIM}."))


def test_the_product_never_imports_the_simulator() -> None:
    imports: list[str] = []
    mentions: list[str] = []
    for path in _modules():
        text = path.read_text(encoding="utf-8")
        where = path.relative_to(ROOT).as_posix()
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                names = [node.module or ""]
            else:
                continue
            imports += [f"{where}:{node.lineno}" for name in names if _imports_sim(name)]
        mentions += [f"{where}:{n}" for n, line in enumerate(text.splitlines(), 1) if SIM in line]
    assert imports == []

    # By name, too: the one mention is cli.py's constant, and nothing imports by that name.
    cli = ast.parse((APP / "cli.py").read_text(encoding="utf-8"))
    (constant,) = [
        node
        for node in cli.body
        if isinstance(node, ast.Assign)
        and [ast.unparse(t) for t in node.targets] == ["SIM_MODULE"]
        and isinstance(node.value, ast.Constant)
        and node.value.value == SIM
    ]
    assert mentions == [f"app/cli.py:{constant.lineno}"]
    for node in ast.walk(cli):
        if isinstance(node, ast.Call) and ast.unparse(node.func).split(".")[-1] in IMPORTERS:
            assert "SIM_MODULE" not in ast.unparse(node), ast.unparse(node)


def test_importing_every_product_module_loads_no_simulator_module() -> None:
    code = (
        "import importlib, pkgutil, sys, app\n"
        "for info in pkgutil.walk_packages(app.__path__, 'app.'):\n"
        "    importlib.import_module(info.name)\n"
        f"print(sorted(m for m in sys.modules if m.split('.')[0] == {SIM!r}))\n"
    )
    proc = _python("-c", code)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


def test_reprompt_sim_help_is_the_simulators_help() -> None:
    proc = _python("-m", "app.cli", "sim", "--help")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("usage: reprompt sim")
    for text in ("--fail", "--fix", "broken_json", "[[sim {...}]]"):
        assert text in proc.stdout


def test_reprompt_sim_without_the_package_says_how_to_get_it() -> None:
    # A None entry in sys.modules makes find_spec report the package as missing.
    code = (
        f"import sys; sys.modules[{SIM!r}] = None\n"
        "from app.cli import main\n"
        "raise SystemExit(main(['sim', '--help']))\n"
    )
    proc = _python("-c", code)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stdout == ""
    assert "pip install 'reprompt[sim]'" in proc.stderr
    assert SIM in proc.stderr


def _python(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


# -- the product's own layers ----------------------------------------------------------------

# Who may import whom: the pure core at the bottom, the edges (providers over httpx, the
# store over Redis) on it, the worker and the API side by side on those, the assembly of
# a process above both, the command line at the top. Small leaf modules ("base") serve all.
LAYERS: dict[str, set[str]] = {
    "core": set(),
    "base": {"core"},
    "providers": {"core", "base"},
    "store": {"core", "base"},
    # The outbound guard: an edge beside providers (httpx to where tenants point), used by
    # the API (URL checks at submit) and the worker (the calls).
    "outbound": {"core", "base"},
    "worker": {"core", "base", "providers", "store", "outbound"},
    "api": {"core", "base", "providers", "store", "outbound"},
    "assembly": {"core", "base", "providers", "store", "worker", "api", "outbound"},
    "cli": {"core", "base", "providers", "store", "worker", "api", "assembly", "outbound"},
}
# Read once by the assembly and passed down: the edges never read the settings themselves.
SETTINGS_READERS = {"api", "worker", "assembly", "cli"}


def _layer(module: str) -> str:
    parts = module.split(".")
    if len(parts) == 1:
        return "cli"
    if parts[1] in ("core", "providers", "store", "api", "outbound"):
        return parts[1]
    if parts[1] == "console":  # the web console: the API's pages, in its layer (#32)
        return "api"
    # app/batches (#30): the batch runner, a worker of its own kind.
    layers = {"worker": "worker", "batches": "worker", "assembly": "assembly", "cli": "cli"}
    return layers.get(parts[1], "base")


def _app_imports(path: Path) -> list[tuple[int, str]]:
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module == "app":  # from app import metrics
                found += [(node.lineno, f"app.{alias.name}") for alias in node.names]
            else:
                found.append((node.lineno, node.module))
    return [(line, name) for line, name in found if name.startswith("app.")]


def test_no_module_imports_upward() -> None:
    wrong: list[str] = []
    for path in _modules():
        module = ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
        mine = _layer(module)
        for line, name in _app_imports(path):
            theirs = _layer(name)
            where = f"{path.relative_to(ROOT)}:{line} ({mine}) imports {name} ({theirs})"
            if theirs != mine and theirs not in LAYERS[mine]:
                wrong.append(where)
            elif name == "app.settings" and mine not in SETTINGS_READERS and module != name:
                wrong.append(where + ": settings are passed down, not read")
    assert wrong == []


def test_the_api_package_does_not_import_the_worker() -> None:
    api = [p for p in _modules() if p.parent.name == "api"]
    assert api
    for path in api:
        assert all(_layer(name) != "worker" for _, name in _app_imports(path)), path


# -- no import circle ------------------------------------------------------------------------


def _module_name(path: Path) -> str:
    return ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")


def _imported_at_load(path: Path, known: set[str]) -> set[str]:
    """The app modules ``path`` imports as it loads: its module-level imports, not those
    inside a function or under ``if TYPE_CHECKING:``. ``from a import b`` names ``a.b``
    when that is a module, else ``a``."""
    found: set[str] = set()

    def visit(body: list[ast.stmt]) -> None:
        for node in body:
            if isinstance(node, ast.Import):
                found.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                for alias in node.names:
                    name = f"{node.module}.{alias.name}"
                    found.add(name if name in known else node.module)
            elif isinstance(node, ast.If) and ast.unparse(node.test) != "TYPE_CHECKING":
                visit(node.body)
                visit(node.orelse)
            elif isinstance(node, ast.Try):
                for block in (node.body, node.orelse, node.finalbody):
                    visit(block)
                for handler in node.handlers:
                    visit(handler.body)
            elif isinstance(node, ast.With):
                visit(node.body)

    visit(ast.parse(path.read_text(encoding="utf-8")).body)
    return {name for name in found if name in known}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (or a module importing
    itself), each sorted (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for after in sorted(graph[node]):
            if after not in index:
                visit(after)
                low[node] = min(low[node], low[after])
            elif after in on_stack:
                low[node] = min(low[node], index[after])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1 or node in graph[node]:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_import_circle_in_the_product() -> None:
    paths = {_module_name(path): path for path in _modules()}
    known = set(paths)
    graph = {name: _imported_at_load(path, known) for name, path in paths.items()}
    circles = [
        " -> ".join(component) + f"  ({'; '.join(_edges(graph, component))})"
        for component in _cycles(graph)
    ]
    assert circles == []


def _edges(graph: dict[str, set[str]], component: list[str]) -> list[str]:
    members = set(component)
    return [f"{a} imports {b}" for a in component for b in sorted(graph[a] & members)]


def test_the_circle_finder_finds_a_circle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": {"e"}}
    assert _cycles(graph) == [["a", "b", "c"], ["e"]]
