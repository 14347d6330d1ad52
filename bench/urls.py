"""The bench's URLs: the admin and prescient's (the scale section times their pages)."""

from django.contrib import admin
from django.urls import include, path

urlpatterns = [
    path("admin/", admin.site.urls),
    path("prescient/", include("prescient.urls")),
]
