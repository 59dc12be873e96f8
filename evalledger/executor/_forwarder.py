"""The gateway's end inside a sandbox of ``network: gateway`` (docs/gateway.md): the
sandbox's only way out is this process, which listens on its own loopback's
``127.0.0.1:PORT`` and passes each connection to the gateway's unix socket, bound in
(and on a second port to the egress proxy's socket, with ``allow_domains``).

Run as ``python -I -S _forwarder.py SOCKET PORT [SOCKET PORT] -- COMMAND...`` inside the
sandbox (the runner's interpreter, its standard library bound read-only): it listens
first, then runs
the command as its child, serves until the command ends, and ends as it did (its exit
code, or the signal that killed it), so the attempt reads as the command's. Standard
library only: nothing of evalledger is importable in there.

A container has no interpreter of the runner's: there it runs on the host as
``_forwarder.py --netns /proc/PID/ns/net SOCKET PORT [SOCKET PORT]``, entering only the container's
network namespace (root may), and serves until it is ended.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import sys
import threading


def _pump(source: socket.socket, sink: socket.socket) -> None:
    with contextlib.suppress(OSError):  # either end gone: the other is told below
        while data := source.recv(65536):
            sink.sendall(data)
    for end, how in ((sink, socket.SHUT_WR), (source, socket.SHUT_RD)):
        with contextlib.suppress(OSError):
            end.shutdown(how)


def _serve(listener: socket.socket, path: str) -> None:
    while True:
        client, _ = listener.accept()
        upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            upstream.connect(path)
        except OSError:
            client.close()
            upstream.close()
            continue
        for source, sink in ((client, upstream), (upstream, client)):
            threading.Thread(target=_pump, args=(source, sink), daemon=True).start()


def _listen(routes: list[str]) -> list[tuple[socket.socket, str]]:
    """A listener on the loopback per ``SOCKET PORT`` pair, with its socket's path."""
    if not routes or len(routes) % 2:
        raise ValueError("routes: SOCKET PORT pairs")
    listening = []
    for path, port in zip(routes[::2], routes[1::2], strict=True):
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", int(port)))
        listener.listen(64)
        listening.append((listener, path))
    return listening


def _serve_all(listening: list[tuple[socket.socket, str]]) -> None:
    for listener, path in listening:
        threading.Thread(target=_serve, args=(listener, path), daemon=True).start()


def _in_namespace(netns: str, routes: list[str]) -> int:
    """Serve from inside another network namespace (a container's, ``/proc/PID/ns/net``):
    this process stays on the host's file system, where the gateway's socket is; says
    ``ready`` once it listens."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(netns, os.O_RDONLY)
    if libc.setns(fd, 0x40000000) != 0:  # CLONE_NEWNET
        print(f"cannot enter {netns}: {os.strerror(ctypes.get_errno())}", flush=True)
        return 1
    os.close(fd)
    listening = _listen(routes)
    print("ready", flush=True)
    _serve_all(listening)
    threading.Event().wait()  # until it is ended
    return 0


def main(argv: list[str]) -> int:
    if argv[:1] == ["--netns"] and len(argv) >= 4:
        return _in_namespace(argv[1], argv[2:])
    routes, command = (argv[:argv.index("--")], argv[argv.index("--") + 1:]
                       ) if "--" in argv else ([], [])
    if not command or not routes or len(routes) % 2:
        print("usage: _forwarder.py SOCKET PORT [SOCKET PORT] -- COMMAND...",
              file=sys.stderr)
        return 2
    listening = _listen(routes)  # before the command starts: its first call finds them
    child = os.fork()
    if child == 0:
        for listener, _ in listening:
            listener.close()
        try:
            os.execvp(command[0], command)
        except OSError as e:
            print(f"evalledger: cannot run {command[0]}: {e}", file=sys.stderr)
            os._exit(127)
    # This side holds no pipe of the command's: its output ends when the command's does.
    for fd in (0, 1, 2):
        os.close(fd)
    _serve_all(listening)
    for name in ("SIGTERM", "SIGINT", "SIGHUP"):  # passed on: the command decides
        signal.signal(getattr(signal, name), lambda number, _: os.kill(child, number))
    _, status = os.waitpid(child, 0)
    if os.WIFSIGNALED(status):
        number = os.WTERMSIG(status)
        signal.signal(number, signal.SIG_DFL)
        os.kill(os.getpid(), number)
    return os.waitstatus_to_exitcode(status)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
