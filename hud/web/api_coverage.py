"""GET /api/oot/<org>/<repo>/coverage/: the coverage page's figures (the skip ledger) as JSON."""

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework.exceptions import ParseError
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from hud.coverage import queries
from hud.web import params
from hud.web.api_shared import backend_or_404, plain

DAY = OpenApiParameter(
    "day", str, description="The day (YYYY-MM-DD) whose changed test ids are listed (default: the newest)"
)


class CoverageView(APIView):
    @extend_schema(
        operation_id="oot_coverage",
        parameters=[DAY],
        responses=OpenApiTypes.OBJECT,
        summary="One backend's skip ledger: tests by upstream file against its peers, skipped over 90 days, changes",
        description="``files``: each upstream test file in the newest baseline run (nightly or push, with a parsed "
        "report) of each of its jobs over 90 days — collected, passed, failed, skipped, xfailed, disabled — with "
        "``peers``, the other backends running it; ``series``: tests skipped per day; ``changes``: the diffs of its "
        "baseline runs against the previous run of the same job, by day (added, removed, started_skipping, "
        "stopped_skipping, xpass); ``tests``: the test ids of ``day``'s changes, up to 5,000 per kind and run. "
        "A bad ``day`` is refused with 400.",
    )
    def get(self, request: Request, org: str, repo: str) -> Response:
        info = backend_or_404(org, repo)
        day = params.day(request)
        if isinstance(day, str):
            raise ParseError(f"day={day!r} is not a day: write it as YYYY-MM-DD.")
        return Response(plain(queries.coverage(info, day=day, cap=100_000)))
