"""The viewer in a real browser: Debian's Chromium, driven by Playwright's Python API.

Where Chromium or Playwright is missing a test skips with the reason; CI sets
``EVALLEDGER_REQUIRE_BROWSER=1`` and then it fails instead. The ``browser`` and ``page``
fixtures (conftest.py) are made with these.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from tests.waiting import PATIENCE

from ..needs import unavailable

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-quic",
        "--no-first-run", "--disable-background-networking", "--disable-component-update",
        "--disable-sync"]


def playwright_or_skip() -> Any:
    """Playwright's ``sync_playwright``; a skip (a failure in CI) saying what is missing
    where Playwright or Chromium is."""
    reason = None
    try:
        from playwright.sync_api import expect, sync_playwright
    except ImportError:
        reason = "Playwright is not installed (pip install -e '.[test]')"
    if reason is None and not Path(CHROMIUM).exists():
        reason = "no Chromium at /usr/bin/chromium (apt-get install -y chromium)"
    if reason is not None:
        unavailable("BROWSER", reason)
    expect.set_options(timeout=PATIENCE * 1000)
    return sync_playwright


def expect(target: Any) -> Any:
    from playwright.sync_api import expect as playwright_expect

    return playwright_expect(target)


def axe_violations(browser: Any, url: str, scheme: str = "light") -> list[str]:
    """What axe-core (from npm: tests/real_agents.py) finds wrong on the page at ``url``,
    a line per rule broken, the page in the ``scheme`` (light or dark) a browser asks
    for; it fails, or skips outside CI, where axe-core is missing.
    Injected through a context that bypasses the page's policy (the app's allows its own
    script only)."""
    from tests.real_agents import axe_script

    script = axe_script()
    if not script.exists():
        unavailable("BROWSER", f"axe-core is not installed ({script}): "
                               "python -m tests.real_agents install")
    context = browser.new_context(viewport={"width": 1400, "height": 900}, bypass_csp=True,
                                  color_scheme=scheme)
    try:
        page = context.new_page()
        page.goto(url)
        page.add_script_tag(path=str(script))
        found: list[str] = page.evaluate("""async () => (await axe.run()).violations.map(
            v => `${v.id} (${v.impact}): ${v.nodes.map(n => n.target.join(" "))
                                               .slice(0, 5).join(", ")}`)""")
        return found
    finally:
        context.close()
