// The token arrives in the URL fragment (never sent to a server): as itself
// (#token=, pasted by the user) or as a one-time code (#code=, what `wakemark ui` opens)
// traded for it at /ui/token. It is kept in sessionStorage for this tab and goes out
// only as an Authorization header. A new one pasted into an open tab replaces the old.
const TOKEN_KEY = "wakemark.token";
const NS_KEY = "wakemark.namespace";

function adopt(token) {
  if (sessionStorage.getItem(TOKEN_KEY) !== token) sessionStorage.removeItem(NS_KEY); // another scope
  sessionStorage.setItem(TOKEN_KEY, token);
}

// Returns an error message when a code could not be traded, else null.
export async function takeTokenFromFragment() {
  const match = /^#(token|code)=([^&]+)/.exec(location.hash);
  if (!match) return null;
  history.replaceState(null, "", location.pathname + location.search + "#/projects");
  const value = decodeURIComponent(match[2]);
  if (match[1] === "token") {
    adopt(value);
    return null;
  }
  const response = await fetch("/ui/token", {
    method: "POST", headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ code: value }), credentials: "omit", cache: "no-store",
  });
  const data = await response.json().catch(() => null);
  if (!response.ok || !data || !data.token) return (data && data.message) || `HTTP ${response.status}`;
  adopt(data.token);
  return null;
}

export const hasToken = () => Boolean(sessionStorage.getItem(TOKEN_KEY));
export const setToken = (token) => sessionStorage.setItem(TOKEN_KEY, token.trim());
export const namespace = () => sessionStorage.getItem(NS_KEY);
export const setNamespace = (ns) => sessionStorage.setItem(NS_KEY, ns);

export class ApiError extends Error {
  constructor(status, body) {
    super((body && body.message) || `HTTP ${status}`);
    this.status = status;
  }
}

export async function call(method, path, params, body) {
  const url = new URL(path, location.origin);
  for (const [key, value] of Object.entries(params || {})) {
    if (value !== undefined && value !== null && value !== "") url.searchParams.set(key, value);
  }
  const headers = { Authorization: `Bearer ${sessionStorage.getItem(TOKEN_KEY) || ""}` };
  const init = { method, headers, credentials: "omit", cache: "no-store" };
  if (body !== undefined) {
    headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const response = await fetch(url, init);
  const text = await response.text();
  const data = text ? JSON.parse(text) : null;
  if (!response.ok) throw new ApiError(response.status, data);
  return data;
}

export const get = (path, params) => call("GET", path, params);
