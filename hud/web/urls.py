from django.urls import path
from drf_spectacular.views import SpectacularAPIView

from hud.web import (
    api,
    api_breaks,
    api_coverage,
    api_disabled,
    api_failing,
    api_history,
    api_incidents,
    api_results,
    views,
    views_breaks,
    views_coverage,
    views_history,
)

app_name = "hud"
urlpatterns: list = [
    path("oot/", views.index, name="index"),
    path("oot/metrics/", views.metrics, name="metrics"),
    path("oot/allowlist/", views.allowlist_page, name="allowlist"),
    path("oot/failures/", views.failures, name="failures"),
    path("oot/api/", views.api_docs, name="api-docs"),
    path("oot/pr/", views.pr_jump, name="pr-jump"),
    path("oot/pr/<int:number>/", views.pull_request, name="pull-request"),
    path("oot/tests/", views_history.search, name="tests"),
    path("oot/tests/<path:generic_id>/", views_history.detail, name="test"),  # ids hold "/", "::", "[", "{"…
    path("oot/<str:org>/<str:repo>/", views.backend, name="backend"),
    path("oot/<str:org>/<str:repo>/jobs/<int:job_id>/", views.job, name="job"),
    path("oot/<str:org>/<str:repo>/readiness/", views.readiness, name="readiness"),
    path("oot/<str:org>/<str:repo>/coverage/", views_coverage.coverage, name="coverage"),
    path("oot/<str:org>/<str:repo>/breaks/", views_breaks.breaks, name="breaks"),
    path("oot/<str:org>/<str:repo>/badge.svg", views.badge, name="badge"),
    path(
        "oot/<str:org>/<str:repo>/disabled-tests.json",
        api_disabled.DisabledTestsView.as_view(),
        name="disabled-tests",
    ),
    path("api/oot/", api.OverviewView.as_view(), name="api-overview"),
    path("api/oot/metrics/", api.MetricsView.as_view(), name="api-metrics"),
    path("api/oot/allowlist/", api.AllowlistView.as_view(), name="api-allowlist"),
    path("api/oot/failures/", api.FailuresView.as_view(), name="api-failures"),
    path("api/oot/incidents/", api_incidents.IncidentsView.as_view(), name="api-incidents"),
    path("api/oot/pr/<int:number>/", api_failing.PullRequestView.as_view(), name="api-pull-request"),
    path("api/oot/tests/", api_history.TestSearchView.as_view(), name="api-tests"),
    path("api/oot/tests/<path:generic_id>/", api_history.TestHistoryView.as_view(), name="api-test"),
    path("api/oot/<str:org>/<str:repo>/", api.BackendView.as_view(), name="api-backend"),
    path("api/oot/<str:org>/<str:repo>/jobs/<int:job_id>/", api.JobView.as_view(), name="api-job"),
    path(
        "api/oot/<str:org>/<str:repo>/jobs/<int:job_id>/tests/",
        api_results.JobTestsView.as_view(),
        name="api-job-tests",
    ),
    path(
        "api/oot/<str:org>/<str:repo>/failing-tests/",
        api_failing.FailingTestsView.as_view(),
        name="api-failing-tests",
    ),
    path("api/oot/<str:org>/<str:repo>/readiness/", api.ReadinessView.as_view(), name="api-readiness"),
    path("api/oot/<str:org>/<str:repo>/coverage/", api_coverage.CoverageView.as_view(), name="api-coverage"),
    path("api/oot/<str:org>/<str:repo>/breaks/", api_breaks.BreaksView.as_view(), name="api-breaks"),
    path("api/schema/", SpectacularAPIView.as_view(), name="api-schema"),
]
