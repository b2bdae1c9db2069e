// tether's page script: progressive enhancement only. Every page works without it
// (links and forms posted to the server). With it, the pages follow the daemon's
// live stream (Server-Sent Events): the Sources list updates its rows in place, a
// Source's page reloads its <main> from the server. Data from the stream is put in
// the page only as text (textContent, setAttribute), never as markup.
"use strict";

(function () {
  var STREAM = "/api/v1/stream";
  var SOURCES = "/api/v1/sources";
  var SHORT_COMMIT = 12;
  var STATES = ["failed", "blocked", "drifted", "progressing", "unknown", "suspended", "ready"];
  var NEEDS_ATTENTION = { failed: true, blocked: true, drifted: true };

  function el(tag, className, text) {
    var node = document.createElement(tag);
    if (className) node.className = className;
    if (text !== undefined && text !== null) node.textContent = String(text);
    return node;
  }

  function titleCase(word) {
    return word.charAt(0).toUpperCase() + word.slice(1);
  }

  // As paths::segment: everything but unreserved characters percent-encoded.
  function segment(text) {
    return encodeURIComponent(text).replace(/[!'()*]/g, function (c) {
      return "%" + c.charCodeAt(0).toString(16).toUpperCase();
    });
  }

  // As the server's check: an http(s) address or a relative one, no control character.
  function isSafeUrl(url) {
    if (typeof url !== "string" || /[\u0000-\u001f\u007f-\u009f]/.test(url)) return false;
    var trimmed = url.replace(/^\s+/, "");
    var match = /^([^:/?#]*):/.exec(trimmed);
    return !match || /^https?$/i.test(match[1]);
  }

  function short(commit) {
    return commit.slice(0, SHORT_COMMIT);
  }

  function duration(seconds) {
    if (seconds < 10) return seconds.toFixed(1) + "s";
    if (seconds < 60) return seconds.toFixed(0) + "s";
    var whole = Math.round(seconds);
    var rest = whole % 60;
    return Math.floor(whole / 60) + "m" + (rest < 10 ? "0" : "") + rest + "s";
  }

  // ---- the live indicator ----

  var live = null;

  function showLive(up, words) {
    if (!live) {
      var header = document.querySelector("body > header");
      if (!header) return;
      live = el("span");
      live.id = "live";
      live.setAttribute("role", "status");
      header.appendChild(live);
    }
    live.setAttribute("data-state", up ? "up" : "down");
    live.textContent = words;
  }

  // Follows the stream; `onSource(summary)` for each change, `onResync()` when
  // changes may have been missed (the stream came back, or the reader lagged).
  function follow(onSource, onResync) {
    if (!window.EventSource) return;
    var stream = new EventSource(STREAM);
    var wasDown = false;
    showLive(false, "connecting…");
    stream.addEventListener("open", function () {
      showLive(true, "live");
      if (wasDown) onResync();
      wasDown = false;
    });
    stream.addEventListener("error", function () {
      wasDown = true;
      showLive(false, stream.readyState === EventSource.CLOSED ? "offline: reload the page" : "offline, reconnecting…");
    });
    stream.addEventListener("source", function (event) {
      var summary;
      try {
        summary = JSON.parse(event.data);
      } catch (e) {
        return;
      }
      if (summary && typeof summary.namespace === "string" && typeof summary.name === "string") onSource(summary);
    });
    stream.addEventListener("reload", onResync);
  }

  // ---- the Sources page: rows as html::source_rows makes them ----

  function commitCell(source) {
    var cell = el("td");
    var link = source.state !== "ready" && isSafeUrl(source.commitLink) ? source.commitLink : null;
    if (source.wanted && link) {
      var a = el("a", "wanted", short(source.wanted));
      a.setAttribute("href", link);
      cell.appendChild(a);
    } else {
      cell.appendChild(document.createTextNode(source.wanted ? short(source.wanted) : "—"));
    }
    if ((source.applied || null) !== (source.wanted || null)) {
      cell.appendChild(document.createTextNode(" "));
      cell.appendChild(el("span", "applied", "applied " + (source.applied ? short(source.applied) : "none")));
    }
    return cell;
  }

  function statusCell(source) {
    var cell = el("td");
    if (source.state !== "ready") {
      cell.appendChild(el("span", "reason", source.reason));
      cell.appendChild(document.createTextNode(" "));
      cell.appendChild(el("span", "message", source.message));
    }
    if (source.blockedOn) {
      cell.appendChild(document.createTextNode(" "));
      cell.appendChild(el("span", "blocked", source.blockedOn));
    }
    var clusters = source.clusters || [];
    if (clusters.length > 1) {
      var list = el("span", "clusters");
      clusters.forEach(function (cluster) {
        var item = el("span", "cluster " + (cluster.ready ? "ok" : "bad"), cluster.name);
        item.setAttribute("title", cluster.message || "");
        list.appendChild(item);
      });
      cell.appendChild(document.createTextNode(" "));
      cell.appendChild(list);
    }
    return cell;
  }

  function countsCell(counts) {
    counts = counts || {};
    var cell = el("td", null, counts.objects || 0);
    ["drifted", "failed", "conflicts"].forEach(function (what) {
      if (counts[what] > 0) {
        cell.appendChild(document.createTextNode(" "));
        cell.appendChild(el("span", what, counts[what] + " " + what));
      }
    });
    return cell;
  }

  function sourceRow(source) {
    var state = STATES.indexOf(source.state) >= 0 ? source.state : "unknown";
    var key = source.namespace + "/" + source.name;
    var row = el("tr", "st-" + state);
    row.setAttribute("data-source", key);
    row.appendChild(el("td", null, titleCase(state)));
    var nameCell = el("td");
    var link = el("a", null, key);
    link.setAttribute("href", "/sources/" + segment(source.namespace) + "/" + segment(source.name));
    nameCell.appendChild(link);
    row.appendChild(nameCell);
    row.appendChild(commitCell(source));
    row.appendChild(statusCell(source));
    var pass = source.lastPass ? source.lastPass + (typeof source.tookSeconds === "number" ? " " + duration(source.tookSeconds) : "") : "—";
    row.appendChild(el("td", null, pass));
    row.appendChild(countsCell(source.counts));
    return row;
  }

  function rowState(row) {
    var match = /(?:^|\s)st-([a-z]+)/.exec(row.className);
    return match ? match[1] : "unknown";
  }

  function rowByKey(body, key) {
    for (var i = 0; i < body.rows.length; i++) {
      if (body.rows[i].getAttribute("data-source") === key) return body.rows[i];
    }
    return null;
  }

  function firstCalmRow(body) {
    for (var i = 0; i < body.rows.length; i++) {
      if (!NEEDS_ATTENTION[rowState(body.rows[i])]) return body.rows[i];
    }
    return null;
  }

  // As html::overview: "3 need attention · 997 ready".
  function updateOverview(body) {
    var summary = document.getElementById("summary");
    if (!summary) return;
    var count = {};
    var attention = 0;
    for (var i = 0; i < body.rows.length; i++) {
      var state = rowState(body.rows[i]);
      count[state] = (count[state] || 0) + 1;
      if (NEEDS_ATTENTION[state]) attention++;
    }
    var parts = [attention + " need attention"];
    ["progressing", "unknown", "suspended", "ready"].forEach(function (state) {
      if (count[state]) parts.push(count[state] + " " + state);
    });
    summary.textContent = parts.join(" · ");
  }

  // Puts a Source's row in place: a Source that needs attention goes to the top, a
  // calm one stays where it was, or joins the calm ones' top.
  function placeRow(body, source) {
    var row = sourceRow(source);
    var old = rowByKey(body, row.getAttribute("data-source"));
    if (NEEDS_ATTENTION[rowState(row)]) {
      if (old) body.removeChild(old);
      body.insertBefore(row, body.firstChild);
    } else if (old && !NEEDS_ATTENTION[rowState(old)]) {
      body.replaceChild(row, old);
    } else {
      if (old) body.removeChild(old);
      body.insertBefore(row, firstCalmRow(body));
    }
    var empty = document.querySelector("main > p.empty");
    if (empty) empty.parentNode.removeChild(empty);
  }

  function sourcesPage() {
    var table = document.getElementById("sources");
    if (!table || !table.tBodies[0]) return;
    var body = table.tBodies[0];
    follow(
      function (source) {
        placeRow(body, source);
        updateOverview(body);
      },
      function () {
        fetch(SOURCES, { headers: { Accept: "application/json" } })
          .then(function (response) {
            if (!response.ok) throw new Error(response.status);
            return response.json();
          })
          .then(function (list) {
            var seen = {};
            (list.sources || []).forEach(function (source) {
              seen[source.namespace + "/" + source.name] = true;
            });
            for (var i = body.rows.length - 1; i >= 0; i--) {
              if (!seen[body.rows[i].getAttribute("data-source")]) body.removeChild(body.rows[i]);
            }
            (list.sources || []).slice().reverse().forEach(function (source) {
              placeRow(body, source);
            });
            updateOverview(body);
          })
          .catch(function () {
            showLive(false, "offline: reload the page");
          });
      }
    );
  }

  // ---- a Source's page: <main> reloaded from the server ----

  function sourcePage() {
    var main = document.querySelector("main");
    var summary = document.getElementById("summary");
    if (!main || !summary) return;
    var key = summary.getAttribute("data-source");
    var loading = false;
    var again = false;

    // Someone typing in a form keeps their words: the reload waits for them.
    function busy() {
      var active = document.activeElement;
      return active && main.contains(active) && active.tagName === "INPUT" && active.value !== "";
    }

    function refresh() {
      if (loading || busy()) {
        again = true;
        return;
      }
      loading = true;
      fetch(location.pathname + "?fragment=main", { headers: { Accept: "text/html" } })
        .then(function (response) {
          // A redirect (to the login form) is not the fragment: the session ended.
          if (!response.ok || response.redirected) throw new Error(response.status);
          return response.text();
        })
        .then(function (fragment) {
          // The server escaped every value of the fragment; no script in it runs.
          main.innerHTML = fragment;
        })
        .catch(function () {
          showLive(false, "could not update: reload the page");
        })
        .then(function () {
          loading = false;
          if (again) {
            again = false;
            refresh();
          }
        });
    }

    main.addEventListener("focusout", function () {
      if (again) setTimeout(refresh, 0);
    });
    follow(function (source) {
      if (source.namespace + "/" + source.name === key) refresh();
    }, refresh);
  }

  // Destructive actions (recreating a pod) ask first.
  document.addEventListener("submit", function (event) {
    var button = event.submitter;
    var question = button && button.getAttribute("data-confirm");
    if (question && !window.confirm(question)) event.preventDefault();
  });

  function start() {
    if (document.body.classList.contains("sources-page")) sourcesPage();
    else if (document.body.classList.contains("source-page")) sourcePage();
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
