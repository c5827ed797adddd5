"""``POST /v1/events`` on both backends: single, batch, idempotency, atomicity, retrieval."""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext

from wakemark.shared.jobs import EMBED, EXTRACT, Job

from .conftest import NS, Api, make_event


def test_single_event_is_stored_and_readable(api: Api) -> None:
    event = make_event()
    res = api.post("/v1/events", json=event)
    assert res.status_code == 201
    assert res.json == {"event_id": event["event_id"], "stored": True}
    got = api.get(f"/v1/events/{event['event_id']}")
    assert got.status_code == 200
    assert got.json["body"] == event["body"]
    assert got.json["namespace"] == NS
    assert "transaction_time" in got.json


def test_an_event_id_that_reads_like_an_access_key_is_stored_as_sent(api: Api) -> None:
    # The id schemathesis found: ``A3TYHG503XH3WFDHX7N7`` inside it has an access key's form.
    event = {**make_event(), "event_id": "VA3TYHG503XH3WFDHX7N749V2M"}
    res = api.post("/v1/events", json={"events": [event]})
    assert res.status_code == 201, res.json
    assert api.get(f"/v1/events/{event['event_id']}").status_code == 200


def test_repeat_event_id_is_stored_false_and_keeps_the_first(api: Api) -> None:
    event = make_event()
    assert api.post("/v1/events", json=event).json["stored"] is True
    first = api.get(f"/v1/events/{event['event_id']}").json
    changed = {**event, "body": {"type": "text", "content": "something else"}}
    res = api.post("/v1/events", json=changed)
    assert res.status_code == 201 and res.json["stored"] is False
    assert api.get(f"/v1/events/{event['event_id']}").json == first


def test_batch_stores_all_and_reports_each(api: Api) -> None:
    events = [make_event("prompt")] + [make_event("tool_use") for _ in range(3)]
    events.append(make_event("session_summary"))
    res = api.post("/v1/events", json={"events": events})
    assert res.status_code == 201
    assert res.json == {"results": [{"event_id": e["event_id"], "stored": True} for e in events]}
    listed = api.get(f"/v1/events?namespace={NS}&session_id=s1&limit=100").json["items"]
    assert {e["event_id"] for e in listed} == {e["event_id"] for e in events}


def test_batch_is_all_or_nothing_and_names_the_bad_item(api: Api) -> None:
    events = [make_event("tool_use") for _ in range(5)]
    events[3]["kind"] = "nonsense"
    res = api.post("/v1/events", json={"events": events})
    assert res.status_code == 422
    assert "index 3" in res.json["message"]
    assert [d["index"] for d in res.json["details"]] == [3]
    assert res.json["details"][0]["loc"] == ["kind"]
    for e in events:
        assert api.get(f"/v1/events/{e['event_id']}").status_code == 404
    assert api.get("/v1/stats").json["events"] == 0


def test_batch_limits(api: Api) -> None:
    assert api.post("/v1/events", json={"events": []}).status_code == 422
    too_many = [make_event("tool_use") for _ in range(501)]
    assert api.post("/v1/events", json={"events": too_many}).status_code == 422
    assert api.post("/v1/events", json={"events": [make_event()], "x": 1}).status_code == 422
    assert api.post("/v1/events", json={"events": "nope"}).status_code == 422
    assert api.get("/v1/stats").json["events"] == 0


def test_batch_of_500_is_accepted(api: Api) -> None:
    events = [make_event("tool_use", session_id=f"s{i % 7}") for i in range(500)]
    res = api.post("/v1/events", json={"events": events})
    assert res.status_code == 201 and len(res.json["results"]) == 500
    assert api.get("/v1/stats").json["events"] == 500


def test_note_and_closed_turn_become_pending_extraction(api: Api) -> None:
    note = make_event("note", body={"type": "text", "content": "remember: use uv"})
    assert api.post("/v1/events", json=note).status_code == 201
    turn = [make_event("prompt", session_id="s2"), make_event("session_summary", session_id="s2")]
    assert api.post("/v1/events", json={"events": turn}).status_code == 201
    stats = api.get(f"/v1/stats?namespace={NS}").json
    assert stats["events"] == 3


