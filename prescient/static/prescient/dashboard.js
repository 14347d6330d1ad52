/* The dashboard refreshes itself: every data-refresh-seconds (15 s) it fetches its own page and
   puts the new figures (#prescient-live) in place of the old, while the tab is visible. The
   Pause/Resume button stops and restarts that; the choice is kept in localStorage, so it holds
   across reloads and tabs. No framework, nothing from the internet; loaded as a file (with the
   site's CSP nonce, if any), never inline. */
(function () {
  "use strict";
  var KEY = "prescient.dashboard.paused";
  var live = document.getElementById("prescient-live");
  var bar = document.getElementById("prescient-refresh");
  var button = document.getElementById("prescient-refresh-toggle");
  var note = document.getElementById("prescient-refresh-note");
  if (!live || !bar || !button || !note || !window.fetch || !window.DOMParser) {
    return;
  }
  var every = (parseInt(live.getAttribute("data-refresh-seconds"), 10) || 15) * 1000;
  var timer = null;

  function paused() {
    try {
      return window.localStorage.getItem(KEY) === "1";
    } catch (e) {  // storage refused (privacy settings): refresh, and pause for this page only
      return button.getAttribute("aria-pressed") === "true";
    }
  }

  function remember(value) {
    try {
      if (value) {
        window.localStorage.setItem(KEY, "1");
      } else {
        window.localStorage.removeItem(KEY);
      }
    } catch (e) { /* kept on the button only */ }
    button.setAttribute("aria-pressed", value ? "true" : "false");
  }

  function show(failed) {
    var now = paused();
    button.textContent = button.getAttribute(now ? "data-resume" : "data-pause");
    button.setAttribute("aria-pressed", now ? "true" : "false");
    note.textContent = note.getAttribute(failed ? "data-failed" : now ? "data-paused" : "data-running");
  }

  function schedule() {
    window.clearTimeout(timer);
    timer = paused() ? null : window.setTimeout(refresh, every);
  }

  function refresh() {
    if (paused()) {
      return;
    }
    if (document.hidden) {  // a background tab asks for nothing; it catches up when shown
      schedule();
      return;
    }
    window.fetch(window.location.href, {credentials: "same-origin", headers: {"Accept": "text/html"}})
      .then(function (response) {
        // A redirect is the login page: the session ended.
        if (!response.ok || response.redirected) {
          throw new Error("HTTP " + response.status);
        }
        return response.text();
      })
      .then(function (html) {
        var fresh = new DOMParser().parseFromString(html, "text/html").getElementById("prescient-live");
        if (!fresh) {
          throw new Error("no figures in the page");
        }
        if (!paused()) {  // paused while the page was on its way: keep what is shown
          live.innerHTML = fresh.innerHTML;
        }
        show(false);
      })
      .catch(function () {
        show(true);
      })
      .then(schedule);
  }

  button.addEventListener("click", function () {
    var pause = !paused();
    remember(pause);
    show(false);
    if (pause) {
      window.clearTimeout(timer);
      timer = null;
    } else {
      refresh();  // resumed: fresh figures at once
    }
  });
  document.addEventListener("visibilitychange", function () {
    if (!document.hidden && !paused() && timer === null) {
      refresh();
    }
  });

  bar.hidden = false;
  show(false);
  schedule();
})();
