from django.contrib import admin
from django.urls import include, path
from django.views.generic import RedirectView

urlpatterns = [
    path("admin/", admin.site.urls),
    path("prescient/", include("prescient.urls")),
    path("", RedirectView.as_view(pattern_name="admin:index", permanent=False)),
]
