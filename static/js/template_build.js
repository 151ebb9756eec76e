// Template build pages: focus the recipe's errors after a refused build,
// and follow a running build's log (Server-Sent Events) with its step.
(function () {
  "use strict";

  document.addEventListener("DOMContentLoaded", function () {
    var errs = document.getElementById("recipe-errors");
    if (errs) errs.focus();
    var pre = document.getElementById("build-log");
    if (pre && pre.getAttribute("data-events-url")) follow(pre);
  });

  function follow(pre) {
    var url = pre.getAttribute("data-events-url");
    if (!window.EventSource) return;
    var status = document.getElementById("build-log-status");
    var progress = document.getElementById("build-progress");
    var state = document.getElementById("build-state");
    var error = document.getElementById("build-error");
    var es = new EventSource(url);
    function atBottom() { return pre.scrollHeight - pre.scrollTop - pre.clientHeight < 24; }
    function say(text, live) {
      if (!status) return;
      status.textContent = text;
      if (live) { status.setAttribute("data-live", ""); } else { status.removeAttribute("data-live"); }
    }
    function show(b) {
      if (progress) progress.textContent = b.step > 0 ? "Step " + b.step + " of " + b.steps + ": " + b.step_name : "Queued";
      if (state) {
        state.textContent = b.state;
        state.className = b.state === "succeeded" ? "pill pill-good" : b.state === "failed" ? "pill pill-bad" : "pill";
      }
      if (error) {
        error.textContent = b.error || "";
        error.hidden = !b.error;
      }
    }
    es.addEventListener("open", function () { say("live", true); });
    // The stream starts from the log's beginning, also after a reconnect.
    es.addEventListener("reset", function () { pre.textContent = ""; });
    es.addEventListener("log", function (ev) {
      var stick = atBottom();
      pre.appendChild(document.createTextNode(JSON.parse(ev.data)));
      if (stick) pre.scrollTop = pre.scrollHeight;
    });
    es.addEventListener("step", function (ev) { show(JSON.parse(ev.data)); });
    es.addEventListener("end", function (ev) {
      es.close();
      var b = JSON.parse(ev.data);
      show(b);
      say("build " + b.state);
      pre.removeAttribute("data-events-url");
    });
    es.addEventListener("error", function () {
      if (es.readyState !== EventSource.CLOSED) say("reconnecting…");
    });
  }
})();
