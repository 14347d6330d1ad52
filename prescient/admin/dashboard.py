"""The dashboard page of the job list: its view (:class:`DashboardMixin`) and what it shows.

Counts per state, the oldest overdue job, live workers, and three charts (:mod:`.charts`): jobs
due per slot in the near term (24 hours of 15-minute slots), jobs finished per slot as long
before now, and in the past 7 days; a fourth when expectations are declared: those met and
missed per slot in the past 7 days, and each one's SLA as a table (:mod:`prescient.sla`): its
days, met within each rung, missed. Then the health of each check over a recent window
(:mod:`prescient.health`, ``?minutes=``, the past hour by default). The page refreshes itself
every :data:`REFRESH_SECONDS` (``prescient/dashboard.js``: the live part fetched again, pausable).
"""

from __future__ import annotations

from datetime import date, datetime, timedelta
from typing import Any

import django
from django.contrib import admin
from django.contrib.admin.utils import quote
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import URLPattern, path
from django.utils import timezone
from django.utils.timesince import timesince
from django.utils.translation import gettext

from prescient import reads, slots
from prescient.admin.charts import (
    DAY_MINUTES,
    WEEK_MINUTES,
    Chart,
    Series,
    bucket_label,
    bucket_minutes,
    build_chart,
    label_every,
    near_span,
    span_text,
)
from prescient.admin.display import (
    OUTCOME_HUES,
    STATE_COLOURS,
    AdminMixinBase,
    badge,
    breakable,
    can_view,
    duration,
    when,
)
from prescient.admin.reading import as_of_context
from prescient.conf import setting
from prescient.expectations import registered as registered_expectations
from prescient.health import DEFAULT_MINUTES, MAX_MINUTES, Health
from prescient.kinds.links import admin_url, entity_link
from prescient.models import FutureJob, JobHistory, Worker
from prescient.queries import bucket_counts, sample_percent
from prescient.sla import ExpectationSla
from prescient.states import Outcome, State
from prescient.status import snapshot
from prescient.wording import offset_text

#: The dashboard fetches its figures again this often (paused and resumed on the page).
REFRESH_SECONDS = 15
#: The windows offered for the health per check, in minutes.
HEALTH_WINDOWS = (15, 60, 6 * 60, 24 * 60)
#: Characters of the last error shown in the health table (its row's page has all of it).
ERROR_PREVIEW = 120


def dashboard_charts(now: datetime) -> list[Chart]:
    """Jobs due per slot in the near term (a day of 15-minute slots: charts.near_span), jobs
    finished per slot in the same span before now, and per hour (or slot) in the past 7 days."""
    slot_minutes = int(setting("SLOT_MINUTES"))
    outcomes = [Series(outcome.value, str(outcome.label).lower(), colour=OUTCOME_HUES[outcome]) for outcome in Outcome]
    charts = []

    # A bar per slot: a day of 15-minute slots, two hours of one-minute slots (charts.near_span).
    near = near_span(slot_minutes)
    minutes = bucket_minutes(near, slot_minutes)
    start = slots.floor(now, minutes)
    end = start + timedelta(minutes=near)
    due = FutureJob.objects.filter(state=State.SCHEDULED, next_check_at__gte=start, next_check_at__lt=end)
    chart = Chart(
        "due",
        gettext("Due in the next %(span)s") % {"span": span_text(near)},
        gettext("Scheduled jobs by due time, per %(bucket)s. Overdue jobs count under “due now”.")
        % {"bucket": bucket_label(minutes, slot_minutes)},
        gettext("No scheduled job is due in the next %(span)s.") % {"span": span_text(near)},
        [Series(State.SCHEDULED.value, gettext("scheduled"), colour=OUTCOME_HUES[State.SCHEDULED])],
    )
    counts = bucket_counts(due, "next_check_at", start, minutes, key="state", only=State.SCHEDULED.value)
    charts.append(
        build_chart(
            chart, counts, start, minutes, near // minutes,
            label_every=label_every(near), label_format="H:i", title_format="H:i",
        )
    )

    # Whether the history is too large to count: asked once, of the widest range (the week's).
    week_end = slots.floor(now, bucket_minutes(WEEK_MINUTES, slot_minutes)) + timedelta(
        minutes=bucket_minutes(WEEK_MINUTES, slot_minutes)
    )
    large = sample_percent(JobHistory.objects.filter(
        finished_at__gte=week_end - timedelta(minutes=WEEK_MINUTES), finished_at__lt=week_end
    )) is not None
    for key, title, span, every, label_format, title_format in (
        ("day", gettext("Finished in the past %(span)s") % {"span": span_text(near)}, near, label_every(near),
         "H:i", "H:i"),
        ("week", gettext("Finished in the past 7 days"), WEEK_MINUTES, DAY_MINUTES, "D j", "D j, H:i"),
    ):
        minutes = bucket_minutes(span, slot_minutes)
        end = slots.floor(now, minutes) + timedelta(minutes=minutes)
        start = end - timedelta(minutes=span)
        finished = JobHistory.objects.filter(finished_at__gte=start, finished_at__lt=end)
        chart = Chart(
            key,
            title,
            gettext("Jobs that left the live table, by outcome, per %(bucket)s.")
            % {"bucket": bucket_label(minutes, slot_minutes)},
            gettext("No job finished in this period."),
            [Series(entry.key, entry.label, colour=entry.colour) for entry in outcomes],
        )
        sample = sample_percent(finished) if large else None  # a range too large to count: a sample, said so
        counts = bucket_counts(finished, "finished_at", start, minutes, key="outcome", sample_percent=sample)
        if sample is not None:
            chart.caption += " " + gettext(
                "Estimated from %(percent)s%% of the history's pages: too many rows to count."
            ) % {"percent": f"{sample:.2g}"}
        charts.append(
            build_chart(
                chart, counts, start, minutes, span // minutes,
                label_every=every, label_format=label_format, title_format=title_format,
            )
        )
    if any(True for _ in registered_expectations()):
        charts.append(sla_chart(now, slot_minutes))
    return charts


