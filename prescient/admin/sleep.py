"""The *Sleep selected jobs* action of the job list: asks for a time on a form, then moves each
job's next check there through :func:`prescient.sleep` (Metafora's Sleep)."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.utils import timezone
from django.utils.translation import gettext, ngettext
from django.utils.translation import gettext_lazy as _

from prescient.admin.confirm import confirmation_page
from prescient.engine import verbs as services
from prescient.models import FutureJob


class SleepForm(forms.Form):
    at = forms.DateTimeField(
        label=_("Next check at"),
        help_text=_("In the site's time zone, e.g. 2026-12-01 09:00; rounded up to a slot."),
    )

    def clean_at(self) -> Any:
        at = self.cleaned_data["at"]
        if at is not None and timezone.is_naive(at):  # USE_TZ = False: read it in the current zone
            at = timezone.make_aware(at)
        return at


def _sleep(modeladmin: Any, request: HttpRequest, queryset: QuerySet[FutureJob], at: Any) -> None:
    def verb(job: FutureJob) -> str:
        in_flight = job.in_flight
        services.sleep(job, at)
        return "requested" if in_flight else "slept"

    logged = gettext("Slept from the admin until %(at)s.") % {"at": at.isoformat()}
    requested = gettext("Sleep until %(at)s requested from the admin (run in flight).") % {"at": at.isoformat()}
    done = modeladmin._apply(request, queryset, verb, {"slept": logged, "requested": requested})
    if done["slept"]:
        messages.success(
            request,
            ngettext("%(count)d job sleeps until its new time.", "%(count)d jobs sleep until their new time.",
                     done["slept"]) % {"count": done["slept"]},
        )
    if done["requested"]:
        messages.success(
            request,
            ngettext(
                "%(count)d job is running: it is asked to stop, and sleeps once its run returns.",
                "%(count)d jobs are running: each is asked to stop, and sleeps once its run returns.",
                done["requested"],
            ) % {"count": done["requested"]},
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
        form = SleepForm()
    return confirmation_page(
        modeladmin, request, queryset, form=form, action="sleep_jobs",
        title=lambda total: ngettext("Sleep a job", "Sleep %(count)d jobs", total) % {"count": total},
        template="prescient/admin/sleep_confirmation.html",
    )
