// In Flower's task list: each noetl.execute_command row gets a link to its execution.
// The list (drawn by DataTables, without the arguments column by default) names each
// row by its task id: the ids of the new command rows go to /executions/of-tasks, which
// answers the execution of each from Flower's own task state (tasks.flower_pages).
(function () {
  "use strict";
  var table = document.getElementById("tasks-table");
  if (!table) { return; }
  var prefixInput = document.getElementById("url_prefix");
  // as Flower's own url_prefix(): no trailing slash, one leading slash
  var prefix = prefixInput ? prefixInput.value.replace(/\/+$/, "") : "";
  if (prefix && prefix.charAt(0) !== "/") { prefix = "/" + prefix; }
  var pending = null;

  function commandRows() {
    return Array.prototype.filter.call(table.querySelectorAll("tbody tr[id]"), function (row) {
      if (row.dataset.noetlLinked === row.id) { return false; }
      return Array.prototype.some.call(row.cells, function (td) {
        return td.textContent.trim() === "noetl.execute_command";
      });
    });
  }

  function addLink(row, executionId) {
    var cell = null;
    Array.prototype.forEach.call(row.cells, function (td) {
      if (!cell && td.textContent.trim() === "noetl.execute_command") { cell = td; }
    });
    if (!cell || cell.querySelector(".noetl-execution-link")) { return; }
    var a = document.createElement("a");
    a.className = "noetl-execution-link ms-2 badge text-bg-light";
    a.href = prefix + "/executions/" + encodeURIComponent(executionId);
    a.textContent = "execution";
    a.title = "execution " + executionId;
    cell.appendChild(a);
  }

  function link() {
    pending = null;
    var rows = commandRows().slice(0, 100);
    if (!rows.length) { return; }
    rows.forEach(function (row) { row.dataset.noetlLinked = row.id; });
    var ids = rows.map(function (row) { return row.id; }).join(",");
    var url = new URL(prefix + "/executions/of-tasks", window.location.origin);
    url.searchParams.set("ids", ids);
    fetch(url.toString(), { credentials: "same-origin" })
      .then(function (r) { return r.ok ? r.json() : {}; })
      .then(function (found) {
        rows.forEach(function (row) { if (found[row.id]) { addLink(row, found[row.id]); } });
      })
      .catch(function () { rows.forEach(function (row) { delete row.dataset.noetlLinked; }); });
  }

  new MutationObserver(function () {
    if (!pending) { pending = window.setTimeout(link, 50); }
  }).observe(table, { childList: true, subtree: true });
  link();
})();
