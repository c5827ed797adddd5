"""The cached codemem-dev builds that several benches open."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest

from bench import _codemem


def test_benches_started_together_build_the_cache_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_codemem, "CACHE", tmp_path)
    monkeypatch.setattr(_codemem, "_fingerprint", lambda project: "f")
    builds: list[Path] = []

    def build(project: str, settings: Any) -> None:
        builds.append(settings.home)
        settings.home.mkdir(parents=True)
        time.sleep(0.2)  # long enough for the other bench to look for the cache meanwhile
        (settings.home / "db").write_text(project)

    monkeypatch.setattr(_codemem, "build", build)
    homes: list[Path] = []
    benches = [
        threading.Thread(target=lambda: homes.append(_codemem.cached("werkzeug"))) for _ in range(2)
    ]
    for bench in benches:
        bench.start()
    for bench in benches:
        bench.join()
    assert builds == [tmp_path / "werkzeug-f"]
    assert homes == [tmp_path / "werkzeug-f"] * 2
    assert (homes[0] / "db").read_text() == "werkzeug"
