"""``evalledger view``: a read-only web viewer over a ledger, live while runs are written.

Pages are views over the same folds and queries the CLI uses (``projections``,
``app``), rendered by ``evalledger.render`` (whose templates the HTML report shares);
the app never writes. ``create_app`` builds the ASGI app; ``serve`` runs it with
hypercorn's trio worker.

The web stack is imported only when the app is asked for.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._app import create_app as create_app
    from ._hosts import allowed_name as allowed_name
    from ._serve import is_loopback as is_loopback
    from ._serve import serve as serve


def __getattr__(name: str) -> Any:
    if name == "create_app":
        from ._app import create_app

        return create_app
    if name in ("serve", "is_loopback"):
        from . import _serve

        return getattr(_serve, name)
    if name == "allowed_name":
        from ._hosts import allowed_name

        return allowed_name
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["allowed_name", "create_app", "is_loopback", "serve"]
