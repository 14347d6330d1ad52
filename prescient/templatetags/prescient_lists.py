"""Template tags of prescient's admin lists: each cell of a row labelled with its column's title
(a ``data-label`` attribute), which the lists' CSS shows beside the value when a narrow list
turns its rows into cards (see ``templates/admin/prescient/change_list_results.html``)."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from django import template
from django.utils.html import escape, strip_tags
from django.utils.safestring import SafeString, mark_safe
from django.utils.text import capfirst

register = template.Library()

#: The opening of a changelist cell as Django renders it (``<td class="field-…">`` or ``<th …>``).
CELL = re.compile(r"^\s*<(td|th)\b")


def column_title(header: Mapping[str, Any]) -> str:
    """The title of a column as its head shows it; none for the action checkbox's column."""
    if "action-checkbox-column" in str(header.get("class_attrib", "")):
        return ""
    return capfirst(strip_tags(str(header.get("text", ""))).strip())


@register.simple_tag
def labelled_cells(result: Iterable[Any], headers: Iterable[Mapping[str, Any]]) -> list[SafeString]:
    """The cells of a changelist row, each with ``data-label`` set to its column's title."""
    cells = []
    for item, header in zip(result, headers, strict=False):
        label = escape(column_title(header))  # escaped here: the cell itself is safe HTML already
        html = str(item)
        opening = CELL.match(html)
        if opening is not None:
            html = f'<{opening[1]} data-label="{label}"{html[opening.end():]}'
        cells.append(mark_safe(html))
    return cells
