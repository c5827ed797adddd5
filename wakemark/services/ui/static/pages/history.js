import { call } from "../api.js";
import { confirmDialog, errorBox, h, link, t, when } from "../dom.js";

// A word diff (longest common subsequence): what a newer version removed and added.
export function wordDiff(before, after) {
  const a = (before || "").split(/\s+/).filter(Boolean);
  const b = (after || "").split(/\s+/).filter(Boolean);
  const n = a.length, m = b.length;
  const lcs = Array.from({ length: n + 1 }, () => new Int32Array(m + 1));
  for (let i = n - 1; i >= 0; i--) for (let j = m - 1; j >= 0; j--)
    lcs[i][j] = a[i] === b[j] ? lcs[i + 1][j + 1] + 1 : Math.max(lcs[i + 1][j], lcs[i][j + 1]);
  const out = [];
  let i = 0, j = 0;
  while (i < n || j < m) {
    if (i < n && j < m && a[i] === b[j]) { out.push(t(a[i] + " ")); i++; j++; }
    else if (j < m && (i === n || lcs[i][j + 1] >= lcs[i + 1][j])) { out.push(h("ins", null, t(b[j] + " "))); j++; }
    else { out.push(h("del", null, t(a[i] + " "))); i++; }
  }
  return out;
}

// The older versions of a record (newest first), each against the version that replaced
// it, with a Split button that makes it a current record again.
export function historySection(record, history, reload, message) {
  const byId = new Map([[record.record_id, record], ...history.items.map((v) => [v.record.record_id, v.record])]);
  const split = async (version) => {
    const old = version.record;
    const ok = await confirmDialog("Split this version off?", [
      `“${old.title}” becomes a current record again (searched, listed and injected).`,
      "The versions it had replaced go with it; the newer versions stay where they are.",
    ], "Split");
    if (!ok) return;
    try {
      await call("POST", `/v1/memories/${encodeURIComponent(old.record_id)}/split`, null, {});
      await reload();
    } catch (err) {
      message.replaceChildren(errorBox(err));
    }
  };
  const cards = history.items.map((version) => {
    const old = version.record, newer = byId.get(version.superseded_by) || record;
    return h("div", { class: "card version" },
      h("p", null, h("strong", null, t(old.title)), " ", h("span", { class: "muted" },
        "created ", when(old.created_at), " · superseded ", when(version.superseded_at), " by ",
        link(`/record/${encodeURIComponent(newer.record_id)}`, t(newer.title)))),
      h("p", { class: "diff" }, h("span", { class: "muted" }, "title: "), wordDiff(old.title, newer.title)),
      h("p", { class: "diff" }, h("span", { class: "muted" }, "summary: "), wordDiff(old.summary, newer.summary)),
      h("button", { type: "button", class: "split", onclick: () => split(version) }, "Split (wrong merge)"));
  });
  return [h("h2", null, "History"),
    cards.length ? cards : h("p", { class: "muted" }, "No older versions: no later record replaced one about this subject.")];
}
