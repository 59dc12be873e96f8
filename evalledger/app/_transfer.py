"""``export``, ``import_events`` and ``merge``: runs carried between ledgers.

An export is written whole or not at all when it goes to a file; an events file is
taken only whole (checked before anything is appended); a merge appends whole batches.
Each refusal names the file and says what was done before it.
"""

from __future__ import annotations

import gzip
import os
import zlib
from collections.abc import Iterable
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from evalledger._files import atomic_file, same_file
from evalledger.errors import InvalidRequest, TransferFailed
from evalledger.ledger import Ledger, LedgerNotFound, NotALedger, verify_events
from evalledger.ledger._transfer import (
    MAX_LINE_BYTES,
    BadLine,
    Conflict,
    ExportFile,
    Readable,
    Trailer,
    Transfer,
    append_all,
    claims_here,
    export_lines,
    rows_of,
)

from ._callbacks import Callbacks
from ._repository import write_snapshot
from ._settings import open_ledger


@dataclass(frozen=True)
class ExportOutcome:
    """What ``export`` wrote: these runs' events, to ``output`` (None: a stream)."""

    run_ids: list[str]
    output: Path | None


@dataclass(frozen=True)
class TransferOutcome:
    """What one events file or other ledger added to the ledger."""

    source: str
    """The file or ledger, as it was named (bytes of it that are not UTF-8 escaped)."""
    read: int
    added: int
    """Events appended: those the ledger lacked."""
    runs: list[str]
    """The runs that gained events (each snapshotted)."""


def export(runs: Iterable[str], to: Path | BinaryIO, *, ledger: Path | str) -> ExportOutcome:
    """Write the runs' events as NDJSON, one event a line, then a trailer (how many
    events, their SHA-256): what ``import_events`` reads in another ledger.

    Args:
        runs: run ids, unique prefixes of them, or ``latest`` (each run once).
        to: a file (gzip when its name ends in .gz), written whole or not at all; or a
            binary stream, written as the lines come.

    Raises:
        InvalidRequest: ``to`` is the ledger itself.
        TransferFailed: the output cannot be written (nothing was, to a file).
    """
    if isinstance(to, Path) and same_file(to, Path(ledger)):
        raise InvalidRequest(f"-o {to} is the ledger itself; choose another file")
    with open_ledger(ledger, read_only=True) as source:
        run_ids = list(dict.fromkeys(source.resolve_run(spec) for spec in runs))
        # Closed before the ledger: a reader left open would try to close its cursor on
        # a closed database when collected, after the error was shown.
        with closing(export_lines(source, run_ids)) as lines:
            if isinstance(to, Path):
                _write_whole(to, lines)
                return ExportOutcome(run_ids, to)
            _write_stream(to, lines)
    return ExportOutcome(run_ids, None)


def _write_whole(path: Path, lines: Iterable[bytes]) -> None:
    """Write ``lines`` to ``path`` (gzip when it ends in .gz) whole or not at all
    (``atomic_file``): on any error ``path`` is left as it was."""
    try:
        with atomic_file(path) as raw:
            if path.suffix == ".gz":
                with gzip.GzipFile(filename=path.name, mode="wb", fileobj=raw) as packed:
                    packed.writelines(lines)
            else:
                raw.writelines(lines)
            raw.flush()
    except OSError as e:
        raise TransferFailed(f"cannot write {path}: {e.strerror or e}; nothing was "
                             "written") from e


def _write_stream(stream: BinaryIO, lines: Iterable[bytes]) -> None:
    try:
        for line in lines:
            stream.write(line)
        stream.flush()
    except BrokenPipeError:
        raise  # the reader left (`export ... | head`): not an error of the export
    except OSError as e:  # a full disk under `> file`
        name = getattr(stream, "name", None)
        where = name.strip("<>") if isinstance(name, str) else "the stream"
        raise TransferFailed(f"cannot write the export to {where}: {e.strerror or e}") from e


def import_events(file: Path, *, ledger: Path | str, max_line_bytes: int = MAX_LINE_BYTES,
                  callbacks: Callbacks | None = None) -> TransferOutcome:
    """Append the events of an export (from ``export``) that the ledger lacks.

    Events keep their ids: importing a file twice adds nothing. The file is taken only
    whole: it is checked against the ledger first, and refused, naming the line, before
    anything is appended. Each batch appended records where its events came from
    (``run.merged``).

    Raises:
        InvalidRequest: ``file`` is not a regular file (it is read twice).
        BadLine: a line that is not an event, an event of a run this ledger recorded
            itself, no trailer (cut short).
        Conflict: an event id this ledger holds with other content.
        TransferFailed: the file cannot be read (a truncated or damaged .gz).
    """
    if not file.is_file():
        raise InvalidRequest(f"{file} is not a regular file: an export is read twice")
    export_file = ExportFile(lambda: _open_binary(file), max_line_bytes=max_line_bytes)
    trailer = _checked(export_file, Path(ledger), file)
    with open_ledger(ledger) as into:
        try:
            done = append_all(into, export_file.rows(), source=_recorded(file),
                              source_ledger=trailer.ledger_id, refuse_local=True)
        except (BadLine, Conflict) as e:
            # Only a race (the file or the ledger changed since the check) gets here.
            raise type(e)(f"{file}: {e}; the events before it were imported, each "
                          "batch with its run.merged") from e
        except (OSError, EOFError, zlib.error) as e:
            raise TransferFailed(f"{file}: cannot be read: {e}") from e
        return _finish(into, done, _named(file), callbacks or Callbacks())


