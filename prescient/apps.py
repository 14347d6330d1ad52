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
