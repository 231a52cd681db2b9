"""GET /oot/<org>/<repo>/disabled-tests.json: a backend's disabled tests in force, in the format of PyTorch's
``DISABLED_TESTS_FILE`` (``{"test_x (__main__.TestClass)": [issue_url, [platforms]]}``), so its CI can point
PyTorch's runner at this URL. Cached 60 s by clients; ConditionalGetMiddleware tags it with an ETag, so an
unchanged list is answered 304."""

from django.http import HttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema
from rest_framework.request import Request
from rest_framework.views import APIView

from hud.web.api_shared import backend_or_404
from ootci.disabled import registry

CACHE_SECONDS = 60


class DisabledTestsView(APIView):
    @extend_schema(
        operation_id="oot_disabled_tests",
        responses=OpenApiTypes.OBJECT,
        summary="A backend's disabled tests in PyTorch's DISABLED_TESTS_FILE format (expired entries left out)",
    )
    def get(self, request: Request, org: str, repo: str) -> HttpResponse:
        info = backend_or_404(org, repo)
        response = HttpResponse(registry.export_json(backend_id=info.id), content_type="application/json")
        response["Cache-Control"] = f"public, max-age={CACHE_SECONDS}"
        return response
