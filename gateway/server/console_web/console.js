// The Dex gateway's operator console: upstreams, tools, pending approvals, pinned definitions
// awaiting review, fences in unknown, tasks and the audit log. Plain JavaScript, no build step,
// no dependency.
//
// Every value comes from the admin JSON routes and is put in the page with textContent only:
// never innerHTML, never as markup, an attribute that acts, or a URL. Characters a reader would not
// see or that would reorder the text (controls, bidi overrides, zero-width and other format
// characters, odd spaces, line separators) are shown as visible \uXXXX escapes, as on the host's
// approval cards, so a name cannot pass for another. The bearer token goes in the
// Authorization header (never a cookie), so another site cannot make the browser act with it.
"use strict";

(function () {
  const TOKEN_KEY = "dex-console-token";
  const ADMIN_VIEWS = ["upstreams", "tools", "approvals", "pins", "fences", "tasks", "audit"];
  const APPROVER_VIEWS = ["approvals"];
  const state = { token: "", role: null, name: null, view: null, auditBefore: null, poll: null, signIn: null };
  const $ = (id) => document.getElementById(id);

  // Not shown as themselves: controls, format (bidi, zero-width), surrogates, private use,
  // unassigned, separators and any space but the plain one. Newlines only where text is multi-line.
  const UNSEEN = /[\p{Cc}\p{Cf}\p{Cs}\p{Co}\p{Cn}\p{Zl}\p{Zp}\p{Zs}]/gu;

  function escapeUnit(ch) {
    let out = "";
    for (let i = 0; i < ch.length; i++) out += "\\u" + ch.charCodeAt(i).toString(16).padStart(4, "0");
    return out;
  }

  function visible(value, multiline) {
    return String(value).replace(UNSEEN, (ch) => (ch === " " || (multiline && ch === "\n")) ? ch : escapeUnit(ch));
  }

  function el(tag, className, text, multiline) {
    const node = document.createElement(tag);
    if (className) node.className = className;
    if (text !== undefined && text !== null) node.textContent = visible(text, multiline);
    return node;
  }

  function button(label, className, onClick) {
    const node = el("button", className, label);
    node.type = "button";
    node.addEventListener("click", onClick);
    return node;
  }

  function text(value) {
    if (value === null || value === undefined || value === "") return "—";
    if (typeof value === "object") return visible(JSON.stringify(value));
    return visible(value);
  }

  function showError(message) {
    $("error").textContent = message || "";
    $("error").hidden = !message;
  }

  function setStatus(message) {
    $("status").textContent = message;
  }

  // The API ------------------------------------------------------------------------------------

  async function api(method, path, body) {
    const headers = { Authorization: "Bearer " + state.token, Accept: "application/json" };
    if (body !== undefined) headers["Content-Type"] = "application/json";
    let response;
    try {
      response = await fetch(path, {
        method, headers, cache: "no-store", credentials: "omit",
        body: body === undefined ? undefined : JSON.stringify(body),
      });
    } catch (e) {
      return { ok: false, status: 0, data: { error: "the gateway did not answer" } };
    }
    let data = {};
    try { data = await response.json(); } catch (e) { data = {}; }
    if (!data || typeof data !== "object") data = {};
    if (response.status === 401 && state.role) {
      // The token stopped working while connected (a signed-in token expired, a token was removed).
      logout("", "The gateway no longer accepts this token (it may have expired): sign in again." +
        (data.error ? " (" + String(data.error) + ")" : ""));
    }
    return { ok: response.ok, status: response.status, data };
  }

  function section(view) {
    const node = $("view-" + view);
    return { node, content: node.querySelector(".content"), unavailable: node.querySelector(".unavailable") };
  }

  // A failed read: 404 (the route is not on this gateway), 401/403 (credentials), anything else.
  function failed(view, result) {
    const parts = section(view);
    parts.content.replaceChildren();
    let message;
    if (result.status === 404) {
      message = "Not available on this gateway" + (result.data.error ? ": " + result.data.error : ".");
    } else if (result.status === 401 || result.status === 403) {
      message = "These credentials may not see this view" + (result.data.error ? ": " + result.data.error : ".");
    } else {
      message = "Could not load this view (" + (result.status || "no answer") + ")" + (result.data.error ? ": " + result.data.error : ".");
    }
    parts.unavailable.textContent = message;
    parts.unavailable.hidden = false;
  }

  function loaded(view) {
    const parts = section(view);
    parts.unavailable.hidden = true;
    parts.unavailable.textContent = "";
    return parts.content;
  }

  function table(columns, rows) {
    const node = el("table");
    const head = el("thead");
    const headRow = el("tr");
    for (const column of columns) headRow.appendChild(el("th", "", column.label));
    head.appendChild(headRow);
    node.appendChild(head);
    const bodyNode = el("tbody");
    for (const row of rows) {
      const tr = el("tr");
      for (const column of columns) {
        const td = el("td");
        td.dataset.label = column.label;  // shown before the value on a phone (CSS attr())
        const value = column.value(row);
        td.appendChild(value instanceof Node ? value : el("span", column.className || "", text(value)));
        tr.appendChild(td);
      }
      bodyNode.appendChild(tr);
    }
    node.appendChild(bodyNode);
    return node;
  }

  function badge(value) {
    const node = el("span", "badge", text(value));
    if (typeof value === "string" && /^[a-z_]+$/.test(value)) node.classList.add(value);
    return node;
  }

  function empty(content, message) {
    content.replaceChildren(el("p", "hint empty", message));
  }

  function query(params) {
    const search = new URLSearchParams();
    for (const [key, value] of Object.entries(params)) if (value) search.set(key, value);
    const q = search.toString();
    return q ? "?" + q : "";
  }

  // Upstreams ----------------------------------------------------------------------------------

  async function loadUpstreams() {
    const result = await api("GET", "/admin/upstreams");
    if (!result.ok) return failed("upstreams", result);
    const content = loaded("upstreams");
    const items = result.data.upstreams || [];
    if (!items.length) return empty(content, "No upstreams are configured.");
    content.replaceChildren(table([
      { label: "Upstream", value: (u) => u.name, className: "mono" },
      { label: "Health", value: (u) => badge(u.health) },
      { label: "Era", value: (u) => u.era },
      { label: "Tools", value: (u) => u.tools },
      { label: "Transport", value: (u) => u.transport },
      { label: "Pinning", value: (u) => u.pinning },
      { label: "Listed", value: (u) => (u.listed_seconds_ago === null || u.listed_seconds_ago === undefined) ? "never" : u.listed_seconds_ago + " s ago" },
      { label: "Last error", value: (u) => u.last_error ? u.last_error + " (" + u.last_error_at + ")" : null },
    ], items));
  }

  // Tools --------------------------------------------------------------------------------------

  async function loadTools() {
    const [result, pins] = await Promise.all([api("GET", "/admin/tools"), api("GET", "/admin/pins?state=all")]);
    if (!result.ok) return failed("tools", result);
    const content = loaded("tools");
    const note = $("view-tools").querySelector(".pins-note");
    const pinOf = new Map();
    if (pins.ok) {
      for (const pin of pins.data.pins || []) pinOf.set(pin.upstream + "\u0000" + pin.tool, pin.state);
      note.hidden = true;
    } else {
      note.textContent = pins.status === 404 ? "Pin state: not available on this gateway." : "Pin state could not be read (" + pins.status + ").";
      note.hidden = false;
    }
    const items = result.data.tools || [];
    if (!items.length) return empty(content, "No tools are listed yet.");
    content.replaceChildren(table([
      { label: "Tool", value: (t) => t.name, className: "mono" },
      { label: "Upstream", value: (t) => t.upstream || "(connector)" },
      { label: "Effect", value: (t) => t.effect },
      { label: "Approval", value: (t) => badge(t.approval) },
      { label: "Pin", value: (t) => pins.ok ? badge(pinOf.get(t.upstream + "\u0000" + t.target) || "not pinned") : "n/a" },
    ], items));
  }

  // Approvals ----------------------------------------------------------------------------------

  async function loadApprovals() {
    const result = await api("GET", "/admin/approvals?state=pending");
    if (!result.ok) return failed("approvals", result);
    const content = loaded("approvals");
    const items = result.data.approvals || [];
    const shown = new Map();
    for (const card of content.querySelectorAll("article.approval")) shown.set(card.dataset.id, card);
    for (const [id, card] of shown) {
      // Decided here: kept with its outcome; gone elsewhere (decided, expired): removed.
      if (!items.some((a) => a.id === id) && !card.dataset.decided) card.remove();
    }
    for (const approval of items) if (!shown.has(approval.id)) content.appendChild(approvalCard(approval));
    const placeholder = content.querySelector(".empty");
    if (content.querySelector("article.approval")) { if (placeholder) placeholder.remove(); }
    else if (!placeholder) content.appendChild(el("p", "hint empty", "Nothing waits for a decision."));
  }

  function approvalCard(approval) {
    const card = el("article", "item approval");
    card.dataset.id = approval.id;
    card.setAttribute("aria-label", "approval for " + text(approval.tool));
    card.appendChild(el("h3", "", text(approval.tool) + " wants to run"));
    card.appendChild(el("div", "card-text", approval.card, true));
    card.appendChild(el("p", "meta", "caller " + text(approval.principal) + " · upstream " + text(approval.upstream) +
      " · key " + text(approval.idempotency_key)));
    card.appendChild(el("p", "meta deadline", "asked " + text(approval.created_at) + " · expires " + text(approval.expires_at)));
    const label = el("label", "", "Reason (optional)");
    const reason = el("input");
    reason.type = "text";
    reason.maxLength = 500;
    label.appendChild(reason);
    card.appendChild(label);
    const outcome = el("p", "outcome");
    outcome.setAttribute("role", "status");
    const row = el("div", "row");
    const decide = async (decision) => {
      for (const b of row.querySelectorAll("button")) b.disabled = true;
      const body = { decision };
      if (reason.value.trim()) body.reason = reason.value.trim();
      const answer = await api("POST", "/admin/approvals/" + encodeURIComponent(approval.id) + "/decision", body);
      if (answer.ok || answer.status === 409) {
        const decided = answer.data || {};
        card.dataset.decided = "1";
        row.remove();
        label.remove();
        outcome.textContent = (answer.status === 409 ? "Already decided: " : "") + text(decided.state) +
          (decided.decided_by ? " by " + text(decided.decided_by) : "") + (decided.reason ? " (" + text(decided.reason) + ")" : "");
        return;
      }
      for (const b of row.querySelectorAll("button")) b.disabled = false;
      outcome.textContent = answer.status === 403
        ? "Refused: " + text(answer.data.error || "these credentials may not decide this call")
        : "The decision was not recorded: " + text(answer.data.error || answer.status);
    };
    row.appendChild(button("Allow", "", () => decide("allow")));
    row.appendChild(button("Deny", "danger", () => decide("deny")));
    card.appendChild(row);
    card.appendChild(outcome);
    return card;
  }

  // Pins ---------------------------------------------------------------------------------------

  function definitionLines(definition) {
    return definition === null || definition === undefined ? [] : JSON.stringify(definition, null, 2).split("\n");
  }

  // A line diff (longest common subsequence): [[" " | "-" | "+", line], ...].
  function diffLines(before, after) {
    const n = before.length, m = after.length;
    const lcs = Array.from({ length: n + 1 }, () => new Array(m + 1).fill(0));
    for (let i = n - 1; i >= 0; i--) {
      for (let j = m - 1; j >= 0; j--) {
        lcs[i][j] = before[i] === after[j] ? lcs[i + 1][j + 1] + 1 : Math.max(lcs[i + 1][j], lcs[i][j + 1]);
      }
    }
    const out = [];
    let i = 0, j = 0;
    while (i < n && j < m) {
      if (before[i] === after[j]) { out.push([" ", before[i]]); i++; j++; }
      else if (lcs[i + 1][j] >= lcs[i][j + 1]) out.push(["-", before[i++]]);
      else out.push(["+", after[j++]]);
    }
    while (i < n) out.push(["-", before[i++]]);
    while (j < m) out.push(["+", after[j++]]);
    return out;
  }

  function diffList(pin) {
    const list = el("ol", "diff");
    list.setAttribute("aria-label", "changes from the pinned definition to the one seen now");
    for (const [mark, line] of diffLines(definitionLines(pin.pinned_definition), definitionLines(pin.seen_definition))) {
      const item = el("li", mark === "+" ? "add" : mark === "-" ? "del" : "same", mark + " " + line);
      list.appendChild(item);
    }
    return list;
  }

  async function loadPins() {
    const result = await api("GET", "/admin/pins?state=pending");
    if (!result.ok) return failed("pins", result);
    const content = loaded("pins");
    const items = result.data.pins || [];
    if (!items.length) return empty(content, "No tool definition awaits review.");
    content.replaceChildren(...items.map(pinCard));
  }

  function pinCard(pin) {
    const card = el("article", "item pin");
    card.setAttribute("aria-label", "definition of " + text(pin.upstream) + " / " + text(pin.tool));
    const title = el("h3");
    title.appendChild(el("span", "mono", text(pin.upstream) + " / " + text(pin.tool) + " "));
    title.appendChild(badge(pin.state));
    title.appendChild(el("span", "", " "));
    title.appendChild(badge(pin.mode));
    card.appendChild(title);
    card.appendChild(el("p", "meta", "first seen " + text(pin.first_seen_at) + " · changed " + text(pin.changed_at)));
    card.appendChild(el("p", "meta mono", "pinned " + text(pin.pinned_digest) + " → seen " + text(pin.seen_digest)));
    card.appendChild(diffList(pin));
    const outcome = el("p", "outcome");
    outcome.setAttribute("role", "status");
    const row = el("div", "row");
    const act = async (action) => {
      for (const b of row.querySelectorAll("button")) b.disabled = true;
      const path = "/admin/pins/" + encodeURIComponent(pin.upstream) + "/" + encodeURIComponent(pin.tool) + "/" + action;
      const answer = await api("POST", path, {});
      if (answer.ok) {
        row.remove();
        outcome.textContent = action === "accept" ? "Accepted: the new definition is pinned." : "Rejected.";
        return;
      }
      for (const b of row.querySelectorAll("button")) b.disabled = false;
      outcome.textContent = "Not done: " + text(answer.data.error || answer.status);
    };
    row.appendChild(button("Accept", "", () => act("accept")));
    row.appendChild(button("Reject", "danger", () => act("reject")));
    card.appendChild(row);
    card.appendChild(outcome);
    return card;
  }

  // Fences -------------------------------------------------------------------------------------

  async function loadFences() {
    const resolved = $("fences-resolved").value;
    const result = await api("GET", "/admin/fences" + query({ state: "unknown", resolved }));
    if (!result.ok) return failed("fences", result);
    const content = loaded("fences");
    const items = result.data.fences || [];
    if (!items.length) return empty(content, resolved === "true" ? "No fence has been resolved." : "No fence in unknown waits for a check.");
    content.replaceChildren(...items.map(fenceCard));
  }

  function fenceCard(fence) {
    const card = el("article", "item fence");
    card.setAttribute("aria-label", "fence of " + text(fence.tool));
    card.appendChild(el("h3", "mono", fence.tool));
    card.appendChild(el("p", "meta", "caller " + text(fence.principal) + " · " + text(fence.effect) + " · " +
      text(fence.attempts) + " attempt(s) · last change " + text(fence.updated_at)));
    card.appendChild(el("p", "meta mono", "fence " + text(fence.fence_id)));
    if (fence.answer) card.appendChild(el("pre", "", JSON.stringify(fence.answer, null, 2), true));
    const outcome = el("p", "outcome");
    outcome.setAttribute("role", "status");
    if (fence.resolution) {
      outcome.textContent = "Resolved by " + text(fence.resolution.by) + " at " + text(fence.resolution.at) + ": " + text(fence.resolution.note);
      card.appendChild(outcome);
      return card;
    }
    const label = el("label", "", "What you found (required)");
    const note = el("textarea");
    note.rows = 2;
    note.maxLength = 2000;
    label.appendChild(note);
    card.appendChild(label);
    const row = el("div", "row");
    row.appendChild(button("Mark as resolved", "", async (event) => {
      if (!note.value.trim()) { outcome.textContent = "Write a note first: what happened upstream?"; note.focus(); return; }
      event.target.disabled = true;
      const answer = await api("POST", "/admin/fences/" + encodeURIComponent(fence.fence_id) + "/resolve", { note: note.value.trim() });
      if (answer.ok || answer.status === 409) {
        row.remove();
        label.remove();
        const r = answer.data.resolution;
        outcome.textContent = r ? (answer.status === 409 ? "Already resolved by " : "Resolved by ") + text(r.by) + ": " + text(r.note)
          : "Not resolved: " + text(answer.data.error);
        return;
      }
      event.target.disabled = false;
      outcome.textContent = "Not resolved: " + text(answer.data.error || answer.status);
    }));
    card.appendChild(row);
    card.appendChild(outcome);
    return card;
  }

  // Tasks --------------------------------------------------------------------------------------

  const TERMINAL = ["completed", "failed", "cancelled"];

  async function loadTasks() {
    const result = await api("GET", "/admin/tasks");
    if (!result.ok) return failed("tasks", result);
    const content = loaded("tasks");
    const items = result.data.tasks || [];
    if (!items.length) return empty(content, "No tasks.");
    content.replaceChildren(table([
      { label: "Task", value: (t) => t.task_id, className: "mono" },
      { label: "Tool", value: (t) => t.tool },
      { label: "Caller", value: (t) => t.principal },
      { label: "Status", value: (t) => badge(t.status) },
      { label: "Message", value: (t) => t.status_message },
      { label: "Created", value: (t) => t.created_at },
      { label: "Action", value: (t) => TERMINAL.includes(t.status) ? "" : button("Cancel", "danger", async (event) => {
        event.target.disabled = true;
        const answer = await api("POST", "/admin/tasks/" + encodeURIComponent(t.task_id) + "/cancel", {});
        if (!answer.ok) { showError("The task was not cancelled: " + text(answer.data.error || answer.status)); event.target.disabled = false; return; }
        await loadTasks();
      }) },
    ], items));
  }

  // Audit --------------------------------------------------------------------------------------

  function auditFilters() {
    const form = $("audit-filters");
    const out = {};
    for (const name of ["since", "principal", "tool", "outcome"]) out[name] = form.elements[name].value.trim();
    return out;
  }

  async function loadAudit(older) {
    const params = { ...auditFilters(), limit: "100" };
    if (older && state.auditBefore) params.before = String(state.auditBefore);
    const result = await api("GET", "/admin/audit" + query(params));
    if (!result.ok) { $("audit-older").hidden = true; return failed("audit", result); }
    const content = loaded("audit");
    const items = result.data.entries || [];
    state.auditBefore = result.data.next_before || null;
    $("audit-older").hidden = !state.auditBefore;
    if (!items.length) return empty(content, older ? "No older entries." : "No entries match.");
    content.replaceChildren(table([
      { label: "Time", value: (e) => e.time },
      { label: "Caller", value: (e) => e.principal },
      { label: "Tool", value: (e) => e.tool, className: "mono" },
      { label: "Outcome", value: (e) => badge(e.outcome) },
      { label: "Approval", value: (e) => e.approval ? text(e.approval.how) + " by " + text(e.approval.by) + " at " + text(e.approval.at) : "none" },
      { label: "Key", value: (e) => e.idempotency_key, className: "mono" },
      { label: "Fence", value: (e) => e.fence_state },
      { label: "Latency", value: (e) => (e.latency_ms === null || e.latency_ms === undefined) ? null : e.latency_ms + " ms" },
      { label: "Arguments", value: (e) => e.arguments !== undefined && e.arguments !== null ? e.arguments : e.arguments_digest, className: "mono" },
      { label: "Trace", value: (e) => e.trace_id, className: "mono" },
    ], items));
  }

  // Views --------------------------------------------------------------------------------------

  const loaders = {
    upstreams: loadUpstreams, tools: loadTools, approvals: loadApprovals, pins: loadPins,
    fences: loadFences, tasks: loadTasks, audit: () => loadAudit(false),
  };

  function allowed() {
    return state.role === "admin" ? ADMIN_VIEWS : APPROVER_VIEWS;
  }

  async function show(view, focus) {
    if (!allowed().includes(view)) view = allowed()[0];
    state.view = view;
    showError("");
    for (const name of ADMIN_VIEWS) section(name).node.hidden = name !== view;
    for (const nav of document.querySelectorAll("nav [data-view]")) {
      if (nav.dataset.view === view) nav.setAttribute("aria-current", "page"); else nav.removeAttribute("aria-current");
    }
    if (focus) $("title-" + view).focus();
    await loaders[view]();
  }

  function loginError(message) {
    $("login-error").textContent = message ? visible(message) : "";
    $("login-error").hidden = !message;
  }

  // Forgets the token (and every view's content); `refusal`: why, shown as an alert.
  function logout(message, refusal) {
    state.token = "";
    state.role = null;
    state.name = null;
    sessionStorage.removeItem(TOKEN_KEY);
    for (const name of ADMIN_VIEWS) section(name).content.replaceChildren();
    $("app").hidden = true;
    $("login").hidden = false;
    $("oauth-login").hidden = !state.signIn;
    loginError(refusal || "");
    setStatus("Not connected" + (message ? ": " + message : "."));
  }

  // `viaSignIn`: the token comes from the identity provider (the person signed in there).
  async function connect(token, view, viaSignIn) {
    state.token = token;
    const who = await api("GET", "/admin/whoami");
    if (!who.ok || (who.data.role !== "admin" && who.data.role !== "approver")) {
      const why = text(who.data.error || "the gateway did not answer (" + who.status + ")");
      if (viaSignIn && (who.status === 401 || who.status === 403)) {
        return logout("", "You signed in at the identity provider, but the gateway does not accept you on the console: " + why);
      }
      return logout(why);
    }
    state.role = who.data.role;
    state.name = who.data.name;
    sessionStorage.setItem(TOKEN_KEY, token);
    for (const nav of document.querySelectorAll("nav [data-admin]")) nav.hidden = state.role !== "admin";
    $("login").hidden = true;
    $("oauth-login").hidden = true;
    loginError("");
    $("app").hidden = false;
    setStatus(state.role === "admin"
      ? "Connected as " + text(state.name) + " (the admin token)."
      : "Signed in as " + text(state.name) + ", an approver: approvals only.");
    await show(view || (state.role === "admin" ? "upstreams" : "approvals"), false);
  }

  // Sign-in at the identity provider (console_login.js): offered when auth.oauth.console is set.
  async function setUpSignIn() {
    const login = window.DexConsoleLogin;
    state.signIn = login ? await login.settings() : null;
    if (!state.signIn) return false;
    $("oauth-issuer").textContent = visible(state.signIn.issuer);
    $("oauth-login").hidden = !$("app").hidden;
    $("oauth-start").addEventListener("click", async (event) => {
      event.target.disabled = true;
      loginError("");
      setStatus("Going to the identity provider…");
      try {
        await login.start(state.signIn);
      } catch (e) {
        event.target.disabled = false;
        logout("", "Sign-in could not start: " + (e instanceof login.LoginError ? e.message : "the identity provider could not be reached"));
      }
    });
    if (!login.isCallback(state.signIn)) return false;
    setStatus("Finishing the sign-in…");
    let token;
    try {
      token = await login.finish();
    } catch (e) {
      logout("", e instanceof login.LoginError ? e.message : "The sign-in failed.");
      return true;
    }
    await connect(token, null, true);
    return true;
  }

  document.addEventListener("DOMContentLoaded", async () => {
    $("login").addEventListener("submit", (event) => {
      event.preventDefault();
      connect($("token").value.trim(), null);
    });
    $("logout").addEventListener("click", () => logout("signed out; the token is forgotten."));
    for (const nav of document.querySelectorAll("nav [data-view]")) {
      nav.addEventListener("click", () => show(nav.dataset.view, true));
    }
    for (const refresh of document.querySelectorAll(".view .refresh")) {
      refresh.addEventListener("click", () => loaders[state.view]());
    }
    $("fences-resolved").addEventListener("change", loadFences);
    $("audit-filters").addEventListener("submit", (event) => { event.preventDefault(); loadAudit(false); });
    $("audit-older").addEventListener("click", () => loadAudit(true));
    // Pending approvals appear by themselves while the view is open.
    state.poll = setInterval(() => { if (state.token && state.view === "approvals") loadApprovals(); }, 2000);
    // A token in the fragment (#token=...&view=...) never reaches the server; it is taken and removed.
    const fragment = new URLSearchParams(location.hash.slice(1));
    const token = fragment.get("token") || sessionStorage.getItem(TOKEN_KEY);
    const view = fragment.get("view");
    if (fragment.has("token") || fragment.has("view")) history.replaceState(null, "", location.pathname + location.search);
    if (await setUpSignIn()) return;  // the identity provider's answer (/console/callback)
    if (location.pathname !== "/console" && location.pathname !== "/console/") history.replaceState(null, "", "/console");
    if (token) connect(token, view, false);
  });
})();
