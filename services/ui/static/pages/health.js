import { get, namespace } from "../api.js";
import { h, render, t } from "../dom.js";

function list(entries) {
  return h("dl", null, entries.map(([k, v]) => [h("dt", null, k), h("dd", null, t(v === null || v === undefined ? "—" : String(v)))]));
}

function flat(obj, prefix = "") {
  return Object.entries(obj || {}).flatMap(([k, v]) =>
    v && typeof v === "object" && !Array.isArray(v) ? flat(v, `${prefix}${k}.`) : [[`${prefix}${k}`, Array.isArray(v) ? v.join(", ") : v]]);
}

// The retrieval audit: each prompt-time retrieval, what the gate decided and why.
async function retrievals() {
  const ns = namespace();
  const data = await get("/v1/retrievals", ns ? { namespace: ns, limit: 20 } : { limit: 20 });
  const items = data.items || [];
  if (!items.length) return h("p", { class: "muted", id: "audit" }, "No prompt-time retrieval recorded yet.");
  const cols = ["when", "session", "decision", "why", "injected", "bytes", "ms"];
  return h("table", { id: "audit" }, [
    h("tr", null, cols.map((c) => h("th", null, c))),
    ...items.map((r) => h("tr", { "data-retrieval": r.retrieval_id },
      [r.created_at, r.session_id, r.decision, r.reason, r.injected.length, r.bytes, r.latency_ms]
        .map((v) => h("td", null, t(String(v)))))),
  ]);
}

export async function healthPage(view) {
  const health = await fetch("/health", { cache: "no-store" }).then((r) => r.json());
  const [stats, audit] = await Promise.all([get("/v1/stats"), retrievals()]);
  const search = health.search || {};
  render(view,
    h("h1", null, "Health ", h("span", { class: "badge" }, t(health.status))),
    list([["version", health.version], ["backend", health.backend]]),
    h("h2", null, "Pending work"),
    list([["events awaiting extraction", stats.pending_extraction], ["records awaiting embedding", stats.pending_embedding],
      ["job queue depth", (health.jobs || {}).queue_depth], ["jobs mode", (health.jobs || {}).mode]]),
    h("h2", null, "Embedder"), list(flat(health.embedder)),
    h("h2", null, "Search latency"), list(flat(search)),
    h("h2", null, "Database size"),
    list([["events", stats.events], ["memory records", stats.memories], ["embedded records", stats.embedded]]),
    h("h2", null, "LLM extraction"), list(flat(health.llm)),
    h("h2", null, "Retrieval audit"), audit);
}
