// Workflow pages: the editor's error links and cursor position, and a run's
// live log. The CSP forbids inline scripts, so everything is attached here;
// the pages work without this file (the log then shows what was stored when
// the page was rendered).
(function () {
  "use strict";

  // --- Editor ---

  // lineRange is the [start, end) offsets of line n (1-based) in text.
  function lineRange(text, n) {
    var start = 0;
    for (var i = 1; i < n; i++) {
      var nl = text.indexOf("\n", start);
      if (nl < 0) return [text.length, text.length];
      start = nl + 1;
    }
    var end = text.indexOf("\n", start);
    return [start, end < 0 ? text.length : end];
  }

  // Clicking (or pressing Enter on) an error's "line N" selects that line
  // in the editor and scrolls it into view.
  document.addEventListener("click", function (ev) {
    var a = ev.target instanceof Element ? ev.target.closest("a[data-line]") : null;
    if (!a) return;
    var ta = document.getElementById("workflow-source");
    if (!ta) return;
    ev.preventDefault();
    var n = parseInt(a.getAttribute("data-line"), 10);
    var r = lineRange(ta.value, n);
    ta.focus();
    ta.setSelectionRange(r[0], r[1]);
    var lh = parseFloat(getComputedStyle(ta).lineHeight) || 18;
    ta.scrollTop = Math.max(0, (n - 3) * lh);
    showCursor(ta);
  });

  // The cursor's line and column, so errors by line are easy to find.
  function showCursor(ta) {
    var out = document.querySelector('[data-cursor-for="' + ta.id + '"]');
    if (!out) return;
    var before = ta.value.slice(0, ta.selectionStart);
    var line = before.split("\n").length;
    var col = before.length - before.lastIndexOf("\n");
    out.textContent = "Line " + line + ", column " + col;
  }
  ["keyup", "click", "focus"].forEach(function (type) {
    document.addEventListener(type, function (ev) {
      if (ev.target instanceof HTMLTextAreaElement && ev.target.id === "workflow-source") showCursor(ev.target);
    }, true);
  });

  // After a failed save, keyboard and screen reader users land on the errors.
  document.addEventListener("DOMContentLoaded", function () {
    var errs = document.getElementById("workflow-errors");
    if (errs) errs.focus();
  });

  // --- Run log ---

  function follow(pre) {
    var log = pre;
    var status = document.getElementById("run-log-status");
    var url = pre.getAttribute("data-events-url");
    var summaryURL = pre.getAttribute("data-summary-url");
    if (!url || !window.EventSource) return;
    var es = new EventSource(url);
    // Stay at the bottom while the reader is there; leave them alone when
    // they scrolled up to read.
    function atBottom() { return log.scrollHeight - log.scrollTop - log.clientHeight < 24; }
    function write(text, replace) {
      var stick = atBottom();
      if (replace) {
        log.textContent = text;
      } else if (text) {
        log.appendChild(document.createTextNode(text));
      }
      if (stick) log.scrollTop = log.scrollHeight;
    }
    function say(text, live) {
      if (!status) return;
      status.textContent = text;
      if (live) { status.setAttribute("data-live", ""); } else { status.removeAttribute("data-live"); }
    }
    es.addEventListener("open", function () { say("live", true); });
    es.addEventListener("snapshot", function (ev) { write(JSON.parse(ev.data), true); say("live", true); });
    es.addEventListener("log", function (ev) { write(JSON.parse(ev.data), false); });
    es.addEventListener("end", function (ev) {
      es.close();
      var end = JSON.parse(ev.data);
      if (end.state === "queued" || end.state === "running") {
        // Not executing on this server (another replica has it): what is
        // stored so far is shown; a reload later shows more.
        say("run " + end.state + " elsewhere: reload for news");
        return;
      }
      say("run " + end.state);
      pre.removeAttribute("data-events-url");
      if (!summaryURL) return;
      fetch(summaryURL, { headers: { "Accept": "text/html" }, credentials: "same-origin" }).then(function (resp) {
        if (!resp.ok) throw new Error("summary: " + resp.status);
        return resp.text();
      }).then(function (html) {
        var cur = document.getElementById("run-summary");
        var tpl = document.createElement("template");
        tpl.innerHTML = html.trim();
        var fresh = tpl.content.getElementById("run-summary");
        if (cur && fresh) cur.replaceWith(fresh);
      }).catch(function () {
        say("run " + end.state + " (reload the page for its steps)");
      });
    });
    es.addEventListener("error", function () {
      if (es.readyState !== EventSource.CLOSED) say("reconnecting…");
    });
  }

  document.addEventListener("DOMContentLoaded", function () {
    document.querySelectorAll("pre[data-events-url]").forEach(follow);
  });
})();
