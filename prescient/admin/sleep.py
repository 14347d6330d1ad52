"""The *Sleep selected jobs* action of the job list: asks for a time on a form (a date-time picker
prefilled with the job's next check, the time zone named beside it), then moves each job's next
check there through :func:`prescient.sleep` (Metafora's Sleep) and says until when."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.db.models import Min, QuerySet
from django.http import HttpRequest, HttpResponse
from django.utils import timezone
from django.utils.formats import date_format
from django.utils.translation import gettext, ngettext
from django.utils.translation import gettext_lazy as _

from prescient.admin.confirm import confirmation_page
from prescient.engine import verbs as services
from prescient.models import FutureJob

#: What the picker shows and sends (``<input type="datetime-local">``: to the minute, no zone).
PICKER_FORMAT = "%Y-%m-%dT%H:%M"


class SleepForm(forms.Form):
    # The picker sends 2026-12-01T09:00; the text formats typed before it (2026-12-01 09:00, …)
    # are still read, by Django's DateTimeField (ISO 8601, then DATETIME_INPUT_FORMATS).
    at = forms.DateTimeField(
        label=_("Next check at"),
        widget=forms.DateTimeInput(attrs={"type": "datetime-local"}, format=PICKER_FORMAT),
        help_text=_("In the time zone named beside it; rounded up to a slot."),
    )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        #: The zone the time is read in, named beside the picker.
        self.zone = timezone.get_current_timezone_name()

    def clean_at(self) -> Any:
        at = self.cleaned_data["at"]
        if at is not None and timezone.is_naive(at):  # USE_TZ = False: read it in the current zone
            at = timezone.make_aware(at)
        return at


def moment(at: datetime) -> str:
    """A time as the sleep's message names it: ``28 Nov 2026 14:00 (Europe/Paris)``."""
    local = timezone.localtime(at) if timezone.is_aware(at) else at
    return f"{date_format(local, 'j M Y H:i')} ({timezone.get_current_timezone_name()})"


def _sleep(modeladmin: Any, request: HttpRequest, queryset: QuerySet[FutureJob], at: Any) -> None:
    until: list[datetime] = []

    def verb(job: FutureJob) -> str:
        in_flight = job.in_flight
        moved = services.sleep(job, at)
        until.append(moved.sleep_until or moved.next_check_at)  # rounded up to a slot
        return "requested" if in_flight else "slept"

    logged = gettext("Slept from the admin until %(at)s.") % {"at": at.isoformat()}
    requested = gettext("Sleep until %(at)s requested from the admin (run in flight).") % {"at": at.isoformat()}
    done = modeladmin._apply(request, queryset, verb, {"slept": logged, "requested": requested})
    when = moment(until[0]) if until else ""
    if done["slept"]:
        messages.success(
            request,
            ngettext("%(count)d job sleeps until %(when)s.", "%(count)d jobs sleep until %(when)s.", done["slept"])
            % {"count": done["slept"], "when": when},
        )
    if done["requested"]:
        messages.success(
            request,
            ngettext(
                "%(count)d job is running: it is asked to stop, and sleeps until %(when)s once its run returns.",
                "%(count)d jobs are running: each is asked to stop, and sleeps until %(when)s once its run returns.",
                done["requested"],
            ) % {"count": done["requested"], "when": when},
        )


@admin.action(description=_("Sleep selected jobs until… (asks for a time)"), permissions=["change"])
def sleep_jobs(modeladmin: Any, request: HttpRequest, queryset: QuerySet[FutureJob]) -> HttpResponse | None:
    """Ask for a time on a form, then sleep each job until it."""
    if request.POST.get("post") == "yes":
        form = SleepForm(request.POST)
        if form.is_valid():
            _sleep(modeladmin, request, queryset, form.cleaned_data["at"])
            return None
    else:
        # Prefilled with the job's next check (of several jobs, the earliest): a time to move from.
        current = queryset.order_by().aggregate(at=Min("next_check_at"))["at"]
        form = SleepForm(initial={"at": current} if current is not None else None)
    return confirmation_page(
        modeladmin, request, queryset, form=form, action="sleep_jobs",
        title=lambda total: ngettext("Sleep a job", "Sleep %(count)d jobs", total) % {"count": total},
        template="prescient/admin/sleep_confirmation.html",
    )
