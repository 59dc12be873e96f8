"""``evalledger view``: serve the read-only web viewer over the ledger."""

from __future__ import annotations

import errno
import secrets
import sys
from pathlib import Path

import click

from ._errors import UserError
from ._main import Settings, pass_settings


def _allowed_hosts(ctx: click.Context, param: click.Parameter,
                   values: tuple[str, ...]) -> tuple[str, ...]:
    from evalledger.viewer import allowed_name

    for value in values:
        try:
            allowed_name(value)
        except ValueError as e:
            raise click.BadParameter(str(e)) from None
    return values


@click.command()
@click.option("--ledger", "ledger_path", type=click.Path(path_type=Path),
              help="The ledger to show (default: the one `evalledger --ledger` names).")
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Where to listen. Any other host than loopback requires an access token, "
                   "printed in the URL.")
@click.option("--port", type=click.IntRange(min=0, max=65535), default=8765, show_default=True,
              help="The port (0: any free one).")
@click.option("--allow-host", "allow_hosts", multiple=True, metavar="NAME[:PORT]",
              callback=_allowed_hosts,
              help="Another name this machine is reached by (repeatable). The viewer answers "
                   "only requests whose Host is loopback, --host, the address they came to, "
                   "or such a name.")
@click.option("--open", "open_browser", is_flag=True, help="Open the viewer in a browser.")
@pass_settings
def view(settings: Settings, ledger_path: Path | None, host: str, port: int,
         allow_hosts: tuple[str, ...], open_browser: bool) -> None:
    """Serve a live web viewer of the ledger: runs, tasks, transcripts, diffs.

    Read-only: it never writes the ledger. Pages update as runs are written;
    `?at=SEQ` on a run page shows the run as it was at that event. Ctrl-C stops it.

    Example:

        evalledger view --open
    """
    from evalledger.ledger import Ledger
    from evalledger.viewer import is_loopback, serve

    path = ledger_path or settings.ledger_path
    with Ledger(path, read_only=True):  # a clear error now, not a broken page later
        pass
    token = None if is_loopback(host) else secrets.token_urlsafe(24)

    listening = False

    def announce(url: str) -> None:
        nonlocal listening
        listening = True
        click.echo(f"evalledger view: {path} at {url}", err=False)
        click.echo("Ctrl-C to stop", err=True)
        sys.stdout.flush()

    try:
        serve(path, host=host, port=port, token=token, allow_hosts=allow_hosts,
              open_browser=open_browser, announce=announce)
    except (OSError, ExceptionGroup) as e:  # trio's nursery delivers the bind error wrapped
        refused = _os_error(e)
        if refused is None or listening:  # not a failure to listen
            raise
        where = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        hint = ("; another program has that port: give another with --port N, or --port 0 "
                "for any free one" if refused.errno == errno.EADDRINUSE else "")
        raise UserError(f"cannot listen on {where}: {refused.strerror or refused}{hint}") from e


def _os_error(error: BaseException) -> OSError | None:
    """The OSError that stopped the server (binding its port), bare or wrapped."""
    if isinstance(error, BaseExceptionGroup):
        leaves = [_os_error(e) for e in error.exceptions]
        return leaves[0] if leaves and all(leaves) else None
    return error if isinstance(error, OSError) else None
