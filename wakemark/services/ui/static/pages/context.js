import { get } from "../api.js";
import { errorBox, h, link, t, table } from "../dom.js";
import { requireProject } from "./common.js";

function bytes(used, budget) {
  return h("p", { class: "muted bytes" }, `${used} of ${budget} bytes`);
}

export async function contextPage(view) {
  const ns = requireProject(view);
  if (!ns) return;
  const first = await get("/v1/context/preview", { namespace: ns });
  const prompt = h("textarea", { id: "prompt", "aria-label": "prompt", placeholder: "type a prompt to see what the hook would inject now" });
  const out = h("div", { id: "prompt-preview" });

  async function preview(ev) {
    ev.preventDefault();
    if (!prompt.value.trim()) return;
    try {
      const result = (await get("/v1/context/preview", { namespace: ns, prompt: prompt.value })).prompt;
      // relevance and reason come from a retriever that gates candidates; shown when sent.
      const extra = result.candidates.some((c) => c.relevance !== undefined || c.reason !== undefined);
      const rows = result.candidates.map((c) => h("tr", { "data-record": c.record.record_id },
        h("td", null, c.injected ? h("span", { class: "badge yes" }, "injected") : h("span", { class: "badge" }, "left out")),
        h("td", null, link(`/record/${encodeURIComponent(c.record.record_id)}`, t(c.record.title))),
        h("td", null, t(c.match_source)),
        h("td", { class: "num" }, typeof c.score === "number" ? c.score.toFixed(4) : "—"),
        extra ? h("td", { class: "num" }, c.relevance === undefined || c.relevance === null ? "—" : t(String(c.relevance))) : null,
        extra ? h("td", null, c.reason ? t(c.reason) : "—") : null));
      out.replaceChildren(
        h("h2", null, "Block the prompt hook would inject"),
        bytes(result.used_bytes, result.budget_bytes),
        result.context ? h("pre", { class: "block" }, result.context) : h("p", { class: "muted" }, "Nothing would be injected."),
        h("h2", null, "Candidates"),
        rows.length ? table(["", "Record", "Match", "Score#", ...(extra ? ["Relevance#", "Reason"] : [])], rows) : h("p", { class: "muted" }, "No candidate."),
        h("p", { class: "muted" }, `retrieval took ${result.latency_ms} ms; the prompt was not stored`));
    } catch (err) {
      out.replaceChildren(errorBox(err));
    }
  }

  view.replaceChildren(
    h("h1", null, "Context preview"),
    h("h2", null, "Session-start index"),
    bytes(first.index.used_bytes, first.index.budget_bytes),
    first.index.context ? h("pre", { id: "index" }, first.index.context) : h("p", { class: "muted", id: "index" }, "The index is empty."),
    h("form", { onsubmit: preview }, prompt, h("div", { class: "row" }, h("button", { type: "submit" }, "Preview"))),
    out);
}