def _checked(export_file: ExportFile, ledger: Path, file: Path) -> Trailer:
    """The file checked whole against the ledger as it is, read-only (a ledger is made
    only for a file that is imported); its trailer."""
    try:
        reference: Ledger | None = Ledger(ledger, read_only=True)
    except (LedgerNotFound, NotALedger):
        reference = None  # nothing there to compare with (the import's own open says why)
    try:
        try:
            return export_file.check(reference)
        finally:
            if reference is not None:
                reference.close()
    except BadLine as e:
        raise BadLine(f"{file}: {e}; nothing was imported") from e
    except (OSError, EOFError, zlib.error) as e:  # a truncated or damaged .gz
        raise TransferFailed(f"{file}: cannot be read: {e}; nothing was imported") from e


def _open_binary(path: Path) -> Readable:
    """The file's bytes, decompressed when its name ends in ``.gz``."""
    if path.suffix == ".gz":
        return gzip.GzipFile(path, "rb")
    return path.open("rb")


def merge(others: Iterable[Path], *, ledger: Path | str,
          callbacks: Callbacks | None = None) -> list[TransferOutcome]:
    """Append every event of other ledgers that this one lacks, in their order.

    Events keep their ids (merging twice adds nothing) and are chained anew here; each
    batch appended records, per run that gained events, the other ledger's id and the
    seqs they had there (``run.merged``). Each other ledger's outcome is told
    (``callbacks.transferred``) once its events are in.

    Raises:
        InvalidRequest: one of ``others`` is the ledger itself.
        Conflict: an event id this ledger holds with other content (the batches before
            it were merged).
        TransferFailed: another ledger's events do not verify (nothing of it merged).
        LedgerTooNew: another ledger was written by a newer evalledger.
    """
    callbacks = callbacks or Callbacks()
    done: list[TransferOutcome] = []
    with open_ledger(ledger) as into:
        for other in others:
            if other.resolve() == into.path.resolve():
                raise InvalidRequest(f"{other} is the ledger itself: nothing to merge")
            # The rows are closed before the source: a reader left open would try to
            # close its cursor on a closed database when collected, after the error. One
            # read transaction: the rows merged are the rows verified.
            with (Ledger(other, read_only=True, untrusted=True) as source,
                  source.read_transaction(),
                  closing(rows_of(source)) as rows):
                _refuse_unverified(source, other)
                if (claim := claims_here(source, into)) is not None:
                    raise TransferFailed(f"{other}: {claim}; nothing of it was merged")
                try:
                    moved = append_all(into, rows, source=_recorded(other),
                                       source_ledger=source.ledger_id)
                except Conflict as e:
                    raise Conflict(f"{other}: {e}; the events before it were merged, each "
                                   "batch with its run.merged") from e
            done.append(_finish(into, moved, _named(other), callbacks))
    return done


def _recorded(path: Path) -> str:
    """The path as a run.merged records it: absolute, ``_named``."""
    return _named(path.resolve())


def _named(path: Path) -> str:
    """The path as text even when its name is not UTF-8 (a tarball's, an attachment's):
    its undecodable bytes escaped (``\\xff``). JSON and a UTF-8 stdout hold only text."""
    return os.fsencode(path).decode("utf-8", "backslashreplace")


def _refuse_unverified(source: Ledger, name: Path) -> None:
    """Refuse another ledger whose events ``verify`` does not accept: chained anew here,
    a changed row would verify, and a payload no fold can read would stay for good."""
    report = verify_events(source)
    if not report.ok:
        problem = report.lines()[1]
        raise TransferFailed(f"{name} does not verify ({problem}); nothing of it was "
                             f"merged: `evalledger --ledger {name} verify` lists every problem")


def _finish(ledger: Ledger, done: Transfer, name: str, callbacks: Callbacks) -> TransferOutcome:
    """Snapshot the runs that gained events (the finished ones) and say what happened."""
    for run_id in done.runs:
        write_snapshot(ledger, run_id)
    outcome = TransferOutcome(source=name, read=done.read, added=done.added,
                              runs=list(done.runs))
    callbacks.transferred(outcome)
    return outcome
