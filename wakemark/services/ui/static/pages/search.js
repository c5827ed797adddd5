import { get } from "../api.js";
import { errorBox, h, link, t, table, when } from "../dom.js";
import { codeBadge, requireProject } from "./common.js";

export const OBSERVATION_TYPES = ["decision", "bugfix", "feature", "refactor", "discovery", "change", "note", "session_summary"];
const AGES = [["", "any age"], ["1", "last day"], ["7", "last week"], ["30", "last 30 days"], ["365", "last year"]];

export async function searchPage(view) {
  const ns = requireProject(view);
  if (!ns) return;
  const q = h("input", { type: "text", class: "wide", id: "q", placeholder: "search this project's memory", "aria-label": "query" });
  const type = h("select", { "aria-label": "type" }, h("option", { value: "" }, "any type"), OBSERVATION_TYPES.map((x) => h("option", { value: x }, x)));
  const days = h("select", { "aria-label": "age" }, AGES.map(([v, label]) => h("option", { value: v }, label)));
  const out = h("div", { id: "results" });

  async function run(ev) {
    ev.preventDefault();
    if (!q.value.trim()) return;
    try {
      const result = await get("/v1/search", { namespace: ns, q: q.value, type: type.value, days: days.value, limit: 20 });
      const hasRelevance = result.items.some((hit) => hit.relevance !== undefined);
      const rows = result.items.map((hit) => h("tr", { "data-record": hit.record.record_id },
        h("td", null, link(`/record/${encodeURIComponent(hit.record.record_id)}`, t(hit.record.title)),
          hit.code ? [" ", codeBadge(hit.code)] : null,
          h("div", { class: "muted" }, t((hit.record.summary || "").slice(0, 200)))),
        h("td", null, h("span", { class: "badge" }, t(hit.match_source))),
        h("td", { class: "num" }, hit.score.toFixed(4)),
        hasRelevance ? h("td", { class: "num" }, hit.relevance === undefined || hit.relevance === null ? "—" : t(String(hit.relevance))) : null,
        h("td", null, t(hit.record.observation_type)),
        h("td", null, when(hit.record.created_at))));
      const heads = ["Record", "Match", "Score#", ...(hasRelevance ? ["Relevance#"] : []), "Type", "Created"];
      out.replaceChildren(
        h("p", { class: "muted" }, `${result.items.length} hits in ${result.latency_ms} ms`, result.degraded ? " · degraded to full-text only" : ""),
        result.items.length ? table(heads, rows) : h("p", null, "No match."));
    } catch (err) {
      out.replaceChildren(errorBox(err));
    }
  }

  view.replaceChildren(
    h("h1", null, "Search"),
    h("form", { onsubmit: run }, q, h("div", { class: "row" }, type, days, h("button", { type: "submit" }, "Search"))),
    out);
  q.focus();
}
