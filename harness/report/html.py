"""report.html: the summary and the timeline on one page."""

from __future__ import annotations

import html as markup

from markdown_it import MarkdownIt  # ships with rich, a dependency already

from harness.report.schema import Report


def page(report: Report, svg_text: str, summary_md: str) -> str:
    """``report.html``: the timeline above the rendered summary, one self-contained page."""
    title = markup.escape(
        f"harness: {report.get('suite') or 'run'} on {report['platform'].get('name') or '?'}"
    )
    # html=False: markup in a test id or model name is shown as text, never run as the page's own
    body = MarkdownIt("commonmark", {"html": False}).enable("table").render(summary_md)
    return (
        "<!DOCTYPE html>\n<html><head><meta charset='utf-8'>"
        f"<title>{title}</title><style>body{{font-family:sans-serif;margin:1.5em}}"
        "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:2px 6px}"
        ".timeline{overflow-x:auto}</style></head><body>\n"
        f"<div class='timeline'>{svg_text}</div>\n{body}</body></html>\n"
    )
