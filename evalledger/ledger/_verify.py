"""Integrity check of a whole ledger: hash chain, seq gaps, payloads, triggers, schema.

``verify`` never stops at the first problem of a kind it can keep counting: an
auditor wants to know the first broken link *and* how much is wrong. Lists are
capped so a badly damaged file still gives a short report.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from ._chain import GENESIS, link_hash
from ._errors import LedgerError
from ._events import decode_row
from ._schema import SCHEMA_VERSION, TRIGGERS
from ._store import Ledger, _first_error

MAX_LISTED = 20


@dataclass
class VerifyReport:
    """What ``verify`` found. ``ok`` is true only when every check passed."""

    path: str
    schema_version: int
    events: int = 0
    last_hash: str = GENESIS
    broken_links: list[int] = field(default_factory=list)
    gaps: list[tuple[int, int]] = field(default_factory=list)
    invalid_payloads: list[tuple[int, str]] = field(default_factory=list)
    missing_triggers: list[str] = field(default_factory=list)
    # What SQLite's own PRAGMA quick_check says is wrong with the file's pages and
    # indexes: damage the hash chain cannot see (an index's page, free space).
    storage: list[str] = field(default_factory=list)
    problems_total: int = 0

    @property
    def first_broken_seq(self) -> int | None:
        return self.broken_links[0] if self.broken_links else None

    @property
    def ok(self) -> bool:
        return self.problems_total == 0 and not self.missing_triggers

    def lines(self) -> list[str]:
        """The report as a person reads it: a verdict line, then one line per problem."""
        verdict = "OK" if self.ok else "FAILED"
        out = [
            f"{verdict}: {self.path}: {self.events} events, schema version "
            f"{self.schema_version} (this evalledger: {SCHEMA_VERSION}), last hash {self.last_hash}"
        ]
        if self.first_broken_seq is not None:
            out.append(
                f"hash chain broken at seq {self.first_broken_seq}: the row was changed after "
                "it was written"
            )
        out += [f"hash chain broken at seq {s}" for s in self.broken_links[1:]]
        out += [f"gap in seq: {a} is followed by {b}" for a, b in self.gaps]
        out += [f"seq {s}: payload does not validate: {why}" for s, why in self.invalid_payloads]
        out += [f"trigger {t} is missing: events can be edited" for t in self.missing_triggers]
        out += [f"SQLite integrity check: {s}" for s in self.storage]
        listed = (len(self.broken_links) + len(self.gaps) + len(self.invalid_payloads)
                  + len(self.storage))
        if self.problems_total > listed:
            out.append(f"... and {self.problems_total - listed} more problems")
        return out


def verify(ledger: Ledger) -> VerifyReport:
    """SQLite's ``quick_check`` of the file, then the hash chain over every row, and what
    the schema promises (gapless seqs, payloads that validate, the triggers)."""
    report = VerifyReport(path=str(ledger.path), schema_version=ledger.schema_version)
    _, triggers = ledger.query("SELECT name FROM sqlite_master WHERE type = 'trigger'")
    present = {r[0] for r in triggers}
    report.missing_triggers = [t for t in TRIGGERS if t not in present]

    def problem(target: list[Any], item: Any) -> None:
        report.problems_total += 1
        if len(target) < MAX_LISTED:
            target.append(item)

    try:
        _, checked = ledger.query("PRAGMA quick_check")
        damage = [str(r[0]) for r in checked if r[0] != "ok"]
    except LedgerError as e:
        damage = [str(e)]
    for item in damage:
        problem(report.storage, item)

    prev_seq, prev_hash = 0, GENESIS
    for row in ledger.rows():
        report.events += 1
        if row.seq != prev_seq + 1:
            problem(report.gaps, (prev_seq, row.seq))
        if link_hash(prev_hash, row) != row.hash:
            problem(report.broken_links, row.seq)
        try:
            decode_row(row)
        except ValidationError as e:
            problem(report.invalid_payloads, (row.seq, _first_error(e)))
        except ValueError as e:  # an opaque event whose payload is not JSON at all
            problem(report.invalid_payloads, (row.seq, str(e)))
        prev_seq, prev_hash = row.seq or 0, row.hash or ""
    report.last_hash = prev_hash
    return report
