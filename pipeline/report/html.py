"""HTML pieces the report pages share: styles, the model switches' script, tables, and the one
place recorded text is escaped (``e``).

Numbers are printed as the record holds them (``number``: integers whole, floats to 4
decimals), so each one can be found in the file a section names. Times are the exception:
``duration`` rounds them to what a reader compares (850 ms, 12.3 s, 2 min 05 s), since a
stage's fourth decimal of a second is noise, not a finding.
"""

from __future__ import annotations

import html
import json
import math
from collections.abc import Iterable, Sequence
from typing import Any

from pipeline.report import figures

STYLE = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0 auto;max-width:2200px;
padding:0 1.5rem 3rem;color:#222;line-height:1.4}
h1{margin:1rem 0 .1rem;font-size:1.5rem}h2{border-bottom:1px solid #ddd;padding-bottom:.2rem;margin-top:1.8rem}
h3{margin:1.2rem 0 .4rem;font-size:1.05rem}
table{border-collapse:collapse;margin:.4rem 0 1rem;font-size:.86rem}
th,td{border:1px solid #ddd;padding:.2rem .5rem;text-align:right;vertical-align:top}
th{background:#f4f6f8}td.text,th.text{text-align:left}th.group{text-align:center}
.best{font-weight:600;background:#eef7ee}td.split-test{background:#f7faff}td.best.split-test{background:#e3f2e3}
table.metrics{font-size:.8rem;font-variant-numeric:tabular-nums}table.metrics th,table.metrics td{padding:.15rem .32rem}
table.metrics td.split-other{color:#666}table.metrics th.group{border-bottom:0}
.figures{display:grid;grid-template-columns:repeat(auto-fill,minmax(min(100%,430px),1fr));gap:.8rem;
align-items:start}.figures figure{margin:0;border:1px solid #eee;padding:.2rem}.figures>div{min-width:0}
figure svg{display:block;width:100%;height:auto}.figures figure.wide{grid-column:1/-1;max-width:900px}
td{white-space:nowrap}td.text{white-space:normal}
.answer{display:grid;grid-template-columns:minmax(0,3fr) minmax(300px,2fr);gap:1.2rem;align-items:start}
.answer figure{margin:0;border:1px solid #eee;padding:.2rem}.answer figure svg{max-height:60vh}
@media (max-width:900px){.answer{grid-template-columns:1fr}}
.lead{font-size:1.15rem;margin:.6rem 0}.lead .name{font-size:1.3rem}.scroll{overflow-x:auto}
.status-succeeded{color:#1a7f37}.status-failed,.status-interrupted,.status-abandoned{color:#b42318}
.warning{background:#fff4e5;border:1px solid #f0b35a;padding:.4rem .6rem}
.note{color:#666;font-size:.85rem}.switches label{margin-right:1rem;cursor:pointer}
pre{background:#f7f7f7;padding:.6rem;overflow:auto;font-size:.8rem;max-height:28rem}
details>summary{cursor:pointer;font-weight:600;margin:.4rem 0}
nav a{margin-right:.8rem}.swatch{display:inline-block;width:.8rem;height:.8rem;margin-right:.25rem;vertical-align:-1px}
"""

# Show or hide a model in every figure: each of its artists has an id ending "--m<i>". A page
# has a row of switches per section; the model's other switches follow the one clicked.
SCRIPT = """
document.querySelectorAll('.switches input').forEach(function (box) {
  box.addEventListener('change', function () {
    var suffix = '--m' + box.dataset.model;
    document.querySelectorAll('[id$="' + suffix + '"]').forEach(function (node) {
      node.style.display = box.checked ? '' : 'none';
    });
    document.querySelectorAll('.switches input[data-model="' + box.dataset.model + '"]').forEach(function (other) {
      other.checked = box.checked;
    });
  });
});
"""


def switches(models: Sequence[str], everyone: Sequence[str]) -> str:
    """A check box per model of ``models``; a model's number (its colour, its figures' ids) is
    its position in ``everyone``, the page's model order."""
    boxes = "".join(
        f'<label><input type="checkbox" checked data-model="{everyone.index(m)}">'
        f'<span class="swatch" style="background:{figures.colour(everyone.index(m))}"></span>{e(m)}</label>'
        for m in models)
    return f'<p class="switches">Show: {boxes}</p>'


def figure_row(svgs: Iterable[str]) -> str:
    return '<div class="figures">' + "".join(f"<figure>{svg}</figure>" for svg in svgs) + "</div>"


def key_values(rows: Iterable[tuple[str, Any]]) -> str:
    body = "".join(f'<tr><th class="text">{e(k)}</th><td class="text">{e(plain(v))}</td></tr>'
                   for k, v in rows if v is not None)
    return f"<table>{body}</table>"


def table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A table whose headings align as their column's first cells do (text left, numbers right)."""
    left = [i == 0 or bool(rows) and i < len(rows[0]) and rows[0][i].startswith('<td class="text')
            for i in range(len(header))]
    head = "".join(f'<th class="text">{e(h)}</th>' if left[i] else f"<th>{e(h)}</th>" for i, h in enumerate(header))
    body = "".join("<tr>" + "".join(row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def grouped_table(first: str, groups: Sequence[tuple[str, Sequence[str]]], rows: Sequence[Sequence[str]],
                  css: str = "") -> str:
    """A table with two heading rows: ``first`` over the row names, then each group's name over
    its columns (a metric over its splits)."""
    top = f'<th class="text" rowspan="2">{e(first)}</th>' + "".join(
        f'<th class="group" colspan="{len(columns)}">{e(name)}</th>' for name, columns in groups)
    under = "".join(f"<th>{e(column)}</th>" for _, columns in groups for column in columns)
    body = "".join("<tr>" + "".join(row) + "</tr>" for row in rows)
    opening = f'<table class="{e(css)}">' if css else "<table>"
    return f"{opening}<thead><tr>{top}</tr><tr>{under}</tr></thead><tbody>{body}</tbody></table>"


def cell(value: Any) -> str:
    return f"<td>{e(number(value))}</td>"


def text(value: Any, css: str = "text") -> str:
    return f'<td class="{css}">{e(value)}</td>'


def number(value: Any) -> str:
    """A recorded number as shown: integers whole, floats to 4 decimals, NaN as NaN, None as -."""
    if value is None:
        return "-"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, int):
        return f"{value:,}"
    if math.isnan(value):
        return "NaN"
    return f"{value:.4f}"


def duration(seconds: Any) -> str:
    """A time as a reader compares it: ``850 ms``, ``4.27 s``, ``12.3 s``, ``2 min 05 s``,
    ``1 h 02 min``; ``-`` when not recorded."""
    if seconds is None or isinstance(seconds, bool) or not isinstance(seconds, (int, float)):
        return "-"
    if math.isnan(seconds):
        return "NaN"
    if seconds == 0:
        return "0 s"
    if seconds < 0.9995:
        return f"{max(round(seconds * 1000), 1)} ms"
    if seconds < 9.995:
        return f"{seconds:.2f} s"
    if seconds < 59.95:
        return f"{seconds:.1f} s"
    whole = round(seconds)
    if whole < 3600:
        return f"{whole // 60} min {whole % 60:02d} s"
    minutes = round(seconds / 60)
    return f"{minutes // 60} h {minutes % 60:02d} min"


def plain(value: Any) -> str:
    return json.dumps(value) if isinstance(value, (list, dict)) else str(value)


def e(value: Any) -> str:
    return html.escape("" if value is None else str(value), quote=True)


def document(title: str, heading: str, sections: Sequence[tuple[str, str, str]], footer: str) -> str:
    """A whole page: ``sections`` as (anchor, heading, HTML) with a link bar; empty ones left out."""
    shown = [(anchor, label, content) for anchor, label, content in sections if content]
    nav = "".join(f'<a href="#{anchor}">{e(label)}</a>' for anchor, label, _ in shown)
    body = "".join(f'<section id="{anchor}"><h2>{e(label)}</h2>{content}</section>' for anchor, label, content in shown)
    return ("<!DOCTYPE html>\n"
            '<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width">'
            f"<title>{e(title)}</title><style>{STYLE}</style></head><body>{heading}<nav>{nav}</nav>{body}"
            f'<p class="note">{footer}</p><script>{SCRIPT}</script></body></html>\n')
