"""`wakemark scrub` rewrites credentials stored before the scan existed (both backends)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.test_secrets import CREDENTIALS
from wakemark.services.cli.main import main
from wakemark.shared.config import Settings
from wakemark.shared.models import Event, MemoryRecord, new_ulid, utcnow
from wakemark.shared.retrieval.lexical import search_lexical
from wakemark.shared.runtime import Runtime

NS = "/actor/alice/project/p/"
GHP = next(c for c in CREDENTIALS if c[0] == "github-token")
SLACK = next(c for c in CREDENTIALS if c[0] == "slack-token")


def _event(text: str) -> Event:
    return Event(
        event_id=new_ulid(), session_id="s", actor_id="alice", namespace=NS, kind="tool_use",
        body={"type": "json", "data": {"output": text}}, valid_time=utcnow(),
        source={"surface": "test"},
    )  # fmt: skip


@pytest.fixture
def old_data(backend_settings: Settings, onnx_model_path: Path, monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    """Rows written straight to storage, as if stored before secret scanning existed."""
    cfg = backend_settings.replace(embedder="onnx", model_path=onnx_model_path)
    monkeypatch.setenv("WAKEMARK_HOME", str(cfg.home))
    monkeypatch.setenv("WAKEMARK_EMBEDDER", "onnx")
    monkeypatch.setenv("WAKEMARK_MODEL_PATH", str(onnx_model_path))
    if cfg.database_url:
        monkeypatch.setenv("WAKEMARK_DATABASE_URL", cfg.database_url)
    rt = Runtime.build(cfg)
    leaky, clean = _event(f"$ cat .env\n{GHP[2]}"), _event("84 passed in 3.2s")
    rt.storage.put_events([leaky, clean])
    secret_record = MemoryRecord(
        namespace=NS, title="Slack bot setup", summary=SLACK[2], facts=["rotated monthly"]
    )
    plain = MemoryRecord(namespace=NS, title="Cart rounding", summary="ROUND_HALF_EVEN")
    for r in (secret_record, plain):
        rt.storage.put_memory_record(r)
        rt.storage.put_embedding(r.record_id, rt.embedder.embed([r.embedding_text()])[0])
    yield rt, leaky, clean, secret_record, plain
    rt.close()


def test_dry_run_reports_and_changes_nothing(
    old_data: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    rt, leaky, _, secret_record, _ = old_data
    assert main(["scrub", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "would rewrite 1 event(s) and 1 record(s)" in out
    assert "github-token 1" in out and "slack-token 1" in out
    assert GHP[1] in rt.storage.get_event(leaky.event_id).body_json()
    assert rt.storage.has_embedding(secret_record.record_id)


def test_scrub_rewrites_reindexes_and_reembeds(
    old_data: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    rt, leaky, clean, secret_record, plain = old_data
    before_plain = rt.storage.get_event(clean.event_id)
    assert main(["scrub"]) == 0
    assert "rewrote 1 event(s) and 1 record(s)" in capsys.readouterr().out
    stored = rt.storage.get_event(leaky.event_id)
    assert GHP[1] not in stored.body_json() and "[REDACTED:github-token]" in stored.body_json()
    assert rt.storage.get_event(clean.event_id) == before_plain
    record = rt.storage.get_memory_record(secret_record.record_id)
    assert SLACK[1] not in record.summary and "[REDACTED:slack-token]" in record.summary
    # The full-text entry follows, and the record is embedded again from its new text.
    assert search_lexical(rt.storage, NS, SLACK[1].split("-")[-1], 10) == []
    assert [h.record.record_id for h in search_lexical(rt.storage, NS, "slack", 10)] == [
        secret_record.record_id
    ]
    assert rt.storage.has_embedding(secret_record.record_id)
    assert rt.storage.stats()["pending_embedding"] == 0
    assert rt.storage.get_memory_record(plain.record_id) == plain
    # A second run finds nothing left.
    assert main(["scrub", "--dry-run"]) == 0
    assert (
        "would rewrite 0 event(s) and 0 record(s); redactions: nothing" in capsys.readouterr().out
    )


def test_every_client_string_of_events_and_records_is_rescanned(
    old_data: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    rt = old_data[0]
    ghp, slack = GHP[1], SLACK[1]
    # A token in every field of an event a client writes: session, actor and source.
    leaky = Event(
        event_id=new_ulid(), session_id=f"sess-{ghp}", actor_id=f"bot {slack}", namespace=NS,
        kind="prompt", body={"type": "text", "content": "deploy it"}, valid_time=utcnow(),
        source={"surface": "test", "version": ghp, "project_path": f"/srv/{ghp}/app"},
    )  # fmt: skip
    later = leaky.model_copy(update={"event_id": new_ulid(), "kind": "note"})
    rt.storage.put_events([leaky, later])
    record = MemoryRecord(
        namespace=NS, title="Deploy notes", concepts=[f"key {ghp}"],
        files_touched=[f"/srv/{slack}/deploy.sh"],
    )  # fmt: skip
    rt.storage.put_memory_record(record)
    assert main(["scrub"]) == 0
    assert "rewrote 3 event(s) and 2 record(s)" in capsys.readouterr().out
    session = "sess-[REDACTED:github-token]"
    for ev in (leaky, later):
        stored = rt.storage.get_event(ev.event_id)
        assert stored is not None
        assert ghp not in stored.model_dump_json() and slack not in stored.model_dump_json()
        assert stored.session_id == session and stored.actor_id == "bot [REDACTED:slack-token]"
        assert stored.source.version == "[REDACTED:github-token]"
        assert stored.source.project_path == "/srv/[REDACTED:github-token]/app"
    # The session moved whole: its turn went with its events.
    turns = {rt.storage.get_event(e.event_id).turn_id for e in (leaky, later)}  # type: ignore[union-attr]
    assert {t.turn_id for t in rt.storage.session_turns(NS, session)} == turns
    assert rt.storage.session_turns(NS, f"sess-{ghp}") == []
    fixed = rt.storage.get_memory_record(record.record_id)
    assert fixed is not None and fixed.concepts == ["key [REDACTED:github-token]"]
    assert fixed.files_touched == ["/srv/[REDACTED:slack-token]/deploy.sh"]
    assert rt.storage.has_embedding(record.record_id)
