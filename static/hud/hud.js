// Small enhancements; every page works without them (and without inline scripts: the CSP allows only this file).
// 1. Matrix tooltips open on hover or focus, placed with position: fixed so the scrolling matrix cannot clip
//    them, flipped at the screen's edges; "pin" keeps one open, Escape or a click elsewhere closes it.
// 2. The matrix is one Tab stop: arrow keys, Home and End move between its cells; hovering a cell highlights
//    its column.
// 3. "copy link" buttons copy a job's or the current view's address.
// 4. The live part of the page (#live[data-refresh]) is fetched again every N seconds as a fragment; it is
//    replaced only when it changed, keeping focus, open sections and scroll positions, and the page says when
//    it was updated or why it paused.
document.documentElement.classList.add("js");

(function () {
  "use strict";
  var MARGIN = 4;

  // 1. Tooltips
  function tipOf(cell) { return cell && cell.querySelector(":scope > .tip"); }

  function place(tip, cell) {
    tip.classList.add("open");
    var box = cell.getBoundingClientRect(), width = tip.offsetWidth, height = tip.offsetHeight;
    var maxLeft = window.innerWidth - width - MARGIN, maxTop = window.innerHeight - height - MARGIN;
    var left = box.right - 1;
    if (left > maxLeft) left = box.left - width + 1;  // flip to the cell's left near the right edge
    var top = Math.min(box.top, maxTop);
    tip.style.left = Math.max(MARGIN, Math.min(left, maxLeft)) + "px";
    tip.style.top = Math.max(MARGIN, top) + "px";
  }

  function close(tip) { if (!tip.classList.contains("pinned")) tip.classList.remove("open"); }

  function unpinAll(except) {
    document.querySelectorAll(".tip.pinned").forEach(function (tip) {
      if (tip !== except) { tip.classList.remove("pinned"); close(tip); }
    });
  }

  function cellOf(node) { return node && node.closest ? node.closest("td.cell") : null; }

  document.addEventListener("mouseover", function (event) {
    var cell = cellOf(event.target), tip = tipOf(cell);
    if (tip && !tip.classList.contains("open")) place(tip, cell);
    highlightColumn(event.target.closest && event.target.closest(".matrix tbody td"));
  });
  document.addEventListener("mouseout", function (event) {
    var cell = cellOf(event.target), tip = tipOf(cell);
    if (tip && !cell.contains(event.relatedTarget)) close(tip);
  });
  document.addEventListener("focusin", function (event) {
    var cell = cellOf(event.target), tip = tipOf(cell);
    if (tip) place(tip, cell);
  });
  document.addEventListener("focusout", function (event) {
    var cell = cellOf(event.target), tip = tipOf(cell);
    if (tip && !cell.contains(event.relatedTarget)) close(tip);
  });
  function followOpenTips() {
    document.querySelectorAll(".tip.open").forEach(function (tip) { place(tip, tip.closest("td.cell")); });
  }
  // A filter left empty stays out of the address: only what narrows the view is in the link one shares.
  document.addEventListener("submit", function (event) {
    if (!event.target.matches("form.filter")) return;
    event.target.querySelectorAll("input[type=search]").forEach(function (input) {
      if (!input.value.trim()) input.disabled = true;
    });
  });
  window.addEventListener("scroll", followOpenTips, true);
  window.addEventListener("resize", followOpenTips);

  document.addEventListener("click", function (event) {
    var pin = event.target.closest(".tip .pin");
    if (pin) {
      var tip = pin.closest(".tip");
      unpinAll(tip);
      tip.classList.toggle("pinned");
      pin.textContent = tip.classList.contains("pinned") ? "unpin" : "pin";
      event.preventDefault();
      return;
    }
    var copy = event.target.closest("[data-copy]");
    if (copy) {
      var address = new URL(copy.dataset.copy || window.location.href, window.location.href).href;
      if (navigator.clipboard) {
        navigator.clipboard.writeText(address).then(function () { copy.textContent = "copied"; }, function () {});
      }
      event.preventDefault();
      return;
    }
    if (!event.target.closest(".tip")) unpinAll(null);
  });
  document.addEventListener("keydown", function (event) {
    if (event.key === "Escape") {
      unpinAll(null);
      document.querySelectorAll(".tip.open").forEach(close);
    }
  });

  // 2. One Tab stop per matrix, arrow keys between cells; column highlight on hover
  var highlighted = [];
  function highlightColumn(td) {
    highlighted.forEach(function (node) { node.classList.remove("hl"); });
    highlighted = [];
    if (!td || !td.classList.contains("cell")) return;
    var table = td.closest("table"), index = td.cellIndex;
    table.querySelectorAll("tbody tr, thead tr:last-child").forEach(function (row) {
      var node = row.cells[index];
      if (node) { node.classList.add("hl"); highlighted.push(node); }
    });
  }

  function cellLinks(table) { return table.querySelectorAll("tbody td.cell > a"); }

  function initMatrix(root) {
    root.querySelectorAll("table.matrix").forEach(function (table) {
      var links = cellLinks(table);
      links.forEach(function (link, i) { link.tabIndex = i === 0 ? 0 : -1; });
    });
  }

  var MOVES = { ArrowLeft: [0, -1], ArrowRight: [0, 1], ArrowUp: [-1, 0], ArrowDown: [1, 0] };
  document.addEventListener("keydown", function (event) {
    var link = event.target.closest && event.target.closest("table.matrix tbody td.cell > a");
    if (!link) return;
    var td = link.parentElement, row = td.parentElement, rows = row.parentElement.rows, target = null;
    var r = row.sectionRowIndex, c = td.cellIndex;
    if (MOVES[event.key]) {
      var dr = MOVES[event.key][0], dc = MOVES[event.key][1];
      for (var rr = r + dr, cc = c + dc; rows[rr] && rows[rr].cells[cc]; rr += dr, cc += dc) {
        target = rows[rr].cells[cc].querySelector(":scope > a");
        if (target) break;
      }
    } else if (event.key === "Home" || event.key === "End") {
      var inRow = row.querySelectorAll("td.cell > a");
      target = inRow[event.key === "Home" ? 0 : inRow.length - 1];
    } else {
      return;
    }
    event.preventDefault();
    if (!target) return;
    link.tabIndex = -1;
    target.tabIndex = 0;
    target.focus();
  });

  // 4. Quiet refresh of the live fragment
  function keyOf(node) {
    if (!node || node === document.body) return null;
    if (node.id) return "#" + CSS.escape(node.id);
    var href = node.getAttribute && node.getAttribute("href");
    return href ? node.tagName.toLowerCase() + '[href="' + CSS.escape(href) + '"]' : null;
  }

  function replaceLive(live, html) {
    var focused = live.contains(document.activeElement) ? keyOf(document.activeElement) : null;
    var open = Array.prototype.map.call(live.querySelectorAll("details[open][id]"), function (d) { return d.id; });
    var scrolls = Array.prototype.map.call(live.querySelectorAll(".matrix-wrap, .scroll-x"), function (box) {
      return [box.scrollLeft, box.scrollTop];
    });
    live.innerHTML = html;
    open.forEach(function (id) { var d = document.getElementById(id); if (d) d.open = true; });
    live.querySelectorAll(".matrix-wrap, .scroll-x").forEach(function (box, i) {
      if (scrolls[i]) { box.scrollLeft = scrolls[i][0]; box.scrollTop = scrolls[i][1]; }
    });
    initMatrix(live);
    if (focused) {
      var again = live.querySelector(focused);
      if (again) { again.tabIndex = 0; again.focus({ preventScroll: true }); }
    }
  }

  function utcNow() { return new Date().toISOString().slice(11, 16) + " UTC"; }

  function startRefresh() {
    var live = document.getElementById("live");
    var seconds = live && parseInt(live.dataset.refresh, 10);
    var status = document.getElementById("refresh-status");
    if (!seconds) return;
    var last = null;
    function say(text) { if (status) status.textContent = text; }
    window.setInterval(function () {
      if (document.hidden) return say("Paused while this tab is hidden");
      if (document.querySelector(".tip.pinned")) return say("Paused while a tooltip is pinned (Escape unpins)");
      fetch(window.location.href, { headers: { "X-HUD-Fragment": "live" }, cache: "no-cache" })
        .then(function (response) { if (!response.ok) throw new Error(response.status); return response.text(); })
        .then(function (html) {
          if (html !== last) replaceLive(live, html);
          last = html;
          say("Updated " + utcNow() + " · refreshes every " + seconds + " s");
        })
        .catch(function () { say("Update failed at " + utcNow() + "; showing earlier figures, retrying"); });
    }, seconds * 1000);
  }

  function init() {
    initMatrix(document);
    startRefresh();
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", init);
  else init();
})();
