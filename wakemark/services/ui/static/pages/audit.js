import { get } from "../api.js";
import { errorBox, h, link, t, table, when } from "../dom.js";
import { plural, requireProject } from "./common.js";

const SESSIONS = 20;
const PROMPTS = 50;

// Titles of the injected records, fetched once per record and visit; null: deleted.
function titleFetcher() {
  const titles = new Map();
  return (id) => {
    if (!titles.has(id)) {
      titles.set(id, get(`/v1/memories/${encodeURIComponent(id)}`).then((r) => r.title, () => null));
    }
    return titles.get(id);
  };
}

async function injectedCell(row, titleOf) {
  const relevance = new Map(row.candidates.map((c) => [c.record_id, c.relevance]));
  const names = await Promise.all(row.injected.map(titleOf));
  if (!row.injected.length) return h("td", { class: "muted" }, "—");
  return h("td", null, row.injected.map((id, i) => h("div", { "data-record": id },
    names[i] === null ? h("span", { class: "muted" }, t(id), " (deleted)") : link(`/record/${encodeURIComponent(id)}`, t(names[i])),
    h("span", { class: "muted" }, ` · relevance ${relevance.get(id) ?? "—"}`))));
}

async function promptRows(ns, sessionId, after, titleOf) {
  const page = await get("/v1/retrievals", { namespace: ns, session_id: sessionId, limit: PROMPTS, after });
  const rows = await Promise.all(page.items.map(async (r) => h("tr", { "data-retrieval": r.retrieval_id },
    h("td", null, when(r.created_at)),
    h("td", null, h("span", { class: r.decision === "inject" ? "badge yes" : "badge" }, t(r.decision)), h("div", { class: "muted" }, t(r.reason))),
    await injectedCell(r, titleOf),
    h("td", { class: "num" }, r.bytes),
    h("td", { class: "num" }, r.latency_ms.toFixed(1)))));
  return { rows, next: page.next };
}

function sessionCard(ns, s, titleOf) {
  const body = h("div", null, h("p", { class: "muted" }, "Loading…"));
  let loaded = false;
  const card = h("details", { class: "card session", "data-session": s.session_id },
    h("summary", null, h("strong", null, "session ", t(s.session_id)), " · ",
      `${plural(s.prompts, "prompt")}, ${s.injected} injected, ${plural(s.records, "record")}, ${s.bytes} bytes, ${s.mean_latency_ms} ms mean`,
      h("span", { class: "muted" }, " · last ", when(s.last_at))),
    body);
  card.addEventListener("toggle", async () => {
    if (!card.open || loaded) return;
    loaded = true;
    try {
      const tbody = h("tbody");
      const more = h("div", { class: "row" });
      const fill = async (after) => {
        const { rows, next } = await promptRows(ns, s.session_id, after, titleOf);
        tbody.append(...rows);
        more.replaceChildren(next ? h("button", { type: "button", onclick: () => fill(next).catch((err) => more.replaceChildren(errorBox(err))) }, "More prompts") : "");
      };
      await fill(undefined);
      body.replaceChildren(h("table", null,
        h("thead", null, h("tr", null, ["When", "Decision", "Injected records", "Bytes#", "Ms#"].map((x) => h("th", { class: x.endsWith("#") ? "num" : null }, x.replace(/#$/, ""))))),
        tbody), more);
    } catch (err) {
      body.replaceChildren(errorBox(err));
    }
  });
  return card;
}

export async function auditPage(view) {
  const ns = requireProject(view);
  if (!ns) return;
  const titleOf = titleFetcher();
  const list = h("div", { id: "audit" });
  const more = h("div", { class: "row" });
  const fill = async (after) => {
    const page = await get("/v1/retrievals/sessions", { namespace: ns, limit: SESSIONS, after });
    if (!after && !page.items.length) {
      list.replaceChildren(h("p", { class: "muted" }, "No prompt-time retrieval recorded yet."));
    }
    list.append(...page.items.map((s) => sessionCard(ns, s, titleOf)));
    more.replaceChildren(page.next ? h("button", { type: "button", onclick: () => fill(page.next).catch((err) => more.replaceChildren(errorBox(err))) }, "Older sessions") : "");
  };
  await fill(undefined);
  view.replaceChildren(
    h("h1", null, "Retrieval audit"),
    h("p", { class: "muted" }, "Each session's prompts, newest session first: what the relevance gate injected, each record's relevance, the bytes and the time it took. Open a session to see its prompts."),
    list, more);
  const first = list.querySelector("details");
  if (first) first.open = true;
}
