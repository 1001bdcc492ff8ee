// The console's only script: keep the page's live part current from its event stream.
// The server renders every fragment (escaped there) and sends it only when it changed;
// this swaps it in. Without this script the pages still work: reload to update.
(function () {
  "use strict";
  const live = document.getElementById("live");
  const dot = document.getElementById("connection");
  if (!live || !live.dataset.stream || !window.EventSource) return;
  let updates = 0;
  let source = null;
  // A form in the live part that the reader has started to fill (brokers ticked, topics
  // chosen) is not replaced under them: updates wait until it is sent.
  let editing = false;
  live.addEventListener("input", function () { editing = true; });
  live.addEventListener("change", function () { editing = true; });
  live.addEventListener("submit", function () { editing = false; });

  function show(state, title) {
    if (dot) { dot.className = "connection " + state; dot.title = title; }
  }

  function connect() {
    source = new EventSource(live.dataset.stream);
    source.addEventListener("update", function (event) {
      if (editing) { show("paused", "updates paused while you edit"); return; }
      live.innerHTML = event.data;
      updates += 1;
      document.body.dataset.updates = String(updates);
      show("up", "live: updated " + new Date().toLocaleTimeString());
    });
    source.addEventListener("tick", function (event) {
      const polled = document.getElementById("polled");
      if (polled) polled.textContent = event.data;
      if (!editing) show("up", "live");
    });
    // EventSource reconnects by itself; say so meanwhile.
    source.onerror = function () { show("down", "the console is not answering: reconnecting"); };
  }

  connect();
  // A browser holds six connections per server; a page left for another must give its
  // stream back at once, or a few clicks later navigation waits for a free connection
  // (and a page kept in the back/forward cache would hold one for minutes).
  window.addEventListener("pagehide", function () { if (source) { source.close(); source = null; } });
  window.addEventListener("pageshow", function (event) { if (event.persisted && !source) connect(); });
})();
