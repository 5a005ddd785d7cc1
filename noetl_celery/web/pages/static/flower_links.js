// In Flower's task list: each noetl.execute_command row gets a link to its execution
// (its arguments read "execution=ID step=... command=..."; a raw command id starts with
// the execution id and a colon). Rows are drawn by DataTables: watch the table.
(function () {
  "use strict";
  var table = document.getElementById("tasks-table");
  if (!table) { return; }
  var prefixInput = document.getElementById("url_prefix");
  var prefix = prefixInput ? prefixInput.value.replace(/\/$/, "") : "";
  var readable = /execution=([A-Za-z0-9_.\-]+)/;
  var raw = /^\s*[\[(]?\s*['"]([A-Za-z0-9_.\-]+):/;

  function link() {
    table.querySelectorAll("tbody tr").forEach(function (row) {
      if (row.dataset.noetlLinked) { return; }
      var command = false, id = null, cell = null;
      Array.prototype.forEach.call(row.cells, function (td) {
        var text = td.textContent.trim();
        if (text === "noetl.execute_command") { command = true; }
        var found = readable.exec(text) || raw.exec(text);
        if (found && !id) { id = found[1]; cell = td; }
      });
      row.dataset.noetlLinked = "1";
      if (!command || !id) { return; }
      var a = document.createElement("a");
      a.className = "noetl-execution-link";
      a.href = prefix + "/executions/" + encodeURIComponent(id);
      a.textContent = "execution";
      a.title = "execution " + id;
      cell.appendChild(a);
    });
  }
  new MutationObserver(link).observe(table, { childList: true, subtree: true });
  link();
})();
