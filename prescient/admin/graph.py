"""Workflows as graphs: a job's parents and children on its page, and a workflow's jobs drawn as
an SVG on the server (nodes coloured by state or outcome, arrows parent → child), as the
dashboard's charts are: no JavaScript, nothing from the internet.

The graph is drawn in layers, left to right: a job's layer is one more than its deepest parent's,
and within a layer each job sits beside its parents (at their mean row, or the next free one), so
arrows run across, not down many rows. Beyond :data:`FINISHED_SHOWN` finished jobs, the rest fold
into one "+k more finished" node linking to the finished jobs of the workflow."""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from django.contrib import admin
from django.contrib.admin.utils import quote
from django.db.models import Q
from django.urls import NoReverseMatch, reverse
from django.utils.html import format_html, format_html_join
from django.utils.http import urlencode
from django.utils.safestring import SafeString
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from prescient.models import FutureJob, JobHistory, JobLink
from prescient.wording import entity_text

from .display import OUTCOME_COLOURS, QUIET, STATE_COLOURS, badge

#: Geometry of the graph, in SVG units: a node's least width, its height, the gaps, the margin.
NODE_W, NODE_H, GAP_X, GAP_Y, PAD = 150, 36, 60, 12, 10
#: A generous width of one character of the labels (11 px sans-serif), and a node's inner margin:
#: a node is as wide as its longest line needs, never clipping it.
CHAR_W, TEXT_PAD = 6.8, 8
#: A graph draws at most this many jobs (the newest), so a huge workflow still renders.
MAX_NODES = 300
#: Finished jobs drawn (those that live jobs wait on first, then the newest); the others fold
#: into one node, :data:`FOLDED`.
FINISHED_SHOWN = 12
#: The id of the "+k more finished" node (job ids are positive): its layer is the first.
FOLDED = 0


@dataclass
class Node:
    """A job in a graph: what it checks and for which entity first, its id and status second."""

    job_id: int
    check: str
    entity: str
    status: str
    colour: str
    url: str
    x: int = 0
    y: int = 0
    folded: bool = False

    @property
    def label(self) -> str:
        """The first line: the check and the entity (``shop.ship · shop.order:42``)."""
        return self.check if self.folded else f"{self.check} · {self.entity}"

    @property
    def caption(self) -> str:
        """The second line: the job's id and its state or outcome (``job 17 · Scheduled``)."""
        if self.folded:
            return self.status
        return gettext("job %(id)s · %(status)s") % {"id": self.job_id, "status": self.status}

    @property
    def text_x(self) -> int:
        return self.x + TEXT_PAD

    @property
    def text_y(self) -> int:
        return self.y + 15

    @property
    def caption_y(self) -> int:
        return self.y + 29

    @property
    def width(self) -> int:
        """The width its longer line needs."""
        return math.ceil(max(len(self.label), len(self.caption)) * CHAR_W) + 2 * TEXT_PAD


@dataclass
class Edge:
    x1: int
    y1: int
    x2: int
    y2: int


def _url(site: admin.AdminSite, model: type[Any], pk: int) -> str:
    opts = model._meta
    try:
        return reverse(f"admin:{opts.app_label}_{opts.model_name}_change", args=[quote(pk)], current_app=site.name)
    except NoReverseMatch:
        return ""


def nodes_for(site: admin.AdminSite, job_ids: set[int]) -> dict[int, Node]:
    """A node per job id: the live job if there is one, else its history row."""
    nodes: dict[int, Node] = {}
    for job in FutureJob.objects.filter(pk__in=job_ids):
        nodes[job.pk] = Node(job.pk, job.job_exec, entity_text(job.entity_name, job.entity_key),
                             job.get_state_display(), STATE_COLOURS.get(job.state, QUIET),
                             _url(site, FutureJob, job.pk))
    for row in JobHistory.objects.filter(job_id__in=job_ids - set(nodes)):
        nodes[row.job_id] = Node(row.job_id, row.job_exec, entity_text(row.entity_name, row.entity_key),
                                 row.get_outcome_display(), OUTCOME_COLOURS.get(row.outcome, QUIET),
                                 _url(site, JobHistory, row.pk))
    return nodes


def links_html(site: admin.AdminSite, job_id: int) -> SafeString:
    """The parents and children of ``job_id``, linked, each with its state or outcome."""
    links = list(JobLink.objects.filter(Q(child_id=job_id) | Q(parent_id=job_id)).order_by("pk"))
    if not links:
        return format_html("{}", "-")
    nodes = nodes_for(site, {link.parent_id for link in links} | {link.child_id for link in links})

    def items(ids: list[int]) -> SafeString:
        if not ids:
            return format_html("{}", "-")
        return format_html_join(
            ", ", '<a href="{}">{}</a> <small>({})</small> {}',
            (
                (nodes[pk].url, nodes[pk].label, gettext("job %(id)s") % {"id": pk},
                 badge(nodes[pk].status, nodes[pk].colour))
                for pk in ids if pk in nodes
            ),
        )

    parents = [link.parent_id for link in links if link.child_id == job_id]
    children = [link.child_id for link in links if link.parent_id == job_id]
    return format_html(
        "{}: {}<br>{}: {}", gettext("runs after"), items(parents), gettext("runs before"), items(children)
    )


