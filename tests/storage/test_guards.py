"""Structural guards: backend packages stay private to the factory; storage never sees
the privacy tag."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FACTORY = ROOT / "shared" / "storage" / "__init__.py"
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
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    package = ".".join(("wakemark", *path.relative_to(root).with_suffix("").parts[:-1]))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                parent = ".".join(parts[: len(parts) - node.level + 1])
                base = f"{parent}.{base}" if base else parent
            names.add(base)
            # ``from wakemark.shared.storage import sqlite`` imports the submodule too.
            names.update(f"{base}.{alias.name}" for alias in node.names)
    return names


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_only_the_factory_imports_a_backend(backend: str) -> None:
    module = f"wakemark.shared.storage.{backend}"
    inside = ROOT / "shared" / "storage" / backend
    # Backend tests (tests/storage/) and the backend itself may import it directly.
    allowed = (inside, ROOT / "tests" / "storage")
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
