"""Builders for extraction tests: turns from fixture files or from (kind, body) pairs."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from wakemark.shared.models import StoredEvent, new_ulid
from wakemark.shared.storage import Turn

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
NAMESPACE = "/actor/dev/project/5f1c0a9e2b7d4c31/"
PROJECT = "/home/dev/projects/shop"
T0 = datetime(2025, 11, 3, 9, 0, tzinfo=UTC)


def turn_of(events: Sequence[dict[str, Any]]) -> Turn:
    stored = [StoredEvent.model_validate({**e, "transaction_time": T0}) for e in events]
    return Turn(
        turn_id=new_ulid(),
        namespace=stored[0].namespace if stored else NAMESPACE,
        session_id=stored[0].session_id if stored else "s",
        closed=True,
        extracted=False,
        events=stored,
    )


def fixture_turn(name: str) -> Turn:
    return turn_of(json.loads((FIXTURES / "turns" / f"{name}.json").read_text()))


def event(kind: str, body: dict[str, Any], i: int = 0, **extra: Any) -> dict[str, Any]:
    return {
        "event_id": new_ulid(),
        "session_id": "s-test",
        "actor_id": "dev",
        "namespace": NAMESPACE,
        "kind": kind,
        "body": body,
        "valid_time": (T0 + timedelta(seconds=i)).isoformat(),
        "source": {"surface": "test", "project_path": PROJECT},
        **extra,
    }


def text(content: str) -> dict[str, Any]:
    return {"type": "text", "content": content}


def data(payload: dict[str, Any]) -> dict[str, Any]:
    return {"type": "json", "data": payload}


def make_turn(*items: tuple[str, dict[str, Any]]) -> Turn:
    return turn_of([event(kind, body, i) for i, (kind, body) in enumerate(items)])
