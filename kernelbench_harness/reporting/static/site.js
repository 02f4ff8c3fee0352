/* kbench pages: sortable tables (click a header) and row filters (select[data-filter]). No dependencies. */
(function () {
  "use strict";

  function cellKey(row, idx, numeric) {
    var cell = row.cells[idx];
    if (!cell) { return numeric ? null : ""; }
    var v = cell.getAttribute("data-v");
    if (v === null) { v = cell.textContent.trim(); }
    if (!numeric) { return v.toLowerCase(); }
    if (v === "" || v === "-" || v === "\u2014") { return null; }
    var f = parseFloat(v);
    return isNaN(f) ? null : f;
  }

  function sortBy(th) {
    var table = th.closest("table");
    var tbody = table.tBodies[0];
    if (!tbody) { return; }
    var idx = Array.prototype.indexOf.call(th.parentNode.children, th);
    var numeric = th.getAttribute("data-type") === "num";
    var current = th.getAttribute("aria-sort");
    var dir = current ? (current === "descending" ? "ascending" : "descending") : (numeric ? "descending" : "ascending");
    var sign = dir === "ascending" ? 1 : -1;
    var rows = Array.prototype.slice.call(tbody.rows);
    rows.forEach(function (r, i) { r.setAttribute("data-i", String(i)); });
    rows.sort(function (a, b) {
      var x = cellKey(a, idx, numeric), y = cellKey(b, idx, numeric);
      if (x === null && y === null) { return 0; }
      if (x === null) { return 1; }   /* empty cells last in both directions */
      if (y === null) { return -1; }
      if (x < y) { return -sign; }
      if (x > y) { return sign; }
      return parseInt(a.getAttribute("data-i"), 10) - parseInt(b.getAttribute("data-i"), 10);
    });
    rows.forEach(function (r) { tbody.appendChild(r); });
    Array.prototype.forEach.call(th.parentNode.children, function (h) { h.removeAttribute("aria-sort"); });
    th.setAttribute("aria-sort", dir);
  }

  function applyFilters() {
    var selects = document.querySelectorAll("select[data-filter]");
    var tables = document.querySelectorAll("table[data-filterable]");
    Array.prototype.forEach.call(tables, function (table) {
      var shown = 0;
      Array.prototype.forEach.call(table.tBodies[0].rows, function (row) {
        var ok = true;
        Array.prototype.forEach.call(selects, function (sel) {
          var want = sel.value;
          var key = sel.getAttribute("data-filter");
          var have = row.getAttribute("data-" + key);  // rows without the attribute ignore that filter
          if (want !== "" && have !== null && have !== want) { ok = false; }
        });
        row.classList.toggle("hidden", !ok);
        if (ok) { shown += 1; }
      });
      var counter = document.querySelector("[data-count-for='" + table.id + "']");
      if (counter) { counter.textContent = String(shown); }
    });
  }

  document.addEventListener("click", function (e) {
    var th = e.target.closest ? e.target.closest("th[data-type]") : null;
    if (th) { sortBy(th); }
  });
  document.addEventListener("keydown", function (e) {
    if (e.key !== "Enter" && e.key !== " ") { return; }
    var th = e.target.closest ? e.target.closest("th[data-type]") : null;
    if (th) { e.preventDefault(); sortBy(th); }
  });
  document.addEventListener("change", function (e) {
    if (e.target.matches && e.target.matches("select[data-filter]")) { applyFilters(); }
  });
  document.addEventListener("DOMContentLoaded", applyFilters);
})();