def sla_chart(now: datetime, slot_minutes: int) -> Chart:
    """Expectations met and missed per slot in the past 7 days: the SLA, at a glance."""
    minutes = bucket_minutes(WEEK_MINUTES, slot_minutes)
    end = slots.floor(now, minutes) + timedelta(minutes=minutes)
    start = end - timedelta(minutes=WEEK_MINUTES)
    ended = JobHistory.objects.filter(
        outcome__in=[Outcome.MET, Outcome.MISSED], finished_at__gte=start, finished_at__lt=end
    )
    chart = Chart(
        "sla",
        gettext("Expectations in the past 7 days"),
        gettext("Expectations met (in time) and missed (past their last rung), per %(bucket)s.")
        % {"bucket": bucket_label(minutes, slot_minutes)},
        gettext("No expectation ended in this period."),
        [Series(Outcome.MET.value, gettext("met"), colour=OUTCOME_HUES[Outcome.MET]),
         Series(Outcome.MISSED.value, gettext("missed"), colour=OUTCOME_HUES[Outcome.MISSED])],
    )
    counts = bucket_counts(ended, "finished_at", start, minutes, key="outcome")
    return build_chart(
        chart, counts, start, minutes, WEEK_MINUTES // minutes,
        label_every=DAY_MINUTES, label_format="D j", title_format="D j, H:i",
    )


def sla_tables(site: admin.AdminSite, request: HttpRequest, reports: list[ExpectationSla]) -> list[dict[str, Any]]:
    """Each expectation's SLA as a table: its days as rows (newest first), a column per rung,
    missed and other endings, the window's totals; its time to met beneath."""
    history = can_view(site, request, JobHistory)

    def duration(seconds: float | None) -> str:
        return "-" if seconds is None else offset_text(seconds)

    tables = []
    for report in reports:
        offsets = [offset_text(seconds) for seconds in report.ladder_seconds]
        tables.append({
            "name": report.name,
            "history_url": admin_url(site, JobHistory, "changelist", job_exec=report.name) if history else None,
            "rungs": [
                {"number": k, "offset": offsets[k - 1] if k <= len(offsets) else ""}
                for k in range(1, len(report.met) + 1)
            ],
            "days": [
                {"date": date.fromisoformat(day.date), "met": day.met, "missed": day.missed, "other": day.other}
                for day in report.days
            ],
            "total": {"met": report.met, "missed": report.missed, "other": report.other},
            "p50": duration(report.time_to_met_p50_seconds),
            "p95": duration(report.time_to_met_p95_seconds),
            "count": report.time_to_met_count,
            "time_zone": report.time_zone,
        })
    return tables


def health_minutes(request: HttpRequest) -> int:
    """The window of the health table: ``?minutes=`` when it is a whole number in range, else an hour."""
    try:
        minutes = int(request.GET.get("minutes", DEFAULT_MINUTES))
    except ValueError:
        return DEFAULT_MINUTES
    return minutes if 1 <= minutes <= MAX_MINUTES else DEFAULT_MINUTES


def health_table(site: admin.AdminSite, request: HttpRequest, report: Health) -> dict[str, Any]:
    """The health of each check as rows: runs per minute, failure rate, run time p50/p95, the
    last error (linked to its history row), pending jobs and the most overdue (linked to them)."""
    history = can_view(site, request, JobHistory)
    rows = []
    for check in report.checks:
        error = check.last_error
        last_error = None
        if error is not None:
            text = (error.error.strip().splitlines() or [""])[0]
            last_error = {
                "cls": error.exception_class.rpartition(".")[2],
                "text": text if len(text) <= ERROR_PREVIEW else text[: ERROR_PREVIEW - 1] + "…",
                "title": error.error,
                "when": when(datetime.fromisoformat(error.finished_at)),
                "url": admin_url(site, JobHistory, "change", quote(error.history_id)) if history else None,
            }
        rows.append({
            "name": check.name,
            "name_html": breakable(check.name),
            "history_url": admin_url(site, JobHistory, "changelist", job_exec=check.name) if history else None,
            "runs": check.runs,
            "finished": check.finished,
            "runs_per_minute": f"{check.runs_per_minute:g}",
            "failure_rate": "-" if check.failure_rate is None else f"{check.failure_rate:.1%}",
            "failed_runs": check.failed_runs,
            "failing": bool(check.failed_runs),
            "p50": duration(check.run_seconds_p50),
            "p95": duration(check.run_seconds_p95),
            "last_error": last_error,
            "pending": check.pending,
            "pending_approx": check.pending_estimated,
            "pending_url": admin_url(site, FutureJob, "changelist", job_exec=check.name),
            "late": None if check.oldest_overdue_seconds is None else offset_text(check.oldest_overdue_seconds),
            "due": check.due,
            "due_approx": check.due_estimated,
            "held": check.held,
            "held_by": ", ".join(f"{name} {count}" for name, count in sorted(check.held_by.items())),
            "due_url": admin_url(
                site, FutureJob, "changelist", job_exec=check.name, state__exact=State.SCHEDULED.value, due="overdue"
            ),
        })
    windows = [
        {"minutes": minutes, "label": offset_text(minutes * 60), "current": minutes == report.minutes}
        for minutes in HEALTH_WINDOWS
    ]
    return {"minutes": report.minutes, "span": offset_text(report.minutes * 60), "rows": rows, "windows": windows}


