"""``clip_json`` stores what the plain algorithm stores (every limit tried in turn), and
a huge structure of small strings is not rebuilt at each limit."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

from wakemark.services.agents import base
from wakemark.services.agents.base import MAX_JSON_BYTES, MAX_TOOL_TEXT, clip_json


def _reference_clip(value: Any, limit: int) -> Any:
    if isinstance(value, str) and len(value) > limit:
        half = limit // 2
        cut = len(value) - 2 * half
        return f"{value[:half]}\n... [{cut} characters truncated] ...\n{value[-half:]}"
    if isinstance(value, dict):
        return {str(k): _reference_clip(v, limit) for k, v in value.items()}
    if isinstance(value, list):
        return [_reference_clip(v, limit) for v in value]
    return value


def _reference(value: Any) -> Any:
    """Each limit a quarter of the last until the value fits; else a clipped serialization."""
    limit = MAX_TOOL_TEXT
    clipped = _reference_clip(value, limit)
    while len(json.dumps(clipped, default=str)) > MAX_JSON_BYTES and limit > 256:
        limit //= 4
        clipped = _reference_clip(value, limit)
    if len(json.dumps(clipped, default=str)) > MAX_JSON_BYTES:
        return _reference_clip(json.dumps(value, default=str)[: MAX_JSON_BYTES // 2], limit)
    return clipped


def _random_value(rng: random.Random, budget: list[int], depth: int = 0) -> Any:
    # String lengths around each limit, and 257..290: clipped at 256 those grow (the
    # marker is longer than what it cuts), so a harder clip is not always a smaller one.
    # ``budget`` caps the characters of the whole value (about 600k: past the limit).
    kind = rng.choice(["str", "str", "list", "dict", "scalar"] if depth < 4 else ["str"])
    if kind == "str":
        size = min(budget[0], rng.choice([0, 3, 256, 257, 270, 290, 1500, 5000, 20_000, 70_000]))
        budget[0] -= size
        return rng.choice('ab\né"') * size
    if kind == "scalar":
        return rng.choice([None, True, 7, 2.5])
    items = [_random_value(rng, budget, depth + 1) for _ in range(rng.randint(0, 40))]
    if kind == "list":
        return items
    return {f"k{i}": v for i, v in enumerate(items)}


CASES: dict[str, Any] = {
    "small": {"command": "pytest -q", "timeout": 60},
    "none": None,
    "one big string": {"stdout": "x" * 200_000},
    "big strings, fit at 16384": {"files": ["x" * 100_000] * 5},
    "big escaped strings": {"a": "\n" * 150_000, "b": "é" * 100_000},
    "structure of small strings": [{"k": "v"}] * 100_000,
    "structure of empty objects": {"a": [{}] * 480_000},
    "structure and a long string": {"a": [{}] * 100_000, "b": "x" * 300_000},
    "structure that fits once the strings are clipped": {
        "a": [{}] * 50_000,
        "b": ["x" * 100_000] * 3,
    },
    "strings that grow at 256, fit at a larger limit": ["y" * 270] * 930 + ["x" * 70_000],
    "strings that grow at 256, fit at no limit": ["y" * 270] * 1000,
    "non-string keys": {1: "a", None: "b" * 300_000, 2.5: ["c" * 300] * 900},
}
CASES.update(
    {f"random {seed}": _random_value(random.Random(seed), [600_000]) for seed in range(60)}
)


@pytest.mark.parametrize("name", list(CASES))
def test_clip_json_stores_what_trying_every_limit_stores(name: str) -> None:
    value = CASES[name]
    clipped = clip_json(value)
    assert clipped == _reference(value)
    assert json.dumps(clipped) == json.dumps(_reference(value))  # key order, types
    assert len(json.dumps(clipped, default=str)) <= MAX_JSON_BYTES


def test_a_huge_structure_of_small_strings_is_clipped_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    limits: list[int] = []
    clip_text = base.clip_text

    def recording(value: Any, limit: int = MAX_TOOL_TEXT) -> Any:
        limits.append(limit)
        return clip_text(value, limit)

    monkeypatch.setattr(base, "clip_text", recording)
    stored = clip_json({"a": [{"k": "v"}] * 100_000, "b": "x" * 300_000})
    # Only the fallback's clip of the serialization: no limit was tried on the structure.
    assert limits == [256]
    assert isinstance(stored, str) and stored.startswith('{"a": [{"k": "v"}, ')
