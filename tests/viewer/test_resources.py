"""The viewer's shape (Datasette's): each resource has one data function returning a
typed model, which its page and its ``/api`` route render; the SQL over ``events`` is
the ledger's (``ledger/_page_queries.py``), not the viewer's."""

from __future__ import annotations

import json
import re
import typing
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.routing import Route
from starlette.testclient import TestClient

import evalledger.viewer
from evalledger.viewer import create_app

from .suites import Suite

VIEWER = Path(evalledger.viewer.__file__).parent


def test_each_api_route_is_a_resources_data_function_rendered_as_json(suite: Suite) -> None:
    from evalledger.viewer._resources import Resource

    app: Any = create_app(suite.db)  # never started: only its routes are read
    while not isinstance(app, Starlette):
        app = app.app  # through the middleware
    api = [r for r in app.routes if isinstance(r, Route) and r.path.startswith("/api/")
           and r.path != "/api/stream"]  # a stream of changes, not a resource
    assert len(api) == 10
    for route in api:
        data = getattr(route.endpoint, "resource", None)
        assert data is not None, f"{route.path} builds its JSON itself"
        returns = typing.get_type_hints(data)["return"]
        assert issubclass(returns, Resource), (route.path, returns)


def test_the_viewer_copies_no_column_list_of_the_store() -> None:
    """Its SQL is the ledger's (tests/test_layering.py); so is the store's column list."""
    for module in sorted(VIEWER.glob("*.py")):
        text = module.read_text(encoding="utf-8")
        assert "event_id, run_id, task_key" not in text, module.name


# A URL of each page that shows something: the values of its path, and its query.
PATHS = {"run_id": "{first}", "run_a": "{first}", "run_b": "{second}",
         "task_key": "default/claude/00"}
QUERIES: dict[str, dict[str, str]] = {
    "/runs/{run_id}": {"sort": "key"},
    "/runs/{run_id}/tasks/{task_key:path}": {"list": "outcome=failed"},
    "/runs/{run_id}/search": {"q": "oops"},
    "/search": {"q": "oops"},
}


def _url(path: str, suite: Suite) -> str:
    for name, value in PATHS.items():
        path = re.sub(r"\{" + name + r"(:\w+)?\}",
                      value.format(first=suite.first, second=suite.second), path)
    return path


def _body(response: Any) -> Any:
    """A JSON body as data; a run's summary without its anchor (the run page reads none:
    it shows none, and its twin's is run.json's)."""
    body = json.loads(response.body if hasattr(response, "body") else response.text)
    if isinstance(body.get("summary"), dict):
        body["summary"].pop("anchor", None)
    return body


def test_every_page_has_json_twins_serving_the_model_it_was_drawn_from(
    suite: Suite, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each of the viewer's HTML routes names the resources it is drawn from, and each
    has its JSON twin under /api. Over HTTP against a real ledger, the model a page was
    drawn from, as JSON, is what its twin serves for the same request; and no field of
    a model is left out of its JSON (what a page reads, a program can)."""
    from evalledger.viewer._resources import Resource

    app: Any = create_app(suite.db)
    routes = app
    while not isinstance(routes, Starlette):
        routes = routes.app
    pages = [r for r in routes.routes if isinstance(r, Route) and not r.path.startswith("/api/")]
    twins = {r.endpoint.resource: r for r in routes.routes if isinstance(r, Route)
             and hasattr(r.endpoint, "resource")}
    assert len(pages) == 11
    views = pages[0].endpoint.resources[0].__self__
    drawn: dict[str, Resource] = {}

    def recording(data: Callable[..., Awaitable[Resource]]) -> Callable[..., Any]:
        async def record(*args: Any, **kwargs: Any) -> Resource:
            drawn[data.__name__] = model = await data(*args, **kwargs)
            return model
        return record

    for data in {d for page in pages for d in page.endpoint.resources}:
        monkeypatch.setattr(views, data.__name__, recording(data))
    # A search stops where its time is up: under load, the page's and its twin's stopped
    # in different places (what each found is what the other would have, had it the
    # time). The claim here is that they are one model, so neither runs out of time.
    monkeypatch.setattr("evalledger.viewer._app.SEARCH_SECONDS", 60.0)
    with TestClient(app, follow_redirects=False) as client:
        for page in pages:
            resources = getattr(page.endpoint, "resources", ())
            assert resources, f"{page.path} names no resource it is drawn from"
            query = QUERIES.get(page.path, {})
            drawn.clear()
            shown = client.get(_url(page.path, suite), params=query)
            assert shown.status_code == 200, (page.path, shown.text[:300])
            for data in resources:
                twin = twins.get(data)
                assert twin is not None, f"{page.path}: {data.__name__} has no JSON twin"
                model = drawn[data.__name__]
                assert not [name for name, f in type(model).model_fields.items()
                            if f.exclude], f"{type(model).__name__} keeps a field from JSON"
                served = client.get(_url(twin.path, suite), params=query)
                assert served.status_code == 200, (twin.path, served.text[:300])
                assert _body(served) == _body(model.json_response()), (page.path, twin.path)


def test_compare_and_its_twin_send_two_picked_runs_to_their_diff(suite: Suite) -> None:
    with TestClient(create_app(suite.db), follow_redirects=False) as client:
        picked = {"run": [suite.second, suite.first]}  # the older first, whatever the order
        page, twin = client.get("/compare", params=picked), client.get("/api/compare",
                                                                        params=picked)
        assert (page.status_code, twin.status_code) == (303, 303)
        assert page.headers["location"] == f"/diff/{suite.first}/{suite.second}"
        assert twin.headers["location"] == f"/api/diff/{suite.first}/{suite.second}"
        listing = client.get("/api/compare", params={"run": suite.first}).json()
        assert listing["picked"] == [suite.first] and listing["diff"] is None
        assert [r["run_id"] for r in listing["runs"]] == [suite.second, suite.first]
