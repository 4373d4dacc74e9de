// Herald's operator page works without this script. It adds the "select
// every event shown" box of the dead-letter list, and keeps the overview
// live: every few seconds it fetches the overview's JSON (the same URL,
// Accept: application/json) and updates the figures, tables and charts in
// place, without reloading. It waits while a confirmation is open or a
// form field has focus, so that nothing moves under the operator's hand.
"use strict";

function selectAll() {
  var all = document.getElementById("select-all");
  if (!all) {
    return;
  }
  var picks = document.querySelectorAll("input.pick");
  all.addEventListener("change", function () {
    picks.forEach(function (p) { p.checked = all.checked; });
  });
  picks.forEach(function (p) {
    p.addEventListener("change", function () {
      var n = 0;
      picks.forEach(function (q) { if (q.checked) { n++; } });
      all.checked = n === picks.length;
      all.indeterminate = n > 0 && n < picks.length;
    });
  });
}

// at reads a dotted path ("totals.ready", "charts.0.total") in data.
function at(data, path) {
  return path.split(".").reduce(function (v, k) { return v == null ? v : v[k]; }, data);
}

function truthy(v) {
  return Array.isArray(v) ? v.length > 0 : !!v;
}

// fill sets the fields of a copy of a row template from one JSON object.
// Text only ever goes in as textContent.
function text(v) {
  return v == null ? "" : String(v);
}

function fill(el, row) {
  // A row keeps the key the server gave it, so that it can be found again
  // after a refresh (data-key-f names the field that holds it).
  if (el.dataset.keyF) {
    el.dataset.key = text(at(row, el.dataset.keyF));
  }
  el.querySelectorAll("[data-f]").forEach(function (n) { n.textContent = text(at(row, n.dataset.f)); });
  el.querySelectorAll("[data-v]").forEach(function (n) { n.value = text(at(row, n.dataset.v)); });
  el.querySelectorAll("[data-title]").forEach(function (n) { n.title = text(at(row, n.dataset.title)); });
  el.querySelectorAll("[data-href]").forEach(function (n) {
    n.setAttribute("href", n.dataset.hrefBase + encodeURIComponent(text(at(row, n.dataset.href))));
  });
  el.querySelectorAll("[data-class]").forEach(function (n) {
    n.className = (n.className.replace(/\bstate-\S+/g, "").trim() + " state-" + text(at(row, n.dataset.class))).trim();
  });
  el.querySelectorAll("[data-show]").forEach(function (n) { n.hidden = !truthy(at(row, n.dataset.show)); });
}

// renderRows makes box's rows those of the JSON, in its order. A row whose
// key (data-key-f) the box shows already is updated in place, so that what
// did not change does not move under the operator's pointer; rows without
// a key are made again.
function renderRows(box, rows) {
  var tpl = box.querySelector(":scope > template");
  var keyF = tpl.content.firstElementChild.dataset.keyF;
  var shown = new Map(); // a Map: a key may be any text, "constructor" too
  Array.from(box.children).forEach(function (c) {
    if (c === tpl) {
      return;
    }
    if (keyF && c.dataset.key !== undefined && !shown.has(c.dataset.key)) {
      shown.set(c.dataset.key, c);
    } else {
      c.remove();
    }
  });
  var next = (rows || []).map(function (row) {
    var key = keyF ? text(at(row, keyF)) : undefined;
    var el = key !== undefined && shown.get(key);
    if (el) {
      shown.delete(key);
    } else {
      el = tpl.content.firstElementChild.cloneNode(true);
    }
    fill(el, row);
    return el;
  });
  shown.forEach(function (el) { el.remove(); });
  // In order after the template, moving only the rows out of place.
  var prev = tpl;
  next.forEach(function (el) {
    if (prev.nextElementSibling !== el) {
      box.insertBefore(el, prev.nextElementSibling);
    }
    prev = el;
  });
}

var svgNS = "http://www.w3.org/2000/svg";

