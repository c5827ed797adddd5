import { get } from "../api.js";
import { h, render, t, table } from "../dom.js";

const dash = (v) => (v === null || v === undefined ? "—" : String(v));

// An undefined value is a field the server did not send (an error note, say): no row.
function list(id, entries) {
  return h("dl", { id }, entries.filter(([, v]) => v !== undefined)
    .map(([k, v]) => [h("dt", null, k), h("dd", null, t(dash(v)))]));
}

const card = (title, ...body) => h("section", { class: "card" }, h("h2", null, title), body);

function bytes(n) {
  if (n === null || n === undefined) return "—";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  let v = n;
  while (v >= 1024 && i < units.length - 1) { v /= 1024; i += 1; }
  return i ? `${v.toFixed(1)} ${units[i]} (${n.toLocaleString()} bytes)` : `${n} bytes`;
}

const percent = (share) => (share === null || share === undefined ? "—" : `${(share * 100).toFixed(1)} %`);

function gateSection(gate, live) {
  if (!gate) return h("p", { class: "muted", id: "gate" }, "The database is unreachable.");
  return [
    list("gate", [
      ["prompts seen", gate.prompts], ["injected", `${gate.injected} (${percent(gate.injected_share)})`],
      ["records per injection (mean)", gate.mean_records], ["bytes per injection (mean)", gate.mean_bytes],
      ["retrieval latency (mean ms)", gate.mean_latency_ms]]),
    h("p", { class: "muted" }, "From the stored retrieval audit: every prompt-time retrieval since it began. ",
      `This process since it started: ${dash(live.prompts)} prompts, ${percent(live.injected_share)} injected.`),
  ];
}

function llmSection(llm) {
  if (llm.error) return list("llm", [["state", `unavailable (${llm.error})`]]);
  if (!llm.enabled) {
    return [list("llm", [["state", "off"]]),
      h("p", { class: "muted" }, "Extraction is deterministic: no LLM is called and no tokens are spent. ",
        "WAKEMARK_LLM_BASE_URL and WAKEMARK_LLM_MODEL turn the LLM extractor on, within WAKEMARK_LLM_DAILY_TOKENS a day.")];
  }
  return list("llm", [["state", llm.state], ["tokens spent today", `${llm.tokens_used} of ${llm.budget}`],
    ["remaining", llm.remaining], ["calls", llm.calls], ["failed calls", llm.failures],
    ["turns refused for the budget", llm.skipped], ["day (UTC)", llm.date]]);
}

function captureSection(health) {
  const skipped = Object.entries(health.skipped || {});
  return [
    list("capture", [
      ["Stop hooks without a final answer", health.capture.stop_without_answer],
      ["transcript or file reads refused", health.capture.file_reads_refused],
      ["events dropped (project ignored)", health.dropped.ignored_project]]),
    h("p", { class: "muted" }, "Counted by this server process since it started."),
    h("h3", null, "Turns extracted without a record, by reason"),
    skipped.length
      ? table(["Reason", "Turns#"], skipped.map(([reason, n]) => h("tr", null, h("td", null, t(reason)), h("td", { class: "num" }, n))))
      : h("p", { class: "muted", id: "skipped" }, "none"),
  ];
}

export async function healthPage(view) {
  // With the token: figures need it, and a scoped token gets only its scope's.
  const health = await get("/health");
  const stats = await get("/v1/stats");
  const search = health.search || {};
  const jobs = health.jobs || {};
  const embedder = health.embedder || {};
  render(view,
    h("h1", null, "Health ", h("span", { class: "badge" }, t(health.status)),
      h("span", { class: "muted" }, ` wakemark ${health.version} · ${health.backend}`)),
    h("div", { class: "cards" },
      card("Pending work",
        list("pending", [["events awaiting extraction", stats.pending_extraction],
          ["records awaiting embedding", stats.pending_embedding], ["job queue depth", jobs.queue_depth]])),
      card("Workers and embedder",
        list("workers", [["jobs run", jobs.mode], ["jobs error", jobs.error], ["embedder", embedder.state],
          ["embedder note", embedder.reason]])),
      card("Search latency",
        list("search", [["searches", search.requests], ["p50 ms", search.p50_ms], ["p95 ms", search.p95_ms],
          ["degraded (lexical only)", percent(search.degraded_rate)], ["timeouts", search.timeouts],
          ["errors", search.errors]]),
        h("p", { class: "muted" }, "This process since it started.")),
      card("Relevance gate", gateSection(health.gate, search.prompts || {}),
        h("p", null, "Per session and prompt: the ", h("a", { href: "#/audit" }, "Audit"), " page.")),
      health.llm && card("LLM budget", llmSection(health.llm)),
      health.capture && card("Capture misses", captureSection(health)),
      card("Database",
        list("database", [["size", bytes(health.database ? health.database.bytes : null)], ["events", stats.events],
          ["memory records", stats.memories], ["embedded records", stats.embedded]]),
        h("p", { class: "muted" }, health.backend === "sqlite"
          ? "SQLite: the database file and its write-ahead log."
          : "Postgres: wakemark's tables with their indexes and TOAST."))));
}
