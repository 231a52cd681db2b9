from django.contrib import admin
from django.templatetags.static import static
from django.urls import include, path
from django.views.generic import RedirectView

urlpatterns = [
    path("", RedirectView.as_view(url="/oot/", permanent=False)),
    path("favicon.ico", RedirectView.as_view(url=static("hud/favicon.svg"), permanent=True)),
    path("admin/", admin.site.urls),
    path("", include("relay.urls")),
    path("", include("hud.web.urls")),
]

handler404 = "hud.web.views.not_found"
