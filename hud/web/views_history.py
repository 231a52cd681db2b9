"""The per-test pages: the test search (/oot/tests/?q=) and one test across backends (/oot/tests/<generic id>/).

Kept beside ``hud.web.views`` (same shape: read parameters, ask hud.figures.queries, render one template).
"""

from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render

from hud.breaks import queries as breaks_queries
from hud.history import assembly
from hud.history import queries as history_queries
from hud.web import params


def search(request: HttpRequest) -> HttpResponse:
    """The search form, and the tests whose id contains ``q``; a short or overlong ``q`` gets a message instead."""
    text = request.GET.get("q", "").strip()
    days, page = params.days(request), params.page(request)
    problem = assembly.query_problem(text) if text else ""
    found = history_queries.search(text=text, days=days, page=page) if text and not problem else None
    context = {
        "text": text[: assembly.MAX_QUERY].replace("\x00", ""),
        "problem": problem,
        "found": found,
        "days": days,
        "day_choices": params.DAYS,
        "min_query": assembly.MIN_QUERY,
    }
    status = 400 if problem and len(text) >= assembly.MIN_QUERY else 200
    return render(request, "hud/tests.html", context, status=status)


def detail(request: HttpRequest, generic_id: str) -> HttpResponse:
    if not assembly.possible_id(generic_id):
        raise Http404("No test has this id")
    days = params.days(request)
    found = history_queries.page(generic_id=generic_id, days=days)
    context = {"history": found, "days": days, "day_choices": params.DAYS}
    context["breaks"] = breaks_queries.breaks(test_id=generic_id) if found else []
    return render(request, "hud/test.html", context)
