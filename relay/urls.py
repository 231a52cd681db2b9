from django.urls import path

from relay.endpoints import bisect_request, callback, ingest, log_upload, report_upload, webhook

app_name = "relay"
urlpatterns = [
    path("github/webhook", webhook.webhook, name="webhook"),
    path("github/callback", callback.CallbackApi.as_view(), name="callback"),
    path("github/test-report", report_upload.TestReportApi.as_view(), name="test-report"),
    path("github/job-log", log_upload.JobLogApi.as_view(), name="job-log"),
    path("api/crcr/results", ingest.IngestApi.as_view(), name="crcr-results"),
    path(
        "api/oot/<str:org>/<str:repo>/breaks/<int:break_id>/bisect/",
        bisect_request.bisect_request,
        name="bisect-request",
    ),
]
