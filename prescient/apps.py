from django.apps import AppConfig
from django.utils.module_loading import autodiscover_modules
from django.utils.translation import gettext_lazy as _


class PrescientConfig(AppConfig):
    name = "prescient"
    label = "prescient"
    verbose_name = _("prescient future checks")
    default_auto_field = "django.db.models.BigAutoField"

    def hear_save_notices(self) -> None:
        """On PostgreSQL, the triggers that name the rows saved with an expectation pending:
        installed after migrate, heard on every connection (prescient/kinds/commit_notices.py)."""
        from django.core.signals import setting_changed
        from django.db.backends.signals import connection_created
        from django.db.models.signals import post_migrate

        from .kinds import commit_notices

        connection_created.connect(commit_notices.on_connection_created, dispatch_uid="prescient.save_notices")
        post_migrate.connect(commit_notices.on_post_migrate, sender=self, dispatch_uid="prescient.save_notices")
        setting_changed.connect(commit_notices.forget, dispatch_uid="prescient.save_notices")

    def ready(self) -> None:
        from . import system_checks  # noqa: F401  (registers the system checks)
        from .immutable import install as keep_first_check_at
        from .kinds import register_builtin
        from .maintenance import register_builtin as register_upkeep

        keep_first_check_at()  # job.save() cannot change a job's first_check_at
        self.hear_save_notices()
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
