"""The viewer in real Chromium against a real server: the walk a user takes, the token's
hand-off (one-time code, a new token pasted into an open tab), stored XSS, and the headers
every /ui response carries."""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from wakemark.services.ui import handoff
from wakemark.services.ui.pages import CSP
from wakemark.shared import tokens
from wakemark.shared.models import Event, MemoryRecord, new_ulid
from wakemark.shared.runtime import Runtime

from .conftest import Server, shot

pytestmark = pytest.mark.browser

NS = "/actor/dev/project/shop/"
PATH = "/home/dev/projects/shop"
PROMPT = "the checkout total is wrong when a coupon is applied"


def _event(kind: str, body: dict[str, Any], at: datetime, session: str = "s1") -> Event:
    return Event.model_validate(
        {
            "event_id": new_ulid(),
            "session_id": session,
            "actor_id": "dev",
            "namespace": NS,
            "kind": kind,
            "body": body,
            "valid_time": at.isoformat(),
            "source": {"surface": "claude-code", "project_path": PATH},
        }
    )


def _turn(rt: Runtime, prompt: str, title: str, **record: Any) -> MemoryRecord:
    """A stored turn (prompt, a shell command, a file edit, the answer) and its record."""
    at = datetime.now(UTC) - timedelta(minutes=5)
    events = [
        _event("prompt", {"type": "text", "content": prompt}, at),
        _event(
            "tool_use",
            {
                "type": "json",
                "data": {
                    "tool_name": "Bash",
                    "tool_input": {"command": "pytest -q tests/test_cart.py"},
                    "tool_response": {"stdout": "1 failed", "exit_code": 1},
                },
            },
            at + timedelta(seconds=10),
        ),
        _event(
            "tool_use",
            {
                "type": "json",
                "data": {
                    "tool_name": "Edit",
                    "tool_input": {"file_path": record.pop("edited", f"{PATH}/src/cart.py")},
                },
            },
            at + timedelta(seconds=20),
        ),
        _event(
            "session_summary",
            {"type": "text", "content": record.pop("answer", "Applied the coupon once.")},
            at + timedelta(seconds=30),
        ),
    ]
    results = rt.storage.put_events(events)
    rec = MemoryRecord(
        namespace=NS,
        title=title,
        source_event_ids=[e.event_id for e in events],
        observation_type="bugfix",
        created_at=at + timedelta(seconds=31),
        **record,
    )
    with rt.storage.transaction() as tx:
        tx.put_memory_record(rec)
        tx.mark_turn_extracted(results[0].turn_id or "", [rec.record_id])
    return rec


def _record(rt: Runtime, title: str, minutes: int, **kw: Any) -> MemoryRecord:
    rec = MemoryRecord(
        namespace=NS,
        title=title,
        created_at=datetime.now(UTC) - timedelta(minutes=minutes),
        **kw,
    )
    rt.storage.put_memory_record(rec)
    return rec


def _watch(page: Any) -> dict[str, list[Any]]:
    seen: dict[str, list[Any]] = {"dialogs": [], "errors": [], "ui": []}

    def on_dialog(dialog: Any) -> None:
        seen["dialogs"].append(dialog.message)
        dialog.dismiss()

    page.on("dialog", on_dialog)

    def on_console(msg: Any) -> None:
        if msg.type == "error":
            seen["errors"].append(msg.text)

    page.on("console", on_console)
    page.on("pageerror", lambda exc: seen["errors"].append(str(exc)))
    page.on("response", lambda r: "/ui" in r.url and seen["ui"].append(r))
    return seen


def _open(page: Any, server: Server) -> None:
    page.goto(f"{server.base}/ui#token={server.token}")
    page.wait_for_selector("tr[data-namespace]")


