// Every string from the API becomes a text node (append / textContent), never markup.
export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key.startsWith("on")) el.addEventListener(key.slice(2), value);
    else if (key === "class") el.className = value;
    else el.setAttribute(key, value === true ? "" : String(value));
  }
  for (const child of children.flat(Infinity)) {
    if (child === undefined || child === null || child === false) continue;
    el.append(child instanceof Node ? child : String(child));
  }
  return el;
}

// replaceChildren would turn an array or a null into text: flatten and drop them first.
export function render(parent, ...children) {
  parent.replaceChildren(...children.flat(Infinity).filter((c) => c !== undefined && c !== null && c !== false));
}

// Stored text, isolated so a bidi override inside it cannot reorder the page around it.
export const t = (value) => h("bdi", null, value ?? "");

export const link = (route, ...children) => h("a", { href: "#" + route }, ...children);

export function when(iso) {
  if (!iso) return "—";
  const d = new Date(iso);
  return Number.isNaN(d.getTime()) ? String(iso) : d.toLocaleString();
}

export function table(headers, rows) {
  return h("table", null,
    h("thead", null, h("tr", null, headers.map((x) => h("th", { class: x.endsWith("#") ? "num" : null }, x.replace(/#$/, ""))))),
    h("tbody", null, rows));
}

export function errorBox(err) {
  return h("p", { class: "error", role: "alert" }, String(err && err.message ? err.message : err));
}

// A modal that states exactly what an action destroys; resolves true on confirm.
export function confirmDialog(title, lines, okLabel) {
  const dialog = document.getElementById("confirm");
  document.getElementById("confirm-title").textContent = title;
  document.getElementById("confirm-body").replaceChildren(...lines.map((line) => h("li", null, line)));
  const ok = document.getElementById("confirm-ok");
  ok.textContent = okLabel;
  return new Promise((resolve) => {
    const done = (value) => {
      ok.onclick = null;
      document.getElementById("confirm-cancel").onclick = null;
      dialog.onclose = null;
      if (dialog.open) dialog.close();
      resolve(value);
    };
    ok.onclick = () => done(true);
    document.getElementById("confirm-cancel").onclick = () => done(false);
    dialog.onclose = () => done(false);
    dialog.showModal();
  });
}
