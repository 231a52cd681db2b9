from django.contrib import admin
from django.urls import include, path
from django.views.generic import RedirectView

urlpatterns = [
    path("", RedirectView.as_view(url="/oot/", permanent=False)),
    path("admin/", admin.site.urls),
    path("", include("relay.urls")),
    path("", include("hud.urls")),
]

handler404 = "ootci.errors.not_found"  # JSON under /api/ and /github/