def layers(nodes: dict[int, Node], pairs: list[tuple[int, int]]) -> tuple[dict[int, int], dict[int, int]]:
    """Each node's layer (one more than its deepest parent's) and row within it: beside its parents
    (their mean row), or the first free row below; a layer in id order where that ties."""
    parents: dict[int, list[int]] = defaultdict(list)
    for parent, child in pairs:
        if parent in nodes and child in nodes:
            parents[child].append(parent)
    layer: dict[int, int] = {}
    for pk in sorted(nodes):  # parents are older than their children: ids rise along arrows
        layer[pk] = 1 + max((layer[p] for p in parents[pk] if p in layer), default=-1)
    by_layer: dict[int, list[int]] = defaultdict(list)
    for pk in sorted(nodes):
        by_layer[layer[pk]].append(pk)
    row: dict[int, int] = {}
    for depth in sorted(by_layer):
        wanted = {
            pk: sum(row[p] for p in parents[pk] if p in row) / len(parents[pk]) if parents[pk] else 0.0
            for pk in by_layer[depth]
        }
        free = 0
        for pk in sorted(by_layer[depth], key=lambda pk: (wanted[pk], pk)):
            row[pk] = max(free, round(wanted[pk]))
            free = row[pk] + 1
    return layer, row


def layout(nodes: dict[int, Node], pairs: list[tuple[int, int]], node_w: int = NODE_W) -> tuple[list[Edge], int, int]:
    """Place ``nodes`` (each ``node_w`` wide) in layers, left to right (see :func:`layers`);
    returns the arrows and the drawing's width and height."""
    layer, row = layers(nodes, pairs)
    for pk, node in nodes.items():
        node.x = PAD + layer[pk] * (node_w + GAP_X)
        node.y = PAD + row[pk] * (NODE_H + GAP_Y)
    edges = [
        Edge(nodes[p].x + node_w, nodes[p].y + NODE_H // 2, nodes[c].x - 4, nodes[c].y + NODE_H // 2)
        for p, c in dict.fromkeys(pairs) if p in nodes and c in nodes
    ]
    width = PAD * 2 + (max(layer.values(), default=0) + 1) * (node_w + GAP_X) - GAP_X
    height = PAD * 2 + (max(row.values(), default=0) + 1) * (NODE_H + GAP_Y) - GAP_Y
    return edges, width, height


def fold_finished(site: admin.AdminSite, name: str, nodes: dict[int, Node], live: set[int],
                  pairs: list[tuple[int, int]]) -> tuple[list[tuple[int, int]], int]:
    """Keep :data:`FINISHED_SHOWN` finished jobs of ``nodes`` (those live jobs wait on first, then
    the newest); fold the others into one node (:data:`FOLDED`), which takes over their arrows to
    the jobs drawn. Returns the arrows and how many were folded."""
    finished = [pk for pk in nodes if pk not in live]
    if len(finished) <= FINISHED_SHOWN:
        return pairs, 0
    awaited = {p for p, c in pairs if c in live}
    kept = set(sorted(finished, key=lambda pk: (pk not in awaited, -pk))[:FINISHED_SHOWN])
    folded = {pk for pk in finished if pk not in kept}
    for pk in folded:
        del nodes[pk]
    try:
        url = reverse("admin:prescient_jobhistory_changelist", current_app=site.name) + "?" + urlencode({"q": name})
    except NoReverseMatch:
        url = ""
    nodes[FOLDED] = Node(
        FOLDED, gettext("+%(count)d more finished") % {"count": len(folded)}, "",
        gettext("among the finished jobs"), QUIET, url, folded=True,
    )
    arrows = [(FOLDED if p in folded else p, c) for p, c in pairs if c not in folded]
    return arrows, len(folded)


def workflow_graph(site: admin.AdminSite, name: str) -> dict[str, Any]:
    """What the graph template needs for workflow ``name``."""
    live = set(FutureJob.objects.of_workflow(name).values_list("pk", flat=True))
    ended = set(JobHistory.objects.filter(workflow=name).values_list("job_id", flat=True))
    job_ids = set(sorted(live | ended)[-MAX_NODES:])
    nodes = nodes_for(site, job_ids)
    pairs = list(
        JobLink.objects.filter(child_id__in=job_ids, parent_id__in=job_ids).values_list("parent_id", "child_id")
    )
    pairs, folded = fold_finished(site, name, nodes, live, pairs)
    node_w = max([NODE_W, *(node.width for node in nodes.values())])  # one width: the columns line up
    edges, width, height = layout(nodes, pairs, node_w)
    return {
        "nodes": [nodes[pk] for pk in sorted(nodes)], "edges": edges, "width": width, "height": height,
        "node_w": node_w, "node_h": NODE_H, "truncated": len(live | ended) > MAX_NODES, "max_nodes": MAX_NODES,
        "folded": folded, "drawn": len(nodes) - (1 if folded else 0),
    }


class LinksMixin:
    """A read-only "workflow links" field for the job and history pages."""

    admin_site: admin.AdminSite

    @admin.display(description=_("parents and children"))
    def workflow_links(self, obj: FutureJob | JobHistory) -> SafeString:
        return links_html(self.admin_site, obj.job_id if isinstance(obj, JobHistory) else obj.pk)
