// Stockade page behaviour. The CSP forbids inline scripts and on* handlers, so
// every behaviour is attached here through data- attributes, and every page also
// works without this file (it only adds convenience).
(function () {
  "use strict";

  // In-flight guard, part one: a POST form that is already submitting does
  // not submit again (two clicks on Create made two sandboxes). Registered
  // before data-confirm so that a second click does not ask again.
  document.addEventListener("submit", function (ev) {
    var form = ev.target;
    if (!(form instanceof HTMLFormElement) || !guarded(form)) return;
    if (form.hasAttribute("data-busy")) {
      ev.preventDefault();
      ev.stopImmediatePropagation();
    }
  }, true);

  // data-confirm on a form: before a destructive post, a <dialog> says
  // what it will do (the server-rendered summary in data-confirm: a freeze
  // names the live sandboxes it destroys) and asks. Confirmed, the form is
  // posted again with confirm=yes, which the server's own confirm step
  // accepts; without this script that step is a page saying the same.
  document.addEventListener("submit", function (ev) {
    var form = ev.target;
    if (!(form instanceof HTMLFormElement)) return;
    var msg = form.getAttribute("data-confirm");
    if (!msg || confirmedField(form)) return;
    ev.preventDefault();
    ev.stopImmediatePropagation();
    askConfirm(form, msg, ev.submitter);
  }, true);

  function confirmedField(form) {
    return form.querySelector('input[type="hidden"][name="confirm"][value="yes"]');
  }

  // buttonLabel is what a button shows, without its visually hidden part.
  function buttonLabel(b) {
    if (!b) return "";
    var c = b.cloneNode(true);
    c.querySelectorAll(".visually-hidden").forEach(function (e) { e.remove(); });
    return c.textContent.replace(/\s+/g, " ").trim();
  }

  function askConfirm(form, msg, submitter) {
    if (document.querySelector("dialog.confirm-dialog[open]")) return;
    var d = document.createElement("dialog");
    d.className = "confirm-dialog";
    d.setAttribute("aria-labelledby", "confirm-dialog-text");
    var p = document.createElement("p");
    p.id = "confirm-dialog-text";
    p.textContent = msg;
    var actions = document.createElement("div");
    actions.className = "form-actions";
    var ok = document.createElement("button");
    ok.type = "button";
    ok.className = "btn btn-danger";
    ok.setAttribute("data-confirm-ok", "");
    ok.textContent = buttonLabel(submitter) || "Confirm";
    var cancel = document.createElement("button");
    cancel.type = "button";
    cancel.className = "btn";
    cancel.setAttribute("data-confirm-cancel", "");
    cancel.textContent = "Cancel";
    actions.appendChild(ok);
    actions.appendChild(cancel);
    d.appendChild(p);
    d.appendChild(actions);
    ok.addEventListener("click", function () { d.close("ok"); });
    cancel.addEventListener("click", function () { d.close("cancel"); });
    d.addEventListener("close", function () {
      var yes = d.returnValue === "ok";
      d.remove();
      if (!yes) {
        if (submitter) submitter.focus();
        return;
      }
      if (!confirmedField(form)) {
        var f = document.createElement("input");
        f.type = "hidden";
        f.name = "confirm";
        f.value = "yes";
        form.appendChild(f);
      }
      if (submitter && typeof form.requestSubmit === "function") {
        form.requestSubmit(submitter);
      } else if (typeof form.requestSubmit === "function") {
        form.requestSubmit();
      } else {
        form.submit();
      }
    });
    document.body.appendChild(d);
    d.showModal();
    cancel.focus(); // the safe choice first
  }

  // In-flight guard, part two: once a POST form submits (confirmed, if it
  // asks), it is busy until the next page: aria-busy, its submit buttons
  // disabled and the one used labelled "Working…" (or the form's
  // data-busy-label), and with data-busy-progress an indeterminate progress
  // bar with that text (sandbox create waits for a VM to boot). The buttons
  // are disabled after the browser has read the form, since a disabled
  // submitter would not be sent. A form that did not leave the page (a
  // script took the submit over; htmx answered, or failed) is made idle
  // again, as is every form of a page shown again from the back/forward
  // cache. Forms opt out with data-no-busy (a POST that downloads a file).
  document.addEventListener("submit", function (ev) {
    var form = ev.target;
    if (!(form instanceof HTMLFormElement) || !guarded(form) || form.hasAttribute("data-busy")) return;
    busy(form, ev.submitter);
    window.setTimeout(function () {
      if (ev.defaultPrevented && !isHtmx(form)) {
        idle(form);
        return;
      }
      disable(form);
    }, 0);
  });

  function guarded(form) {
    var method = (form.getAttribute("hx-post") !== null ? "post" : form.method || "get").toLowerCase();
    var target = form.getAttribute("target");
    return method === "post" && !form.hasAttribute("data-no-busy") && (!target || target === "_self");
  }

  function isHtmx(form) {
    return ["hx-post", "hx-put", "hx-patch", "hx-delete", "hx-get"].some(function (a) { return form.hasAttribute(a); });
  }

  function submitButtons(form) {
    var own = Array.prototype.slice.call(form.querySelectorAll('button:not([type]), button[type="submit"], input[type="submit"]'));
    if (form.id) {
      document.querySelectorAll('[form="' + CSS.escape(form.id) + '"]').forEach(function (b) {
        if (b.matches('button:not([type]), button[type="submit"], input[type="submit"]')) own.push(b);
      });
    }
    return own;
  }

  function busy(form, submitter) {
    form.setAttribute("data-busy", "");
    form.setAttribute("aria-busy", "true");
    var buttons = submitButtons(form);
    var label = submitter && buttons.indexOf(submitter) >= 0 ? submitter : buttons[0];
    if (label) label.setAttribute("data-busy-submitter", "");
    var text = form.getAttribute("data-busy-progress");
    if (text) {
      var p = document.createElement("p");
      p.className = "busy-progress";
      p.setAttribute("data-busy-progress-note", "");
      p.setAttribute("role", "status");
      var bar = document.createElement("progress"); // no value: indeterminate
      bar.setAttribute("aria-label", text);
      p.appendChild(bar);
      p.appendChild(document.createTextNode(" " + text));
      var actions = label ? label.closest(".form-actions") : null;
      if (actions && form.contains(actions)) {
        actions.insertAdjacentElement("afterend", p);
      } else {
        form.appendChild(p);
      }
    }
  }

  var labels = new WeakMap(); // button -> its markup before "Working…"

  function disable(form) {
    if (!form.hasAttribute("data-busy")) return;
    submitButtons(form).forEach(function (b) {
      if (b.disabled) return; // disabled by the page itself: stays so
      b.setAttribute("data-busy-disabled", "");
      b.disabled = true;
      if (!b.hasAttribute("data-busy-submitter")) return;
      var text = form.getAttribute("data-busy-label") || "Working…";
      if (b instanceof HTMLInputElement) {
        labels.set(b, b.value);
        b.value = text;
      } else {
        labels.set(b, b.innerHTML);
        b.textContent = text;
      }
    });
  }

  function idle(form) {
    form.removeAttribute("data-busy");
    form.removeAttribute("aria-busy");
    submitButtons(form).forEach(function (b) {
      if (labels.has(b)) {
        if (b instanceof HTMLInputElement) { b.value = labels.get(b); } else { b.innerHTML = labels.get(b); }
        labels.delete(b);
      }
      b.removeAttribute("data-busy-submitter");
      if (b.hasAttribute("data-busy-disabled")) {
        b.removeAttribute("data-busy-disabled");
        b.disabled = false;
      }
    });
    form.querySelectorAll("[data-busy-progress-note]").forEach(function (p) { p.remove(); });
  }

  window.addEventListener("pageshow", function (ev) {
    if (ev.persisted) document.querySelectorAll("form[data-busy]").forEach(idle);
  });
  document.addEventListener("htmx:afterRequest", function (ev) {
    var el = ev.detail && ev.detail.elt;
    if (el instanceof HTMLFormElement && el.isConnected) idle(el);
  });

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
  // A form refused with field errors: focus the first field at fault, so
  // keyboard and screen reader users start where the errors are.
  var firstInvalid = document.querySelector('main [aria-invalid="true"]');
  if (firstInvalid && !document.querySelector("[autofocus]")) firstInvalid.focus();

  function enhance(root) {
    root.querySelectorAll("[data-copy][hidden]").forEach(function (b) { b.hidden = false; });
    root.querySelectorAll("form[data-autosubmit] [data-js-hide]").forEach(function (b) { b.hidden = true; });
  }
  enhance(document);
  document.addEventListener("htmx:load", function (ev) {
    if (ev.target instanceof Element) enhance(ev.target);
  });
  // The Menu button (shell.templ) folds the navigation away on narrow
  // screens: shown only when this script runs, so without it the
  // navigation stays a strip above the content.
  document.querySelectorAll("[data-navtoggle]").forEach(function (btn) {
    var nav = document.getElementById(btn.getAttribute("aria-controls"));
    if (!nav) return;
    document.documentElement.classList.add("js-nav");
    btn.hidden = false;
    btn.addEventListener("click", function () {
      var open = !nav.classList.contains("open");
      nav.classList.toggle("open", open);
      btn.setAttribute("aria-expanded", String(open));
      btn.textContent = open ? "Close menu" : "Menu";
    });
  });
})();
