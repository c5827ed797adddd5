"""The MCP tools' behaviour: each turns validated arguments into API calls and a result.

A tool returns ``Output(text, data)``: compact readable text for the model and the same
facts as structured data. Failures are raised as ``ToolFailure`` with a message an agent
can act on; the server turns them into ``isError`` results.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from wakemark.services.mcp.client import ApiClient, ApiError, code_label, record_path

SUMMARY_LINE = 160


class ToolFailure(Exception):
    """A tool could not do what was asked; the message says why and what to do."""


@dataclass(frozen=True)
class Scope:
    """Where the tools read and write: this project's namespace, or all of the actor's.

    The API token may reach further (the bootstrap token reaches everything), so a tool
    given a record id checks the record's namespace itself: reads within the actor's
    projects (what ``search`` with ``all_projects`` shows), changes within this project.
    A record outside is reported as missing, like one that does not exist."""

    namespace: str
    actor_prefix: str

    def covers(self, record: dict[str, Any], change: bool = False) -> bool:
        allowed = self.namespace if change else self.actor_prefix
        return str(record.get("namespace") or "").startswith(allowed)


@dataclass(frozen=True)
class Output:
    text: str
    data: dict[str, Any]


def search(api: ApiClient, scope: Scope, args: dict[str, Any]) -> Output:
    namespace = scope.actor_prefix if args.get("all_projects") else scope.namespace
    result = api.get(
        "/v1/search",
        namespace=namespace,
        q=args["query"],
        limit=args.get("limit", 10),
        type=args.get("type"),
        days=args.get("days"),
        min_relevance=args.get("min_relevance"),
    )
    hits = [
        {
            **_compact(item["record"]),
            "match_source": item["match_source"],
            "relevance": item.get("relevance"),
            "code": code_label(item.get("code")),  # "changed since: …", "gone: …" or ""
        }
        for item in result["items"]
    ]
    where = "all projects" if args.get("all_projects") else "this project"
    if not hits:
        text = f"No memories match {args['query']!r} in {where}."
    else:
        lines = [f"{len(hits)} memories for {args['query']!r} in {where}:"]
        lines += [
            f"- {_line(h)} ({h['match_source']}, relevance {h['relevance']}"
            + (f"; {h['code']})" if h["code"] else ")")
            for h in hits
        ]
        lines.append("Use get_records(ids) for details, timeline(record_id) for context.")
        text = "\n".join(lines)
    data = {"namespace": namespace, "items": hits, "degraded": bool(result.get("degraded"))}
    return Output(text, data)


def timeline(api: ApiClient, scope: Scope, args: dict[str, Any]) -> Output:
    record_id = args["record_id"]
    _record_in_scope(api, scope, record_id)
    result = _or_missing(
        record_id,
        lambda: api.get(
            "/v1/timeline",
            record_id=record_id,
            before=args.get("before", 3),
            after=args.get("after", 3),
        ),
    )
    items = [_compact(r) for r in result["items"] if scope.covers(r)]
    lines = [f"Timeline around {record_id} (oldest first):"]
    lines += [("> " if i["id"] == record_id else "- ") + _line(i) for i in items]
    return Output("\n".join(lines), {"record_id": record_id, "items": items})


def get_records(api: ApiClient, scope: Scope, args: dict[str, Any]) -> Output:
    """Each record with its history (older versions, newest first). An id that a newer
    record superseded answers its subject's current record, with the whole chain."""
    records, missing = [], []
    for record_id in args["ids"]:
        try:
            history = api.request("GET", record_path(record_id) + "/history")
            record = api.request("GET", record_path(history["current_id"]))
        except ApiError as exc:
            if exc.status != 404:
                raise
            record = None
        if record is not None and scope.covers(record):
            records.append({**record, "history": history["items"]})
        else:
            missing.append(record_id)
    codes = _code_states(api, scope, [r["record_id"] for r in records])
    records = [{**r, "code": code_label(codes.get(r["record_id"]))} for r in records]
    blocks = [_full(r) for r in records]
    if missing:
        blocks.append("Not found (deleted or never existed): " + ", ".join(missing))
    return Output("\n\n".join(blocks), {"records": records, "not_found": missing})


def _code_states(api: ApiClient, scope: Scope, ids: list[str]) -> dict[str, Any]:
    """The records' code states as the search's hits carry them (``/v1/memories/code``):
    none from a server that does not read this client's files, or when the check fails
    (the records are worth having without it)."""
    if not ids:
        return {}
    try:
        found = api.get("/v1/memories/code", ids=",".join(ids), namespace=scope.actor_prefix)
    except ApiError:
        return {}
    return dict(found.get("items") or {})


def remember(api: ApiClient, scope: Scope, args: dict[str, Any]) -> Output:
    body = {
        "namespace": scope.namespace,
        "title": args["title"],
        "summary": args["summary"],
        "facts": args.get("facts", []),
        "concepts": args.get("concepts", []),
        "files_touched": args.get("files", []),
        "observation_type": args.get("type", "note"),
    }
    record_id = api.request("POST", "/v1/memories", body)["record_id"]
    text = f"Remembered {record_id}: {args['title']}"
    return Output(text, {"record_id": record_id, "namespace": scope.namespace})