def test_private_content_is_redacted_in_every_body_shape(api: Api) -> None:
    bodies = [
        {"type": "text", "content": "key=<private>hunter2</private> ok"},
        {"type": "message", "turns": [{"role": "user", "content": "<PRIVATE>hunter2"}]},
        {
            "type": "json",
            "data": {"a": [{"b": "x<private>hunter2</private>"}], "<private>hunter2</private>": 1},
        },
    ]
    for body in bodies:
        event = make_event("tool_use", body=body)
        assert api.post("/v1/events", json=event).status_code == 201
        got = api.get(f"/v1/events/{event['event_id']}").get_data(as_text=True)
        assert "hunter2" not in got and "[REDACTED]" in got


def test_retrieve_true_adds_retrieval_on_prompts_only(api: Api) -> None:
    res = api.post("/v1/events?retrieve=true", json=make_event("prompt"))
    assert res.status_code == 201
    retrieval = res.json["retrieval"]
    assert set(retrieval) == {"context", "records", "latency_ms", "retrieval_id"}
    assert isinstance(retrieval["context"], str) and isinstance(retrieval["records"], list)
    res = api.post("/v1/events?retrieve=true", json=make_event("tool_use"))
    assert "retrieval" not in res.json
    res = api.post("/v1/events", json=make_event("prompt"))
    assert "retrieval" not in res.json


def test_retrieve_finds_a_manual_memory(api: Api) -> None:
    created = api.post(
        "/v1/memories",
        json={"namespace": NS, "title": "Run tests with pytest -q", "summary": "pytest flags"},
    )
    assert created.status_code == 201
    prompt = make_event("prompt", body={"type": "text", "content": "how do I run pytest?"})
    retrieval = api.post("/v1/events?retrieve=true", json=prompt).json["retrieval"]
    assert created.json["record_id"] in retrieval["records"]
    assert "Run tests with pytest -q" in retrieval["context"]


class RecordingJobs:
    """A stand-in dispatcher that records what the API enqueues (or fails on purpose)."""

    mode = "recording"

    def __init__(self, fail: bool = False) -> None:
        self.fail = fail
        self.extract: list[list[str]] = []
        self.embed: list[list[str]] = []

    def enqueue(self, job: Job, ids: list[str]) -> None:
        if self.fail:
            raise ConnectionError("queue down")
        {EXTRACT: self.extract, EMBED: self.embed}[job].append(ids)

    def queue_depth(self) -> int | None:
        return None

    def serving(self) -> AbstractContextManager[None]:
        return nullcontext()

    def close(self) -> None:
        pass


def _use_jobs(api: Api, jobs: RecordingJobs) -> None:
    runtime = api.client.application.extensions["wakemark"]
    runtime.__dict__["jobs"] = jobs


def test_closed_turns_and_notes_are_enqueued_after_commit(api: Api) -> None:
    jobs = RecordingJobs()
    _use_jobs(api, jobs)
    api.post("/v1/events", json=make_event("prompt", session_id="t"))
    api.post("/v1/events", json=make_event("tool_use", session_id="t"))
    assert jobs.extract == []
    api.post("/v1/events", json=make_event("session_summary", session_id="t"))
    note = make_event("note")
    api.post("/v1/events", json=note)
    assert len(jobs.extract) == 2 and all(len(t) == 1 for t in jobs.extract)
    # Each enqueued turn is durable (readable) by the time it was enqueued.
    turn = api.client.application.extensions["wakemark"].storage.get_turn(jobs.extract[1][0])
    assert turn is not None and [e.event_id for e in turn.events] == [note["event_id"]]
    # A repeat of the note closes nothing new.
    api.post("/v1/events", json=note)
    assert len(jobs.extract) == 2
    rid = api.post("/v1/memories", json={"namespace": NS, "title": "t", "summary": "s"}).json[
        "record_id"
    ]
    assert jobs.embed == [[rid]]


def test_enqueue_failure_never_fails_the_ingest(api: Api) -> None:
    _use_jobs(api, RecordingJobs(fail=True))
    note = make_event("note")
    assert api.post("/v1/events", json=note).status_code == 201
    assert api.get(f"/v1/events/{note['event_id']}").status_code == 200
    res = api.post("/v1/memories", json={"namespace": NS, "title": "t", "summary": "s"})
    assert res.status_code == 201
    assert api.get("/v1/stats").json["pending_extraction"] >= 1


def test_requests_are_marked_in_flight_for_the_job_runner(app, api, runtime) -> None:  # type: ignore[no-untyped-def]
    # Embedded mode defers queued jobs while a request is in flight (shared/jobs/inprocess).
    seen: list[int] = []
    app.before_request(lambda: seen.append(runtime.jobs._serving) and None)
    assert api.get("/health").status_code == 200
    assert seen == [1] and runtime.jobs._serving == 0
