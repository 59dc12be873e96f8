"""The viewer tests' shared fixtures: a ledger made by real runs (``suite``), a new user's
first hour (``scenes``), and a real browser (``browser``, ``page``)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.waiting import PATIENCE

from . import scenes as scenes_module
from .browser import ARGS, CHROMIUM, playwright_or_skip
from .suites import Suite, build_suite


@pytest.fixture(scope="session")
def suite(tmp_path_factory: pytest.TempPathFactory) -> Suite:
    """Two runs of one small suite (``suites.py``), made once for the session."""
    return build_suite(tmp_path_factory.mktemp("viewer"))


@pytest.fixture(scope="session")
def scenes(tmp_path_factory: pytest.TempPathFactory) -> scenes_module.Scenes:
    """A new user's first hour (``scenes``): an interrupted and resumed agent, ANSI colour,
    an experiment of two models run twice, an old run imported last."""
    return scenes_module.build(tmp_path_factory.mktemp("scenes"))


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """One Chromium for the module (its start is most of a test's cost); each test gets
    a context of its own, which shares nothing with the others'."""
    sync_playwright = playwright_or_skip()
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            yield launched
        finally:
            launched.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1300, "height": 900})
    try:
        opened = context.new_page()
        opened.set_default_timeout(PATIENCE * 1000)
        errors: list[str] = []
        opened.on("pageerror", lambda error: errors.append(str(error)))
        opened.on("console", lambda message: errors.append(message.text)
                  if message.type == "error" else None)
        yield opened
        assert errors == [], errors  # no script error, no policy violation
    finally:
        context.close()
