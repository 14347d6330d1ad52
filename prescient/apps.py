from django.apps import AppConfig
from django.utils.module_loading import autodiscover_modules
from django.utils.translation import gettext_lazy as _


class PrescientConfig(AppConfig):
    name = "prescient"
    label = "prescient"
    verbose_name = _("prescient future checks")
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from . import system_checks  # noqa: F401  (registers the system checks)
        from .immutable import install as keep_first_check_at
        from .kinds import register_builtin
        from .maintenance import register_builtin as register_upkeep

        keep_first_check_at()  # job.save() cannot change a job's first_check_at
        register_builtin()
        register_upkeep()
        # Each installed app may declare its checks in <app>/prescient_checks.py.
        autodiscover_modules("prescient_checks")
        # With prescient as a django.tasks backend, each app's tasks.py defines tasks: importing
        # it registers them (the worker then knows them; a task defined in another module of an
        # installed app is imported when one of its jobs first needs it).
        from django.conf import settings

        from .conf import BACKEND_PATH

        backends = getattr(settings, "TASKS", None) or {}
        ours = [name for name, cfg in backends.items() if isinstance(cfg, dict) and cfg.get("BACKEND") == BACKEND_PATH]
        if ours:
            from django.core.exceptions import ImproperlyConfigured
            from django.tasks import task_backends

            from .kinds.tasks import discover

            discover()
            for alias in ours:  # created now: each declares its OPTIONS' LIMITS (prescient.limits)
                try:
                    task_backends[alias]
                except ImproperlyConfigured:
                    pass  # bad OPTIONS: manage.py check and the first use say so
        # Every @prescient.periodic declaration is imported now: the upkeep service may remove
        # a declared schedule whose declaration is gone.
        from .recurrence import mark_loaded

        mark_loaded()
