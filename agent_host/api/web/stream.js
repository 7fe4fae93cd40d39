// Server-Sent Events read with fetch, so the approver token travels in a header (EventSource
// cannot send one), resumed with Last-Event-ID after every cut. No dependency, no build step.
"use strict";

window.dexEventStream = function (url, hooks) {
  // hooks: token(), lastEventId(), stopped(), onEvent(id, data), onOpen(), onLost(), onRefused()
  function blocks(state, chunk) {
    // Line ends are \r\n, \n or \r; a \r at the end of a chunk may be half of a \r\n.
    let text = state.pending + chunk;
    state.pending = text.endsWith("\r") ? "\r" : "";
    if (state.pending) text = text.slice(0, -1);
    state.buffer += text.replace(/\r\n?/g, "\n");
    const done = [];
    let end;
    while ((end = state.buffer.indexOf("\n\n")) >= 0) {
      done.push(state.buffer.slice(0, end));
      state.buffer = state.buffer.slice(end + 2);
    }
    return done;
  }

  function dispatch(block) {
    let id = null, data = "";
    for (const line of block.split("\n")) {
      if (line.startsWith("id:")) id = line.slice(3).trim();
      else if (line.startsWith("data:")) data += (data ? "\n" : "") + line.slice(5).replace(/^ /, "");
    }
    if (data) hooks.onEvent(id === null ? null : Number(id), data);
  }

  async function run() {
    while (!hooks.stopped()) {
      try {
        const response = await fetch(url, {
          headers: {
            Authorization: "Bearer " + hooks.token(), Accept: "text/event-stream",
            "Last-Event-ID": String(hooks.lastEventId()),
          },
          cache: "no-store",
        });
        if (response.status === 401 || response.status === 403) return hooks.onRefused();
        if (!response.ok) throw new Error("HTTP " + response.status);
        hooks.onOpen();
        const reader = response.body.getReader();
        const decoder = new TextDecoder();
        const state = { pending: "", buffer: "" };
        for (;;) {
          const { value, done } = await reader.read();
          if (done) break;
          for (const block of blocks(state, decoder.decode(value, { stream: true }))) dispatch(block);
        }
      } catch (error) {
        hooks.onLost();
      }
      if (!hooks.stopped()) await new Promise((resolve) => setTimeout(resolve, 1000));
    }
  }

  return run();
};
