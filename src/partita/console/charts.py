"""The console's charts: SVG drawn on the server by pygal, inlined in the page.

No JavaScript is sent with them (pygal's tooltips script would come from a CDN): a chart
is a picture, and the numbers stand beside it in a table.
"""

from __future__ import annotations

import re
from typing import Any

import pygal
from markupsafe import Markup
from pygal.graph.public import PublicApi
from pygal.style import Style

_STYLE = Style(
    background="transparent",
    plot_background="transparent",
    foreground="#333",
    foreground_strong="#111",
    foreground_subtle="#999",
    colors=("#3b6ea8", "#c0504d", "#9bbb59"),
    font_family="system-ui, sans-serif",
    label_font_size=10,
    major_label_font_size=10,
    title_font_size=12,
)


def _config(title: str, height: int) -> pygal.Config:
    config = pygal.Config()
    config.js = []
    config.disable_xml_declaration = True
    config.style = _STYLE
    config.title = title
    config.height = height
    config.width = 720
    config.show_legend = False
    config.explicit_size = True
    return config


# pygal inlines a script holding its chart's config, for its tooltips: not wanted (no
# script but the console's own runs in its pages).
_SCRIPT = re.compile(r"<script\b.*?</script>", re.S)


def _svg(chart: PublicApi[Any, Any, Any]) -> Markup:
    return Markup(_SCRIPT.sub("", chart.render(is_unicode=True)))


def bars(title: str, labels: list[str], values: list[float], height: int = 220) -> Markup:
    chart = pygal.Bar(_config(title, height))
    chart.x_labels = labels
    chart.add(title, values)
    return _svg(chart)


def line(title: str, values: list[float], height: int = 200) -> Markup:
    chart = pygal.Line(_config(title, height))
    chart.show_x_labels = False
    chart.add(title, values)
    return _svg(chart)
