from django.apps import AppConfig
from django.utils.module_loading import autodiscover_modules
from django.utils.translation import gettext_lazy as _


class PrescientConfig(AppConfig):
    name = "prescient"
    label = "prescient"
    verbose_name = _("prescient future checks")
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from . import checks  # noqa: F401  (registers the system checks)

        # Each installed app may declare its checks in <app>/prescient_checks.py.
        autodiscover_modules("prescient_checks")
        # With prescient as a django.tasks backend, each app's tasks.py defines tasks: importing
        # it registers them (the worker then knows them; nothing is imported by name).
        from django.conf import settings

        backends = getattr(settings, "TASKS", None) or {}
        if any(isinstance(cfg, dict) and cfg.get("BACKEND") == "prescient.tasks.PrescientBackend" for cfg in backends.values()):
            from .tasks import discover

            discover()