def test_a_user_walks_through_the_viewer(
    server: Server, page: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="werkzeug")
    rt = server.runtime
    for i in range(3):
        _record(rt, f"Staging deploys need the VPN ({i})", minutes=60 + i, summary="ops note")
    fix = _turn(
        rt,
        PROMPT,
        "Coupon discount was applied twice in Cart.total",
        summary="Cart.total subtracted the coupon from the subtotal and again from the total.",
        facts=["pytest -q tests/test_cart.py fails before the fix", "fixed in src/cart.py"],
        files_touched=["src/cart.py"],
    )
    rt.storage.put_embedding(fix.record_id, np.ones(384, dtype=np.float32))
    seen = _watch(page)

    _open(page, server)
    # The token left the address bar at once and never reached the server.
    assert page.evaluate("location.hash") == "#/projects"
    assert server.token not in page.url
    assert page.evaluate("sessionStorage.getItem('wakemark.token')") == server.token
    row = page.locator(f"tr[data-namespace='{NS}']")
    assert PATH in row.inner_text() and "shop" in row.inner_text()
    # records, events, pending (nothing extracts here; 3 of the 4 records await embedding)
    assert [c.strip() for c in row.locator("td.num").all_inner_texts()] == ["4", "4", "3"]
    shot(page, "projects", tmp_path)

    row.get_by_role("button", name="Open").click()
    page.wait_for_selector(f"tr[data-record='{fix.record_id}']")
    live = _record(rt, "Arrived while the feed was open", minutes=0)
    page.wait_for_selector(f"tr[data-record='{live.record_id}']", timeout=4000)  # polls 2 s
    assert page.locator("tbody tr[data-record]").first.get_attribute("data-record") == (
        live.record_id
    )
    shot(page, "feed", tmp_path)

    page.click("a[href='#/search']")
    page.fill("#q", "coupon applied twice")
    page.press("#q", "Enter")
    hit = page.locator(f"#results tr[data-record='{fix.record_id}']")
    hit.wait_for()
    assert hit.locator(".badge").inner_text() in ("fts", "hybrid", "semantic")
    shot(page, "search", tmp_path)

    hit.get_by_role("link").click()
    page.wait_for_selector("#record-title")
    assert page.inner_text("#record-title") == fix.title
    turn = page.locator(".turn")
    assert turn.locator("pre.prompt").inner_text() == PROMPT
    assert "pytest -q tests/test_cart.py" in turn.locator("code").inner_text()
    assert "edited /home/dev/projects/shop/src/cart.py" in turn.inner_text()
    assert turn.locator("pre.answer").inner_text() == "Applied the coupon once."
    shot(page, "record", tmp_path)

    page.click("a[href='#/context']")
    page.wait_for_selector("#index")
    assert fix.title in page.inner_text("#index")
    page.fill("#prompt", "the coupon discount is wrong again")
    page.get_by_role("button", name="Preview").click()
    candidate = page.locator(f"#prompt-preview tr[data-record='{fix.record_id}']")
    candidate.wait_for()
    assert "injected" in candidate.inner_text()
    assert fix.title in page.inner_text("#prompt-preview pre.block")
    shot(page, "context", tmp_path)

    page.goto(f"{server.base}/ui#/record/{fix.record_id}")
    page.click("#pin")
    page.wait_for_selector("#pin:text('Unpin')")
    assert rt.storage.get_memory_record(fix.record_id).pinned is True  # type: ignore[union-attr]

    page.click("#delete")
    dialog = page.locator("#confirm")
    dialog.wait_for()
    text = dialog.inner_text()
    for line in (
        f"1 memory record: {fix.record_id} “{fix.title}”",
        "1 vector",
        "1 full-text entry",
        "Source events are kept",
    ):
        assert line in text, text
    shot(page, "delete", tmp_path)
    page.click("#confirm-ok")
    # (not wait_for_function: its polling evaluates strings, which this CSP forbids)
    page.wait_for_selector("#live")
    assert page.evaluate("location.hash") == "#/feed"
    page.wait_for_selector(f"tr[data-record='{live.record_id}']")
    assert page.locator(f"tr[data-record='{fix.record_id}']").count() == 0
    assert rt.storage.get_memory_record(fix.record_id) is None
    assert rt.storage.get_event(fix.source_event_ids[0]) is not None  # not asked to go

    page.click("a[href='#/search']")
    page.fill("#q", "coupon applied twice")
    page.press("#q", "Enter")
    page.wait_for_selector("#results p")
    assert page.locator(f"#results tr[data-record='{fix.record_id}']").count() == 0
    page.click("a[href='#/context']")
    page.wait_for_selector("#index")
    assert fix.title not in page.inner_text("#index")

    page.click("a[href='#/audit']")
    page.wait_for_selector("#audit")
    # The preview stored nothing, so the audit (prompt-time retrievals) is still empty.
    assert "No prompt-time retrieval recorded yet" in page.inner_text("#audit")

    assert seen["dialogs"] == [] and seen["errors"] == []
    assert seen["ui"] and all(r.headers["content-security-policy"] == CSP for r in seen["ui"])
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert "/ui" in logged and server.token not in logged


