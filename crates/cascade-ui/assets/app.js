// The cascade dashboard: one model of the run fed by the JSON API and the
// server-sent event stream, and four views drawn from it (run, story, mega,
// plan). No framework: small render functions that rebuild one panel each,
// called when an event touches what that panel shows.
//
// Phases of the file: token and HTTP helpers; the model and how events change
// it; the views (run graph, Gantt, story, mega, plan); routing and start-up.
"use strict";

(function () {
  // ---------------------------------------------------------------- access
  // The token arrives once in the address (?token=...). fetch sends it as a
  // header (what the server requires for actions), EventSource in the query
  // (it cannot set headers).
  const TOKEN = new URLSearchParams(location.search).get("token") || "";

  class ApiError extends Error {
    constructor(status, message) {
      super(message);
      this.status = status;
    }
  }

  async function api(path, options) {
    const opts = Object.assign({ method: "GET" }, options || {});
    const headers = { "X-Cascade-Token": TOKEN, Accept: "application/json" };
    let body;
    if (opts.body !== undefined) {
      headers["Content-Type"] = "application/json";
      body = JSON.stringify(opts.body);
    }
    const res = await fetch(path, { method: opts.method, headers, body, credentials: "same-origin" });
    const text = await res.text();
    let data = null;
    try {
      data = text ? JSON.parse(text) : null;
    } catch (_) {
      data = null;
    }
    if (!res.ok) {
      const msg = (data && data.error) || text.trim() || res.statusText;
      throw new ApiError(res.status, msg);
    }
    return data;
  }

  const post = (path, body) => api(path, { method: "POST", body: body || {} });

  // ---------------------------------------------------------------- DOM helpers
  // h("div", {class: "x", "data-story": id}, child, "text", ...): text is
  // always set as text, never parsed as HTML.
  function h(tag, attrs, ...children) {
    const el = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === undefined || v === null || v === false) continue;
      if (k === "class") el.className = v;
      // Through the CSSOM: the Content-Security-Policy (style-src 'self')
      // refuses style attributes, not styles set from the page's own script.
      else if (k === "style") el.style.cssText = String(v);
      else if (k.startsWith("on") && typeof v === "function") el.addEventListener(k.slice(2), v);
      else el.setAttribute(k, v === true ? "" : String(v));
    }
    appendAll(el, children);
    return el;
  }

  function appendAll(el, children) {
    for (const c of children.flat(Infinity)) {
      if (c === undefined || c === null || c === false) continue;
      el.appendChild(c instanceof Node ? c : document.createTextNode(String(c)));
    }
  }

  const SVG_NS = "http://www.w3.org/2000/svg";
  function s(tag, attrs, ...children) {
    const el = document.createElementNS(SVG_NS, tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v !== undefined && v !== null) el.setAttribute(k, String(v));
    }
    appendAll(el, children);
    return el;
  }

  const $ = (sel, root) => (root || document).querySelector(sel);

  // Replaces an element's children; null and false children are left out
  // (replaceChildren itself would write them as text).
  function fill(el, ...children) {
    el.replaceChildren();
    appendAll(el, children);
  }

  function toast(message, isError) {
    const t = h("div", { class: "toast" + (isError ? " error" : ""), role: isError ? "alert" : "status" }, message);
    const box = $("#toasts");
    box.appendChild(t);
    // A burst of actions must not cover the page: the newest three stay.
    while (box.children.length > 3) box.firstChild.remove();
    setTimeout(() => t.remove(), isError ? 9000 : 4000);
  }

  function fmtMs(ms) {
    if (ms === null || ms === undefined || !isFinite(ms)) return "";
    if (ms === 0) return "0s";
    if (ms < 1000) return Math.round(ms) + " ms";
    const sec = Math.max(0, Math.floor(ms / 1000));
    if (sec < 60) return sec + "s";
    const m = Math.floor(sec / 60);
    if (m < 60) return m + "m " + String(sec % 60).padStart(2, "0") + "s";
    return Math.floor(m / 60) + "h " + String(m % 60).padStart(2, "0") + "m";
  }

  function fmtNum(n) {
    return n === null || n === undefined ? "–" : Number(n).toLocaleString("en-US");
  }

  function fmtCost(c) {
    return c === null || c === undefined ? "–" : "$" + Number(c).toFixed(c < 1 ? 4 : 2);
  }

  // The run's spend: what agents reported, and "unknown" for attempts whose
  // agent reported none (never counted as $0).
  function fmtSpend(t) {
    if (!t.unknown_spend) return fmtCost(t.cost_usd);
    return t.cost_usd ? fmtCost(t.cost_usd) + " + unknown" : "unknown";
  }

  // The run's tokens in / out: "unknown" for attempts whose agent reported
  // none (never counted as 0 / 0), added to what the others reported.
  function fmtTokens(t) {
    const known = fmtNum(t.tokens_in) + " / " + fmtNum(t.tokens_out);
    if (!t.unknown_tokens) return known;
    return t.tokens_in || t.tokens_out ? known + " + unknown" : "unknown";
  }

  // ---------------------------------------------------------------- model
  // model.run is the last /api/run snapshot with events applied on top;
  // runClock maps "ms since run start" onto the browser's clock so running
  // things tick without asking the server.
  const model = {
    run: null,
    runClock: 0, // Date.now() at run start, estimated
    byId: new Map(),
    output: new Map(), // "story#attempt" -> streamed agent output
    openStory: null, // id of the story view on screen
    storyDetail: null,
    events: [], // recent events for the log panel
    lastEventId: null,
    streamState: "connecting",
    mega: null,
    plans: null,
    openPlan: null,
    trainRecentOpen: false, // the merge train's "Last gatings" unfolded
  };

  function nowMs() {
    return model.runClock ? Date.now() - model.runClock : 0;
  }

  function setRun(snapshot) {
    model.run = snapshot;
    model.run.stories = snapshot.stories || [];
    model.run.attempts = snapshot.attempts || [];
    model.run.totals = snapshot.totals || {};
    model.run.train = snapshot.train || { cars: [], recent: [] };
    model.byId = new Map(model.run.stories.map((st) => [st.id, st]));
    if (typeof snapshot.elapsed_ms === "number") model.runClock = Date.now() - snapshot.elapsed_ms;
    for (const st of model.run.stories) {
      if (st.state === "running" && typeof st.started_at_ms !== "number" && typeof st.elapsed_ms === "number") {
        st.started_at_ms = nowMs() - st.elapsed_ms;
      }
    }
  }

  async function loadRun() {
    const snap = await api("/api/run");
    setRun(snap);
    return snap;
  }

  // The snapshot is the truth for aggregates (totals, attempts of the past);
  // events refine it at once and a snapshot refresh follows, coalesced, so a
  // replayed event can never be counted twice.
  // One refresh at a time: a request during a fetch runs another one after
  // it, so an older answer can never land after a newer one.
  let refreshTimer = null;
  let refreshing = false;
  let refreshAgain = false;
  function refreshSoon() {
    if (refreshing) {
      refreshAgain = true;
      return;
    }
    if (refreshTimer) return;
    refreshTimer = setTimeout(refreshNow, 300);
  }

  async function refreshNow() {
    refreshTimer = null;
    refreshing = true;
    try {
      const before = model.run;
      const states = new Map(before ? before.stories.map((x) => [x.id, [x.state, x.attempt]]) : []);
      await loadRun();
      // A snapshot written a moment before the event it races with must not
      // move a story backwards within the same run and attempt (a retry or
      // a new run does move it back, through its own events).
      if (before && before.run_id === model.run.run_id) {
        for (const st of model.run.stories) {
          const [state, attempt] = states.get(st.id) || [];
          const retried = st.state === "pending" && rank(state) === 3;
          if (state && attempt === st.attempt && rank(state) > rank(st.state) && !retried) st.state = state;
        }
      }
      if (model.streamState !== "lost") setConn(model.run.live ? "live" : "finished");
      renderRunIfShown();
      if (model.openStory) loadStory(model.openStory);
    } catch (e) {
      showBanner(e);
    } finally {
      refreshing = false;
      if (refreshAgain) {
        refreshAgain = false;
        refreshSoon();
      }
    }
  }

  function rank(state) {
    return { pending: 0, running: 1, merging: 2, complete: 3, failed: 3, blocked: 3, skipped: 3, cancelled: 3 }[state] ?? 0;
  }

  function attemptOf(story, attempt) {
    return model.run.attempts.find((a) => a.story === story && a.attempt === attempt);
  }

  function endAttempt(story, attempt, outcome, kind, at) {
    const a = attempt ? attemptOf(story, attempt) : [...model.run.attempts].reverse().find((x) => x.story === story);
    if (a && (a.end_ms === null || a.end_ms === undefined)) {
      a.end_ms = typeof at === "number" ? at : nowMs();
      a.outcome = outcome;
      if (kind) a.failure_kind = kind;
    }
  }

  function freeSlot() {
    const busy = new Set(model.run.attempts.filter((a) => a.end_ms === null || a.end_ms === undefined).map((a) => a.slot));
    let n = 0;
    while (busy.has(n)) n++;
    return n;
  }

  // Applies one engine event (the JSON of `cascade approve --json`) to the
  // model; returns whether the run panels must be redrawn.
  function applyEvent(ev) {
    const run = model.run;
    if (!run) return false;
    // A mega run's feature events belong to the mega view (story ids
    // repeat across features); a refusal is said wherever the page is.
    if (ev.feature) {
      if (ev.event === "control" && !ev.ok) toast(ev.action + " " + (ev.story || "") + " of " + ev.feature + " refused: " + ev.message, true);
      return false;
    }
    const st = ev.story ? model.byId.get(ev.story) : null;
    // When the engine said it, in ms since the run started: from its wall
    // clock (t_ms counts from the start of the process, which a resumed run
    // does not share), else now.
    const start = Date.parse(run.started_at || "");
    const t = typeof ev.ts === "number" && isFinite(start) ? Math.max(0, ev.ts - start) : nowMs();
    switch (ev.event) {
      case "run_started":
        run.status = "running";
        run.live = true;
        run.run_id = ev.run_id;
        refreshSoon(); // a new run may change the whole graph
        return true;
      case "story_started":
        if (!st) return false;
        if (!(st.state === "running" && st.attempt === ev.attempt)) {
          st.started_at_ms = t;
        }
        st.state = "running";
        st.agent = ev.agent;
        st.attempt = ev.attempt;
        st.max_attempts = ev.max_attempts;
        st.phase = ev.phase;
        st.step = "agent";
        if (!attemptOf(ev.story, ev.attempt)) {
          run.attempts.push({
            story: ev.story, attempt: ev.attempt, slot: freeSlot(), agent: ev.agent,
            start_ms: t, end_ms: null, outcome: "running",
          });
        }
        return true;
      // Fleet runs: the coordinator publishes a job, a worker takes it.
      case "job_published":
        if (st) st.step = "queued for the fleet";
        return true;
      case "job_started":
        if (!st) return false;
        if (st.state !== "running") st.started_at_ms = t;
        st.state = "running";
        st.agent = ev.agent;
        st.attempt = ev.attempt;
        st.worker = ev.worker;
        st.step = "on " + ev.worker;
        if (!attemptOf(ev.story, ev.attempt)) {
          run.attempts.push({
            story: ev.story, attempt: ev.attempt, slot: freeSlot(), agent: ev.agent,
            start_ms: t, end_ms: null, outcome: "running",
          });
        }
        return true;
      case "agent_finished":
        if (st) st.step = ev.success ? "agent done" : "agent failed";
        refreshSoon();
        return true;
      case "gate_started":
        if (st) st.step = "gate " + ev.gate;
        return true;
      case "gate_finished":
        if (st) st.step = "gate " + ev.gate + (ev.passed ? " ok" : " failed");
        refreshSoon();
        return true;
      case "review_started":
        if (st) st.step = "review";
        return true;
      case "verification_finished":
        if (st) st.step = ev.passed ? "verified" : "verification failed";
        return true;
      case "attempt_failed":
        if (st) {
          st.error = ev.error;
          st.failure_kind = ev.error_type;
        }
        endAttempt(ev.story, ev.attempt, "failed", ev.error_type, t);
        refreshSoon();
        return true;
      case "retry_scheduled":
        if (st) st.step = "retry " + ev.attempt + "/" + ev.max_attempts + " (" + ev.error_type + ")";
        return true;
      case "merge_started":
        if (st) {
          st.state = "merging";
          st.step = "merging into " + ev.target_branch;
        }
        return true;
      case "merge_resolving":
        if (st) {
          st.state = "merging";
          st.step = "resolving conflict";
        }
        return true;
      // The merge train is the server's to fold (snapshot.train): the
      // snapshot that follows draws it.
      case "integration_started": {
        const ahead = (ev.members || []).filter((m) => m !== ev.story);
        if (st) st.step = "integration gate" + (ahead.length ? " on top of " + ahead.join(", ") : "");
        refreshSoon();
        return true;
      }
      case "integration_finished":
        if (st) st.step = "integration " + ev.verdict;
        refreshSoon();
        return true;
      case "story_committed":
        if (st) st.step = "committed";
        return true;
      case "story_merged":
        if (st) {
          st.state = "complete";
          st.step = "merged";
          st.elapsed_ms = typeof st.started_at_ms === "number" ? t - st.started_at_ms : st.elapsed_ms;
        }
        endAttempt(ev.story, ev.attempts, "ok", null, t);
        refreshSoon();
        return true;
      case "merge_conflict":
        if (st) st.step = "merge conflict";
        if (run.train.cars.length) refreshSoon(); // it left the train
        return true;
      case "story_failed":
        if (st) {
          st.state = ev.error_type === "cancelled" ? "cancelled" : "failed";
          st.error = ev.error;
          st.failure_kind = ev.error_type;
          st.step = null;
          st.elapsed_ms = typeof st.started_at_ms === "number" ? t - st.started_at_ms : st.elapsed_ms;
        }
        endAttempt(ev.story, ev.attempts, ev.error_type === "cancelled" ? "cancelled" : "failed", ev.error_type, t);
        refreshSoon();
        return true;
      case "story_blocked":
        if (st) {
          st.state = "blocked";
          st.error = "blocked by " + (ev.blocked_by || []).join(", ");
        }
        return true;
      case "story_skipped":
        if (st && st.state !== "complete") st.state = "skipped";
        return true;
      case "run_paused":
        run.status = "paused";
        return true;
      case "run_finished":
        run.status = ev.status;
        run.live = false;
        run.elapsed_ms = ev.duration_ms;
        refreshSoon();
        return true;
      case "control":
        // Taken or refused, a steering request is said in the events.
        if (ev.ok) applyControl(ev);
        else toast(ev.action + (ev.story ? " " + ev.story : "") + " refused: " + ev.message, true);
        return true;
      case "batch_started":
        run.current_batch = ev.batch;
        return true;
      default:
        return false;
    }
  }

  // A steering action that was taken (from this page, another one, or the
  // terminal): the run's paused flag, or a story back to waiting.
  function applyControl(c) {
    if (!model.run) return;
    if (c.action === "pause") model.run.paused = true;
    if (c.action === "resume") model.run.paused = false;
    if (c.action === "retry" && c.story) {
      const st = model.byId.get(c.story);
      if (st) {
        st.state = "pending";
        st.error = null;
        st.step = "retry requested";
      }
    }
    if (c.action === "cancel" || c.action === "retry") refreshSoon();
    if (c.by && c.by !== "ui") toast("From " + c.by + ": " + c.action + (c.story ? " " + c.story : ""));
  }

  function logEvent(ev) {
    model.events.push(ev);
    if (model.events.length > 200) model.events.shift();
    const ul = $("#event-log");
    if (ul) {
      ul.appendChild(eventLine(ev));
      while (ul.children.length > 200) ul.firstChild.remove();
      ul.scrollTop = ul.scrollHeight;
    }
  }

  function eventLine(ev) {
    const parts = [ev.event];
    if (ev.feature) parts.push("[" + ev.feature + "]");
    if (ev.story) parts.push(ev.story);
    for (const k of ["gate", "agent", "attempt", "status", "verdict", "members", "action", "error", "message", "reason"]) {
      if (ev[k] !== undefined && ev[k] !== null && ev[k] !== "") parts.push(k + "=" + ev[k]);
    }
    return h("li", { "data-event": ev.event }, parts.join("  "));
  }

  // ---------------------------------------------------------------- event stream
  let source = null;
  function connect() {
    if (source) source.close();
    const url = "/api/events?token=" + encodeURIComponent(TOKEN);
    source = new EventSource(url);
    source.onopen = () => {
      setConn(model.run && !model.run.live ? "finished" : "live");
      showBanner(null);
    };
    source.onerror = () => {
      // EventSource reconnects on its own (with Last-Event-ID) while the
      // server is away; it gives up when refused (a restarted `cascade ui`
      // has a new token).
      setConn("lost");
      if (source.readyState === EventSource.CLOSED) {
        showBanner(new Error("the event stream was refused: if `cascade ui` was restarted, open the new address it printed"));
      }
    };
    source.onmessage = (msg) => {
      let ev;
      try {
        ev = JSON.parse(msg.data);
      } catch (_) {
        return;
      }
      const id = Number(msg.lastEventId) || 0;
      // A reconnection may replay what this page has seen; a new run starts
      // its own sequence.
      if (ev.event === "run_started") model.lastEventId = 0;
      if (id && model.lastEventId && id <= model.lastEventId) return;
      const seen = model.run && typeof model.run.last_event_id === "number" && id && id <= model.run.last_event_id;
      if (id) model.lastEventId = id;
      logEvent(ev);
      if (!seen && applyEvent(ev)) renderRunIfShown();
      if (model.openStory && ev.story === model.openStory) storyChanged();
      if (currentView() === "mega" && (ev.feature || /^(control|mega_.*|feature_.*)$/.test(ev.event))) megaChanged();
    };
    source.addEventListener("agent_output", (msg) => {
      let o;
      try {
        o = JSON.parse(msg.data);
      } catch (_) {
        return;
      }
      if (o.feature) return;
      const key = o.story + "#" + o.attempt;
      // One message per line the agent printed.
      const text = String(o.text ?? "").endsWith("\n") ? String(o.text) : o.text + "\n";
      model.output.set(key, (model.output.get(key) || "") + text);
      const pre = document.querySelector(`pre.output[data-story="${cssEsc(o.story)}"][data-attempt="${Number(o.attempt)}"]`);
      if (pre) {
        const stick = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 4;
        if (pre.dataset.empty === "true") {
          pre.textContent = "";
          pre.dataset.empty = "false";
        }
        pre.textContent += text;
        if (stick) pre.scrollTop = pre.scrollHeight;
      }
    });
    // The run on show changed (a new run went live, the live one ended, or
    // this reader fell behind): reload the snapshot. A new run numbers its
    // events from the start again.
    source.addEventListener("run", (msg) => {
      let st = {};
      try {
        st = JSON.parse(msg.data) || {};
      } catch (_) {
        /* an unreadable status still means: reload */
      }
      if (model.run && st.run_id && st.run_id !== model.run.run_id) model.lastEventId = 0;
      refreshSoon();
    });
  }

  function setConn(state) {
    model.streamState = state;
    const el = $("#conn");
    el.dataset.conn = state;
    el.textContent = { live: "live", lost: "reconnecting…", finished: "connected · no live run", connecting: "connecting…" }[state] || state;
  }

  function cssEsc(v) {
    return window.CSS && CSS.escape ? CSS.escape(v) : String(v).replace(/["\\]/g, "\\$&");
  }

  function showBanner(err) {
    const b = $("#banner");
    if (!err) {
      b.hidden = true;
      return;
    }
    b.hidden = false;
    b.textContent =
      err.status === 401
        ? "Access token missing or wrong: open the address `cascade ui` printed (it ends with ?token=…)."
        : "Error: " + (err.message || err);
  }

  // ---------------------------------------------------------------- run view
  function renderRunIfShown() {
    if (currentView() === "run") renderRun();
    else if (currentView() === "story" && model.storyDetail) renderStoryHead();
  }

  function renderRun() {
    const root = $("#view-run");
    const run = model.run;
    // Redrawing must not take the keyboard focus or the graph's scroll away.
    const focused = document.activeElement && root.contains(document.activeElement) ? document.activeElement.id : null;
    const wrap = $("#graph-wrap");
    const scroll = wrap ? [wrap.scrollLeft, wrap.scrollTop] : null;
    fill(root, );
    if (!run) {
      root.appendChild(h("p", { class: "muted" }, "Loading…"));
      return;
    }
    appendAll(root, [
      h("div", { class: "panel", id: "run-panel" }, renderSummary(run)),
      h("div", { class: "panel" }, h("h2", {}, "Stories by batch"),
        run.stories.length
          ? [renderGraph(run), renderLegend()]
          : h("p", { class: "muted", id: "no-stories" }, run.run_id ? "This run has no stories." : "No run yet, and no prd.json here to draw. Start one with `cascade approve` (or `cascade plan \"goal\"` to make a plan).")),
      renderTrain(run.train),
      h("div", { class: "panel", id: "gantt" }, h("h2", {}, "Timeline of attempts per worker slot"), renderGantt(run)),
      h("div", { class: "panel" }, h("h2", {}, "Events"), h("ul", { id: "event-log" }, model.events.map(eventLine))),
    ]);
    const ul = $("#event-log");
    ul.scrollTop = ul.scrollHeight;
    if (scroll) [$("#graph-wrap").scrollLeft, $("#graph-wrap").scrollTop] = scroll;
    if (focused && document.getElementById(focused)) document.getElementById(focused).focus({ preventScroll: true });
  }

  function renderSummary(run) {
    const t = run.totals || {};
    const done = t.merged ?? run.stories.filter((x) => x.state === "complete").length;
    const failed = t.failed ?? run.stories.filter((x) => x.state === "failed").length;
    const total = t.total ?? run.stories.length;
    const running = run.stories.filter((x) => x.state === "running" || x.state === "merging").length;
    const status = run.run_id ? run.status || "unknown" : "no run yet";
    const pct = (n) => (total ? (100 * n) / total : 0) + "%";
    const pauseBtn = run.paused
      ? h("button", { id: "action-resume", class: "primary", onclick: () => act("/api/actions/resume", "resume") }, "Resume scheduling")
      : h("button", { id: "action-pause", onclick: () => act("/api/actions/pause", "pause"), disabled: !run.live }, "Pause scheduling");
    return h(
      "div",
      { id: "run-summary", "data-status": status, "data-live": String(!!run.live), "data-paused": String(!!run.paused) },
      h("div", { class: "stat" }, h("span", { class: "k" }, "Run"), h("span", { class: "v" },
        h("span", { class: "badge", id: "run-status", "data-status": status }, status), " ",
        run.paused ? h("span", { id: "paused-indicator", title: "No new story starts; running ones finish" }, "PAUSED") : null)),
      h("div", { class: "stat" }, h("span", { class: "k" }, "Plan"), h("span", { class: "v mono", title: run.run_id || "" },
        (run.prd || "") + (run.target_branch ? " → " + run.target_branch : ""))),
      h("div", { class: "stat" }, h("span", { class: "k" }, "Progress"),
        h("span", { class: "v", id: "progress-text" }, done + "/" + total + " merged" + (failed ? ", " + failed + " failed" : "") + (running ? ", " + running + " running" : "")),
        h("div", { class: "progress", "aria-hidden": "true" },
          h("span", { class: "p-done", style: "width:" + pct(done) }),
          h("span", { class: "p-failed", style: "width:" + pct(failed) }),
          h("span", { class: "p-running", style: "width:" + pct(running) }))),
      h("div", { class: "stat" }, h("span", { class: "k" }, "Elapsed"), h("span", { class: "v", id: "run-elapsed", "data-tick": run.live ? "run" : null },
        fmtMs(run.live ? nowMs() : run.elapsed_ms))),
      h("div", { class: "stat" }, h("span", { class: "k" }, "Tokens in / out"), h("span", { class: "v", id: "total-tokens" }, fmtTokens(t))),
      h("div", { class: "stat" }, h("span", { class: "k" }, "Cost" + (t.cost_estimated ? " (estimated)" : "")),
        h("span", { class: "v", id: "total-cost", "data-estimated": String(!!t.cost_estimated) }, fmtSpend(t) + (t.cost_estimated ? " est." : ""))),
      h("div", { class: "stat" }, h("span", { class: "k" }, "Gate cache"), h("span", { class: "v", id: "cache-savings" },
        fmtNum(t.gate_cache_hits || 0) + " hits" + (t.gate_cache_saved_ms ? ", " + fmtMs(t.gate_cache_saved_ms) + " saved" : ""))),
      h("div", { class: "stat" }, h("span", { class: "k" }, "Scheduling"), h("span", { class: "v" }, pauseBtn))
    );
  }

  // The merge train (see docs/control.md): the stories whose merge with the
  // target is gated now, in train order, each on top of the ones ahead of
  // it; the last gatings that ended; how many passed, failed, were
  // superseded. Not drawn for a run that gated no merge.
  function renderTrain(t) {
    const gated = (t.passed || 0) + (t.failed || 0) + (t.superseded || 0);
    if (!t.cars.length && !gated) return null;
    const storyLink = (id) => h("a", { href: "#/story/" + encodeURIComponent(id), class: "mono" }, id);
    const counts = fmtNum(t.passed || 0) + " passed, " + fmtNum(t.failed || 0) + " failed, " + fmtNum(t.superseded || 0) + " superseded";
    const car = (c) => {
      const ahead = c.members.filter((m) => m !== c.story);
      return h("li", { class: "car", "data-story": c.story, "data-state": c.state },
        h("span", { class: "badge", "data-state": carBadge(c.state) }, c.state), " ", storyLink(c.story),
        h("span", { class: "car-base" }, " on " + ["the target"].concat(ahead).join(" + ")),
        c.gatings > 1 ? h("span", { class: "muted" }, " · gated " + c.gatings + " times") : null,
        c.failed_gates.length ? h("span", { class: "car-failed" }, " · failed: " + c.failed_gates.join(", ")) : null);
    };
    const gating = (g) => h("li", { class: "gating", "data-story": g.story, "data-verdict": g.verdict },
      storyLink(g.story), " with " + (g.members.filter((m) => m !== g.story).join(", ") || "the target alone") + ": ",
      h("span", { class: "gating-verdict" }, g.verdict + (g.failed_gates.length ? " (" + g.failed_gates.join(", ") + ")" : "")));
    return h("div", { class: "panel", id: "train" },
      h("h2", {}, "Merge train"),
      h("p", { id: "train-counts" }, "Integration gatings: " + counts),
      t.cars.length
        ? h("ol", { id: "train-cars" }, t.cars.map(car))
        : h("p", { class: "muted", id: "train-empty" }, "No story is on the train now."),
      (t.recent || []).length
        ? h("details", { id: "train-recent", open: model.trainRecentOpen, ontoggle: (e) => (model.trainRecentOpen = e.target.open) },
          h("summary", {}, "Last gatings"), h("ul", {}, t.recent.map(gating)))
        : null);
  }

  // A car's state in the story colours: gating is the merge queue's colour.
  function carBadge(state) {
    return { gating: "merging", passed: "complete", failed: "failed", superseded: "cancelled" }[state] || "pending";
  }

  // Columns are batches, rows the stories of a batch in plan order; edges run
  // from a dependency's right side to the dependant's left side.
  const NODE_W = 210, NODE_H = 84, COL_GAP = 70, ROW_GAP = 14, TOP = 22;

  function renderGraph(run) {
    const batches = run.batches && run.batches.length ? run.batches : groupByBatch(run.stories);
    const critical = new Set(run.critical_path || []);
    const pos = new Map();
    let maxRows = 0;
    batches.forEach((ids, col) => {
      ids.forEach((id, row) => pos.set(id, { x: col * (NODE_W + COL_GAP), y: TOP + row * (NODE_H + ROW_GAP) }));
      maxRows = Math.max(maxRows, ids.length);
    });
    const width = Math.max(1, batches.length) * (NODE_W + COL_GAP) - COL_GAP;
    const height = TOP + maxRows * (NODE_H + ROW_GAP);
    const graph = h("div", { id: "graph", style: `width:${width}px;height:${height}px` });
    const svg = s("svg", { class: "edges", width, height, "aria-hidden": "true" });
    const cp = run.critical_path || [];
    const critEdge = new Set(cp.slice(1).map((id, i) => cp[i] + ">" + id));
    for (const st of run.stories) {
      const to = pos.get(st.id);
      for (const dep of st.depends_on || []) {
        const from = pos.get(dep);
        if (!from || !to) continue;
        const x1 = from.x + NODE_W, y1 = from.y + NODE_H / 2, x2 = to.x, y2 = to.y + NODE_H / 2;
        const mx = (x1 + x2) / 2;
        svg.appendChild(s("path", {
          d: `M${x1},${y1} C${mx},${y1} ${mx},${y2} ${x2},${y2}`,
          class: critEdge.has(dep + ">" + st.id) ? "critical" : "",
          "data-from": dep, "data-to": st.id,
        }));
      }
    }
    graph.appendChild(svg);
    batches.forEach((_, col) => {
      graph.appendChild(h("div", { class: "batch-label", style: `left:${col * (NODE_W + COL_GAP)}px;top:0` }, "batch " + (col + 1)));
    });
    for (const st of run.stories) {
      const p = pos.get(st.id);
      if (!p) continue;
      graph.appendChild(renderNode(st, p, critical.has(st.id)));
    }
    return h("div", { id: "graph-wrap" }, graph);
  }

  function groupByBatch(stories) {
    const cols = [];
    for (const st of stories) {
      const b = st.batch || 0;
      (cols[b] = cols[b] || []).push(st.id);
    }
    return cols.map((c) => c || []);
  }

  function nodeMeta(st) {
    const bits = [];
    if (st.agent) bits.push(st.agent);
    if (st.attempt) bits.push("attempt " + st.attempt + (st.max_attempts ? "/" + st.max_attempts : ""));
    return bits.join(" · ");
  }

  function nodeElapsed(st) {
    if ((st.state === "running" || st.state === "merging") && typeof st.started_at_ms === "number" && model.run.live) {
      return nowMs() - st.started_at_ms;
    }
    return st.elapsed_ms;
  }

  function renderNode(st, p, critical) {
    const elapsed = nodeElapsed(st);
    const blockedBy = st.state === "blocked" && (st.blocked_by || []).length ? "blocked by " + st.blocked_by.join(", ") : null;
    const third = st.state === "failed" ? st.failure_kind || "failed" : blockedBy || st.step || st.state;
    return h(
      "button",
      {
        class: "node", id: "node-" + st.id, "data-story": st.id, "data-state": st.state,
        "data-critical": String(critical), style: `left:${p.x}px;top:${p.y}px`,
        title: (st.title || st.id) + (st.error ? "\n" + st.error : ""),
        "aria-label": `${st.id} ${st.title || ""}: ${st.state}${critical ? ", on the critical path" : ""}`,
        onclick: () => (location.hash = "#/story/" + encodeURIComponent(st.id)),
      },
      h("span", { class: "n-id" }, st.id),
      h("span", { class: "n-title" }, st.title || ""),
      h("span", { class: "n-meta n-agent" }, nodeMeta(st) || "\u00a0"),
      h("span", { class: "n-meta" }, h("span", { class: "n-state" }, third),
        elapsed ? " · " : "", h("span", { class: "n-elapsed", "data-tick": st.state === "running" || st.state === "merging" ? "story" : null }, elapsed ? fmtMs(elapsed) : ""))
    );
  }

  function renderLegend() {
    const states = ["pending", "running", "merging", "complete", "failed", "blocked", "skipped", "cancelled"];
    return h("div", { class: "legend" },
      states.map((x) => h("span", {}, h("i", { style: `background:var(--st-${x})` }), x)),
      h("span", {}, h("i", { style: "background:var(--crit)" }), "critical path"));
  }

  // One row per worker slot; a bar per attempt from its start to its end
  // (to now while running). The scale fits the run so far.
  function renderGantt(run) {
    const atts = run.attempts || [];
    if (!atts.length) return h("p", { class: "muted" }, "No attempt has started yet.");
    const now = run.live ? nowMs() : Math.max(run.elapsed_ms || 0, ...atts.map((a) => a.end_ms || 0));
    const slots = Math.max(...atts.map((a) => a.slot || 0)) + 1;
    const LEFT = 70, ROW = 26, W = Math.max(600, Math.min(1400, (document.body.clientWidth || 1000) - 100));
    const span = Math.max(now, 1000);
    const x = (ms) => LEFT + ((W - LEFT - 10) * Math.max(0, ms)) / span;
    const height = slots * ROW + 26;
    const svg = s("svg", { width: W, height, role: "img", "aria-label": "Gantt chart of attempts", id: "gantt-svg" });
    // Axis: about six ticks on round seconds/minutes.
    const axis = s("g", { class: "axis" });
    const step = niceStep(span / 6);
    for (let t = 0; t <= span; t += step) {
      axis.appendChild(s("line", { x1: x(t), x2: x(t), y1: 0, y2: slots * ROW }));
      axis.appendChild(s("text", { x: x(t) + 2, y: slots * ROW + 14 }, fmtMs(t) || "0s"));
    }
    svg.appendChild(axis);
    for (let i = 0; i < slots; i++) svg.appendChild(s("text", { class: "slot-label", x: 4, y: i * ROW + 17 }, "slot " + (i + 1)));
    for (const a of atts) {
      const end = a.end_ms === null || a.end_ms === undefined ? now : a.end_ms;
      const x0 = x(a.start_ms || 0), w = Math.max(2, x(end) - x0);
      const g = s("g", { "data-story": a.story, "data-attempt": a.attempt });
      const rect = s("rect", {
        class: "bar", x: x0, y: (a.slot || 0) * ROW + 3, width: w, height: ROW - 6,
        "data-outcome": a.failure_kind === "cancelled" ? "cancelled" : a.outcome || (a.end_ms == null ? "running" : "ok"), "data-story": a.story,
      }, s("title", {}, `${a.story} attempt ${a.attempt} (${a.agent || "?"}): ${a.outcome || ""}${a.failure_kind ? " " + a.failure_kind : ""}, ${fmtMs(end - (a.start_ms || 0))}`));
      // Bars are links to their story, for the keyboard too.
      rect.setAttribute("tabindex", "0");
      rect.setAttribute("role", "link");
      rect.setAttribute("aria-label", `${a.story} attempt ${a.attempt}: ${a.outcome || ""}`);
      const open = () => (location.hash = "#/story/" + encodeURIComponent(a.story));
      rect.addEventListener("click", open);
      rect.addEventListener("keydown", (e) => {
        if (e.key === "Enter" || e.key === " ") {
          e.preventDefault();
          open();
        }
      });
      g.appendChild(rect);
      if (w > 60) g.appendChild(s("text", { class: "bar-label", x: x0 + 4, y: (a.slot || 0) * ROW + 17 }, a.story + " #" + a.attempt));
      svg.appendChild(g);
    }
    return svg;
  }

  function niceStep(raw) {
    const steps = [1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600].map((x) => x * 1000);
    return steps.find((x) => x >= raw) || 7200000;
  }

  // Ticking: the elapsed labels of running stories and the run, once a second,
  // without redrawing anything else; the Gantt is redrawn every 5 s.
  let tickCount = 0;
  setInterval(() => {
    if (!model.run || !model.run.live) return;
    tickCount++;
    const re = $("#run-elapsed");
    if (re) re.textContent = fmtMs(nowMs());
    for (const el of document.querySelectorAll(".node .n-elapsed[data-tick]")) {
      const st = model.byId.get(el.closest(".node").dataset.story);
      if (st) el.textContent = fmtMs(nodeElapsed(st));
    }
    if (tickCount % 5 === 0 && currentView() === "run") {
      const g = $("#gantt");
      if (g && g.lastChild) g.lastChild.replaceWith(renderGantt(model.run));
    }
  }, 1000);

  async function act(path, what) {
    try {
      const res = (await post(path)) || {};
      toast(what + ": " + (res.message || (res.pid ? "started (log: " + res.log + ")" : "done")));
      if (what === "pause") model.run.paused = true;
      if (what === "resume") model.run.paused = false;
      renderRunIfShown();
      if (currentView() === "mega") renderMega(true);
      refreshSoon();
      if (model.openStory) loadStory(model.openStory);
    } catch (e) {
      toast(what + " refused: " + e.message, true);
      const out = $(currentView() === "mega" ? "#mega-action-error" : "#action-error");
      if (out) out.textContent = what + " refused (" + e.status + "): " + e.message;
    }
  }

  // ---------------------------------------------------------------- story view
  let storyTimer = null;
  function storyChanged() {
    if (storyTimer) return;
    storyTimer = setTimeout(() => {
      storyTimer = null;
      if (model.openStory) loadStory(model.openStory);
    }, 400);
  }

  async function loadStory(id) {
    try {
      const d = await api("/api/stories/" + encodeURIComponent(id));
      if (model.openStory !== id) return;
      model.storyDetail = d;
      renderStory();
    } catch (e) {
      const root = $("#view-story");
      fill(root, backLink(), h("p", { class: "panel", id: "story-error" }, e.status === 404 ? "No story " + id + ": " + e.message : "Error: " + e.message));
    }
  }

  function backLink() {
    return h("p", {}, h("a", { href: "#/run", id: "back-to-run" }, "← run"));
  }

  function renderStoryHead() {
    const d = model.storyDetail;
    const head = $("#story-head");
    if (!d || !head) return;
    head.replaceWith(storyHead(d));
  }

  function storyHead(d) {
    const st = model.byId.get(d.id) || {};
    const state = st.state || d.state;
    return h("div", { class: "panel", id: "story-head", "data-story": d.id, "data-state": state },
      h("div", { class: "story-head" },
        h("h2", {}, d.id + " · " + (d.title || "")),
        h("span", { class: "badge", "data-state": state, id: "story-state" }, state),
        st.agent ? h("span", { class: "muted" }, st.agent + (st.attempt ? ", attempt " + st.attempt + (st.max_attempts ? "/" + st.max_attempts : "") : "")) : null,
        h("button", { id: "action-retry", disabled: !(state === "failed" || state === "cancelled"), title: "Run the failed story again", onclick: () => act("/api/stories/" + encodeURIComponent(d.id) + "/retry", "retry " + d.id) }, "Retry"),
        h("button", { id: "action-cancel", class: "danger", disabled: !(state === "running" || state === "merging" || state === "pending"), title: "Stop this story (its agent is killed)", onclick: () => act("/api/stories/" + encodeURIComponent(d.id) + "/cancel", "cancel " + d.id) }, "Cancel")),
      h("p", { id: "action-error", class: "muted", role: "status" }),
      st.error ? h("p", { id: "story-error-text" }, h("strong", {}, (st.failure_kind || "error") + ": "), st.error) : null);
  }

  function renderStory() {
    const d = model.storyDetail;
    const root = $("#view-story");
    const attempts = d.attempts || [];
    // What the reader opened or closed stays so when the story is redrawn.
    const detailsKey = (el) => (el.closest(".attempt") || {}).id + "/" + (el.querySelector("summary") || {}).textContent;
    const opened = new Map([...root.querySelectorAll("details")].map((el) => [detailsKey(el), el.open]));
    const same = root.dataset.story === d.id;
    root.dataset.story = d.id;
    fill(root, 
      backLink(),
      storyHead(d),
      h("div", { class: "panel" },
        d.description ? h("p", {}, d.description) : null,
        (d.acceptance_criteria || []).length ? h("div", {}, h("strong", {}, "Acceptance criteria"), h("ul", {}, d.acceptance_criteria.map((c) => h("li", {}, c)))) : null,
        mergeBlock(d.merge),
        h("dl", { class: "kv", id: "story-facts" },
          (d.depends_on || []).length ? [h("dt", {}, "Depends on"), h("dd", { class: "mono" }, d.depends_on.map((x, i) => [i ? ", " : "", h("a", { href: "#/story/" + encodeURIComponent(x) }, x)]))] : null,
          (d.blocked_by || []).length ? [h("dt", {}, "Blocked by"), h("dd", { class: "mono" }, d.blocked_by.join(", "))] : null,
          d.branch ? [h("dt", {}, "Branch"), h("dd", { class: "mono" }, d.branch)] : null,
          d.worktree ? [h("dt", {}, "Worktree"), h("dd", { class: "mono" }, d.worktree)] : null,
          d.review && d.review.verdict ? [h("dt", {}, "Review"), h("dd", {}, d.review.verdict + (d.review.agent ? " by " + d.review.agent : ""))] : null)),
      renderRace(d),
      d.diff ? h("div", { class: "panel", id: "story-diff" }, h("details", { open: true }, h("summary", {}, "Diff of the story's last commit"), renderDiff(d.diff, "diff-story"))) : null,
      h("div", { class: "panel", id: "attempts" },
        h("h2", {}, attempts.length ? "Attempts" : "No attempt yet"),
        attempts.map((a, i) => renderAttempt(d.id, a, i === attempts.length - 1)))
    );
    const st = model.byId.get(d.id);
    if (st && (st.state === "running" || st.state === "merging")) {
      const outs = root.querySelectorAll("pre.output");
      if (outs.length) outs[outs.length - 1].scrollTop = outs[outs.length - 1].scrollHeight;
    }
    if (same) {
      for (const el of root.querySelectorAll("details")) {
        const was = opened.get(detailsKey(el));
        if (was !== undefined) el.open = was;
      }
    }
  }

  // A racing story's contestants side by side: status, review verdict,
  // gates, diff size, cost, branch, and a link to the diff of its branch
  // (the diff of its attempt, below).
  function renderRace(d) {
    const r = d.race;
    if (!r) return null;
    const others = (r.runners_up || []).length ? " over " + r.runners_up.join(", ") : "";
    const outcome = r.winner
      ? "Won by " + r.winner + others + (r.reason ? ": " + r.reason : "")
      : r.contestants.some((c) => c.status === "running") ? "Racing (until " + r.until + ")" : "No contestant passed";
    return h("div", { class: "panel", id: "race" },
      h("h2", {}, "Race"),
      h("p", { class: "race-outcome" }, outcome),
      h("div", { class: "race-contestants" }, r.contestants.map((c) => renderContestant(r, c))));
  }

  function renderContestant(r, c) {
    const won = r.winner === c.name;
    const gates = c.gates || [];
    return h("div", { class: "contestant" + (won ? " winner" : ""), "data-contestant": c.name, "data-status": c.status },
      h("h3", {}, c.name + (won ? " · winner" : "")),
      h("dl", { class: "kv" },
        h("dt", {}, "Agent"), h("dd", {}, c.agent + " (attempt " + c.attempt + ")"),
        h("dt", {}, "Status"), h("dd", { class: "contestant-status" }, c.status.replace("_", " ") + (c.error_type ? " (" + c.error_type + ")" : "")),
        h("dt", {}, "Review"), h("dd", { class: "contestant-verdict" }, c.verdict || "-"),
        h("dt", {}, "Gates"), h("dd", { class: "contestant-gates" }, gates.length ? gates.map((g) => g.name + " " + (g.passed ? "✔" : "✘")).join(", ") : "-"),
        h("dt", {}, "Diff size"), h("dd", { class: "contestant-lines" }, c.lines_changed != null ? c.lines_changed + " lines" : "-"),
        h("dt", {}, "Cost"), h("dd", { class: "contestant-cost" }, c.cost_usd != null ? fmtCost(c.cost_usd) : "unknown"),
        h("dt", {}, "Branch"), h("dd", { class: "mono contestant-branch" }, c.branch)),
      c.error && c.status !== "passed" ? h("p", { class: "attempt-error" }, c.error) : null,
      c.commit ? h("a", {
        href: "#", class: "race-diff", "data-attempt": c.attempt,
        onclick: (ev) => {
          ev.preventDefault();
          const diff = document.getElementById("diff-" + c.attempt);
          if (!diff) return toast("No diff recorded for " + c.branch, true);
          const details = diff.closest("details");
          if (details) details.open = true;
          diff.scrollIntoView({ block: "start" });
        },
      }, "Diff of " + c.branch) : null);
  }

  function mergeBlock(m) {
    if (!m || !m.outcome) return null;
    return h("dl", { class: "kv", id: "merge-outcome", "data-outcome": m.outcome },
      h("dt", {}, "Merge"), h("dd", {}, m.outcome),
      m.commit ? [h("dt", {}, "Commit"), h("dd", { class: "mono" }, m.commit)] : null,
      (m.conflict_files || []).length ? [h("dt", {}, "Conflicts"), h("dd", { class: "mono" }, m.conflict_files.join(", "))] : null);
  }

  function renderAttempt(story, a, last) {
    const key = story + "#" + a.attempt;
    const streamed = model.output.get(key);
    const output = a.output && (!streamed || a.output.length >= streamed.length) ? a.output : streamed || a.output || "";
    // Links go to the attempt's own diff when it has one, else the story's.
    const diffId = a.diff ? "diff-" + a.attempt : "diff-story";
    const gates = a.gates || [];
    const findings = a.findings || [];
    return h("div", { class: "attempt", id: "attempt-" + a.attempt, "data-attempt": a.attempt },
      h("h3", {}, "Attempt " + a.attempt + (a.agent ? " · " + a.agent : "") + (a.phase ? " · " + a.phase : "") + (a.failure_kind ? " · " + a.failure_kind : "")),
      h("p", { class: "muted attempt-meta" }, [
        a.outcome ? "outcome: " + a.outcome : null,
        a.duration_ms ? fmtMs(a.duration_ms) : null,
        a.tokens_in != null || a.tokens_out != null ? fmtNum(a.tokens_in) + " tokens in / " + fmtNum(a.tokens_out) + " out" : (a.outcome ? "tokens unknown (not reported)" : null),
        a.cost_usd != null ? fmtCost(a.cost_usd) + (a.cost_estimated ? " (estimated)" : "") : (a.outcome ? "cost unknown (not reported)" : null),
      ].filter(Boolean).join(" · ")),
      // What confined its processes ("landlock abi 7", or "none"); runs
      // from before confinement recorded nothing.
      a.confinement ? h("p", { class: "attempt-confinement", "data-confinement": a.confinement },
        h("strong", {}, "Confinement: "), a.confinement === "none" ? "none (unconfined)" : a.confinement) : null,
      a.error ? h("p", { class: "attempt-error" }, h("strong", {}, "Error: "), a.error) : null,
      a.retry_reason ? h("p", { class: "retry-reason" }, h("strong", {}, "Retry because: "), a.retry_reason) : null,
      h("details", {}, h("summary", {}, "Prompt"), h("pre", { class: "prompt" }, a.prompt || "(not recorded)")),
      h("details", { open: last }, h("summary", {}, "Agent output"),
        h("pre", { class: "output", "data-story": story, "data-attempt": a.attempt, "data-empty": String(!output) }, output || "(no output yet)")),
      h("details", { open: last && gates.some((g) => !g.passed) }, h("summary", {}, "Gates (" + gates.length + ")"),
        gates.length ? gates.map((g) => renderGate(g, a.attempt, diffId)) : h("p", { class: "muted" }, "No gate ran.")),
      findings.length ? h("details", { open: last }, h("summary", {}, "Verification and review findings (" + findings.length + ")"),
        h("ul", { class: "findings" }, findings.map((f) => h("li", { "data-kind": f.kind, "data-severity": f.severity || "" },
          "[" + f.kind + (f.severity ? " " + f.severity : "") + "] ",
          f.file ? fileLink(f.file, f.line, a.attempt, diffId) : null, f.file ? " " : null, f.message)))) : null,
      a.diff ? h("details", { open: last }, h("summary", {}, "Diff"), renderDiff(a.diff, diffId)) : null
    );
  }

  function renderGate(g, attempt, diffId) {
    const errs = g.errors || [];
    return h("div", { class: "gate", "data-gate": g.name, "data-passed": String(!!g.passed) },
      h("span", { class: "gname" }, (g.passed ? "✔ " : "✘ ") + g.name),
      h("span", { class: "muted" }, " " + fmtMs(g.duration_ms) + (g.cached ? " · from cache" : "")),
      errs.length ? h("ul", { class: "errors" }, errs.map((e) => h("li", { class: "gate-error" },
        e.file ? fileLink(e.file, e.line, attempt, diffId, e.column) : null, e.file ? ": " : null, e.message))) : null,
      !g.passed && g.output_excerpt ? h("details", {}, h("summary", {}, "Output"), h("pre", {}, g.output_excerpt)) : null);
  }

  function fileLink(file, line, attempt, diffId, column) {
    const label = file + (line ? ":" + line + (column ? ":" + column : "") : "");
    return h("a", {
      href: "#", class: "file-link mono", "data-file": file, "data-line": line || "",
      onclick: (ev) => {
        ev.preventDefault();
        jumpToDiff(diffId, file, line);
      },
    }, label);
  }

  // Jumps to the diff line of `file` at new-side `line`; to the file's header
  // when that line is not part of the change.
  function jumpToDiff(diffId, file, line) {
    const diff = document.getElementById(diffId);
    if (!diff) {
      toast("No diff recorded for this attempt", true);
      return;
    }
    const details = diff.closest("details");
    if (details) details.open = true;
    const files = [...diff.querySelectorAll(".dl.file")];
    const match = (p) => p === file || p.endsWith("/" + file) || file.endsWith("/" + p);
    const header = files.find((f) => match(f.dataset.file));
    let target = null;
    if (header && line) {
      target = [...diff.querySelectorAll(`.dl[data-line="${Number(line)}"]`)].find((el) => match(el.dataset.file));
    }
    target = target || header;
    if (!target) {
      toast(file + " is not in this attempt's diff", true);
      return;
    }
    for (const el of diff.querySelectorAll(".flash")) el.classList.remove("flash");
    target.classList.add("flash");
    target.scrollIntoView({ block: "center" });
    if (!target.dataset.line && line) toast(file + ":" + line + " is not a changed line; showing the file");
  }

  // A unified diff, one span per line, each added or context line numbered
  // with its line in the new file (data-file, data-line) for the links.
  function renderDiff(text, id) {
    const pre = h("pre", { class: "diff", id });
    let file = null, newLine = 0;
    for (const line of text.replace(/\n$/, "").split("\n")) {
      let cls = "ctx", num = null;
      if (line.startsWith("diff --git")) {
        cls = "file";
        const m = / b\/(.+)$/.exec(line);
        file = m ? m[1] : file;
      } else if (line.startsWith("+++ ")) {
        cls = "file";
        const p = line.slice(4).trim();
        if (p !== "/dev/null") file = p.replace(/^b\//, "");
      } else if (line.startsWith("--- ") || line.startsWith("index ") || line.startsWith("new file") || line.startsWith("deleted file")) {
        cls = "meta";
      } else if (line.startsWith("@@")) {
        cls = "hunk";
        const m = /\+(\d+)/.exec(line);
        newLine = m ? Number(m[1]) : 0;
      } else if (line.startsWith("+")) {
        cls = "add";
        num = newLine++;
      } else if (line.startsWith("-")) {
        cls = "del";
      } else if (file) {
        num = newLine++;
      }
      pre.appendChild(h("span", {
        class: "dl " + cls, "data-file": file || "", "data-line": num,
        ...(cls === "file" && line.startsWith("diff --git") ? { "data-file-header": "true" } : {}),
      }, h("span", { class: "ln" }, num === null ? "" : num), line || " "));
    }
    // Only the "diff --git" line is the header a link lands on.
    for (const el of pre.querySelectorAll(".dl.file:not([data-file-header])")) el.classList.replace("file", "meta");
    return pre;
  }

  // ---------------------------------------------------------------- mega view
  // Redrawn (from /api/mega) when an event may have moved a feature.
  let megaTimer = null;
  function megaChanged() {
    if (megaTimer) return;
    megaTimer = setTimeout(() => {
      megaTimer = null;
      if (currentView() === "mega") renderMega(true);
    }, 500);
  }

  // The run's status and a pause button for the whole run (every feature's
  // engine; no new feature batch starts while paused), then per feature its
  // progress and its stories, each with Cancel and Retry.
  async function renderMega(quiet) {
    const root = $("#view-mega");
    if (!quiet) fill(root, h("p", { class: "muted" }, "Loading…"));
    try {
      model.mega = await api("/api/mega");
    } catch (e) {
      fill(root, h("p", { class: "panel" }, "Error: " + e.message));
      return;
    }
    const m = model.mega;
    const features = m.features || [];
    if (!features.length) {
      fill(root, h("div", { class: "panel", id: "mega-empty" }, "No mega-plan in this project (mega-plan.json)."));
      return;
    }
    // Redrawing must not take the keyboard focus away.
    const focused = document.activeElement && root.contains(document.activeElement) ? document.activeElement.id : null;
    const pauseBtn = m.paused
      ? h("button", { id: "mega-resume", class: "primary", onclick: () => act("/api/actions/resume", "resume") }, "Resume scheduling")
      : h("button", { id: "mega-pause", disabled: !m.live, title: "No new story of any feature starts, and no new feature batch", onclick: () => act("/api/actions/pause", "pause") }, "Pause scheduling");
    fill(root,
      h("div", { class: "panel", id: "mega-summary", "data-status": m.status, "data-live": String(!!m.live), "data-paused": String(!!m.paused) },
        h("h2", {}, "Features" + (m.goal ? ": " + m.goal : "")),
        h("div", { class: "row" },
          "Mega run: ", h("span", { class: "badge", "data-status": m.status, id: "mega-status" }, m.status || "unknown"),
          m.target_branch ? h("span", { class: "muted mono" }, "→ " + m.target_branch) : null,
          m.paused ? h("span", { id: "mega-paused", class: "paused-badge", title: "No new story or feature batch starts; running ones finish" }, "PAUSED") : null,
          pauseBtn),
        h("p", { id: "mega-action-error", class: "muted", role: "status" })),
      features.map((f) => renderFeature(f, !!m.live)));
    if (focused && document.getElementById(focused)) document.getElementById(focused).focus({ preventScroll: true });
  }

  function renderFeature(f, live) {
    const total = f.stories_total || 0, done = f.stories_done || 0, failed = f.failed || 0, blocked = f.blocked || 0;
    const pct = (n) => (total ? (100 * n) / total : 0) + "%";
    return h("div", { class: "panel feature", "data-feature": f.name, "data-status": f.status },
      h("div", { class: "feature-head" },
        h("h3", {}, f.name),
        f.title ? h("span", { class: "muted" }, f.title) : null,
        h("span", { class: "badge", "data-status": f.status, "data-state": f.status }, f.status),
        (f.depends_on || []).length ? h("span", { class: "muted mono" }, "after " + f.depends_on.join(", ")) : null,
        h("div", { class: "progress", role: "progressbar", "aria-valuemin": 0, "aria-valuemax": total, "aria-valuenow": done },
          h("span", { class: "p-done", style: "width:" + pct(done) }), h("span", { class: "p-failed", style: "width:" + pct(failed) })),
        h("span", { class: "muted" }, done + "/" + total + " merged" + (failed ? ", " + failed + " failed" : "") + (blocked ? ", " + blocked + " blocked" : ""))),
      f.failure && f.failure.message ? h("div", { class: "feature-failure" }, (f.failure.kind ? f.failure.kind + ": " : "") + f.failure.message) : null,
      (f.stories || []).length
        ? h("ul", { class: "mega-stories" }, f.stories.map((st) => renderMegaStory(f.name, st, live)))
        : h("p", { class: "muted" }, "No stories yet."));
  }

  // A story of a feature: Cancel while it waits or runs in the live run,
  // Retry once it failed (on a finished run: `cascade mega resume --yes`).
  function renderMegaStory(feature, st, live) {
    const path = "/api/mega/features/" + encodeURIComponent(feature) + "/stories/" + encodeURIComponent(st.id);
    const key = feature + "." + st.id; // "." is never part of a feature name
    const what = st.id + " of " + feature;
    return h("li", { class: "mega-story", "data-feature": feature, "data-story": st.id, "data-state": st.state },
      h("span", { class: "mono" }, st.id),
      st.title ? h("span", { class: "ms-title" }, st.title) : null,
      h("span", { class: "badge", "data-state": st.state }, st.state),
      st.attempt ? h("span", { class: "muted" }, (st.agent ? st.agent + ", " : "") + "attempt " + st.attempt) : null,
      st.failure_kind ? h("span", { class: "ms-error", title: st.error || "" }, st.failure_kind + (st.error ? ": " + st.error : "")) : null,
      h("span", { class: "ms-actions" },
        h("button", { id: "mega-retry-" + key, class: "mega-retry", "data-feature": feature, "data-story": st.id,
          disabled: !(st.state === "failed" || st.state === "cancelled"), title: "Run the failed story again",
          onclick: () => act(path + "/retry", "retry " + what) }, "Retry"),
        h("button", { id: "mega-cancel-" + key, class: "mega-cancel danger", "data-feature": feature, "data-story": st.id,
          disabled: !(live && (st.state === "running" || st.state === "merging" || st.state === "pending")), title: "Stop this story (its agent is killed)",
          onclick: () => act(path + "/cancel", "cancel " + what) }, "Cancel")));
  }

  // ---------------------------------------------------------------- plan view
  // The session JSON is cascade-planning's session.json (topic, tradeoffs,
  // recommendation, selected_option_id) or the draft contract's names
  // (title, pros/cons, recommended, chosen): both are read.
  async function renderPlans() {
    const root = $("#view-plan");
    fill(root, h("p", { class: "muted" }, "Loading…"));
    try {
      model.plans = await api("/api/plans");
    } catch (e) {
      fill(root, h("p", { class: "panel" }, "Error: " + e.message));
      return;
    }
    const list = Array.isArray(model.plans) ? model.plans : model.plans.sessions || model.plans.plans || [];
    fill(root, h("div", { class: "panel" }, h("h2", {}, "Planning sessions"),
      list.length ? h("ul", { class: "plan-list", id: "plan-list" }, list.map((p) => {
        const id = p.id || p.session_id;
        return h("li", { "data-plan": id, "data-status": p.status },
          h("a", { href: "#/plan/" + encodeURIComponent(id) }, p.goal || p.instruction || id), " ",
          h("span", { class: "badge", "data-status": p.status }, p.status), " ",
          h("span", { class: "muted mono" }, id + (p.updated_at ? " · " + p.updated_at : "")));
      })) : h("p", { class: "muted", id: "plan-empty" }, "No planning session. Start one with `cascade plan \"goal\"`."),
      (model.plans.unreadable || []).length ? h("div", { id: "plan-unreadable" }, h("h3", {}, "Sessions that could not be read"),
        h("ul", {}, model.plans.unreadable.map((u) => h("li", { class: "mono" }, u.id + ": " + u.error)))) : null));
  }

  async function renderPlan(id) {
    const root = $("#view-plan");
    let p;
    try {
      p = await api("/api/plans/" + encodeURIComponent(id));
    } catch (e) {
      fill(root, h("p", {}, h("a", { href: "#/plan" }, "← sessions")), h("p", { class: "panel", id: "plan-error" }, "Error: " + e.message));
      return;
    }
    if (model.openPlan !== id) return;
    const waiting = new Set(p.waiting_for || []);
    const final = p.status === "approved" || p.status === "cancelled";
    fill(root, 
      h("p", { class: "row" }, h("a", { href: "#/plan", id: "back-to-plans" }, "← sessions"),
        h("button", { id: "plan-reload", onclick: () => renderPlan(id) }, "Reload")),
      h("div", { class: "panel", id: "plan-head", "data-plan": p.id || p.session_id, "data-status": p.status },
        h("div", { class: "story-head" }, h("h2", {}, p.instruction || p.goal || id), h("span", { class: "badge", "data-status": p.status, id: "plan-status" }, p.status)),
        h("dl", { class: "kv" },
          p.strategy ? [h("dt", {}, "Strategy"), h("dd", {}, String(p.strategy) + (p.strategy_reasoning ? " — " + p.strategy_reasoning : ""))] : null,
          waiting.size ? [h("dt", {}, "Waiting for"), h("dd", { id: "plan-waiting" }, [...waiting].join(", "))] : null,
          p.design_summary ? [h("dt", {}, "Design"), h("dd", {}, p.design_summary)] : null,
          p.error_message ? [h("dt", {}, "Error"), h("dd", {}, p.error_message)] : null),
        h("p", { id: "plan-action-error", role: "status", class: "muted" })),
      (p.questions || []).length ? h("div", { class: "panel", id: "plan-questions" }, h("h2", {}, "Questions"),
        p.questions.map((q) => renderQuestion(p, q, final))) : null,
      (p.decisions || []).length ? h("div", { class: "panel", id: "plan-decisions" }, h("h2", {}, "Decisions"),
        p.decisions.map((d) => renderDecision(p, d, final))) : null,
      renderChallenge(p),
      renderReview(p, waiting, final)
    );
  }

  async function planPost(p, path, body, what) {
    const id = p.id || p.session_id;
    try {
      const res = (await post("/api/plans/" + encodeURIComponent(id) + path, body)) || {};
      // 202: the planner goes on in the background (agents at work); the
      // session shows its progress when reloaded.
      toast(what + ": " + (res.running ? "saved; the planner is working (log: " + res.log + ")" : "saved"));
      await renderPlan(id);
      const out = $("#plan-action-error");
      if (out && res.running) out.textContent = "The planner is working on it; press Reload to see where it stands.";
    } catch (e) {
      toast(what + " refused: " + e.message, true);
      // Part of it may have been kept (an answer saved before the planner
      // could go on): show the session as it is now, then why.
      await renderPlan(id);
      const out = $("#plan-action-error");
      if (out) out.textContent = what + " refused (" + e.status + "): " + e.message;
    }
  }

  // An answer kept in the session's answers.json, not used by the planner yet.
  function queued(p, key) {
    const v = p.answers && p.answers[key];
    if (v === undefined || v === null) return null;
    return typeof v === "string" ? v : v.option || JSON.stringify(v);
  }

  function renderQuestion(p, q, final) {
    const inputId = "answer-" + q.id;
    const input = q.options && q.options.length
      ? h("select", { id: inputId, name: q.id }, q.options.map((o) => h("option", { value: o, selected: q.answer === o }, o)))
      : h("input", { type: "text", id: inputId, name: q.id, value: q.answer || queued(p, q.id) || "", placeholder: q.assumption || q.default || "" });
    const form = h("form", {
      class: "row", "data-question": q.id,
      onsubmit: (ev) => {
        ev.preventDefault();
        const v = input.value.trim() || input.placeholder;
        if (!v) return toast("Write an answer first", true);
        planPost(p, "/answer", { key: q.id, value: v }, "answer " + q.id);
      },
    }, h("label", { for: inputId, class: "muted" }, "Answer"), input,
      h("button", { type: "submit", class: "primary", id: "submit-" + q.id, disabled: final }, q.answer ? "Change" : "Answer"));
    return h("div", { class: "question", "data-question": q.id, "data-answered": String(q.answer != null) },
      h("strong", {}, q.id + ". " + q.question),
      q.why || q.context ? h("div", { class: "muted" }, q.why || q.context) : null,
      q.answer != null ? h("div", {}, "Answered: ", h("em", { class: "answer-text" }, q.answer)) : null,
      q.answer == null && queued(p, q.id) ? h("div", { class: "queued" }, "Answer saved: ", h("em", { class: "answer-text" }, queued(p, q.id)), h("span", { class: "muted" }, " (the planner uses it when it goes on)")) : null,
      form);
  }

  function renderDecision(p, d, final) {
    const recommended = d.recommended || d.recommendation;
    const chosen = d.chosen || d.selected_option_id;
    return h("div", { class: "decision", "data-decision": d.id, "data-chosen": chosen || "" },
      h("strong", {}, d.id + ". " + (d.title || d.topic || "")),
      d.context ? h("div", { class: "muted" }, d.context) : null,
      h("div", { class: "options" }, (d.options || []).map((o) => {
        const oid = o.id || o.name;
        const pros = o.pros || (o.tradeoffs && o.tradeoffs.pros) || [];
        const cons = o.cons || (o.tradeoffs && o.tradeoffs.cons) || [];
        return h("div", { class: "option", "data-option": oid, "data-recommended": String(oid === recommended), "data-chosen": String(oid === chosen) },
          h("strong", {}, o.name || oid), oid === recommended ? h("span", { class: "muted" }, " (recommended)") : null,
          o.description ? h("div", { class: "muted" }, o.description) : null,
          pros.length ? h("ul", { class: "pros" }, pros.map((x) => h("li", {}, x))) : null,
          cons.length ? h("ul", { class: "cons" }, cons.map((x) => h("li", {}, x))) : null,
          h("button", { disabled: final || oid === chosen, "data-choose": oid, onclick: () => planPost(p, "/answer", { key: d.id, value: oid }, "decision " + d.id) },
            oid === chosen ? "Chosen" : "Choose"));
      })),
      d.rationale ? h("div", { class: "muted" }, "Rationale: " + d.rationale) : null);
  }

  function renderChallenge(p) {
    const ch = p.challenge;
    if (!ch || (Array.isArray(ch) && !ch.length)) return null;
    const items = Array.isArray(ch) ? ch : [ch];
    return h("div", { class: "panel", id: "plan-challenge" }, h("h2", {}, "Challenge"),
      items.map((c) => typeof c === "string" ? h("pre", {}, c) : h("div", { class: "question" },
        h("strong", {}, [c.round ? "Round " + c.round : null, c.agent || c.by, c.verdict].filter(Boolean).join(" · ")),
        c.text || c.findings || c.summary ? h("pre", {}, c.text || c.findings || c.summary) : null,
        Array.isArray(c.issues) ? h("ul", {}, c.issues.map((i) => h("li", {}, typeof i === "string" ? i : JSON.stringify(i)))) : null)));
  }

  function renderReview(p, waiting, final) {
    const r = p.review || {};
    const canApprove = !final && (p.status === "review" || waiting.has("review"));
    const reason = h("input", { type: "text", id: "reject-reason", placeholder: "What should change" });
    return h("div", { class: "panel", id: "plan-review" }, h("h2", {}, "Review"),
      r.summary || r.self_review || r.text ? h("pre", {}, r.summary || r.self_review || r.text) : null,
      r.verdict ? h("p", {}, "Verdict: ", h("strong", {}, r.verdict)) : null,
      Array.isArray(r.files) && r.files.length ? h("p", { class: "mono" }, r.files.join(", ")) : null,
      typeof r === "object" && !r.summary && !r.self_review && !r.text && Object.keys(r).length ? h("pre", {}, JSON.stringify(r, null, 2)) : null,
      h("div", { class: "row" },
        h("button", { class: "primary", id: "plan-approve", disabled: !canApprove, onclick: () => planPost(p, "/approve", {}, "approve") }, "Approve plan"),
        h("div", { style: "flex:1;min-width:200px" }, reason),
        h("button", { id: "plan-reject", disabled: !canApprove, onclick: () => {
          const why = reason.value.trim();
          if (!why) return toast("Say what should change", true);
          planPost(p, "/answer", { key: "review", value: "reject: " + why }, "reject");
        } }, "Ask for changes")),
      !canApprove && !final ? h("p", { class: "muted" }, "Approval opens when the plan reaches review.") : null);
  }

  // ---------------------------------------------------------------- routing
  function currentView() {
    const m = /^#\/(\w+)/.exec(location.hash);
    return m ? m[1] : "run";
  }

  function route() {
    const hash = location.hash || "#/run";
    const [, view, arg] = /^#\/(\w+)(?:\/(.+))?/.exec(hash) || [null, "run", null];
    for (const sec of document.querySelectorAll(".view")) sec.hidden = true;
    const tab = view === "story" ? "run" : view;
    for (const a of document.querySelectorAll("#tabs a")) {
      if (a.dataset.view === tab) a.setAttribute("aria-current", "page");
      else a.removeAttribute("aria-current");
    }
    model.openStory = null;
    model.openPlan = null;
    if (view === "story" && arg) {
      const id = decodeURIComponent(arg);
      model.openStory = id;
      model.storyDetail = null;
      $("#view-story").hidden = false;
      fill($("#view-story"), backLink(), h("p", { class: "muted" }, "Loading " + id + "…"));
      document.title = id + " · cascade";
      loadStory(id);
    } else if (view === "mega") {
      $("#view-mega").hidden = false;
      document.title = "mega plan · cascade";
      renderMega();
    } else if (view === "plan") {
      $("#view-plan").hidden = false;
      document.title = "planning · cascade";
      if (arg) {
        model.openPlan = decodeURIComponent(arg);
        renderPlan(model.openPlan);
      } else renderPlans();
    } else {
      $("#view-run").hidden = false;
      document.title = "cascade" + (model.run && model.run.status ? " · " + model.run.status : "");
      renderRun();
    }
  }

  async function start() {
    window.addEventListener("hashchange", route);
    try {
      await loadRun();
      showBanner(null);
    } catch (e) {
      showBanner(e);
      setConn("lost");
      document.body.dataset.ready = "error";
      return;
    }
    route();
    connect();
    document.body.dataset.ready = "true";
  }

  start();
})();
