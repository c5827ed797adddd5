import { call, get, namespace } from "../api.js";
import { confirmDialog, h, link, t, when } from "../dom.js";

export function requireProject(view) {
  const ns = namespace();
  if (!ns) view.replaceChildren(h("p", null, "Pick a project first: ", link("/projects", "Projects"), "."));
  return ns;
}

export function recordRow(record, extra) {
  return h("tr", { "data-record": record.record_id },
    extra ? extra.before : null,
    h("td", null, h("span", { class: "badge" }, t(record.observation_type))),
    h("td", null, link(`/record/${encodeURIComponent(record.record_id)}`, t(record.title)),
      record.pinned ? [" ", h("span", { class: "badge pin" }, "pinned")] : null,
      record.edited_at ? [" ", h("span", { class: "badge" }, "edited")] : null,
      extra && extra.code ? [" ", codeBadge(extra.code)] : null,
      record.summary ? h("div", { class: "muted" }, t(record.summary.slice(0, 200))) : null),
    extra ? extra.after : null,
    h("td", null, when(record.created_at)));
}

// Each record's state against the project's files now, by record id (a record citing no
// file has none); `checked` is false when this server does not read the client's files.
export async function codeStates(ns, ids) {
  if (!ids.length) return { checked: true, note: "", items: {} };
  return get("/v1/memories/code", { namespace: ns, ids: ids.join(",") });
}

export function codeBadge(code) {
  if (!code) return null;
  const what = code.state === "changed" ? `changed since: ${code.paths.join(", ")}`
    : code.state === "gone" ? `gone: ${[...code.paths, ...code.identifiers].join(", ")}` : code.state;
  return h("span", { class: `badge code ${code.state}`, "data-code": code.state }, t(what));
}

export function plural(n, word) {
  return `${n} ${word}${n === 1 ? "" : "s"}`;
}

// Dry run, a dialog listing exactly what goes, then the delete. Resolves to the result
// of the real call, or null when nothing matched or the user cancelled.
export async function deleteWithConfirmation(selection, withEvents, what) {
  const dry = await call("POST", "/v1/memories/delete", null, { ...selection, dry_run: true, with_events: withEvents });
  if (dry.records === 0) {
    await confirmDialog("Nothing to delete", ["No record matches."], "OK");
    return null;
  }
  const lines = [
    what && dry.records === 1
      ? `1 memory record: ${what} (title, summary, facts and provenance links)`
      : `${plural(dry.records, "memory record")} (title, summary, facts and provenance links)`,
    `${plural(dry.embeddings, "vector")} (their embeddings)`,
    `${plural(dry.records, "full-text entry")} (search stops finding them at once)`,
  ];
  lines.push(withEvents
    ? `${plural(dry.events, "source event")} (the prompts, tool uses and answers they came from)`
    : "Source events are kept.");
  lines.push("This cannot be undone.");
  const ok = await confirmDialog(`Delete ${plural(dry.records, "record")}?`, lines, `Delete ${plural(dry.records, "record")}`);
  if (!ok) return null;
  return call("POST", "/v1/memories/delete", null, { ...selection, dry_run: false, with_events: withEvents });
}
