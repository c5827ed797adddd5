import { call, get } from "../api.js";
import { errorBox, h, render, t, table, when } from "../dom.js";
import { codeBadge, codeStates, deleteWithConfirmation, plural } from "./common.js";
import { historySection } from "./history.js";

function fields(record) {
  const rows = [
    ["record id", record.record_id], ["namespace", record.namespace], ["type", record.observation_type],
    ["strategy", record.strategy], ["quality", record.quality], ["pinned", record.pinned ? "yes" : "no"],
    ["created", when(record.created_at)], ["edited", record.edited_at ? when(record.edited_at) : "never"],
    ["concepts", record.concepts.join(", ") || "—"], ["source events", String(record.source_event_ids.length)],
  ];
  return h("dl", null, rows.map(([k, v]) => [h("dt", null, k), h("dd", null, t(v))]),
    h("dt", null, "files"), h("dd", null, record.files_touched.length ? h("ul", null, record.files_touched.map((f) => h("li", null, t(f)))) : "—"));
}

function turnCard(turn, heading) {
  const tools = turn.tool_uses.map((u) => h("tr", null,
    h("td", null, t(u.name || u.kind)),
    h("td", null, u.command ? h("code", null, t(u.command)) : "—"),
    h("td", { class: "num" }, u.exit_code === null ? (u.failed ? "failed" : "—") : String(u.exit_code)),
    h("td", null, u.files.length ? u.files.map((f) => h("div", null, t(`${f.verb} ${f.path}`))) : "—")));
  return h("div", { class: "card turn" },
    h("h2", null, heading, " ", h("span", { class: "muted" }, when(turn.started_at), " · session ", t(turn.session_id))),
    h("h3", null, "Prompt"), turn.prompt === null ? h("p", { class: "muted" }, "no prompt in this turn") : h("pre", { class: "prompt" }, turn.prompt),
    h("h3", null, "Tool uses"), tools.length ? table(["Tool", "Command", "Exit#", "Files"], tools) : h("p", { class: "muted" }, "none"),
    h("h3", null, "Final answer"), turn.answer === null ? h("p", { class: "muted" }, "no final answer recorded") : h("pre", { class: "answer" }, turn.answer));
}

function editForm(record, onSaved, message) {
  const title = h("input", { type: "text", class: "wide", value: record.title, "aria-label": "title" });
  const summary = h("textarea", { "aria-label": "summary" });
  summary.value = record.summary;
  const facts = h("textarea", { "aria-label": "facts (one per line)" });
  facts.value = record.facts.join("\n");
  const save = async (ev) => {
    ev.preventDefault();
    try {
      const lines = facts.value.split("\n").map((x) => x.trim()).filter(Boolean);
      await call("PATCH", `/v1/memories/${encodeURIComponent(record.record_id)}`, null, { title: title.value, summary: summary.value, facts: lines });
      onSaved();
    } catch (err) {
      message.replaceChildren(errorBox(err));
    }
  };
  return h("details", null, h("summary", null, "Correct title, summary or facts…"),
    h("form", { onsubmit: save },
      h("label", null, "Title", title), h("label", null, "Summary", summary), h("label", null, "Facts, one per line", facts),
      h("p", { class: "muted" }, "Saving stores the correction, marks the record edited, updates its full-text entry and queues it to be embedded again."),
      h("button", { type: "submit" }, "Save correction")));
}

export async function recordPage(view, [recordId]) {
  const id = encodeURIComponent(recordId || "");
  const record = await get(`/v1/memories/${id}`);
  if (record.current_id && record.current_id !== record.record_id) {
    // A superseded version (linked from the audit, say): its subject's current record,
    // whose history lists it.
    location.replace(`#/record/${encodeURIComponent(record.current_id)}`);
    return;
  }
  const [source, history] = await Promise.all([get(`/v1/memories/${id}/source`), get(`/v1/memories/${id}/history`)]);
  const code = await codeStates(record.namespace, [record.record_id]);
  const message = h("div");
  const reload = () => recordPage(view, [recordId]).catch((err) => message.replaceChildren(errorBox(err)));
  const withEvents = h("input", { type: "checkbox", id: "record-with-events" });
  const pin = async () => {
    try {
      await call("PATCH", `/v1/memories/${id}`, null, { pinned: !record.pinned });
      await reload();
    } catch (err) {
      message.replaceChildren(errorBox(err));
    }
  };
  const remove = async () => {
    try {
      const done = await deleteWithConfirmation({ ids: [record.record_id] }, withEvents.checked, `${record.record_id} “${record.title}”`);
      if (done) location.hash = "#/feed";
    } catch (err) {
      message.replaceChildren(errorBox(err));
    }
  };
  render(view,
    h("h1", { id: "record-title" }, t(record.title)),
    h("p", { id: "record-code" }, "Code: ", code.items[record.record_id] ? codeBadge(code.items[record.record_id])
      : h("span", { class: "muted" }, code.checked ? "cites no file to check" : t(code.note))),
    message,
    h("div", { class: "row" },
      h("button", { type: "button", id: "pin", onclick: pin }, record.pinned ? "Unpin" : "Pin"),
      h("button", { type: "button", class: "danger", id: "delete", onclick: remove }, "Delete…"),
      h("label", null, withEvents, ` with its ${plural(record.source_event_ids.length, "source event")}`)),
    editForm(record, reload, message),
    h("h2", null, "Summary"), record.summary ? h("p", { class: "summary" }, t(record.summary)) : h("p", { class: "muted" }, "none"),
    h("h2", null, "Facts"), record.facts.length ? h("ul", { class: "facts" }, record.facts.map((f) => h("li", null, t(f)))) : h("p", { class: "muted" }, "none"),
    h("h2", null, "Fields"), fields(record),
    historySection(record, history, reload, message),
    h("h2", null, "Provenance"),
    source.turns.length ? source.turns.map((turn, i) => turnCard(turn, source.turns.length > 1 ? `Source turn ${i + 1}` : "Source turn"))
      : h("p", { class: "muted" }, record.source_event_ids.length ? "The source events are no longer stored." : "Written directly (no source turn)."),
    source.missing_event_ids.length ? h("p", { class: "muted" }, `${plural(source.missing_event_ids.length, "source event")} no longer stored.`) : null,
    h("h2", null, "Skipped turns of this session"),
    source.skipped_turns.length
      ? source.skipped_turns.map((turn) => h("div", { class: "card skipped" },
          h("p", null, when(turn.started_at), " · ", turn.reason ? t(turn.reason) : h("span", { class: "muted" }, "extraction kept nothing; no reason was recorded")),
          turn.prompt === null ? null : h("pre", null, turn.prompt)))
      : h("p", { class: "muted" }, "none"));
}
