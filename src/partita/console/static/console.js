// The console's only script: keep the page's live part current from its event stream.
// The server renders every fragment (escaped there); this swaps it in. Without it, the
// pages still work: reload to update.
(function () {
  "use strict";
  const live = document.getElementById("live");
  const dot = document.getElementById("connection");
  if (!live || !live.dataset.stream || !window.EventSource) return;
  let updates = 0;
  // A form in the live part that the reader has started to fill (brokers ticked, topics
  // chosen) is not replaced under them: updates wait until it is sent.
  let editing = false;
  live.addEventListener("input", function () { editing = true; });
  live.addEventListener("change", function () { editing = true; });
  live.addEventListener("submit", function () { editing = false; });
  const source = new EventSource(live.dataset.stream);
  source.addEventListener("update", function (event) {
    if (editing) {
      if (dot) { dot.className = "connection paused"; dot.title = "updates paused while you edit"; }
      return;
    }
    live.innerHTML = event.data;
    updates += 1;
    document.body.dataset.updates = String(updates);
    if (dot) { dot.className = "connection up"; dot.title = "live: updated " + new Date().toLocaleTimeString(); }
  });
  source.onerror = function () {
    // EventSource reconnects by itself; say so meanwhile.
    if (dot) { dot.className = "connection down"; dot.title = "the console is not answering: reconnecting"; }
  };
})();
