import { get, setNamespace } from "../api.js";
import { h, t, table, when } from "../dom.js";

export async function projectsPage(view) {
  const projects = await get("/v1/projects");
  const stats = await Promise.all(projects.map((p) => get("/v1/stats", { namespace: p.namespace })));
  const open = (p) => () => {
    setNamespace(p.namespace);
    location.hash = "#/feed";
  };
  const rows = projects.map((p, i) => h("tr", { "data-namespace": p.namespace },
    h("td", null, h("button", { type: "button", onclick: open(p) }, "Open"), " ", h("strong", null, t(p.display_name))),
    h("td", null, p.project_path ? t(p.project_path) : h("span", { class: "muted" }, "no path seen"), h("div", { class: "muted" }, t(p.namespace))),
    h("td", { class: "num" }, stats[i].memories),
    h("td", { class: "num" }, stats[i].events),
    h("td", { class: "num" }, stats[i].pending_extraction + stats[i].pending_embedding),
    h("td", null, when(p.last_activity))));
  view.replaceChildren(
    h("h1", null, "Projects"),
    projects.length
      ? table(["Project", "Path", "Records#", "Events#", "Pending#", "Last activity"], rows)
      : h("p", { class: "muted" }, "Nothing stored yet: install the hooks and start a session."),
    h("p", { class: "muted" }, "Pending: events awaiting extraction plus records awaiting embedding."));
}
