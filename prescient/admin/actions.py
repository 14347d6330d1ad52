"""The actions of the job list: pause, release, run now, sleep (:mod:`.sleep`), cancel and kill.

Nothing here writes a job row. Each action calls a verb of :mod:`prescient.engine.verbs`, one
job at a time, and reports per job what it did or why it refused. The buttons of a job's own
page post these same actions for one job (:mod:`prescient.admin.job_page`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable

from django import forms
from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.utils.translation import gettext, ngettext
from django.utils.translation import gettext_lazy as _

from prescient.admin.confirm import confirmation_page
from prescient.admin.display import AdminMixinBase
from prescient.admin.sleep import sleep_jobs
from prescient.engine import verbs as services
from prescient.exceptions import InvalidTime, InvalidTransition
from prescient.models import FutureJob

#: Per action, at most this many "skipped" messages; the rest are counted in one more message.
MAX_SKIP_MESSAGES = 10

def describe(job: FutureJob) -> str:
    return gettext("job %(id)s (%(check)s for %(name)s#%(key)s)") % {
        "id": job.pk,
        "check": job.job_exec,
        "name": job.entity_name,
        "key": job.entity_key,
    }


class KillForm(forms.Form):
    reason = forms.CharField(
        label=_("Reason"),
        widget=forms.Textarea(attrs={"rows": 3, "cols": 60}),
        help_text=_("Kept in each job's history row."),
    )


class JobActionsMixin(AdminMixinBase):
    """For :class:`~prescient.admin.jobs.FutureJobAdmin`: the actions of its list."""

    actions = ["pause_jobs", "release_jobs", "run_jobs_now", sleep_jobs, "cancel_jobs", "kill_jobs"]

    def _apply(
        self,
        request: HttpRequest,
        jobs: Iterable[FutureJob],
        verb: Callable[[FutureJob], str],
        log: dict[str, str],
    ) -> Counter[str]:
        """Call ``verb`` on each job; count what it returns, report refusals, log the changes.

        ``verb`` returns a key of ``log`` (the change-log message) or another key for "nothing
        to do". Refusals (the job's state does not allow it, or it has finished) are warnings.
        """
        done: Counter[str] = Counter()
        skipped = 0
        for job in jobs:
            try:
                what = verb(job)
            except (InvalidTransition, InvalidTime, services.JobNotFound) as exc:
                skipped += 1
                if skipped <= MAX_SKIP_MESSAGES:
                    messages.warning(
                        request, gettext("Skipped %(job)s: %(reason)s") % {"job": describe(job), "reason": exc}
                    )
                continue
            done[what] += 1
            if what in log:
                self.log_change(request, job, log[what])
        if skipped > MAX_SKIP_MESSAGES:
            more = skipped - MAX_SKIP_MESSAGES
            messages.warning(
                request,
                ngettext("…and %(count)d more job skipped.", "…and %(count)d more jobs skipped.", more)
                % {"count": more},
            )
        return done

    @admin.action(description=_("Pause selected jobs"), permissions=["change"])
    def pause_jobs(self, request: HttpRequest, queryset: QuerySet[FutureJob]) -> None:
        done = self._apply(
            request, queryset,
            lambda job: "paused" if services.pause(job=job) else "unchanged",
            {"paused": gettext("Paused from the admin.")},
        )
        if done["paused"]:
            messages.success(
                request,
                ngettext("Paused %(count)d job.", "Paused %(count)d jobs.", done["paused"])
                % {"count": done["paused"]},
            )
        if done["unchanged"]:
            messages.info(
                request,
                ngettext(
                    "%(count)d job was paused already.", "%(count)d jobs were paused already.", done["unchanged"]
                ) % {"count": done["unchanged"]},
            )

    @admin.action(description=_("Release selected jobs"), permissions=["change"])
    def release_jobs(self, request: HttpRequest, queryset: QuerySet[FutureJob]) -> None:
        done = self._apply(
            request, queryset,
            lambda job: "released" if services.release(job=job) else "unchanged",
            {"released": gettext("Released from the admin.")},
        )
        if done["released"]:
            messages.success(
                request,
                ngettext("Released %(count)d job.", "Released %(count)d jobs.", done["released"])
                % {"count": done["released"]},
            )
        if done["unchanged"]:
            messages.info(
                request,
                ngettext(
                    "%(count)d job was not paused: nothing to release.",
                    "%(count)d jobs were not paused: nothing to release.",
                    done["unchanged"],
                ) % {"count": done["unchanged"]},
            )

    @admin.action(description=_("Run selected jobs now"), permissions=["change"])
    def run_jobs_now(self, request: HttpRequest, queryset: QuerySet[FutureJob]) -> None:
        def run(job: FutureJob) -> str:
            services.run_now(job)
            return "due"

        done = self._apply(request, queryset, run, {"due": gettext("Made due now from the admin.")})
        if done["due"]:
            messages.success(
                request,
                ngettext("%(count)d job is due now.", "%(count)d jobs are due now.", done["due"])
                % {"count": done["due"]},
            )

    @admin.action(description=_("Cancel selected jobs"), permissions=["change"])
    def cancel_jobs(self, request: HttpRequest, queryset: QuerySet[FutureJob]) -> None:
        """End each job ``cancelled`` (as ``prescient.cancel`` does); no reason asked: cancelling
        says it was not needed, where a kill says why it was stopped."""
        done = self._apply(
            request, queryset, lambda job: services.cancel_job(job),
            {"ended": gettext("Cancelled from the admin."),
             "requested": gettext("Cancel requested from the admin (run in flight).")},
        )
        if done["ended"]:
            messages.success(
                request,
                ngettext("Cancelled %(count)d job.", "Cancelled %(count)d jobs.", done["ended"])
                % {"count": done["ended"]},
            )
        if done["requested"]:
            messages.success(
                request,
                ngettext(
                    "%(count)d job is running: it ends cancelled when its run returns.",
                    "%(count)d jobs are running: each ends cancelled when its run returns.",
                    done["requested"],
                ) % {"count": done["requested"]},
            )

    @admin.action(description=_("Kill selected jobs (asks for a reason)"), permissions=["change"])
    def kill_jobs(self, request: HttpRequest, queryset: QuerySet[FutureJob]) -> HttpResponse | None:
        """Ask for a reason on a confirmation page, then kill each job with it."""
        if request.POST.get("post") == "yes":
            form = KillForm(request.POST)
            if form.is_valid():
                reason = form.cleaned_data["reason"]
                self._kill(request, queryset, reason)
                return None
        else:
            form = KillForm()
        return confirmation_page(
            self, request, queryset, form=form, action="kill_jobs",
            title=lambda total: ngettext("Kill a job", "Kill %(count)d jobs", total) % {"count": total},
            template="prescient/admin/kill_confirmation.html",
        )

    def _kill(self, request: HttpRequest, queryset: QuerySet[FutureJob], reason: str) -> None:
        logged = gettext("Killed from the admin: %(reason)s") % {"reason": reason}
        requested = gettext("Kill requested from the admin (run in flight): %(reason)s") % {"reason": reason}
        done = self._apply(
            request, queryset, lambda job: services.kill(job, reason), {"ended": logged, "requested": requested}
        )
        if done["ended"]:
            messages.success(
                request,
                ngettext("Killed %(count)d job.", "Killed %(count)d jobs.", done["ended"])
                % {"count": done["ended"]},
            )
        if done["requested"]:
            messages.success(
                request,
                ngettext(
                    "%(count)d job is running: it ends killed when its run returns.",
                    "%(count)d jobs are running: each ends killed when its run returns.",
                    done["requested"],
                ) % {"count": done["requested"]},
            )
