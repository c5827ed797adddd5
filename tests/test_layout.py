"""Layout guards: no import cycle inside the package, and only the composition root
(``shared/runtime.py``) builds the process's parts."""

from __future__ import annotations

import ast
from collections.abc import Iterator, Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "wakemark"  # the real files; the top-level folders link into it
PACKAGE_DIRS = ("shared", "services")  # migrations hold SQL

# Constructors of the process's parts, and where each may be called outside tests.
COMPOSITION_ROOT = "shared/runtime.py"
BUILDERS = {
    "open_storage": {COMPOSITION_ROOT},
    "open_epochs": {COMPOSITION_ROOT},
    "open_embedder": {COMPOSITION_ROOT},
    "open_dispatcher": {COMPOSITION_ROOT},
    "Retriever": {COMPOSITION_ROOT},
    # open_dispatcher is the one factory that picks between the two.
    "InProcessDispatcher": {"shared/jobs/__init__.py"},
    "CeleryDispatcher": {"shared/jobs/__init__.py"},
}
SKIP_DIRS = {".venv", ".git", "tests", "build", "node_modules", "__pycache__"}


def module_name(path: Path, root: Path) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(("wakemark", *parts))


def package_modules(root: Path = PACKAGE) -> dict[str, Path]:
    return {
        module_name(path, root): path
        for top in PACKAGE_DIRS
        if (root / top).is_dir()
        for path in sorted((root / top).rglob("*.py"))
    }


def import_statements(path: Path, package: str) -> Iterator[tuple[str, list[str]]]:
    """Each import statement of ``path`` (a module of ``package``) as the absolute module it
    names and, for ``from X import a, b``, the names it takes from it."""
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, []
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                parent = ".".join(parts[: len(parts) - node.level + 1])
                base = f"{parent}.{base}" if base else parent
            yield base, [alias.name for alias in node.names]


def import_graph(root: Path = PACKAGE) -> dict[str, set[str]]:
    """Module -> the package modules it imports.

    Every import statement counts: at module level, under ``if TYPE_CHECKING:`` and inside
    functions. The last two never run at import time, so they cannot break an import,
    but a reader follows them all the same, and the cycle this guard was written against
    (runtime <-> jobs <-> retrieval) ran through exactly those. ``from X import Y`` is an
    edge to the submodule ``X.Y`` when there is one, else to ``X``; importing a submodule
    is not counted as importing its parent package, whose ``__init__`` Python runs first
    but which re-exports from its submodules by design.
    """
    modules = package_modules(root)
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        is_package = path.name == "__init__.py"
        package = name if is_package else name.rpartition(".")[0]
        targets: set[str] = set()
        for base, names in import_statements(path, package):
            subs = [f"{base}.{n}" for n in names]
            targets.update(sub if sub in modules else base for sub in subs or [base])
        graph[name] = {t for t in targets if t in modules and t != name}
    return graph


