// Stockade terminals: live sandbox terminals over a WebSocket, and replays of
// their recordings, drawn by xterm.js. The CSP allows no inline script, so
// every panel is configured by data- attributes:
//
//   data-terminal="live"    data-socket (WebSocket path), data-session (join
//                           it; empty opens a new session), data-watch="1"
//                           (read-only), data-can-drive
//   data-terminal="replay"  data-cast (the asciicast v2 recording)
//
// Panels report what they do in data-state (connecting, live, reconnecting,
// ended, failed; loading, ready, playing, paused, done), data-role and
// data-offset, for people's stylesheets and for tests.
(function () {
  "use strict";

  if (typeof window.Terminal !== "function") return; // xterm.js did not load

  // xterm.js styles itself with <style> elements, which this site's CSP
  // refuses. Hand it, instead, elements whose text goes into constructable
  // style sheets adopted by the document: the CSP allows those.
  (function cspSafeStyles() {
    if (!("adoptedStyleSheets" in Document.prototype) || typeof CSSStyleSheet !== "function") return;
    var create = Document.prototype.createElement;
    Document.prototype.createElement = function (tag, options) {
      if (String(tag).toLowerCase() !== "style") return create.call(this, tag, options);
      var doc = this;
      // A <template> is never rendered and never checked against the CSP.
      var el = create.call(doc, "template");
      var sheet = new CSSStyleSheet();
      var text = "";
      var set = function (v) {
        text = String(v);
        try { sheet.replaceSync(text); } catch (e) { /* keep the last good rules */ }
      };
      var get = function () { return text; };
      Object.defineProperty(el, "textContent", { get: get, set: set, configurable: true });
      Object.defineProperty(el, "innerText", { get: get, set: set, configurable: true });
      Object.defineProperty(el, "sheet", { get: function () { return sheet; }, configurable: true });
      doc.adoptedStyleSheets = doc.adoptedStyleSheets.concat([sheet]);
      var remove = el.remove;
      el.remove = function () {
        doc.adoptedStyleSheets = doc.adoptedStyleSheets.filter(function (s) { return s !== sheet; });
        remove.call(el);
      };
      return el;
    };
  })();

  var theme = {
    background: "#101318", foreground: "#e5e8ec", cursor: "#e5e8ec", selectionBackground: "#3a4556",
  };

  function newTerminal(screen, opts) {
    // lineHeight 1.0 gives each row exactly the font's em box, and the
    // underscore of most monospaced fonts hangs below it: xterm.js clips it
    // and `foo_bar` reads as `foo bar`. 1.2 leaves room for descenders. The
    // fonts listed first are ones whose underscore sits inside that row.
    var o = { cursorBlink: true, scrollback: 5000, fontSize: 14, lineHeight: 1.2, theme: theme,
      fontFamily: '"DejaVu Sans Mono", Menlo, Consolas, "Liberation Mono", ui-monospace, SFMono-Regular, monospace' };
    for (var k in opts) o[k] = opts[k];
    var term = new window.Terminal(o);
    var fit = null;
    if (window.FitAddon && window.FitAddon.FitAddon) {
      fit = new window.FitAddon.FitAddon();
      term.loadAddon(fit);
    }
    term.open(screen);
    return { term: term, fit: fit };
  }

  function setText(el, text) { if (el) el.textContent = text; }

  // --- Live terminals ---

  function live(panel) {
    var q = function (sel) { return panel.querySelector(sel); };
    var screen = q("[data-terminal-screen]");
    var status = q("[data-terminal-status]");
    var roleEl = q("[data-terminal-role]");
    var driverEl = q("[data-terminal-driver]");
    var watchersEl = q("[data-terminal-watchers]");
    var notice = q("[data-terminal-notice]");
    var buttons = {
      request: q('[data-terminal-action="request"]'),
      take: q('[data-terminal-action="take"]'),
      release: q('[data-terminal-action="release"]'),
    };
    var socketPath = panel.getAttribute("data-socket");
    var watch = panel.getAttribute("data-watch") === "1";
    var s = {
      session: panel.getAttribute("data-session") || "",
      canDrive: panel.getAttribute("data-can-drive") === "true",
      role: "", offset: -1, ended: false, ws: null, retries: 0, requested: false, me: "",
    };
    var t = newTerminal(screen, {});
    var term = t.term;
    if (t.fit) t.fit.fit();
    var encoder = new TextEncoder();

    function state(name, text) {
      panel.setAttribute("data-state", name);
      setText(status, text);
    }
    function say(text) {
      if (!notice) return;
      notice.textContent = text;
      notice.hidden = !text;
    }
    function send(obj) {
      if (s.ws && s.ws.readyState === WebSocket.OPEN) s.ws.send(typeof obj === "string" ? obj : JSON.stringify(obj));
    }
    function sendBytes(bytes) {
      if (s.role === "driver" && s.ws && s.ws.readyState === WebSocket.OPEN) s.ws.send(bytes);
    }
    function showButtons() {
      var driving = s.role === "driver";
      if (buttons.request) buttons.request.hidden = s.ended || !s.canDrive || driving || s.requested;
      if (buttons.take) buttons.take.hidden = s.ended || !s.canDrive || driving || !s.requested;
      if (buttons.release) buttons.release.hidden = s.ended || !driving;
    }
    function setRole(role) {
      s.role = role;
      panel.setAttribute("data-role", role);
      setText(roleEl, role === "driver" ? "driving" : "watching");
      if (roleEl) roleEl.className = role === "driver" ? "pill pill-good" : "pill";
      term.options.disableStdin = role !== "driver";
      if (role === "driver") {
        if (s.requested) say("");
        s.requested = false;
        fitAndTell();
        term.focus();
      }
      showButtons();
    }
    function fitAndTell() {
      if (s.role !== "driver" || !t.fit) return;
      t.fit.fit();
      send({ type: "resize", cols: term.cols, rows: term.rows });
    }
    function presence(m) {
      setText(driverEl, m.driver || "nobody");
      var w = (m.watchers || []).join(", ");
      setText(watchersEl, w || "nobody");
    }

    function url() {
      var u = new URL(socketPath, window.location.href);
      u.protocol = u.protocol === "https:" ? "wss:" : "ws:";
      if (s.session) {
        u.searchParams.set("session", s.session);
        if (s.offset >= 0) u.searchParams.set("offset", String(s.offset));
      } else {
        u.searchParams.set("cols", String(term.cols));
        u.searchParams.set("rows", String(term.rows));
      }
      if (watch) u.searchParams.set("watch", "1");
      return u.toString();
    }

    function control(m) {
      switch (m.type) {
      case "hello":
        var fresh = !s.session;
        s.session = m.session;
        panel.setAttribute("data-session", m.session);
        s.offset = m.offset || 0;
        s.canDrive = !!m.can_drive;
        s.me = m.by || "";
        s.retries = 0;
        if (fresh && window.history && window.history.replaceState) {
          // Reloading rejoins this session instead of opening another.
          window.history.replaceState(null, "", "/terminals/" + encodeURIComponent(m.session));
        }
        if (m.role !== "driver" && m.cols && m.rows) term.resize(m.cols, m.rows);
        setRole(m.role);
        presence(m);
        say(m.missed > 0 ? m.missed + " bytes of output went by while disconnected and are no longer held." : "");
        state("live", m.role === "driver" ? "Connected: you are driving" : "Connected: watching");
        break;
      case "resize":
        if (s.role !== "driver" && m.cols && m.rows) term.resize(m.cols, m.rows);
        break;
      case "role":
        setRole(m.role);
        if (m.role === "watcher" && m.by) say(m.by + " took control: you are watching now.");
        state("live", m.role === "driver" ? "Connected: you are driving" : "Connected: watching");
        break;
      case "presence":
        presence(m);
        break;
      case "requested":
        if (m.by !== s.me) say(m.by + " asked for control" + (s.role === "driver" ? ": they can take it now." : "."));
        break;
      case "error":
        say(m.message);
        break;
      case "end":
        s.ended = true;
        term.options.disableStdin = true;
        showButtons();
        ended(m.reason, m.exit_code);
        break;
      }
    }

    // ended shows why the session ended; data-outcome is "ok" when the
    // process exited with code 0 (shown as a success, not in red), "bad"
    // for every other end.
    function ended(reason, exitCode) {
      panel.setAttribute("data-outcome", exitCode === 0 ? "ok" : "bad");
      state("ended", "Ended: " + reason);
      endNotice(reason);
    }

    function endNotice(reason) {
      if (!notice) return;
      notice.textContent = "The session ended (" + reason + "). ";
      var a = document.createElement("a");
      a.href = "/terminals/" + encodeURIComponent(s.session);
      a.textContent = "Replay its recording";
      notice.appendChild(a);
      notice.hidden = false;
    }

    function connect() {
      state(s.offset >= 0 ? "reconnecting" : "connecting", s.offset >= 0 ? "Reconnecting…" : "Connecting…");
      var ws = new WebSocket(url());
      ws.binaryType = "arraybuffer";
      s.ws = ws;
      ws.onmessage = function (ev) {
        if (typeof ev.data === "string") {
          var m;
          try { m = JSON.parse(ev.data); } catch (e) { return; }
          control(m);
          return;
        }
        var b = new Uint8Array(ev.data);
        s.offset += b.length;
        panel.setAttribute("data-offset", String(s.offset));
        term.write(b);
      };
      ws.onclose = function (ev) {
        if (s.ws === ws) s.ws = null;
        if (s.ended) return;
        closed(ev);
      };
    }

    function closed(ev) {
      if (!s.session) {
        // The open itself was refused: trying again would open another.
        state("failed", "Could not open a terminal: the sandbox may have stopped, or your role may not open one.");
        return;
      }
      if (ev.code === 1013) { // cut off for falling behind: resume at once
        connect();
        return;
      }
      // Ask whether the session still runs before trying again.
      fetch("/api/v1/terminals/" + encodeURIComponent(s.session), { credentials: "same-origin", headers: { Accept: "application/json" } })
        .then(function (r) {
          // A server failing over (its replica gone, the VM's channel being
          // adopted: 502, 503, 504) has not ended the session: try again.
          if (r.status >= 500) return { live: true };
          return r.ok ? r.json() : { live: false, end_reason: "no longer reachable (" + r.status + ")" };
        })
        .catch(function () { return { live: true }; })
        .then(function (info) {
          if (!info.live) {
            s.ended = true;
            showButtons();
            ended(info.end_reason || "the session is over", info.exit_code);
            return;
          }
          s.retries++;
          var wait = Math.min(10000, 250 * Math.pow(2, s.retries));
          state("reconnecting", "Disconnected: reconnecting…");
          window.setTimeout(connect, wait);
        });
    }

    term.onData(function (d) { sendBytes(encoder.encode(d)); });
    term.onBinary(function (d) {
      var b = new Uint8Array(d.length);
      for (var i = 0; i < d.length; i++) b[i] = d.charCodeAt(i) & 255;
      sendBytes(b);
    });
    var pending = 0;
    window.addEventListener("resize", function () {
      window.clearTimeout(pending);
      pending = window.setTimeout(fitAndTell, 150);
    });
    panel.addEventListener("click", function (ev) {
      var btn = ev.target instanceof Element ? ev.target.closest("[data-terminal-action]") : null;
      if (!btn) return;
      var what = btn.getAttribute("data-terminal-action");
      send({ type: what });
      if (what === "request") {
        s.requested = true;
        say("You asked for control: everyone on this terminal sees it. Take it when ready.");
      }
      showButtons();
    });
    showButtons();
    connect();
  }

  // --- Replays ---

  function replay(panel) {
    var q = function (sel) { return panel.querySelector(sel); };
    var status = q("[data-terminal-status]");
    var play = q('[data-replay="play"]');
    var speedEl = q("[data-replay-speed]");
    var seekEl = q("[data-replay-seek]");
    var timeEl = q("[data-replay-time]");
    var p = { events: [], header: null, duration: 0, pos: 0, idx: 0, playing: false, speed: 1, last: 0, term: null };

    function state(name, text) {
      panel.setAttribute("data-state", name);
      if (text !== undefined) setText(status, text);
    }
    function clock(sec) {
      sec = Math.max(0, Math.floor(sec));
      var m = Math.floor(sec / 60), r = sec % 60;
      return m + ":" + (r < 10 ? "0" : "") + r;
    }
    function show() {
      setText(timeEl, clock(p.pos) + " / " + clock(p.duration));
      if (seekEl && p.duration > 0) seekEl.value = String(Math.round(p.pos / p.duration * 1000));
      if (play) play.textContent = p.playing ? "Pause" : (p.idx >= p.events.length ? "Replay" : "Play");
      panel.setAttribute("data-position", p.pos.toFixed(3));
    }
    // writeUntil plays every event up to time t, in one write per size.
    function writeUntil(t) {
      var buf = "";
      while (p.idx < p.events.length && p.events[p.idx][0] <= t) {
        var ev = p.events[p.idx++];
        if (ev[1] === "o") {
          buf += ev[2];
        } else if (ev[1] === "r") {
          var wh = String(ev[2]).split("x");
          if (buf) { p.term.write(buf); buf = ""; }
          var cols = parseInt(wh[0], 10), rows = parseInt(wh[1], 10);
          if (cols > 0 && rows > 0) p.term.resize(cols, rows);
        }
      }
      if (buf) p.term.write(buf);
    }
    function seek(t) {
      p.term.reset();
      p.term.resize(p.header.width || 80, p.header.height || 24);
      p.idx = 0;
      p.pos = Math.max(0, Math.min(t, p.duration));
      writeUntil(p.pos);
      show();
    }
    function tick(now) {
      if (!p.playing) return;
      p.pos += (now - p.last) / 1000 * p.speed;
      p.last = now;
      if (p.pos >= p.duration) p.pos = p.duration;
      writeUntil(p.pos);
      if (p.idx >= p.events.length) {
        p.playing = false;
        state("done", "Played to the end");
      }
      show();
      if (p.playing) window.requestAnimationFrame(tick);
    }
    function start() {
      if (p.idx >= p.events.length) seek(0);
      p.playing = true;
      p.last = performance.now();
      state("playing", "Playing");
      show();
      window.requestAnimationFrame(tick);
    }
    function pause() {
      p.playing = false;
      state("paused", "Paused");
      show();
    }

    fetch(panel.getAttribute("data-cast"), { credentials: "same-origin" })
      .then(function (r) {
        if (!r.ok) throw new Error("the recording could not be loaded (" + r.status + ")");
        return r.text();
      })
      .then(function (text) {
        var lines = text.split("\n");
        p.header = JSON.parse(lines[0]);
        for (var i = 1; i < lines.length; i++) {
          if (!lines[i].trim()) continue;
          var ev = JSON.parse(lines[i]);
          if (Array.isArray(ev) && ev.length === 3) p.events.push(ev);
        }
        p.duration = p.events.length ? p.events[p.events.length - 1][0] : 0;
        p.term = newTerminal(q("[data-terminal-screen]"), {
          cols: p.header.width || 80, rows: p.header.height || 24, disableStdin: true, cursorBlink: false,
        }).term;
        if (play) play.disabled = false;
        if (seekEl) seekEl.disabled = false;
        state("ready", "Ready: " + p.events.length + " events");
        show();
      })
      .catch(function (e) { state("failed", String(e.message || e)); });

    if (play) play.addEventListener("click", function () { if (p.playing) { pause(); } else { start(); } });
    if (speedEl) speedEl.addEventListener("change", function () { p.speed = parseFloat(speedEl.value) || 1; });
    if (seekEl) seekEl.addEventListener("input", function () {
      if (!p.term) return;
      seek(parseInt(seekEl.value, 10) / 1000 * p.duration);
      if (!p.playing) state("paused", "Paused at " + clock(p.pos));
    });
  }

  document.querySelectorAll('[data-terminal="live"]').forEach(live);
  document.querySelectorAll('[data-terminal="replay"]').forEach(replay);
})();