def _prompt(rt: Runtime, text: str, session: str) -> dict[str, Any]:
    """A prompt as the hook sends it: stored, then retrieved for (its audit row written)."""
    event = _event("prompt", {"type": "text", "content": text}, datetime.now(UTC), session)
    rt.storage.put_events([event])
    out = rt.retriever.for_prompt(NS, event)
    rt.retriever.flush_audit()
    return out


def test_health_and_the_audit_per_session(server: Server, page: Any, tmp_path: Path) -> None:
    rt = server.runtime
    fix = _turn(rt, PROMPT, "Coupon discount was applied twice in Cart.total",
                summary="Cart.total subtracted the coupon twice.")  # fmt: skip
    _record(rt, "Staging deploys need the VPN", minutes=30, summary="ops note")
    first = _prompt(rt, "the coupon total is wrong again", "morning")
    # Asked about again in the same session, it ranks first by a wide margin, so it comes
    # back (inject.REPEAT_MARGIN; without the margin it would be skipped as "seen").
    again = _prompt(rt, "why is the coupon applied twice in the cart total", "morning")
    _prompt(rt, "hello there", "afternoon")  # nothing relevant: no block
    assert fix.record_id in first.records and again.records == [fix.record_id]
    seen = _watch(page)
    _open(page, server)
    page.get_by_role("button", name="Open").click()
    page.wait_for_selector("#live")

    page.click("a[href='#/audit']")
    newest = page.locator("details.session[data-session='afternoon']")
    newest.wait_for()
    sessions = page.locator("details.session")
    order = [sessions.nth(i).get_attribute("data-session") for i in range(2)]
    assert order == ["afternoon", "morning"]
    assert "1 prompt, 0 injected" in newest.locator("summary").inner_text()
    morning = page.locator("details.session[data-session='morning']")
    assert "2 prompts, 2 injected, 2 records" in morning.locator("summary").inner_text()
    morning.locator("summary").click()
    rows = morning.locator("tr[data-retrieval]")
    rows.first.wait_for()
    assert rows.count() == 2
    audit = rt.storage.list_retrievals(NS, "morning")  # newest first, as the rows
    assert [rows.nth(i).get_attribute("data-retrieval") for i in range(2)] == [
        r.retrieval_id for r in audit
    ]
    assert all("inject" in rows.nth(i).inner_text() for i in range(2))
    injected = rows.nth(1).locator(f"[data-record='{fix.record_id}']")
    assert fix.title in injected.inner_text() and "relevance" in injected.inner_text()
    assert rows.nth(1).locator("td.num").first.inner_text() == str(audit[1].bytes)
    shot(page, "audit", tmp_path)

    page.click("a[href='#/health']")
    page.wait_for_selector("#gate")
    gate = page.inner_text("#gate")
    assert "prompts seen\n3" in gate and "2 (66.7 %)" in gate, gate
    assert "off" in page.inner_text("#llm")
    assert "Stop hooks without a final answer" in page.inner_text("#capture")
    assert "bytes" in page.inner_text("#database")
    shot(page, "health", tmp_path, full_page=True)
    assert seen["dialogs"] == [] and seen["errors"] == []


def test_the_feed_pages_by_key(server: Server, page: Any) -> None:
    rt = server.runtime
    records = [_record(rt, f"note {i:03d}", minutes=i) for i in range(120)]  # newest first
    _open(page, server)
    page.get_by_role("button", name="Open").click()
    page.wait_for_selector(f"tr[data-record='{records[0].record_id}']")
    page.click("#older")
    page.wait_for_selector(f"tr[data-record='{records[50].record_id}']")
    page.click("#older")
    page.wait_for_selector(f"tr[data-record='{records[119].record_id}']")
    assert page.inner_text("#page-number") == "page 3" and page.locator("#older").is_disabled()
    assert page.locator("tbody tr[data-record]").count() == 20
    page.click("#newer")
    page.wait_for_selector(f"tr[data-record='{records[50].record_id}']")
    assert page.inner_text("#page-number") == "page 2"


HOSTILE = '<img src=x onerror="window.__pwned=1;alert(1)">'


