import { hasToken, namespace, setToken, takeTokenFromFragment } from "./api.js";
import { h, render, t } from "./dom.js";
import { auditPage } from "./pages/audit.js";
import { contextPage } from "./pages/context.js";
import { feedPage } from "./pages/feed.js";
import { healthPage } from "./pages/health.js";
import { projectsPage } from "./pages/projects.js";
import { recordPage } from "./pages/record.js";
import { searchPage } from "./pages/search.js";

const ROUTES = {
  projects: projectsPage,
  feed: feedPage,
  search: searchPage,
  record: recordPage,
  context: contextPage,
  audit: auditPage,
  health: healthPage,
};

let stopCurrent = null; // a page that polls returns its stop function

function tokenForm(main, problem) {
  const input = h("input", { type: "password", class: "wide", "aria-label": "token", autocomplete: "off" });
  const form = h("form", { onsubmit: (ev) => { ev.preventDefault(); setToken(input.value); route(); } },
    h("p", null, "Open the viewer with ", h("code", null, "wakemark ui"), ", or paste the API token:"),
    input, h("div", { class: "row" }, h("button", { type: "submit" }, "Use token")));
  render(main, h("h1", null, "Token needed"),
    problem ? h("p", { class: "error", role: "alert", id: "handoff-error" }, t(problem)) : null, form);
}

async function route(problem) {
  if (stopCurrent) stopCurrent();
  stopCurrent = null;
  const main = document.getElementById("main");
  const ns = namespace();
  document.getElementById("project").replaceChildren(ns ? t(ns) : "no project chosen");
  if (!hasToken()) return tokenForm(main, problem);
  const [name, ...rest] = (location.hash.replace(/^#\/?/, "") || "projects").split("/");
  const page = ROUTES[name] || projectsPage;
  for (const a of document.querySelectorAll("#nav a")) {
    a.classList.toggle("active", a.getAttribute("href") === `#/${name}`);
  }
  // Each visit renders into a fresh element: a page still loading after the user moved
  // on fills a detached node, not the new page.
  const view = h("div", { class: "view" }, h("p", { class: "muted" }, "Loading…"));
  main.replaceChildren(view);
  try {
    stopCurrent = (await page(view, rest.map(decodeURIComponent))) || null;
  } catch (err) {
    if (err.status === 401) {
      sessionStorage.clear();
      return tokenForm(main);
    }
    view.replaceChildren(h("p", { class: "error", role: "alert" }, String(err.message || err)));
  }
}

// On every fragment change, not only at load: a #token= or #code= address pasted into
// an open tab changes only the fragment.
async function arrive() {
  route(await takeTokenFromFragment());
}

window.addEventListener("hashchange", arrive);
arrive();
