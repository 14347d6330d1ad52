from django.apps import AppConfig
from django.db.models.signals import post_save


class ShopConfig(AppConfig):
    name = "project.shop"
    label = "shop"
    verbose_name = "Shop"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from .models import Order, schedule_unshipped_check

        post_save.connect(
            schedule_unshipped_check, sender=Order, dispatch_uid="shop.schedule_unshipped_check"
        )
