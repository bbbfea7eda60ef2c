/* Kiln charts: draw plotly figures from a JSON endpoint (data-src), an embedded json_script
   (data-figure = the script element's id), or the list in json_script "history-charts" (history
   pages). plotly.js is served by the app itself (no CDN); no inline script (Content-Security-Policy).
   A point whose customdata is a local URL ("/...") opens it on click (rack heatmap, NCCL lines). */
(function () {
  "use strict";
  var CONFIG = { responsive: true, displaylogo: false };

  function fail(el, message) {
    el.setAttribute("data-rendered", "error");
    el.textContent = message;
    el.className += " chart-error";
  }

  // `responsive` redraws on window resizes only; a box that changes width on its own (a scrollbar
  // appearing, a grid reflowing its columns) would keep a chart drawn past its edge. Redraw when the
  // box's width changes (its height follows the chart, so watching it would loop).
  function follow(el) {
    if (typeof ResizeObserver === "undefined") return;
    var width = el.clientWidth;
    new ResizeObserver(function () {
      if (el.clientWidth === width) return;
      width = el.clientWidth;
      Plotly.Plots.resize(el);
    }).observe(el);
  }

  function draw(el, figure) {
    if (typeof Plotly === "undefined") {
      fail(el, "plotly.js did not load: the chart cannot be drawn.");
      return;
    }
    el.textContent = "";
    // A window resize relayouts with autosize, which drops layout.height: the chart then takes its
    // box's height, so the box is given the figure's height (or its legend is cut at the bottom).
    if (figure.layout && figure.layout.height) el.style.minHeight = figure.layout.height + "px";
    Plotly.newPlot(el, figure.data, figure.layout, CONFIG).then(function () {
      el.setAttribute("data-rendered", "1");
      el.setAttribute("data-traces", String(figure.data.length));
      follow(el);
    });
    el.on("plotly_click", function (event) {
      var point = event && event.points && event.points[0];
      var url = point && point.customdata;
      if (Array.isArray(url)) url = url[0]; // history figures: [url, label, ...]
      if (typeof url === "string" && url.charAt(0) === "/" && url.charAt(1) !== "/") {
        window.location.href = url;
      }
    });
  }

  function load(el) {
    var embedded = el.getAttribute("data-figure");
    if (embedded) {
      var script = document.getElementById(embedded);
      draw(el, JSON.parse(script.textContent));
      return;
    }
    var src = el.getAttribute("data-src");
    if (!src) return;
    fetch(src, { credentials: "same-origin", headers: { Accept: "application/json" } })
      .then(function (response) {
        if (!response.ok) throw new Error("the chart could not be loaded (HTTP " + response.status + ")");
        return response.json();
      })
      .then(function (figure) { draw(el, figure); })
      .catch(function (error) { fail(el, String(error.message || error)); });
  }

  function init() {
    var charts = document.querySelectorAll(".kiln-chart");
    for (var i = 0; i < charts.length; i++) load(charts[i]);
    // History pages embed a list of {div, figure} (history/_figures.html).
    var listed = document.getElementById("history-charts");
    if (listed) {
      JSON.parse(listed.textContent).forEach(function (chart) {
        var el = document.getElementById(chart.div);
        if (el) draw(el, chart.figure);
      });
    }
    var pickers = document.querySelectorAll("[data-autosubmit]");
    for (var j = 0; j < pickers.length; j++) {
      pickers[j].addEventListener("change", function (event) { event.target.form.submit(); });
    }
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", init);
  else init();
})();
