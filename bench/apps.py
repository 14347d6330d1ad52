from django.apps import AppConfig


class BenchConfig(AppConfig):
    name = "bench"
    label = "bench"
    default_auto_field = "django.db.models.BigAutoField"