def test_stored_markup_renders_as_inert_text(server: Server, page: Any) -> None:
    rt = server.runtime
    rlo = "\u202e"  # right-to-left override
    evil = _turn(
        rt,
        "<script>window.__pwned=2;alert(2)</script> please",
        HOSTILE,
        summary="<script>window.__pwned=3;alert(3)</script><iframe src=javascript:alert(4)>",
        facts=[
            '<a href="javascript:alert(5)">click</a>',
            "javascript:alert(6)",
            f"{rlo}txt.exe",
        ],
        files_touched=["<img src=x onerror=alert(7)>.py", f"invoice{rlo}fdp.exe"],
        concepts=["<b onmouseover=alert(8)>x</b>"],
        edited=f"/tmp/<svg onload=alert(9)>{rlo}.py",
        answer="<img src=x onerror=alert(10)>",
    )
    seen = _watch(page)
    _open(page, server)
    page.get_by_role("button", name="Open").click()
    page.wait_for_selector(f"tr[data-record='{evil.record_id}']")
    page.goto(f"{server.base}/ui#/record/{evil.record_id}")
    page.wait_for_selector(".turn pre.answer")
    assert page.inner_text("#record-title") == HOSTILE
    assert page.inner_text(".turn pre.answer") == "<img src=x onerror=alert(10)>"
    assert f"invoice{rlo}fdp.exe" in page.inner_text("dl")
    page.click("#delete")  # the confirmation names the record: its title as text too
    page.locator("#confirm").wait_for()
    assert HOSTILE in page.inner_text("#confirm")
    page.click("#confirm-cancel")
    assert rt.storage.get_memory_record(evil.record_id) is not None
    page.click("a[href='#/search']")
    page.fill("#q", "img onerror")
    page.press("#q", "Enter")
    page.wait_for_selector(f"#results tr[data-record='{evil.record_id}']")
    page.click("a[href='#/context']")
    page.fill("#prompt", "script img onerror")
    page.get_by_role("button", name="Preview").click()
    page.wait_for_selector(f"#prompt-preview tr[data-record='{evil.record_id}']")
    assert "<script>" in page.inner_text("#prompt-preview pre.block")

    injected = page.evaluate(
        """() => ({
            pwned: window.__pwned === undefined ? null : window.__pwned,
            nodes: document.querySelectorAll(
                'body img, body script, body iframe, body svg, body b').length,
            js: document.querySelectorAll('[href^="javascript"], [src^="javascript"]').length,
            handlers: [...document.querySelectorAll('body *')].filter(
                (el) => [...el.attributes].some((a) => a.name.startsWith('on'))).length,
        })"""
    )
    assert injected == {"pwned": None, "nodes": 0, "js": 0, "handlers": 0}
    assert seen["dialogs"] == []
    assert seen["errors"] == []


def test_the_code_wakemark_ui_opens_is_traded_for_the_token_once(server: Server, page: Any) -> None:
    _record(server.runtime, "Staging deploys need the VPN", minutes=5)
    seen = _watch(page)
    code = handoff.issue(server.runtime.settings)  # what `wakemark ui` puts in the address
    page.goto(f"{server.base}/ui#code={code}")
    page.wait_for_selector(f"tr[data-namespace='{NS}']")
    assert page.evaluate("location.hash") == "#/projects" and code not in page.url
    assert page.evaluate("sessionStorage.getItem('wakemark.token')") == server.token
    assert seen["dialogs"] == [] and seen["errors"] == []
    # Spent: the same address in another tab gets no token, and says why.
    other = page.context.new_page()
    other.goto(f"{server.base}/ui#code={code}")
    refused = other.wait_for_selector("#handoff-error")
    assert "run `wakemark ui` again" in refused.inner_text()
    assert other.evaluate("sessionStorage.getItem('wakemark.token')") is None
    assert other.get_by_role("heading", name="Token needed").is_visible()


def test_a_token_pasted_into_an_open_tab_replaces_the_old_one(server: Server, page: Any) -> None:
    _record(server.runtime, "Staging deploys need the VPN", minutes=5)
    # Another actor's token (scoped: it sees none of dev's projects).
    _, other = tokens.create(server.runtime.storage, actor="someone", who="test", project=None,
                             read_only=True, expires=None, name="other")  # fmt: skip
    seen = _watch(page)
    page.goto(f"{server.base}/ui#token=wmk_{'x' * 40}")  # not a token: refused
    page.get_by_role("heading", name="Token needed").wait_for()
    # Only the fragment changes, as when an address is pasted into this tab.
    page.evaluate(f"location.hash = '#token={server.token}'")
    page.wait_for_selector(f"tr[data-namespace='{NS}']")
    assert page.evaluate("location.hash") == "#/projects"
    assert page.evaluate("sessionStorage.getItem('wakemark.token')") == server.token
    page.evaluate(f"location.hash = '#token={other}'")
    page.get_by_text("Nothing stored yet").wait_for()
    assert page.evaluate("sessionStorage.getItem('wakemark.token')") == other
    assert page.locator("tr[data-namespace]").count() == 0
    # A code works in an open tab too.
    page.evaluate(f"location.hash = '#code={handoff.issue(server.runtime.settings)}'")
    page.wait_for_selector(f"tr[data-namespace='{NS}']")
    assert page.evaluate("sessionStorage.getItem('wakemark.token')") == server.token
    assert seen["dialogs"] == []


