"""Serving the viewer: hypercorn with its trio worker (the project's event loop).

Ctrl-C (or SIGTERM) stops it: open event streams are ended by the app's shutdown,
so the server does not wait out a grace period for browser tabs.
"""

from __future__ import annotations

import logging
import signal
import webbrowser
from collections.abc import Callable, Iterable
from functools import partial
from pathlib import Path
from typing import Any

import trio
from hypercorn.config import Config
from hypercorn.trio import serve as hypercorn_serve

from ._app import create_app
from ._hosts import is_loopback as is_loopback

LOOPBACK = "127.0.0.1"


def serve(
    ledger_path: str | Path,
    *,
    host: str = LOOPBACK,
    port: int = 8765,
    token: str | None = None,
    allow_hosts: Iterable[str] = (),
    open_browser: bool = False,
    announce: Callable[[str], None] = print,
) -> None:
    """Serve the viewer until Ctrl-C or SIGTERM.

    Args:
        host, port: where to listen (port 0: any free port; the URL says which).
        token: required on every request when given (see ``create_app``).
        allow_hosts: names the viewer is reached by besides ``host`` (and loopback);
            a request naming any other host is refused (see ``create_app``).
        announce: told the URL to open, once the server listens.
    """
    app = create_app(ledger_path, token=token, host=host, allow_hosts=allow_hosts)
    config = Config()
    config.bind = [f"[{host}]:{port}" if ":" in host else f"{host}:{port}"]
    config.graceful_timeout = 1.0
    config.accesslog = None
    config.errorlog = logging.getLogger("evalledger.viewer")
    trio.run(_serve, app, config, token, open_browser, announce)


async def _serve(app: Any, config: Config, token: str | None, open_browser: bool,
                 announce: Callable[[str], None]) -> None:
    stop = trio.Event()

    async def shutdown_trigger() -> None:
        await stop.wait()

    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with trio.open_nursery() as nursery:
            bound: list[str] = await nursery.start(partial(
                hypercorn_serve, app, config, shutdown_trigger=shutdown_trigger))
            url = bound[0].rstrip("/") + "/" + (f"?token={token}" if token else "")
            announce(url)
            if open_browser:
                await trio.to_thread.run_sync(webbrowser.open, url)
            async for _ in signals:
                stop.set()
                break
