// Drover console: a run's transcript grows as the run prints (server-sent events), and its state badge
// changes when it ends. Pages work without it. Text from runs is set with textContent, never as HTML.
"use strict";
document.addEventListener("DOMContentLoaded", () => {
  const list = document.getElementById("transcript");
  if (!list || list.dataset.live !== "yes" || !window.EventSource) return;
  const source = new EventSource(`/runs/${encodeURIComponent(list.dataset.run)}/stream?after=${list.dataset.after}`);
  let after = Number(list.dataset.after);
  source.addEventListener("line", (message) => {
    for (const entry of JSON.parse(message.data)) {
      after = Math.max(after, entry.seq);
      const item = document.createElement("li");
      item.className = `k-${entry.kind}`;
      item.dataset.seq = entry.seq;
      if (entry.failed) item.dataset.failed = "yes";
      const kind = document.createElement("span");
      kind.className = "kind";
      kind.textContent = entry.kind;
      const text = document.createElement("pre");
      text.textContent = entry.text;
      item.append(kind, text);
      list.append(item);
    }
  });
  source.addEventListener("end", (message) => {
    // The stream ends once the run has, with its final state: the badge says it at once, no reload.
    source.close();
    let ended = {};
    try { ended = JSON.parse(message.data); } catch (err) { ended = {}; }
    if (!ended.state) { window.location.reload(); return; }
    const badge = document.getElementById("run-state");
    if (badge) { badge.textContent = ended.state; badge.className = `badge s-${ended.state}`; }
    const actions = document.getElementById("run-actions");
    if (actions) actions.replaceChildren();  // a finished run takes no cancel and no input
    list.dataset.live = "no";
    const note = document.getElementById("live-note");
    if (note) {
      const again = document.createElement("a");
      again.href = window.location.pathname;
      again.textContent = "reload for its outcome and receipt";
      note.replaceChildren(`(finished: ${ended.state}${ended.outcome ? `, ${ended.outcome}` : ""}; `, again, ")");
    }
  });
  source.onerror = () => {  // the browser retries by itself; resume after the last line shown
    source.close();
    setTimeout(() => { list.dataset.after = String(after); window.location.reload(); }, 3000);
  };
});

// A Change's page reloads when the Change has news (its events, by server-sent events), unless you are
// typing in one of its forms.
document.addEventListener("DOMContentLoaded", () => {
  const head = document.querySelector("[data-watch]");
  if (!head || !head.dataset.watch || !window.EventSource) return;
  const source = new EventSource(head.dataset.watch);
  let pending = null;
  const reload = () => {
    const typing = document.activeElement && ["INPUT", "SELECT", "TEXTAREA"].includes(document.activeElement.tagName);
    if (typing) { pending = setTimeout(reload, 2000); return; }
    window.location.reload();
  };
  const soon = () => { if (!pending) pending = setTimeout(reload, 800); };
  source.addEventListener("change", soon);
  source.addEventListener("end", () => { source.close(); soon(); });
  source.onerror = () => source.close();
});

// The fleet page refreshes itself every few seconds, unless you are typing in one of its forms.
document.addEventListener("DOMContentLoaded", () => {
  const head = document.querySelector("[data-refresh]");
  if (!head) return;
  const every = Number(head.dataset.refresh) * 1000;
  const tick = () => {
    const typing = document.activeElement && ["INPUT", "SELECT", "TEXTAREA"].includes(document.activeElement.tagName);
    if (typing) setTimeout(tick, every); else window.location.reload();
  };
  setTimeout(tick, every);
});
