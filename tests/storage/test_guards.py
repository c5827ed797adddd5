"""Structural guards: backend packages stay private to the factory; storage never sees
the privacy tag."""

from __future__ import annotations

import ast
import importlib
import inspect
from pathlib import Path

import pytest

from tests.test_layout import import_statements

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "wakemark"  # the real files; top-level shared/ links here
FACTORY = PACKAGE / "shared" / "storage" / "__init__.py"
SKIP_DIRS = {".venv", ".git", "build", "node_modules", "__pycache__"}


def python_files() -> list[Path]:
    return [
        p
        for p in ROOT.rglob("*.py")
        if not SKIP_DIRS.intersection(p.relative_to(ROOT).parts)
        and "egg-info" not in str(p.relative_to(ROOT))
    ]


def imported_modules(path: Path, root: Path = ROOT) -> set[str]:
    """Absolute names of every module an import statement in ``path`` reaches."""
    parts = path.relative_to(root).with_suffix("").parts[:-1]
    if parts[:1] == ("wakemark",):
        parts = parts[1:]
    names: set[str] = set()
    for base, taken in import_statements(path, ".".join(("wakemark", *parts))):
        names.add(base)
        # ``from wakemark.shared.storage import sqlite`` imports the submodule too.
        names.update(f"{base}.{name}" for name in taken)
    return names


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_only_the_factory_imports_a_backend(backend: str) -> None:
    module = f"wakemark.shared.storage.{backend}"
    inside = PACKAGE / "shared" / "storage" / backend
    # Backend tests (tests/storage/), the backend itself and the benches that take it
    # apart (bench/lexical.py, bench/textindex.py: the lexical leg; bench/move.py: a
    # Postgres move's statements) may import it directly.
    benches = [ROOT / "bench" / name for name in ("lexical.py", "textindex.py", "move.py")]
    allowed = (inside, ROOT / "tests" / "storage", *benches)
    offenders = [
        str(path.relative_to(ROOT))
        for path in python_files()
        if path != FACTORY
        and not any(path.is_relative_to(a) for a in allowed)
        and any(n == module or n.startswith(module + ".") for n in imported_modules(path))
    ]
    assert offenders == []


def test_guard_sees_every_import_form(tmp_path: Path) -> None:
    probe = tmp_path / "shared" / "storage" / "probe.py"
    probe.parent.mkdir(parents=True)
    probe.write_text(
        "from . import sqlite\nfrom .postgres.rows import x\n"
        "import wakemark.shared.storage.sqlite.codec\n"
    )
    names = imported_modules(probe, root=tmp_path)
    assert {"wakemark.shared.storage.sqlite", "wakemark.shared.storage.postgres.rows"} <= names
    assert "wakemark.shared.storage.sqlite.codec" in names


def test_storage_never_mentions_the_privacy_tag() -> None:
    tag = "<" + "private>"
    offenders = [
        str(p.relative_to(ROOT))
        for p in (ROOT / "shared" / "storage").rglob("*")
        if p.is_file() and "__pycache__" not in p.parts and tag in p.read_text(errors="replace")
    ]
    assert offenders == []


STORAGE = ROOT / "shared" / "storage"
BACKENDS = ("sqlite", "postgres")


def concerns() -> list[str]:
    """One per port file of ``shared/storage/ports/``."""
    return sorted(p.stem for p in (STORAGE / "ports").glob("*.py") if p.stem != "__init__")


def methods(path: Path) -> list[ast.FunctionDef]:
    """The methods of the classes in ``path``."""
    return [
        node
        for cls in ast.parse(path.read_text(encoding="utf-8")).body
        if isinstance(cls, ast.ClassDef)
        for node in cls.body
        if isinstance(node, ast.FunctionDef)
    ]


def defined_methods(path: Path) -> set[str]:
    """Public methods of the classes in ``path``."""
    return {node.name for node in methods(path) if not node.name.startswith("_")}


def abstract_methods(path: Path) -> set[str]:
    return {
        node.name
        for node in methods(path)
        if any(ast.unparse(d).endswith("abstractmethod") for d in node.decorator_list)
    }


def test_every_concern_has_a_file_in_each_backend_and_in_the_conformance_suite() -> None:
    assert concerns() == [
        "anchors",
        "audit",
        "events",
        "history",
        "records",
        "search",
        "upkeep",
        "vectors",
    ]
    for backend in BACKENDS:
        missing = [c for c in concerns() if not (STORAGE / backend / f"{c}.py").is_file()]
        assert missing == [], backend
    tests = ROOT / "tests" / "storage"
    assert [c for c in concerns() if not (tests / f"test_{c}.py").is_file()] == []


@pytest.mark.parametrize("backend", BACKENDS)
def test_each_port_is_implemented_in_the_backend_file_of_its_concern(backend: str) -> None:
    declared = {c: abstract_methods(STORAGE / "ports" / f"{c}.py") for c in concerns()}
    defined = {c: defined_methods(STORAGE / backend / f"{c}.py") for c in concerns()}
    for concern in concerns():
        assert declared[concern], concern  # a port declares what its backends implement
        assert sorted(declared[concern] - defined[concern]) == [], concern
        for other in concerns():
            if other != concern:
                strays = declared[other] & defined[concern]
                assert sorted(strays) == [], f"{backend}/{concern}.py implements {other}"


def classes_of(module: str) -> list[type]:
    loaded = importlib.import_module(module)
    return [c for _, c in inspect.getmembers(loaded, inspect.isclass) if c.__module__ == module]


def test_storage_composes_every_port_and_each_backend_every_concern_file() -> None:
    from wakemark.shared.storage import Storage, Tx

    composed = {*Storage.__mro__, *Tx.__mro__}
    for concern in concerns():
        ports = [c for c in classes_of(f"wakemark.shared.storage.ports.{concern}")
                 if getattr(c, "_is_protocol", False)]  # fmt: skip
        assert ports and all(p in composed for p in ports), concern
    for backend in BACKENDS:
        backend_classes = classes_of(f"wakemark.shared.storage.{backend}.storage")
        assert not any(inspect.isabstract(c) for c in backend_classes), backend
        mro = {k for c in backend_classes for k in c.__mro__}
        for concern in concerns():
            found = classes_of(f"wakemark.shared.storage.{backend}.{concern}")
            parts = [c for c in found if not issubclass(c, Exception)]
            assert parts and all(p in mro for p in parts), f"{backend}/{concern}.py"