def dashboard_context(site: admin.AdminSite, request: HttpRequest, now: datetime) -> dict[str, Any]:
    """What the dashboard shows; a fixed number of queries, whatever the number of jobs."""
    status = snapshot(now, health_minutes=health_minutes(request))
    states = [
        {
            "label": state.label,
            "count": status.states.get(state.value, 0),
            "approx": state.value in status.estimated,
            "badge": badge(state.label, STATE_COLOURS[state]),
            "url": admin_url(site, FutureJob, "changelist", state__exact=state.value),
        }
        for state in State
    ]
    oldest = None
    if status.due_now:
        job = FutureJob.objects.due(now).order_by("next_check_at", "id").first()
        if job is not None:
            oldest = {
                "job": job,
                "entity": entity_link(site, job.entity_name, job.entity_key),
                "due": when(job.next_check_at),
                "late": timesince(job.next_check_at, now) if job.next_check_at < now else "",
                "url": admin_url(site, FutureJob, "change", quote(job.pk)),
            }
    workers = [
        {
            "name": info.name,
            "host": info.hostname,
            # As shown: a line may break after a ":" or ".", never inside a part.
            "name_html": breakable(info.name),
            "host_html": breakable(info.hostname),
            "pid": info.pid,
            "concurrency": info.concurrency,
            "heartbeat": gettext("%(seconds)d s ago") % {"seconds": info.heartbeat_age_seconds},
            "jobs_done": info.jobs_done,
        }
        for info in status.workers
    ]
    last_slot = datetime.fromisoformat(status.last_slot_at) if status.last_slot_at else None
    return {
        "states": states,
        "total": sum(status.states.values()),
        "total_approx": any(state.value in status.estimated for state in State),
        "due_now": status.due_now,
        "due_approx": "due" in status.estimated,
        "due_url": admin_url(site, FutureJob, "changelist", state__exact=State.SCHEDULED.value, due="overdue"),
        "oldest": oldest,
        "workers": workers,
        "last_slot": when(last_slot) if last_slot else None,
        "workers_url": (
            admin_url(site, Worker, "changelist") if can_view(site, request, Worker) else None
        ),
        "history_url": (
            admin_url(site, JobHistory, "changelist") if can_view(site, request, JobHistory) else None
        ),
        "jobs_url": admin_url(site, FutureJob, "changelist"),
        "charts": dashboard_charts(now),
        "sla_tables": sla_tables(site, request, status.sla),
        "health": health_table(site, request, status.health) if status.health is not None else None,
        "refresh_seconds": REFRESH_SECONDS,
        "slot_minutes": int(setting("SLOT_MINUTES")),
        "now": when(now),
    }


class DashboardMixin(AdminMixinBase):
    """For :class:`~prescient.admin.jobs.FutureJobAdmin`: the ``dashboard/`` page, and a link to it
    above the job list."""

    change_list_template = "prescient/admin/futurejob_change_list.html"

    def get_urls(self) -> list[URLPattern]:
        opts = self.opts
        dashboard = path(
            "dashboard/",
            self.admin_site.admin_view(self.dashboard_view),
            name=f"{opts.app_label}_{opts.model_name}_dashboard",
        )
        return [dashboard, *super().get_urls()]

    def dashboard_view(self, request: HttpRequest) -> HttpResponse:
        """Counts per state, due and finished jobs per slot as charts, the oldest overdue job, workers."""
        if not self.has_view_or_change_permission(request):
            raise PermissionDenied
        site: admin.AdminSite = self.admin_site
        with reads.reading(request) as alias:  # off the primary, rendered within (prescient.reads)
            context = {
                **site.each_context(request),
                **as_of_context(alias),
                **dashboard_context(site, request, timezone.now()),
                "title": gettext("Dashboard"),
                "opts": self.opts,
                "breadcrumbs_as_list": django.VERSION >= (6, 0),
            }
            request.current_app = site.name
            return TemplateResponse(request, "prescient/admin/dashboard.html", context).render()