def test_each_record_shows_its_code_state_in_the_list_and_its_page(
    server: Server, page: Any, user_home: Path
) -> None:
    from wakemark.shared.retrieval.staleness import capture

    rt = server.runtime
    root = user_home / "shop"
    (root / "src").mkdir(parents=True)
    for name in ("cart.py", "coupon.py", "tax.py"):
        (root / "src" / name).write_text(f"def {name[:-3]}_total(x):\n    return x\n")
    made = {}
    for name in ("cart.py", "coupon.py", "tax.py", "remote.py"):
        rec = _record(rt, f"about {name}", minutes=len(made), files_touched=[f"src/{name}"])
        anchors = capture(rec, str(root), readable=name != "remote.py")
        assert anchors is not None
        with rt.storage.transaction() as tx:
            tx.put_anchors(anchors)
        made[name] = rec
    _record(rt, "a note citing no file", minutes=9)
    (root / "src" / "coupon.py").write_text("def coupon_total(x):\n    return x * 2\n")
    (root / "src" / "tax.py").unlink()

    _open(page, server)
    page.get_by_role("button", name="Open").click()
    page.wait_for_selector("[data-code]")
    badges = {
        name: page.locator(f"tr[data-record='{rec.record_id}'] [data-code]").inner_text()
        for name, rec in made.items()
    }
    assert badges == {
        "cart.py": "current",
        "coupon.py": "changed since: src/coupon.py",
        "tax.py": "gone: src/tax.py",
        "remote.py": "unchecked",  # anchored by a server that did not read the files
    }
    shot(page, "code-states", user_home)
    page.click(f"tr[data-record='{made['coupon.py'].record_id}'] a")
    page.wait_for_selector("#record-code [data-code]")
    assert page.inner_text("#record-code") == "Code: changed since: src/coupon.py"
    # A search hit says the same (the server sends its state with it).
    page.get_by_role("link", name="Search").click()
    page.fill("#q", "about")
    page.get_by_role("button", name="Search").click()
    hit = page.locator(f"#results tr[data-record='{made['tax.py'].record_id}']")
    assert hit.locator("[data-code]").inner_text() == "gone: src/tax.py"


def test_a_record_shows_its_history_and_a_wrong_merge_is_split(
    server: Server, page: Any, tmp_path: Path
) -> None:
    rt = server.runtime
    old = _record(rt, "coupon applied twice", 9, summary="the cart added the coupon twice")
    new = _record(rt, "coupon applied once", 2, summary="the cart applies the coupon once")
    with rt.storage.transaction() as tx:
        tx.lock_subjects(NS)
        assert tx.supersede(old.record_id, new.record_id, datetime.now(UTC))
    seen = _watch(page)
    _open(page, server)
    page.goto(f"{server.base}/ui#/record/{new.record_id}")
    card = page.locator(".card.version")
    card.wait_for()
    assert "coupon applied twice" in card.inner_text()
    assert card.locator("del").all_inner_texts()[:1] == ["twice"]  # title: twice → once
    assert "once" in " ".join(card.locator("ins").all_inner_texts())
    shot(page, "viewer-history", tmp_path, full_page=True)
    # An old id (the audit links the records a prompt got) opens its subject's record.
    page.goto(f"{server.base}/ui#/record/{old.record_id}")
    page.locator("h1", has_text="coupon applied once").wait_for()
    assert page.evaluate("location.hash") == f"#/record/{new.record_id}"
    card.wait_for()
    card.get_by_role("button", name="Split (wrong merge)").click()
    page.locator("#confirm").wait_for()
    page.click("#confirm-ok")
    page.get_by_text("No older versions").wait_for()
    assert rt.storage.get_memory_record(old.record_id) == old
    assert rt.storage.get_history(new.record_id) == []
    assert seen["errors"] == []
