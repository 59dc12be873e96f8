"""The viewer's shape (Datasette's): each resource has one data function returning a
typed model, which its page and its ``/api`` route render; the SQL over ``events`` is
the ledger's (``ledger/_page_queries.py``), not the viewer's."""

from __future__ import annotations

import typing
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.routing import Route

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
    assert len(api) == 9
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
