// The Dex agent host's session page: a live transcript, approval cards, questions, the plan,
// steer and cancel. Plain JavaScript, no build step, no dependency.
//
// Everything shown comes from the host's API, already escaped for display on the server
// (control, bidi and invisible characters as visible escapes), and is put in the page with
// textContent only: never innerHTML, never as markup or a URL.
"use strict";

(function () {
  // /ui/sessions/{id}: one session; /ui/: the session list.
  const sessionId = location.pathname.startsWith("/ui/sessions/") ? decodeURIComponent(location.pathname.split("/").pop() || "") : "";
  const base = "/sessions/" + encodeURIComponent(sessionId);
  const state = {
    token: "",
    lastEventId: 0,
    clockOffsetMs: 0,
    runningTurn: null,
    streaming: new Map(), // turn id -> the assistant bubble receiving deltas
    toolCalls: new Map(), // tool call id -> its transcript entry
    cards: new Map(), // approval id -> card
    questions: new Map(), // question id -> card
    plan: null,
    usage: { input: 0, output: 0, cost: null },
    stopped: false,
  };

  const $ = (id) => document.getElementById(id);

  function el(tag, className, text) {
    const node = document.createElement(tag);
    if (className) node.className = className;
    if (text !== undefined && text !== null) node.textContent = String(text);
    return node;
  }

  function button(label, className, onClick) {
    const node = el("button", className, label);
    node.type = "button";
    node.addEventListener("click", onClick);
    return node;
  }

  // A labelled one-line text input: [the label (holding the input), the input].
  function textField(labelText, maxLength) {
    const label = el("label", "", labelText);
    const input = el("input");
    input.type = "text";
    input.maxLength = maxLength;
    label.appendChild(input);
    return [label, input];
  }

  function showError(message) {
    const box = $("error");
    box.textContent = message || "";
    box.hidden = !message;
  }

  function setStatus(message) {
    $("status").textContent = message;
  }

  // The API ------------------------------------------------------------------------------

  async function api(method, path, body) {
    const headers = { Authorization: "Bearer " + state.token, Accept: "application/json" };
    if (body !== undefined) headers["Content-Type"] = "application/json";
    const response = await fetch(path, {
      method, headers, cache: "no-store", body: body === undefined ? undefined : JSON.stringify(body),
    });
    let data = {};
    try { data = await response.json(); } catch (e) { data = {}; }
    if (response.status === 401 || response.status === 403) {
      logout(data.error || "the host refused the token");
    }
    return { ok: response.ok, status: response.status, data };
  }

  function nowSeconds() {
    return (Date.now() + state.clockOffsetMs) / 1000;
  }

  function timeLeft(deadline) {
    const left = Math.max(0, Math.floor(deadline - nowSeconds()));
    const h = Math.floor(left / 3600), m = Math.floor((left % 3600) / 60), s = left % 60;
    if (h) return h + "h " + String(m).padStart(2, "0") + "m left";
    if (m) return m + "m " + String(s).padStart(2, "0") + "s left";
    return s + "s left";
  }

  function deadlineText(deadline) {
    if (deadline === null || deadline === undefined) return "No deadline.";
    const at = new Date(deadline * 1000).toLocaleTimeString();
    return "Deadline " + at + " (" + timeLeft(deadline) + "); then it is rejected.";
  }

  // The transcript -----------------------------------------------------------------------

  function entry(className, label, text) {
    const item = el("li", "entry " + className);
    if (label) item.appendChild(el("span", "who", label));
    const body = el("span", "text", text);
    item.appendChild(body);
    $("transcript").appendChild(item);
    item.scrollIntoView({ block: "nearest" });
    return { item, body };
  }

  function onMessage(data) {
    if (data.role === "user") {
      entry("user", "you", data.text);
      return;
    }
    let bubble = state.streaming.get(data.turn_id);
    state.streaming.delete(data.turn_id);
    if (data.text) {
      if (!bubble) bubble = entry("assistant", "agent", "");
      bubble.body.textContent = data.text;
      bubble.item.classList.remove("live");
    } else if (bubble) {
      bubble.item.remove();
    }
    for (const call of data.tool_calls || []) toolEntry(call.id, call.call);
  }

  function onDelta(data) {
    let bubble = state.streaming.get(data.turn_id);
    if (!bubble) {
      bubble = entry("assistant live", "agent", "");
      state.streaming.set(data.turn_id, bubble);
    }
    bubble.body.textContent += data.text || "";
  }

  function toolEntry(id, call) {
    let found = state.toolCalls.get(id);
    if (!found) {
      found = entry("tool", "tool", call);
      found.badge = el("span", "badge", "pending");
      found.item.appendChild(found.badge);
      found.result = el("div", "result");
      found.item.appendChild(found.result);
      state.toolCalls.set(id, found);
    }
    return found;
  }

  function onToolCall(data) {
    const found = toolEntry(data.tool_call_id, data.call);
    const status = data.cancel_reason ? data.status + " (" + data.cancel_reason + ")" : data.status;
    found.badge.textContent = status;
    found.badge.dataset.status = data.status;
    found.result.textContent = data.result || "";
    found.final = data.result !== null && data.result !== undefined;
  }

  // Tool progress (an upstream's notifications/progress): shown on the call until its result.
  function onToolProgress(data) {
    const found = state.toolCalls.get(data.tool_call_id);
    if (!found || found.final) return;
    const amount = data.total ? data.progress + "/" + data.total : String(data.progress);
    found.result.textContent = "progress " + amount + (data.message ? ": " + data.message : "");
  }

  function onTurnStarted(data) {
    state.runningTurn = data.turn_id;
    entry("meta", "", data.turn_id + (data.mode !== "chat" ? " (" + data.mode + ")" : "") + " started");
    refreshControls();
  }

  function onTurnFinished(data) {
    if (state.runningTurn === data.turn_id) state.runningTurn = null;
    const bubble = state.streaming.get(data.turn_id);
    if (bubble) bubble.item.classList.remove("live");
    state.streaming.delete(data.turn_id);
    const why = data.error ? ": " + data.error : "";
    entry("meta turn-end", "", data.turn_id + " " + data.status + why).item.dataset.status = data.status;
    refreshControls();
  }

  function onControl(data) {
    if (data.applied) return;
    const what = data.kind === "steer" ? "steer: " + (data.text || "") :
      data.kind === "cancel" ? "cancel requested" + (data.text ? ": " + data.text : "") :
      "plan revision " + data.revision + " approved";
    entry("meta control", "", what + " (" + data.source + ")");
  }

  function onUsage(data) {
    state.usage.input += data.input_tokens || 0;
    state.usage.output += data.output_tokens || 0;
    if (data.cost !== null && data.cost !== undefined) state.usage.cost = (state.usage.cost || 0) + data.cost;
    let line = "Session usage: " + (state.usage.input + state.usage.output).toLocaleString() + " tokens (" +
      state.usage.input.toLocaleString() + " in, " + state.usage.output.toLocaleString() + " out)";
    if (state.usage.cost !== null) line += " · $" + state.usage.cost.toFixed(4);
    $("usage").textContent = line;
  }

  // Approval cards, questions, the plan ------------------------------------------------------

  function outcomeText(status, by, reason) {
    let text = status.charAt(0).toUpperCase() + status.slice(1);
    if (by) text += " by " + by;
    if (reason) text += ": " + reason;
    return text;
  }

  // A card with a deterministic element id (approval and question ids are hex), its title and
  // an outcome line (a live region); the caller adds the rest, then the outcome at the end.
  function newCard(kind, id, titleText, registry, container) {
    const card = { node: el("article", "card " + kind) };
    card.node.id = kind + "-" + id.replace(/[^0-9a-f]/g, "");
    const title = el("h3", "", titleText);
    title.id = card.node.id + "-title";
    card.node.setAttribute("aria-labelledby", title.id);
    card.node.appendChild(title);
    card.outcome = el("p", "outcome");
    card.outcome.setAttribute("role", "status");
    container.appendChild(card.node);
    registry.set(id, card);
    return card;
  }

  // A card's state: its controls and deadline while pending, else who decided what.
  function showState(card, data, controls, outcome) {
    card.status = data.status;
    card.deadlineAt = data.deadline;
    card.node.dataset.status = data.status;
    const pending = data.status === "pending";
    for (const control of controls) control.hidden = !pending;
    card.deadline.textContent = pending ? deadlineText(data.deadline) : "";
    card.outcome.textContent = pending ? "" : outcome;
    refreshWaiting();
  }

  function onApproval(data) {
    let card = state.cards.get(data.id);
    if (!card) {
      card = newCard("approval", data.id, data.title, state.cards, $("approvals"));
      card.node.appendChild(el("p", "call mono", data.call));
      card.node.appendChild(el("p", "meta", "tool " + data.tool + " · " + data.effect + " · approval " + data.id));
      card.deadline = el("p", "deadline");
      card.node.appendChild(card.deadline);
      const [label, reason] = textField("Reason (optional)", 500);
      card.reason = reason;
      card.node.appendChild(label);
      card.buttons = el("div", "row");
      card.buttons.appendChild(button("Allow", "allow", () => decide(data.id, "allow")));
      card.buttons.appendChild(button("Deny", "danger", () => decide(data.id, "deny")));
      card.node.appendChild(card.buttons);
      card.node.appendChild(card.outcome);
    }
    showState(card, data, [card.buttons, card.reason.parentElement], outcomeText(data.status, data.decided_by, data.reason));
  }

  async function decide(id, decision) {
    const card = state.cards.get(id);
    for (const b of card.buttons.querySelectorAll("button")) b.disabled = true;
    const reason = card.reason.value.trim();
    const answer = await api("POST", "/approvals/" + encodeURIComponent(id), reason ? { decision, reason } : { decision });
    for (const b of card.buttons.querySelectorAll("button")) b.disabled = false;
    if (!answer.ok) return showError(answer.data.error || "the decision was refused (HTTP " + answer.status + ")");
    showError("");
    onApproval(answer.data.approval);
    if (answer.data.replayed) card.outcome.textContent = "Already decided — " + card.outcome.textContent;
  }

  function onQuestion(data) {
    let card = state.questions.get(data.id);
    if (!card) {
      const form = data.kind === "elicitation" && Array.isArray(data.fields);
      card = newCard("question", data.id, form ? "A tool asks" : "The agent asks", state.questions, $("questions"));
      card.node.appendChild(el("p", "question-text", data.question));
      card.deadline = el("p", "deadline");
      card.node.appendChild(card.deadline);
      if (form) {
        card.controls = formControls(data, card);
        card.node.appendChild(card.controls);
        card.node.appendChild(card.outcome);
        const answered = data.answer ? "“" + data.answer + "”" : null;
        return showState(card, data, [card.controls], outcomeText(data.status, data.answered_by, answered));
      }
      card.controls = el("form", "answers");
      const choices = el("div", "row choices");
      for (const choice of data.choices || []) choices.appendChild(button(choice, "choice", () => answer(data.id, choice)));
      card.controls.appendChild(choices);
      if (data.allows_free_text) {
        const [label, free] = textField("Your answer", 4000);
        card.free = free;
        card.controls.appendChild(label);
        const send = el("button", "", "Answer");
        send.type = "submit";
        card.controls.appendChild(send);
      }
      card.controls.appendChild(button("Decline", "danger", () => answer(data.id, null)));
      card.controls.addEventListener("submit", (event) => {
        event.preventDefault();
        if (card.free && card.free.value.trim()) answer(data.id, card.free.value.trim());
      });
      card.node.appendChild(card.controls);
      card.node.appendChild(card.outcome);
    }
    const answered = data.answer ? "“" + data.answer + "”" : null;
    showState(card, data, [card.controls], outcomeText(data.status, data.answered_by, answered));
  }

  // An upstream's form (elicitation): one input per field, by its type; answered with its values.
  function formControls(data, card) {
    const controls = el("form", "answers form-question");
    const readers = [];
    for (const field of data.fields) {
      const label = el("label", "", (field.title || field.name) + (field.required ? " *" : ""));
      if (field.description) label.appendChild(el("span", "meta", " " + field.description));
      let read;
      if (field.type === "boolean") {
        const box = el("input");
        box.type = "checkbox";
        label.appendChild(box);
        read = () => box.checked;
      } else if (field.enum && field.type === "array") {
        const boxes = field.enum.map((value, i) => {
          const option = el("label", "choice", (field.enum_titles || field.enum)[i]);
          const box = el("input");
          box.type = "checkbox";
          box.value = value;
          option.prepend(box);
          label.appendChild(option);
          return box;
        });
        read = () => { const picked = boxes.filter((b) => b.checked).map((b) => b.value); return picked.length ? picked : undefined; };
      } else if (field.enum) {
        const select = el("select");
        select.appendChild(el("option", "", ""));
        field.enum.forEach((value, i) => {
          const option = el("option", "", (field.enum_titles || field.enum)[i]);
          option.value = value;
          select.appendChild(option);
        });
        label.appendChild(select);
        read = () => select.value || undefined;
      } else {
        const input = el("input");
        input.type = field.type === "string" ? "text" : "number";
        if (field.type === "number") input.step = "any";
        label.appendChild(input);
        read = () => input.value === "" ? undefined : (field.type === "string" ? input.value : Number(input.value));
      }
      readers.push([field.name, read]);
      controls.appendChild(label);
    }
    const send = el("button", "", "Send");
    send.type = "submit";
    controls.appendChild(send);
    controls.appendChild(button("Decline", "danger", () => answer(data.id, null)));
    controls.addEventListener("submit", (event) => {
      event.preventDefault();
      const content = {};
      for (const [name, read] of readers) {
        const value = read();
        if (value !== undefined) content[name] = value;
      }
      answerForm(data.id, content);
    });
    return controls;
  }

  async function answerForm(id, content) {
    const result = await api("POST", "/questions/" + encodeURIComponent(id), { content });
    if (!result.ok) return showError(result.data.error || "the answer was refused (HTTP " + result.status + ")");
    showError("");
    onQuestion(result.data.question);
  }

  async function answer(id, text) {
    const body = text === null ? { decline: true } : { answer: text };
    const result = await api("POST", "/questions/" + encodeURIComponent(id), body);
    if (!result.ok) return showError(result.data.error || "the answer was refused (HTTP " + result.status + ")");
    showError("");
    onQuestion(result.data.question);
  }

  function onPlan(data) {
    state.plan = data;
    $("plan-panel").hidden = !(data.todos && data.todos.length);
    $("plan-meta").textContent = "revision " + data.revision + " · " + (data.status || "");
    const list = $("plan-items");
    list.replaceChildren();
    for (const task of data.todos || []) {
      const item = el("li", "task");
      item.dataset.status = task.status;
      item.appendChild(el("span", "badge", task.status));
      item.appendChild(el("span", "", " " + task.content));
      list.appendChild(item);
    }
    refreshControls();
  }

  async function executePlan() {
    if (!state.plan) return;
    const result = await api("POST", base + "/plan/approve", { revision: state.plan.revision });
    if (!result.ok) return showError(result.data.error || "the plan could not be approved");
    showError("");
    $("plan-execute").hidden = true;
  }

  function refreshWaiting() {
    const waiting = [...state.cards.values(), ...state.questions.values()].some((c) => c.status === "pending");
    $("nothing-waiting").hidden = waiting;
  }

  function refreshControls() {
    const running = state.runningTurn !== null;
    $("steer-send").disabled = !running;
    $("cancel-turn").disabled = !running;
    setStatus(running ? "Turn " + state.runningTurn + " is running." : "No turn is running.");
    $("plan-execute").hidden = !(state.plan && state.plan.status === "draft" && !running);
  }

  function tick() {
    for (const card of [...state.cards.values(), ...state.questions.values()]) {
      if (card.status === "pending") card.deadline.textContent = deadlineText(card.deadlineAt);
    }
  }

  // The live stream (stream.js): each event goes to its handler ----------------------------

  const handlers = {
    turn_started: onTurnStarted, turn_finished: onTurnFinished, message: onMessage, delta: onDelta,
    tool_call: onToolCall, tool_progress: onToolProgress, approval: onApproval, question: onQuestion, plan: onPlan, usage: onUsage,
    control: onControl,
    queue: () => refreshQueue(),
    compaction: (d) => entry("meta", "", "earlier messages were summarised (" + d.replaced_messages + " replaced)"),
  };

  function stream() {
    return window.dexEventStream(base + "/events", {
      token: () => state.token,
      lastEventId: () => state.lastEventId,
      stopped: () => state.stopped,
      onEvent: (id, data) => {
        const event = JSON.parse(data);
        const handler = handlers[event.type];
        if (handler) handler(event.data);
        if (id !== null) state.lastEventId = id;
      },
      onOpen: () => setStatus(state.runningTurn ? "Turn " + state.runningTurn + " is running." : "Connected."),
      onLost: () => setStatus("Connection lost; reconnecting…"),
      onRefused: () => logout("the host refused the token"),
    });
  }

  // Chat (dex-agent serve): the message box, the queue, the session list -----------------------

  async function refreshQueue() {
    const result = await api("GET", base + "/messages?limit=1");
    if (!result.ok) return;
    const list = $("queue");
    list.replaceChildren();
    for (const queued of result.data.queued || []) {
      const item = el("li", "queued");
      item.appendChild(el("span", "", queued.text));
      item.appendChild(button("Withdraw", "", async () => {
        const withdrawn = await api("DELETE", base + "/messages/" + encodeURIComponent(queued.id));
        if (withdrawn.status !== 204) showError(withdrawn.data.error || "the message could not be withdrawn");
        refreshQueue();
      }));
      list.appendChild(item);
    }
    $("queue-empty").hidden = list.children.length > 0;
  }

  async function sendMessage(event) {
    event.preventDefault();
    const text = $("message-text").value.trim();
    if (!text) return;
    const result = await api("POST", base + "/messages", { text, plan: $("message-plan").checked });
    if (!result.ok) return showError(result.data.error || "the message was refused");
    showError("");
    $("message-text").value = "";
    $("message-plan").checked = false;
    refreshQueue();
  }

  async function showSessions() {
    const result = await api("GET", "/sessions");
    if (!result.ok) {
      if (result.status !== 401 && result.status !== 403) setStatus("Cannot list the sessions: " + (result.data.error || result.status));
      return false;
    }
    const list = $("sessions");
    list.replaceChildren();
    for (const session of result.data.sessions) {
      const item = el("li");
      const link = el("a", "mono", session.session_id);
      link.href = "/ui/sessions/" + encodeURIComponent(session.session_id);
      item.appendChild(link);
      item.appendChild(el("span", "meta", " " + session.turns + " turns" + (session.last_status ? ", last " + session.last_status : "") +
        (session.queued ? ", " + session.queued + " queued" : "")));
      list.appendChild(item);
    }
    return true;
  }

  async function newSession() {
    const result = await api("POST", "/sessions", {});
    if (!result.ok) return setStatus("Cannot start a session: " + (result.data.error || result.status));
    location.assign("/ui/sessions/" + encodeURIComponent(result.data.session_id));
  }

  // Start --------------------------------------------------------------------------------------

  function logout(message) {
    state.stopped = true;
    sessionStorage.removeItem("dex-approver-token");
    $("app").hidden = true;
    $("login").hidden = false;
    setStatus("Not connected: " + message);
  }

  async function connect(token) {
    state.token = token;
    if (!sessionId) {
      if (!(await showSessions())) return;
      sessionStorage.setItem("dex-approver-token", token);
      $("login").hidden = true;
      $("sessions-panel").hidden = false;
      setStatus("Connected.");
      return;
    }
    const snapshot = await api("GET", base);
    if (!snapshot.ok) {
      if (snapshot.status !== 401 && snapshot.status !== 403) setStatus("Cannot open the session: " + (snapshot.data.error || snapshot.status));
      return;
    }
    sessionStorage.setItem("dex-approver-token", token);
    state.clockOffsetMs = snapshot.data.now * 1000 - Date.now();
    state.stopped = false;
    $("login").hidden = true;
    $("app").hidden = false;
    refreshControls();
    stream();
    const chat = await api("GET", base + "/messages?limit=1");
    $("chat-panel").hidden = !chat.ok; // only dex-agent serve takes messages
    if (chat.ok) refreshQueue();
  }

  document.addEventListener("DOMContentLoaded", () => {
    $("session-id").textContent = sessionId;
    $("login").addEventListener("submit", (event) => {
      event.preventDefault();
      connect($("token").value.trim());
    });
    $("steer-form").addEventListener("submit", async (event) => {
      event.preventDefault();
      const text = $("steer-text").value.trim();
      if (!text) return;
      const result = await api("POST", base + "/steer", { text });
      if (!result.ok) return showError(result.data.error || "the message was refused");
      showError("");
      $("steer-text").value = "";
    });
    $("steer-text").addEventListener("keydown", (event) => {
      if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) $("steer-form").requestSubmit();
    });
    $("cancel-turn").addEventListener("click", async () => {
      const result = await api("POST", base + "/cancel", { reason: "cancelled on the web page" });
      if (!result.ok) return showError(result.data.error || "the turn could not be cancelled");
      showError("");
    });
    $("plan-execute").addEventListener("click", executePlan);
    $("message-form").addEventListener("submit", sendMessage);
    $("message-text").addEventListener("keydown", (event) => {
      if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) $("message-form").requestSubmit();
    });
    $("new-session").addEventListener("click", newSession);
    setInterval(tick, 1000);
    // A token in the fragment (#token=...) never reaches the server; it is taken and removed.
    const fragment = new URLSearchParams(location.hash.slice(1));
    const token = fragment.get("token") || sessionStorage.getItem("dex-approver-token");
    if (fragment.has("token")) history.replaceState(null, "", location.pathname + location.search);
    if (token) connect(token);
  });
})();
