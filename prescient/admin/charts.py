"""The dashboard's charts, laid out here and drawn as SVG by ``prescient/admin/chart.html``.

The bars are SVG, stretched to the page's width; the labels are HTML beside and under them, so
that they keep their size (11 px) at every width instead of shrinking with the drawing.

Pure geometry: bucket lengths (:func:`bucket_minutes`), the scale (:func:`nice_ceiling`), and
stacked bars (:func:`build_chart`) from counts that :func:`prescient.queries.bucket_counts`
takes from the database.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.utils import dateformat, timezone
from django.utils.translation import gettext, ngettext

#: A chart has at most this many bars: a longer span takes buckets of several slots.
MAX_BARS = 168
#: Bucket lengths that read well, in minutes (a bucket is also a whole number of slots).
NICE_MINUTES = (1, 2, 3, 5, 10, 15, 20, 30, 60, 120, 180, 240, 360, 720, 1440)
DAY_MINUTES = 24 * 60
WEEK_MINUTES = 7 * DAY_MINUTES
# The SVG's own coordinates; it scales to the page's width.
CHART_WIDTH, CHART_HEIGHT = 720, 170
# No left margin: the y labels are HTML in a gutter of their own, beside the drawing.
PAD_LEFT, PAD_RIGHT, PAD_TOP, PAD_BOTTOM = 0, 8, 10, 22


def bucket_minutes(span_minutes: int, slot_minutes: int) -> int:
    """The shortest bucket of whole slots, of a length that reads well, giving at most MAX_BARS bars."""
    for minutes in sorted({slot_minutes, *NICE_MINUTES}):
        if minutes % slot_minutes == 0 and span_minutes % minutes == 0 and span_minutes // minutes <= MAX_BARS:
            return minutes
    return span_minutes


#: The spans a near-term chart may cover, in minutes, longest first (a day at most).
NEAR_SPANS = (DAY_MINUTES, 12 * 60, 6 * 60, 3 * 60, 2 * 60, 60)


def near_span(slot_minutes: int) -> int:
    """How far the near-term charts reach (jobs due next, jobs finished lately): the longest of
    :data:`NEAR_SPANS` drawn one bar per slot (at most MAX_BARS bars), so that a bar is a slot
    whatever ``SLOT_MINUTES`` says: a day of 15-minute slots, two hours of one-minute slots.
    Spans shorter than an hour take an hour."""
    for span in NEAR_SPANS:
        if span <= MAX_BARS * slot_minutes and span % slot_minutes == 0:
            return span
    return NEAR_SPANS[-1]


def span_text(minutes: int) -> str:
    """``24 hours``, ``2 hours``, ``1 hour``."""
    hours = minutes // 60
    return ngettext("%(count)d hour", "%(count)d hours", hours) % {"count": hours}


def label_every(span: int) -> int:
    """Minutes between the x labels of a near-term chart: about eight labels across it."""
    return {DAY_MINUTES: 180, 12 * 60: 90, 6 * 60: 60, 3 * 60: 30, 2 * 60: 15, 60: 10}.get(span, max(span // 8, 1))


def bucket_label(minutes: int, slot_minutes: int) -> str:
    """``15 min (one slot)``, ``1 h (4 slots)``."""
    length = (
        gettext("%(count)d min") % {"count": minutes}
        if minutes < 60 or minutes % 60
        else gettext("%(count)d h") % {"count": minutes // 60}
    )
    slots_in = minutes // slot_minutes
    count = gettext("one slot") if slots_in == 1 else gettext("%(count)d slots") % {"count": slots_in}
    return f"{length} ({count})"


def nice_ceiling(value: int) -> int:
    """The smallest of 1, 2, 5, 10, 20, 50 … at or above ``value`` (the top of a chart's scale)."""
    step = 1
    while True:
        for factor in (1, 2, 5):
            if factor * step >= value:
                return factor * step
        step *= 10


def _coordinate(value: float) -> str:
    # Formatted here: a template would localize the decimal separator.
    return f"{value:.1f}"


@dataclass
class Series:
    key: str
    label: str
    total: int = 0
    #: Its colour (an outcome's, as every chart and badge shows it: display.OUTCOME_HUES).
    colour: str = "#777777"

    @property
    def css(self) -> str:
        return f"prescient-s-{self.key}"


@dataclass
class Segment:
    css: str
    x: str
    y: str
    width: str
    height: str
    colour: str = ""


@dataclass
class Bar:
    title: str
    segments: list[Segment]


@dataclass
class Tick:
    x: str
    y: str
    label: str
    #: Where the label goes across the plot, in per cent of its width (the labels are HTML
    #: over the SVG, so that they keep their size at every width while the bars stretch).
    left: str = "0"


@dataclass
class Chart:
    """A stacked bar chart, laid out here and drawn as SVG by ``prescient/admin/chart.html``."""

    key: str
    title: str
    caption: str
    empty_text: str
    series: list[Series]
    total: int = 0
    bars: list[Bar] = field(default_factory=list)
    x_ticks: list[Tick] = field(default_factory=list)
    y_ticks: list[Tick] = field(default_factory=list)
    width: int = CHART_WIDTH
    height: int = CHART_HEIGHT
    left: int = PAD_LEFT
    right: int = CHART_WIDTH - PAD_RIGHT
    top: int = PAD_TOP
    baseline: int = CHART_HEIGHT - PAD_BOTTOM

    @property
    def legend(self) -> list[Series]:
        return [entry for entry in self.series if entry.total]

    @property
    def middle(self) -> tuple[str, str]:
        return _coordinate((self.left + self.right) / 2), _coordinate((self.top + self.baseline) / 2)



def build_chart(
    chart: Chart,
    counts: dict[tuple[int, str], int],
    start: datetime,
    minutes: int,
    bars: int,
    *,
    label_every: int,
    label_format: str,
    title_format: str,
) -> Chart:
    """Lay out ``counts`` (from :func:`prescient.queries.bucket_counts`) as ``bars`` stacked bars from ``start``.

    An x label goes on the first bar at or after each ``label_every`` minutes of local time.
    """
    bucket = timedelta(minutes=minutes)
    for entry in chart.series:
        entry.total = sum(n for (index, key), n in counts.items() if 0 <= index < bars and key == entry.key)
    chart.total = sum(entry.total for entry in chart.series)
    heights = [sum(counts.get((index, entry.key), 0) for entry in chart.series) for index in range(bars)]
    scale = nice_ceiling(max(heights, default=0))
    plot_height = chart.baseline - chart.top
    step = (chart.right - chart.left) / bars
    gap = min(step * 0.2, 2.0)
    for index, height in enumerate(heights):
        bar_start = start + bucket * index
        local = timezone.localtime(bar_start)
        x = chart.left + step * index
        minute_of_day = local.hour * 60 + local.minute
        if minute_of_day % label_every < minutes:
            chart.x_ticks.append(
                Tick(_coordinate(x), str(chart.baseline + 4), dateformat.format(local, label_format),
                     _coordinate((x - chart.left) / (chart.right - chart.left) * 100))
            )
        if not height:
            continue
        y = float(chart.baseline)
        segments, parts = [], []
        for entry in chart.series:
            value = counts.get((index, entry.key), 0)
            if not value:
                continue
            drawn = max(value / scale * plot_height, 1.0)
            y -= drawn
            segments.append(
                Segment(
                    entry.css, _coordinate(x + gap / 2), _coordinate(y), _coordinate(step - gap), _coordinate(drawn),
                    entry.colour,
                )
            )
            parts.append(f"{value} {entry.label}")
        title = "{}–{}: {}".format(
            dateformat.format(local, title_format),
            dateformat.format(timezone.localtime(bar_start + bucket), "H:i"),
            ", ".join(parts),
        )
        chart.bars.append(Bar(title, segments))
    ticks = [0, scale // 2, scale] if scale % 2 == 0 else [0, scale]
    for value in ticks:
        y = chart.baseline - value / scale * plot_height
        chart.y_ticks.append(Tick(str(chart.left - 6), _coordinate(y), str(value), "0"))
    return chart
