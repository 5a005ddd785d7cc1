// The pages run no inline script and carry no inline style (their content policy
// refuses both): a form's confirmation is its data-confirm, a bar's width its data-width.
(function () {
  "use strict";
  document.addEventListener("submit", function (event) {
    // the button pressed may ask its own question (the quarantine's "Redrive all")
    var by = event.submitter && event.submitter.getAttribute("data-confirm");
    var ask = by || (event.target.getAttribute && event.target.getAttribute("data-confirm"));
    if (ask && !window.confirm(ask)) { event.preventDefault(); }
  });
})();

function noetlBars(scope) {
  "use strict";
  scope.querySelectorAll("[data-width]").forEach(function (bar) {
    var width = parseFloat(bar.getAttribute("data-width"));
    bar.style.width = (isFinite(width) ? Math.max(0, Math.min(100, width)) : 0) + "%";
  });
}
noetlBars(document);

// Live parts of the pages: every few seconds fetch this page's fragment and swap each
// element marked data-live for its new version (open <details> stay open). No reload:
// what the page holds otherwise (forms, scroll position, window state) stays.
(function () {
  "use strict";
  var root = document.getElementById("noetl-page");
  if (!root || !root.dataset.refreshUrl) { return; }
  var every = parseInt(root.dataset.refreshMs, 10) || 2000;
  var url = root.dataset.refreshUrl;
  // location.origin never carries credentials: a page opened as http://user:pass@host/
  // would otherwise hand fetch() a URL it refuses
  function target() { return new URL(url, window.location.origin).toString(); }

  function swap(html) {
    var doc = new DOMParser().parseFromString(html, "text/html");
    var open = Array.prototype.map.call(
      document.querySelectorAll("details[open][id]"), function (d) { return d.id; });
    doc.querySelectorAll("[data-live]").forEach(function (fresh) {
      var name = fresh.getAttribute("data-live");
      var current = document.querySelector('[data-live="' + name + '"]');
      if (current) {
        var node = document.importNode(fresh, true);
        current.replaceWith(node);
        noetlBars(node);
      }
    });
    open.forEach(function (id) {
      var d = document.getElementById(id);
      if (d) { d.open = true; }
    });
    root.dataset.refreshes = String((parseInt(root.dataset.refreshes, 10) || 0) + 1);
    var next = doc.getElementById("noetl-page");
    return !(next && next.dataset.terminal);
  }

  function tick() {
    if (document.hidden) { later(); return; }  // a background tab asks for nothing
    fetch(target(), { credentials: "same-origin", headers: { "X-Requested-With": "noetl-pages" } })
      .then(function (r) { if (!r.ok) { throw new Error(String(r.status)); } return r.text(); })
      .then(function (html) { if (swap(html)) { later(); } })
      .catch(function () { later(); });
  }
  function later() { window.setTimeout(tick, every); }
  if (!root.dataset.terminal) { later(); }
})();
