"""The HTML skeleton and stylesheet of the report (static text, no logic)."""

from __future__ import annotations

CSS = """
:root { --fg: #1d1d1f; --muted: #5f6368; --line: #dadce0; --bg: #f6f7f9;
        --compute: #0072B2; --comm: #E69F00; --overlap: #009E73; --exposed: #D55E00; }
* { box-sizing: border-box; }
body { margin: 0; background: var(--bg); color: var(--fg);
       font: 15px/1.5 system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif; }
main { max-width: 1320px; margin: 0 auto; padding: 24px 28px 40px; }
header, section { background: white; border: 1px solid var(--line); border-radius: 10px;
                  padding: 18px 22px; margin: 0 0 18px; }
h1 { font-size: 26px; margin: 0 0 4px; }
h2 { font-size: 19px; margin: 0 0 8px; }
h3 { font-size: 15px; margin: 16px 0 6px; }
p.lead { margin: 0 0 12px; color: var(--muted); font-size: 16px; }
p.explain { margin: 0 0 10px; color: #3c4043; max-width: 1100px; }
code { font: 13px/1.4 ui-monospace, SFMono-Regular, Menlo, Consolas, monospace;
       background: #f1f3f4; padding: 1px 4px; border-radius: 4px; }
.muted { color: var(--muted); }
table { border-collapse: collapse; width: 100%; font-size: 14px; }
th, td { text-align: left; padding: 6px 10px; border-bottom: 1px solid var(--line); vertical-align: top; }
th { font-weight: 600; color: #3c4043; background: #fafafa; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
td { word-break: normal; overflow-wrap: normal; }
td.path, td.name { font: 13px/1.4 ui-monospace, SFMono-Regular, Menlo, Consolas, monospace;
                   overflow-wrap: anywhere; }
.caveats { margin-top: 12px; background: #fff8e1; border: 1px solid #f3d27a; border-radius: 8px; padding: 8px 14px; }
.caveats h3 { margin: 2px 0 4px; }
.caveats ul { margin: 0; padding-left: 20px; }
.cards { display: grid; grid-template-columns: repeat(auto-fit, minmax(190px, 1fr)); gap: 12px; }
.verdict { margin-top: 12px; border: 1px solid var(--line); border-left: 5px solid var(--compute);
           border-radius: 8px; padding: 10px 14px; font-size: 17px; }
.verdict .label { color: var(--muted); font-size: 13px; text-transform: uppercase; letter-spacing: .03em; margin-right: 6px; }
.verdict .sub { color: #3c4043; font-size: 14px; margin-top: 2px; }
.card { border: 1px solid var(--line); border-left: 5px solid #80868b; border-radius: 8px; padding: 10px 14px; }
.card.exposed { border-left-color: var(--exposed); }
.card.overlap { border-left-color: var(--overlap); }
.card.wait { border-left-color: #CC79A7; }
.card .label { color: var(--muted); font-size: 13px; text-transform: uppercase; letter-spacing: .03em; }
.card .value { font-size: 24px; font-weight: 650; margin: 2px 0; font-variant-numeric: tabular-nums; }
.card .sub { color: #3c4043; font-size: 13px; }
.exposed-text { color: #B34700; }
.tag { display: inline-block; font: 11px/1.6 system-ui, sans-serif; background: #fde3d3; color: #8a3200;
       border-radius: 4px; padding: 0 6px; margin-left: 6px; }
ol.advice li { margin-bottom: 12px; }
ol.advice .advice { margin-top: 2px; }
ol.advice .where { color: #3c4043; font-size: 13px; margin-top: 2px; }
ol.advice .evidence { font-size: 12px; }
.tag.warn { background: #ffe08a; color: #5c4300; }
.plot { width: 100%; }
footer { color: var(--muted); font-size: 13px; text-align: center; }
"""

#: Draws one plot. WebGL traces become SVG ones where WebGL is unavailable (headless or remote
#: browsers, GPU blocklists): plotly would otherwise replace the whole plot with a notice.
LOADER = """
var TOV_WEBGL = (function () {
  try {
    var c = document.createElement("canvas");
    var gl = window.WebGLRenderingContext && (c.getContext("webgl") || c.getContext("experimental-webgl"));
    if (!gl) { return false; }
    var lose = gl.getExtension("WEBGL_lose_context");
    if (lose) { lose.loseContext(); }  // browsers cap live contexts: give this probe's back
    return true;
  } catch (e) { return false; }
})();
function tovPlot(id, data, layout, config) {
  if (!TOV_WEBGL) {
    data.forEach(function (t) { if (t.type === "scattergl") { t.type = "scatter"; } });
  }
  if (typeof Plotly === "undefined") {
    document.getElementById(id).textContent =
      "This chart needs plotly.js, which did not load (a report written with --plotlyjs cdn needs the network).";
    return;
  }
  Plotly.newPlot(id, data, layout, config);
}
"""

PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="generator" content="traceoverlap {version}">
<title>{title}</title>
<style>{css}</style>
{plotlyjs}
<script type="text/javascript">{loader}</script>
</head>
<body>
<main data-plots="{n_plots}">
{body}
<footer>Made by traceoverlap {version}. What every number means: docs/numbers.md in the
traceoverlap repository (the contracts: docs/metrics.md and docs/diagnosis.md).</footer>
</main>
</body>
</html>
"""
