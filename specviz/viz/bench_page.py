"""The Benchmark's standalone HTML page (``page_html``, of a report and its figures; ``viz.bench.report_html`` builds them): settings, every figure, the table and
the readout in one file that works offline (plotly.js inlined once)."""

from __future__ import annotations

import html
from typing import Any, Mapping

from ..analysis.metrics import definitions
from ..bench.kernel_words import describe_kernels
from .bench_readout import why_markdown
from .bench_rows import report_rows
from .bench_table import table_help, table_rows
from .theme import COLORS, FONT

__all__ = ["page_html"]


def _md_to_html(md: str) -> str:
    """The tiny Markdown subset why_no_speedup() writes: **bold** lines and '- ' bullets."""
    out, items = [], []
    for line in md.splitlines():
        if not line.strip():
            continue
        if line.startswith("- "):
            items.append(f"<li>{html.escape(line[2:])}</li>")
            continue
        if items:
            out.append("<ul>" + "".join(items) + "</ul>")
            items = []
        text = html.escape(line.strip("*_"))
        out.append(f"<p><b>{text}</b></p>" if line.startswith("**") else f"<p>{text}</p>")
    if items:
        out.append("<ul>" + "".join(items) + "</ul>")
    return "\n".join(out)


def page_html(report: Mapping[str, Any], figs: Mapping[str, Any], height: int, include_plotlyjs: bool | str = True) -> str:
    """One self-contained HTML page: settings, every figure, the table and the readout.

    ``include_plotlyjs=True`` inlines plotly.js (works offline, ~4 MB); "cdn" links it instead.
    """
    meta = dict(report.get("meta") or {})
    parts = []
    for i, (name, fig) in enumerate(figs.items()):
        parts.append(f'<section class="fig" id="fig-{name}">' + fig.to_html(
            full_html=False, include_plotlyjs=include_plotlyjs if i == 0 else False, default_height=f"{height}px",
            config={"displaylogo": False, "responsive": True}) + "</section>")
    headers, body = table_rows(report_rows(report))
    table = "<table><thead><tr>" + "".join(
        f'<th title="{html.escape(tip)}">{html.escape(h)}</th>' if tip else f"<th>{html.escape(h)}</th>"
        for h, tip in zip(headers, table_help())) + "</tr></thead><tbody>"
    table += "".join("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in line) + "</tr>" for line in body)
    table += "</tbody></table>"
    samp = meta.get("sampling") or {}
    settings = [
        ("target", meta.get("target")), ("device / dtype", f"{meta.get('device')} / {meta.get('dtype')}"),
        ("proposers", ", ".join(meta.get("proposers") or [])), ("k", ", ".join(map(str, meta.get("ks") or []))),
        ("prompts", f"{meta.get('prompts')} ({', '.join(meta.get('categories') or [])})"),
        ("max new tokens", meta.get("max_new_tokens")), ("temperature", samp.get("temperature")),
        ("runs", f"{meta.get('runs_done')} of {meta.get('runs_planned')}" + (" (stopped)" if meta.get("stopped") else "")),
        ("sweep wall time", f"{meta.get('wall_s', 0):.1f} s (timed decoding {meta.get('timed_s', 0):.1f} s, warm-up "
                            f"{meta.get('warmup_s', 0):.1f} s, overhead {100 * meta.get('overhead_frac', 0):.1f}%)"),
        ("static decode step", {None: "not recorded", False: "off"}.get(
            meta.get("static_decode"), f"on, traced in {meta.get('static_decode_trace_s') or 0.0:.1f} s (once per model)")),
        ("CPU", f"{meta.get('cpu') or meta.get('machine')}, {meta.get('threads')} threads"),
        ("versions", f"torch {meta.get('torch')}, transformers {meta.get('transformers')}"),
        ("started", meta.get("started")),
        *(("kernels", line) for line in describe_kernels(meta)),
    ]
    settings_html = "".join(f"<tr><th>{html.escape(k)}</th><td>{html.escape(str(v))}</td></tr>" for k, v in settings)
    defs = meta.get("definitions") or definitions(remote=meta.get("source") == "remote")  # the report's own, else METRICS
    defs_html = "".join(f"<li><b>{html.escape(k)}</b>: {html.escape(v)}</li>" for k, v in defs.items())
    why = _md_to_html(why_markdown(report))
    title = f"specviz benchmark: {meta.get('target', '')}"
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>
body {{ font-family: {FONT}; color: {COLORS['ink']}; margin: 24px auto; max-width: 1200px; padding: 0 16px; }}
h1 {{ font-size: 20px; }} h2 {{ font-size: 16px; margin-top: 28px; }}
.grid {{ display: grid; grid-template-columns: repeat(auto-fill, minmax(520px, 1fr)); gap: 12px; }}
.fig {{ border: 1px solid {COLORS['grid']}; border-radius: 8px; padding: 4px; min-width: 0; overflow: hidden; }}
table {{ border-collapse: collapse; font-size: 12px; }}
th, td {{ border-bottom: 1px solid {COLORS['grid']}; padding: 4px 8px; text-align: left; }}
.settings th {{ color: {COLORS['muted']}; font-weight: normal; }}
.why {{ background: #f8fafc; border-left: 4px solid {COLORS['p']}; padding: 8px 16px; }}
</style></head><body>
<h1>{html.escape(title)}</h1>
<table class="settings">{settings_html}</table>
<h2>Why (no) speedup?</h2><div class="why">{why}</div>
<h2>Plots</h2><div class="grid">{''.join(parts)}</div>
<h2>Every configuration</h2>{table}
<h2>Definitions</h2><ul>{defs_html}</ul>
</body></html>"""