def cycles(graph: Mapping[str, set[str]]) -> list[list[str]]:
    """Every strongly connected component of more than one module (Tarjan), sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for succ in sorted(graph.get(node, ())):
            if succ not in index:
                visit(succ)
                low[node] = min(low[node], low[succ])
            elif succ in on_stack:
                low[node] = min(low[node], index[succ])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(found)


def test_the_package_has_no_import_cycle() -> None:
    assert cycles(import_graph()) == []


def _write(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def test_the_cycle_detector_finds_a_cycle(tmp_path: Path) -> None:
    _write(
        tmp_path,
        {
            "shared/__init__.py": "",
            "shared/a.py": "from wakemark.shared import b\n",
            # Through a function-level and a TYPE_CHECKING import: both count.
            "shared/b.py": "def f():\n    from wakemark.shared.c import x\n",
            "shared/c.py": (
                "from typing import TYPE_CHECKING\n"
                "if TYPE_CHECKING:\n    from wakemark.shared.a import A\n"
            ),
            "shared/d.py": "from . import a\n",  # reaches the cycle, is not part of it
        },
    )
    graph = import_graph(tmp_path)
    assert cycles(graph) == [["wakemark.shared.a", "wakemark.shared.b", "wakemark.shared.c"]]


def test_a_package_reexporting_its_submodules_is_no_cycle(tmp_path: Path) -> None:
    _write(
        tmp_path,
        {
            "shared/__init__.py": "",
            "shared/jobs/__init__.py": "from wakemark.shared.jobs.tasks import run\n",
            "shared/jobs/tasks.py": "from wakemark.shared.jobs.job import Job\n",
            "shared/jobs/job.py": "",
            "shared/api.py": "from wakemark.shared.jobs import run\n",
        },
    )
    graph = import_graph(tmp_path)
    assert graph["wakemark.shared.jobs.tasks"] == {"wakemark.shared.jobs.job"}
    assert graph["wakemark.shared.api"] == {"wakemark.shared.jobs"}
    assert cycles(graph) == []


def _calls(path: Path) -> Iterator[tuple[str, int]]:
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
            if name in BUILDERS:
                yield name, node.lineno


def builder_calls(root: Path = ROOT) -> list[str]:
    """``path:line name`` of every call to a builder outside the places allowed it."""
    out = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root)
        if SKIP_DIRS.intersection(rel.parts[:-1]) or "egg-info" in str(rel):
            continue
        where = rel.as_posix().removeprefix("wakemark/")  # the name a reader of the brief uses
        for name, line in _calls(path):
            if where not in BUILDERS[name]:
                out.append(f"{where}:{line} {name}")
    return out


def test_only_the_composition_root_builds_the_parts() -> None:
    assert builder_calls() == []


def test_the_package_holds_its_real_files() -> None:
    """Every import path names a real file: a tool that does not follow links (structure
    viewers, linters, code search) sees the package's modules and their imports. The brief's
    top-level folders are links into the package, where a reader of the brief looks."""
    for top in (*PACKAGE_DIRS, "migrations"):
        real = PACKAGE / top
        assert real.is_dir() and not real.is_symlink(), real
        link = ROOT / top
        assert link.is_symlink() and link.resolve() == real.resolve(), link
    # the composition root is really found by the builder guard, not skipped with the links
    assert any(p.name == "runtime.py" for p in package_modules().values())


def test_the_builder_guard_sees_plain_and_attribute_calls(tmp_path: Path) -> None:
    _write(
        tmp_path,
        {
            "shared/runtime.py": "open_storage(s)\n",
            "services/cli/x.py": "from m import open_storage\nopen_storage(s)\n",
            "bench/y.py": "import jobs\njobs.inprocess.InProcessDispatcher(c)\n",
        },
    )
    assert builder_calls(tmp_path) == [
        "bench/y.py:2 InProcessDispatcher",
        "services/cli/x.py:2 open_storage",
    ]


def test_the_former_name_appears_only_where_it_is_handled() -> None:
    """wakemark was engram: the old name stays only in the README's two passages, the
    modules that recognise what old installs left, the migration that renames the
    database functions, and the tests and fixtures of those."""
    root = Path(__file__).resolve().parents[1]
    allowed = {
        "README.md",
        "shared/legacy.py",
        "services/agents/legacy.py",
        "migrations/postgres/0006_wakemark_names.sql",
        "tests/test_layout.py",
        "tests/test_config.py",
        "tests/hooks/test_install.py",
        "tests/storage/test_migrations.py",
    }
    found = []
    for folder in ("shared", "services", "migrations", "tests", "bench", "docker", "scripts"):
        for path in (root / folder).rglob("*"):
            rel = str(path.relative_to(root))
            if not path.is_file() or "__pycache__" in rel or rel.startswith("tests/fixtures/"):
                continue
            if rel not in allowed and "engram" in path.read_text(errors="ignore").lower():
                found.append(rel)
    top = ("Makefile", "Dockerfile", "compose.yaml", "pyproject.toml", ".ci/run")
    found += [n for n in top if "engram" in (root / n).read_text().lower()]
    assert found == []
    readme = (root / "README.md").read_text().lower()
    assert readme.count("engram") <= 20  # the "formerly" line and the upgrade note


def imported_roots(folder: Path) -> dict[str, set[str]]:
    """File (relative to ``folder``'s parent) -> the top-level names it imports."""
    out: dict[str, set[str]] = {}
    for path in sorted(folder.rglob("*.py")):
        names = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.Import):
                names.update(alias.name.partition(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                names.add(node.module.partition(".")[0])
        out[path.relative_to(folder.parent).as_posix()] = names
    return out


def test_the_tests_import_nothing_from_bench() -> None:
    """bench/ is a tool beside the product: the test suite runs without it."""
    found = [rel for rel, names in imported_roots(ROOT / "tests").items() if "bench" in names]
    assert found == []


def test_the_bench_import_guard_sees_imports(tmp_path: Path) -> None:
    _write(
        tmp_path,
        {
            "tests/a.py": "from bench import relevance\n",
            "tests/b.py": "def f():\n    import bench.search\n",
            "tests/c.py": "from .bench import x\nimport benchmark\n",
        },
    )
    found = [rel for rel, names in imported_roots(tmp_path / "tests").items() if "bench" in names]
    assert found == ["tests/a.py", "tests/b.py"]


def folder_of(path: Path, root: Path) -> str:
    """A module's room: the folder under ``shared/`` or ``services/`` it lives in (with
    every folder below it), or the module itself for a file directly in those two."""
    parts = path.relative_to(root).parts
    return "/".join(parts[:2]) if len(parts) > 2 else "/".join(parts)


def folder_graph(root: Path = ROOT) -> dict[str, set[str]]:
    """Room -> the other rooms its modules import (every import, as ``import_graph``)."""
    modules = package_modules(root)
    rooms = {name: folder_of(path, root) for name, path in modules.items()}
    graph: dict[str, set[str]] = {room: set() for room in rooms.values()}
    for name, targets in import_graph(root).items():
        graph[rooms[name]].update(rooms[t] for t in targets if rooms[t] != rooms[name])
    return graph


def test_no_two_folders_import_each_other() -> None:
    assert cycles(folder_graph()) == []


def test_the_folder_guard_finds_a_loop_through_different_modules(tmp_path: Path) -> None:
    _write(
        tmp_path,
        {
            "services/__init__.py": "",
            "services/api/__init__.py": "",
            "services/api/app.py": "from wakemark.services.ui.pages import bp\n",
            "services/ui/__init__.py": "",
            "services/ui/pages.py": "",
            "services/ui/routes.py": "def f():\n    from wakemark.services.api import app\n",
            "services/cli/deep/x.py": "from wakemark.services.api import app\n",
        },
    )
    assert cycles(import_graph(tmp_path)) == []  # no module loop: a folder loop only
    assert cycles(folder_graph(tmp_path)) == [["services/api", "services/ui"]]


# --- one registration idiom -----------------------------------------------------------------
# Every kind of part is listed in one ``Registry`` (shared/registry.py), here.
REGISTRIES = {
    ("services/agents/__init__.py", "AGENTS"),
    ("services/api/__init__.py", "BLUEPRINTS"),
    ("services/cli/importer.py", "IMPORTERS"),
    ("services/cli/main.py", "COMMANDS"),
    ("shared/jobs/tasks.py", "JOBS"),
    ("shared/retrieval/legs.py", "LEGS"),
}
# Loading code by name, or finding it by scanning folders, is the registry's alone.
DISCOVERY = {"import_module", "iter_modules", "walk_packages", "entry_points"}
DISCOVERY_ALLOWED = {
    "shared/registry.py",
    # Enumerates detect-secrets' own plugins, a library's parts, not wakemark's.
    "shared/secrets.py",
}


def registration_idioms(root: Path = ROOT) -> tuple[set[tuple[str, str]], list[str]]:
    """(every ``NAME = Registry(...)`` / ``NAME: ... = Registry(...)`` at module level, as
    (file, NAME)), and ``file:line call`` of every discovery call outside the registry."""
    registries: set[tuple[str, str]] = set()
    discovery: list[str] = []
    for top in PACKAGE_DIRS:
        for path in sorted((root / top).rglob("*.py")):
            rel = path.relative_to(root).as_posix()
            tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
            for node in tree.body:
                target, value = None, None
                if isinstance(node, ast.Assign) and len(node.targets) == 1:
                    target, value = node.targets[0], node.value
                elif isinstance(node, ast.AnnAssign):
                    target, value = node.target, node.value
                if (
                    isinstance(target, ast.Name)
                    and isinstance(value, ast.Call)
                    and getattr(value.func, "id", None) == "Registry"
                ):
                    registries.add((rel, target.id))
            for call in ast.walk(tree):
                if not isinstance(call, ast.Call):
                    continue
                func = call.func
                name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
                if name in DISCOVERY and rel not in DISCOVERY_ALLOWED:
                    discovery.append(f"{rel}:{call.lineno} {name}")
                if name == "Registry" and not any(
                    call is getattr(n, "value", None) for n in tree.body
                ):
                    registries.add((rel, f"<not at module level, line {call.lineno}>"))
    return registries, discovery


def test_every_kind_of_part_is_registered_one_way() -> None:
    registries, discovery = registration_idioms()
    assert registries == REGISTRIES
    assert discovery == []


def test_every_listed_part_loads() -> None:
    import importlib

    for rel, name in sorted(REGISTRIES):
        module = importlib.import_module(module_name(ROOT / rel, ROOT))
        registry = getattr(module, name)
        parts = list(registry.values())
        assert len(parts) == len(registry) > 0 and all(p is not None for p in parts), rel


def test_the_registry_guard_sees_other_idioms(tmp_path: Path) -> None:
    _write(
        tmp_path,
        {
            "shared/registry.py": "import importlib\nimportlib.import_module('x')\n",
            "shared/parts.py": "PARTS = Registry('part', {})\n",
            "services/a.py": "import pkgutil\nfor m in pkgutil.iter_modules(__path__): pass\n",
            "services/b.py": "def f():\n    return Registry('late', {})\n",
            "services/c.py": "from importlib import import_module\nimport_module('y')\n",
        },
    )
    registries, discovery = registration_idioms(tmp_path)
    assert registries == {
        ("shared/parts.py", "PARTS"),
        ("services/b.py", "<not at module level, line 2>"),
    }
    assert discovery == ["services/a.py:2 iter_modules", "services/c.py:2 import_module"]