FORGET_MATCHES = 20  # a query forgets at most its best 20 hits


def forget(api: ApiClient, scope: Scope, args: dict[str, Any]) -> Output:
    if "query" not in args:
        record_id = args["record_id"]
        _record_in_scope(api, scope, record_id, change=True)
        _or_missing(record_id, lambda: api.request("DELETE", record_path(record_id)))
        return Output(f"Forgot {record_id}.", {"record_id": record_id, "deleted": True})
    found = api.get("/v1/search", namespace=scope.namespace, q=args["query"], limit=FORGET_MATCHES)
    hits = [_compact(item["record"]) for item in found["items"]]
    ids = [h["id"] for h in hits]
    if not args.get("confirm"):
        if not hits:
            return Output(f"No memories match {args['query']!r}.", {"matches": [], "deleted": 0})
        lines = [f"{len(hits)} memories match {args['query']!r}; nothing was deleted:"]
        lines += [f"- {_line(h)}" for h in hits]
        lines.append("Call forget again with the same query and confirm=true to delete them.")
        return Output("\n".join(lines), {"matches": hits, "deleted": 0})
    done = api.request("POST", "/v1/memories/delete", {"ids": ids}) if ids else {"records": 0}
    deleted = int(done.get("records") or 0)
    return Output(f"Forgot {deleted} memories matching {args['query']!r}.",
                  {"matches": hits, "deleted": deleted})  # fmt: skip


def pin(api: ApiClient, scope: Scope, args: dict[str, Any]) -> Output:
    record_id, pinned = args["record_id"], args["pinned"]
    _record_in_scope(api, scope, record_id, change=True)
    record = _or_missing(
        record_id, lambda: api.request("PATCH", record_path(record_id), {"pinned": pinned})
    )
    verb = "Pinned" if record["pinned"] else "Unpinned"
    return Output(
        f"{verb} {record_id}: {record['title']}",
        {"record_id": record_id, "pinned": record["pinned"]},
    )


HANDLERS: dict[str, Callable[[ApiClient, Scope, dict[str, Any]], Output]] = {
    "search": search,
    "timeline": timeline,
    "get_records": get_records,
    "remember": remember,
    "forget": forget,
    "pin": pin,
}


def _or_missing(record_id: str, call: Callable[[], Any]) -> Any:
    try:
        return call()
    except ApiError as exc:
        if exc.status == 404:
            raise _missing(record_id) from None
        raise


def _missing(record_id: str) -> ToolFailure:
    return ToolFailure(
        f"no memory record {record_id} (deleted or never existed) — find current ids with `search`"
    )


def _record_in_scope(api: ApiClient, scope: Scope, record_id: str, change: bool = False) -> None:
    record = _or_missing(record_id, lambda: api.request("GET", record_path(record_id)))
    if not scope.covers(record, change):
        raise _missing(record_id)


def _compact(record: dict[str, Any]) -> dict[str, Any]:
    summary = " ".join(str(record.get("summary") or "").split())
    if len(summary) > SUMMARY_LINE:
        summary = summary[: SUMMARY_LINE - 1].rstrip() + "…"
    return {
        "id": record["record_id"],
        "title": record["title"],
        "summary": summary,
        "type": record["observation_type"],
        "date": str(record["created_at"])[:10],
        "pinned": bool(record.get("pinned")),
    }


def _line(hit: dict[str, Any]) -> str:
    pin_mark = " pinned" if hit["pinned"] else ""
    line = f"{hit['id']} [{hit['date']} {hit['type']}{pin_mark}] {hit['title']}"
    return line + (f" — {hit['summary']}" if hit["summary"] else "")


def _full(record: dict[str, Any]) -> str:
    lines = [
        f"## {record['title']}",
        f"id: {record['record_id']} | type: {record['observation_type']} | "
        f"created: {record['created_at']} | pinned: {str(record['pinned']).lower()}",
    ]
    if record.get("summary"):
        lines += ["", record["summary"]]
    if record.get("facts"):
        lines += ["", "Facts:"] + [f"- {fact}" for fact in record["facts"]]
    if record.get("concepts"):
        lines.append("Concepts: " + ", ".join(record["concepts"]))
    if record.get("files_touched"):
        lines.append("Files: " + ", ".join(record["files_touched"]))
    if record.get("code"):
        lines.append(f"Code: {record['code']}")  # it changed or went since capture
    sources = record.get("source_event_ids") or []
    lines.append(
        f"Provenance: {record['strategy']} extraction ({record['quality']}), "
        f"namespace {record['namespace']}, "
        + (f"source events {', '.join(sources)}" if sources else "no source events")
    )
    for version in record.get("history") or []:
        old = version["record"]
        lines.append(
            f"Superseded {str(version['superseded_at'])[:10]}: {old['record_id']} "
            f"{old['title']}" + (f" — {old['summary']}" if old.get("summary") else "")
        )
    return "\n".join(lines)
