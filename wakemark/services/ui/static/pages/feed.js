import { get } from "../api.js";
import { errorBox, h, t, table, when } from "../dom.js";
import { OBSERVATION_TYPES } from "./search.js";
import { codeStates, deleteWithConfirmation, recordRow, requireProject } from "./common.js";

const PAGE = 50;
const POLL_MS = 2000;

function eventText(event) {
  const body = event.body || {};
  if (body.type === "text") return body.content;
  if (body.type === "message") return (body.turns[body.turns.length - 1] || {}).content;
  const data = body.data || {};
  const input = data.tool_input || {};
  return [data.tool_name || data.tool || "", input.command || input.file_path || ""].join(" ").trim();
}

export async function feedPage(view) {
  const ns = requireProject(view);
  if (!ns) return;
  // Keyset pages: each page starts after the previous one's `next`; the stack holds the
  // start of every page back to the first, so "Newer" retraces them.
  const starts = [undefined];
  let timer = null;
  let lastKey = "";
  const selected = new Set();
  const status = h("span", { class: "muted", id: "live" });
  const records = h("div");
  const turns = h("div");
  const message = h("div");
  const pager = h("div", { class: "row" });

  async function load() {
    const [page, events] = await Promise.all([
      get("/v1/memories", { namespace: ns, limit: PAGE, after: starts[starts.length - 1], count: "false" }),
      get("/v1/events", { namespace: ns, limit: 30 }),
    ]);
    const code = await codeStates(ns, page.items.map((r) => r.record_id));
    status.textContent = `live · updated ${new Date().toLocaleTimeString()}`;
    const key = JSON.stringify([starts.length, page.items.map((r) => [r.record_id, r.pinned, r.edited_at]), events.items.map((e) => e.event_id), code]);
    if (key === lastKey) return; // nothing new: keep the DOM (and any checkbox focus) as it is
    lastKey = key;
    const box = (r) => h("td", null, h("input", {
      type: "checkbox", "aria-label": "select", checked: selected.has(r.record_id),
      onchange: (ev) => { ev.target.checked ? selected.add(r.record_id) : selected.delete(r.record_id); },
    }));
    records.replaceChildren(page.items.length
      ? h("div", null, table(["", "Type", "Record", "Created"], page.items.map((r) => recordRow(r, { before: box(r), code: code.items[r.record_id] }))),
        code.checked ? null : h("p", { class: "muted", id: "code-note" }, t(code.note)))
      : h("p", { class: "muted" }, "No records on this page."));
    turns.replaceChildren(events.items.length
      ? table(["Kind", "Event", "When"], events.items.map((e) => h("tr", null,
          h("td", null, h("span", { class: "badge" }, e.kind)),
          h("td", null, t((eventText(e) || "").slice(0, 160)), h("div", { class: "muted" }, "session ", t(e.session_id))),
          h("td", null, when(e.valid_time)))))
      : h("p", { class: "muted" }, "No events yet."));
    pager.replaceChildren(
      h("button", { type: "button", id: "newer", disabled: starts.length === 1, onclick: () => go(() => starts.pop()) }, "Newer"),
      h("span", { class: "muted", id: "page-number" }, `page ${starts.length}`),
      h("button", { type: "button", id: "older", disabled: !page.next, onclick: () => go(() => starts.push(page.next)) }, "Older"));
  }

  function go(move) {
    if (move) move();
    lastKey = "";
    load().catch((err) => message.replaceChildren(errorBox(err)));
  }

  async function remove(selection) {
    message.replaceChildren();
    try {
      const done = await deleteWithConfirmation(selection, withEvents.checked);
      if (done) {
        selected.clear();
        message.replaceChildren(h("p", null, `Deleted ${done.records} record(s) and ${done.events} event(s).`));
        go();
      }
    } catch (err) {
      message.replaceChildren(errorBox(err));
    }
  }

  const withEvents = h("input", { type: "checkbox", id: "with-events" });
  const type = h("select", { "aria-label": "type" }, h("option", { value: "" }, "any type"), OBSERVATION_TYPES.map((x) => h("option", { value: x }, x)));
  const after = h("input", { type: "date", "aria-label": "created on or after" });
  const before = h("input", { type: "date", "aria-label": "created before" });
  const session = h("input", { type: "text", placeholder: "session id", "aria-label": "session id" });
  const filter = () => ({
    namespace: ns,
    type: type.value || undefined,
    after: after.value ? new Date(after.value + "T00:00:00").toISOString() : undefined,
    before: before.value ? new Date(before.value + "T00:00:00").toISOString() : undefined,
    session_id: session.value.trim() || undefined,
  });

  view.replaceChildren(
    h("h1", null, "Feed ", status),
    message,
    h("div", { class: "row" },
      h("button", { type: "button", class: "danger", onclick: () => selected.size ? remove({ ids: [...selected] }) : message.replaceChildren(errorBox("Select records first.")) }, "Delete selected…"),
      h("label", null, withEvents, " with their source events")),
    h("details", null, h("summary", null, "Delete by filter…"),
      h("div", { class: "row" }, type, "from", after, "before", before, session,
        h("button", { type: "button", class: "danger", onclick: () => remove(filter()) }, "Count and delete…"))),
    h("div", { class: "cols" },
      h("section", null, h("h2", null, "Records, newest first"), records, pager),
      h("section", null, h("h2", null, "Latest turn events"), turns)));
  await load();
  const tick = () => {
    // Poll only while visible; a hidden tab costs the server nothing.
    if (document.visibilityState === "visible") load().catch((err) => { status.textContent = `not updating: ${err.message}`; });
    timer = setTimeout(tick, POLL_MS);
  };
  timer = setTimeout(tick, POLL_MS);
  return () => clearTimeout(timer);
}
