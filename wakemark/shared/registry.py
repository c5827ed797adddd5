"""One way to register a part: each kind of part has one ``Registry`` that lists its
built-ins by name and by reference, in the module that owns the kind.

The kinds and where their registry is: agents (``services/agents/__init__.py``),
importers (``services/cli/importer.py``, the ``--from`` sources), retrieval legs
(``shared/retrieval/legs.py``), CLI commands (``services/cli/main.py``), API blueprints
(``services/api/__init__.py``) and jobs (``shared/jobs/tasks.py``). Adding a part is
writing it and adding its line there; nothing is discovered by scanning folders, and
nothing else lists parts (``tests/test_layout.py`` guards both).

A reference is ``"package.module:attribute"``, or ``"package.module"`` for a part that
is a module. Listing the names imports nothing; a part's module is imported when the
part is first asked for, so a command or a hook pays only for the parts it uses. Entry
points would do the same for third-party parts, but read installed metadata on every
start and go stale in a checkout until it is reinstalled: wakemark has no third-party
parts, so the list is code, read where the kind is defined.

Standard library only, and cheap to import: the CLI's entry point reads its commands
from here before it knows which one runs.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Mapping

TYPE_CHECKING = False  # not ``typing.TYPE_CHECKING``: importing typing costs a hook's start
if TYPE_CHECKING:
    from typing import Any, TypeVar

    T = TypeVar("T")


class Part:
    """A listed part: where it is, and one line about it for listings that must not
    import it."""

    __slots__ = ("ref", "about")

    def __init__(self, ref: str, about: str = "") -> None:
        self.ref = ref
        self.about = about


class Registry(Mapping[str, "T"]):
    """The parts of one kind by name, in the order listed (a read-only mapping)."""

    def __init__(self, kind: str, parts: Mapping[str, str | Part]) -> None:
        self.kind = kind
        self._parts = {
            name: part if isinstance(part, Part) else Part(part) for name, part in parts.items()
        }
        self._loaded: dict[str, T] = {}

    def about(self, name: str) -> str:
        return self._parts[name].about

    def ref(self, name: str) -> str:
        return self._parts[name].ref

    def __getitem__(self, name: str) -> T:
        if name not in self._parts:
            raise KeyError(f"unknown {self.kind} {name!r} (known: {', '.join(self._parts)})")
        if name not in self._loaded:
            module, _, attribute = self._parts[name].ref.partition(":")
            found: Any = importlib.import_module(module)
            self._loaded[name] = getattr(found, attribute) if attribute else found
        return self._loaded[name]

    def __contains__(self, name: object) -> bool:
        return name in self._parts

    def __iter__(self) -> Iterator[str]:
        return iter(self._parts)

    def __len__(self) -> int:
        return len(self._parts)
