/* Kiln: page behaviour, from a file rather than inline attributes, so that the Content-Security-Policy
   can forbid inline script (settings.KILN_CSP). */
(function () {
  "use strict";
  // <button data-confirm="Delete this schedule?">: asks before the click goes through.
  document.addEventListener("click", function (event) {
    var el = event.target.closest ? event.target.closest("[data-confirm]") : null;
    if (el && !window.confirm(el.getAttribute("data-confirm"))) {
      event.preventDefault();
    }
  });
  // The run page opened at a node's row (?node=HOST): bring that row into view inside the grid's
  // scrolling box. Deferred scripts run once the document is parsed.
  var focus = document.querySelector("#run-grid tr.focus");
  if (focus && focus.scrollIntoView) {
    focus.scrollIntoView({ block: "center" });
  }
})();
