// Stockade page behaviour. The CSP forbids inline scripts and on* handlers, so
// every behaviour is attached here through data- attributes, and every page also
// works without this file (it only adds convenience).
(function () {
  "use strict";

  // data-confirm on a form: ask before submitting (revoke, remove).
  document.addEventListener("submit", function (ev) {
    var form = ev.target;
    if (!(form instanceof HTMLFormElement)) return;
    var msg = form.getAttribute("data-confirm");
    if (msg && !window.confirm(msg)) {
      ev.preventDefault();
      ev.stopImmediatePropagation();
    }
  }, true);

  // data-autosubmit on a form: submit when a select or date changes. Text fields
  // marked data-autosubmit-ignore wait for Enter or the submit button, so typing
  // is never interrupted by a reload.
  document.addEventListener("change", function (ev) {
    var el = ev.target;
    if (!(el instanceof HTMLElement) || el.hasAttribute("data-autosubmit-ignore")) return;
    var form = el.closest("form[data-autosubmit]");
    if (!form) return;
    if (typeof form.requestSubmit === "function") {
      form.requestSubmit();
    } else {
      form.submit();
    }
  });

  // data-copy="ID" on a button: copy the text of element ID to the clipboard.
  document.addEventListener("click", function (ev) {
    var btn = ev.target instanceof Element ? ev.target.closest("[data-copy]") : null;
    if (!btn) return;
    var id = btn.getAttribute("data-copy");
    var src = document.getElementById(id);
    if (!src) return;
    var status = document.querySelector('[data-copy-status="' + CSS.escape(id) + '"]');
    copyText(src).then(function () {
      if (status) status.textContent = "Copied to the clipboard.";
      btn.textContent = "Copied";
    }, function () {
      selectText(src);
      if (status) status.textContent = "Copying failed: the token is selected, press Ctrl+C (or ⌘C).";
    });
  });

  function copyText(el) {
    var text = el.textContent.trim();
    if (navigator.clipboard && window.isSecureContext) {
      return navigator.clipboard.writeText(text);
    }
    // Plain-HTTP installations have no async clipboard API.
    return new Promise(function (resolve, reject) {
      selectText(el);
      var ok = false;
      try { ok = document.execCommand("copy"); } catch (e) { ok = false; }
      if (ok) { resolve(); } else { reject(new Error("copy failed")); }
    });
  }

  function selectText(el) {
    var range = document.createRange();
    range.selectNodeContents(el);
    var sel = window.getSelection();
    sel.removeAllRanges();
    sel.addRange(range);
  }

  // The user menu is a <details>: close it on Escape or a click elsewhere.
  document.addEventListener("click", function (ev) {
    document.querySelectorAll("details.usermenu[open]").forEach(function (d) {
      if (!d.contains(ev.target)) d.removeAttribute("open");
    });
  });
  document.addEventListener("keydown", function (ev) {
    if (ev.key !== "Escape") return;
    document.querySelectorAll("details.usermenu[open]").forEach(function (d) {
      d.removeAttribute("open");
      var s = d.querySelector("summary");
      if (s) s.focus();
    });
  });

  // Things that only make sense with this script: reveal copy buttons, hide the
  // buttons that auto-submitting forms no longer need. Runs again on content
  // that htmx swaps in.
  function enhance(root) {
    root.querySelectorAll("[data-copy][hidden]").forEach(function (b) { b.hidden = false; });
    root.querySelectorAll("form[data-autosubmit] [data-js-hide]").forEach(function (b) { b.hidden = true; });
  }
  enhance(document);
  document.addEventListener("htmx:load", function (ev) {
    if (ev.target instanceof Element) enhance(ev.target);
  });
})();
