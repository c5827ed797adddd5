// The token arrives once in the URL fragment (never sent to a server), is kept in
// sessionStorage for this tab, and goes out only as an Authorization header.
const TOKEN_KEY = "wakemark.token";
const NS_KEY = "wakemark.namespace";

export function takeTokenFromFragment() {
  const match = /^#token=([^&]+)/.exec(location.hash);
  if (!match) return;
  sessionStorage.setItem(TOKEN_KEY, decodeURIComponent(match[1]));
  history.replaceState(null, "", location.pathname + location.search + "#/projects");
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
