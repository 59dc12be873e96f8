"""One root: every error a user can act on derives from ``EvalledgerError``, whichever
layer raises it, so a caller (and the CLI's one boundary) catches one class."""

from __future__ import annotations

import pytest

import evalledger
from evalledger.errors import EvalledgerError
from evalledger.executor._sandbox import BuildFailed
from evalledger.importers.legacy import NotImportable
from evalledger.ledger import BadAnchor, LedgerError, RunConflict, RunNotFound
from evalledger.ledger._transfer import BadLine, Conflict
from evalledger.pricing import PricingConflict, PricingError
from evalledger.projections import ResumeRefused
from evalledger.suite import TaskLoadError


@pytest.mark.parametrize("error", [
    LedgerError, RunNotFound, RunConflict, BadAnchor, TaskLoadError, ResumeRefused,
    PricingError, PricingConflict, BadLine, Conflict, BuildFailed, NotImportable,
    evalledger.errors.Unavailable, evalledger.errors.InvalidRequest,
    evalledger.errors.NothingToRun, evalledger.errors.NothingToImport,
    evalledger.errors.TransferFailed,
], ids=lambda e: e.__name__)
def test_every_user_actionable_error_derives_from_the_one_root(error: type) -> None:
    assert issubclass(error, EvalledgerError)
    assert evalledger.EvalledgerError is EvalledgerError


def test_errors_callers_catch_as_value_errors_still_are() -> None:
    for error in (BadLine, Conflict, PricingError, BadAnchor):
        assert issubclass(error, ValueError)