function svg(name, attrs, text) {
  var el = document.createElementNS(svgNS, name);
  Object.keys(attrs).forEach(function (k) { el.setAttribute(k, attrs[k]); });
  if (text !== undefined) {
    el.textContent = text;
  }
  return el;
}

// drawChart redraws a chart the server laid out (see chart.go).
function drawChart(c) {
  var el = document.getElementById(c.id);
  if (!el) {
    return;
  }
  while (el.firstChild) {
    el.firstChild.remove();
  }
  (c.y_ticks || []).forEach(function (t) {
    el.appendChild(svg("line", {"class": "grid", x1: c.left, y1: t.at, x2: c.width, y2: t.at}));
    el.appendChild(svg("text", {"class": "ylabel", x: c.left, y: t.at, dx: -4, dy: 4}, t.label));
  });
  el.appendChild(svg("line", {"class": "axis", x1: c.left, y1: c.bottom, x2: c.width, y2: c.bottom}));
  el.appendChild(svg("line", {"class": "axis", x1: c.left, y1: 0, x2: c.left, y2: c.bottom}));
  (c.bars || []).forEach(function (b) {
    var r = svg("rect", {x: b.x, y: b.y, width: b.w, height: b.h});
    r.appendChild(svg("title", {}, b.label));
    el.appendChild(r);
  });
  (c.x_ticks || []).forEach(function (t) {
    el.appendChild(svg("text", {"class": "xlabel", x: t.at, y: c.height, dy: -2}, t.label));
  });
  var last = document.getElementById(c.id + "-last");
  if (last) {
    last.textContent = c.empty ? "-" : c.last;
  }
}

function apply(data) {
  document.querySelectorAll("[data-live]").forEach(function (n) {
    var v = at(data, n.dataset.live);
    if (v !== undefined) {
      n.textContent = String(v);
    }
  });
  document.querySelectorAll("[data-rows]").forEach(function (box) { renderRows(box, at(data, box.dataset.rows)); });
  document.querySelectorAll("[data-empty]").forEach(function (n) { n.hidden = truthy(at(data, n.dataset.empty)); });
  document.querySelectorAll("[data-hide-empty]").forEach(function (n) { n.hidden = !truthy(at(data, n.dataset.hideEmpty)); });
  document.querySelectorAll(".stats [data-show]").forEach(function (n) { n.hidden = !truthy(at(data, n.dataset.show)); });
  (data.charts || []).forEach(drawChart);
}

// busy: a confirmation is open or the operator is typing.
function busy() {
  if (document.querySelector("details.confirm[open], [data-confirming]")) {
    return true;
  }
  var a = document.activeElement;
  return !!a && a.matches("input, select, textarea");
}

function live() {
  var box = document.getElementById("live");
  if (!box) {
    return;
  }
  var every = Number(box.dataset.every) || 5000;
  var stamp = document.getElementById("refreshed");
  var state = document.getElementById("refresh-state");
  var tick = function () {
    if (busy()) {
      state.textContent = "(paused while a form is open)";
      box.dataset.state = "paused";
      return;
    }
    fetch(window.location.pathname, {headers: {"Accept": "application/json"}, credentials: "same-origin", cache: "no-store"})
      .then(function (res) {
        if (!res.ok) {
          throw new Error("HTTP " + res.status);
        }
        return res.json();
      })
      .then(function (data) {
        if (busy()) {
          return;
        }
        apply(data);
        stamp.textContent = new Date(data.now).toISOString().replace("T", " ").replace(/\.\d+Z$/, " UTC");
        state.textContent = "";
        box.dataset.state = "ok";
        box.dataset.refreshes = String(Number(box.dataset.refreshes || 0) + 1);
      })
      .catch(function (err) {
        state.textContent = "(not refreshed: " + err.message + ")";
        box.dataset.state = "failed";
      });
  };
  window.setInterval(tick, every);
}

document.addEventListener("DOMContentLoaded", function () {
  selectAll();
  live();
});
