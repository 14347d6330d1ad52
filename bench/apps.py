from django.apps import AppConfig


class BenchConfig(AppConfig):
    name = "bench"
    label = "bench"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django.conf import settings

        if getattr(settings, "BENCH_STATEMENTS_DIR", ""):  # the load section's workers (bench/load.py)
            from bench.counting import install

            install(settings.BENCH_STATEMENTS_DIR)
