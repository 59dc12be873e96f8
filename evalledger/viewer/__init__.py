"""``evalledger view``: a read-only web viewer over a ledger, live while runs are written.

Pages are views over the same folds and queries the CLI uses (``projections``);
the app never writes. ``create_app`` builds the ASGI app; ``serve`` runs it with
hypercorn's trio worker; ``report_html`` renders a run as one self-contained
page (what ``evalledger report --format html`` writes).

The web stack is imported only when the app is asked for: writing an HTML report
at the end of a run needs Jinja2, not Starlette.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._app import create_app as create_app
    from ._serve import serve as serve

from ._report import report_html as report_html


def __getattr__(name: str) -> Any:
    if name == "create_app":
        from ._app import create_app

        return create_app
    if name == "serve":
        from ._serve import serve

        return serve
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["create_app", "report_html", "serve"]
