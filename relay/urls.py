from django.urls import path

from relay import api, job_log_api, report_api, views

app_name = "relay"
urlpatterns = [
    path("github/webhook", views.webhook, name="webhook"),
    path("github/callback", api.CallbackApi.as_view(), name="callback"),
    path("github/test-report", report_api.TestReportApi.as_view(), name="test-report"),
    path("github/job-log", job_log_api.JobLogApi.as_view(), name="job-log"),
    path("api/crcr/results", api.IngestApi.as_view(), name="crcr-results"),
]
