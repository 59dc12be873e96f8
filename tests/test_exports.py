"""The public surface: what ``__all__`` promises exists, and nothing public is left out.

In the spirit of trio's ``test_exports``: names are checked both as attributes and
through a real ``from module import name`` in a fresh namespace.
"""

from __future__ import annotations

import importlib
import inspect
import types

import pytest

import evalledger
import evalledger.ledger

PUBLIC_MODULES = [evalledger, evalledger.ledger]


def _cases() -> list[tuple[str, str]]:
    return [(module.__name__, name) for module in PUBLIC_MODULES for name in module.__all__]


@pytest.mark.parametrize("module", PUBLIC_MODULES, ids=lambda m: m.__name__)
def test_all_is_a_list_of_unique_strings(module: types.ModuleType) -> None:
    names = module.__all__
    assert isinstance(names, list | tuple)
    assert all(isinstance(name, str) for name in names)
    duplicates = sorted({name for name in names if names.count(name) > 1})
    assert not duplicates, f"{module.__name__}.__all__ repeats {duplicates}"


@pytest.mark.parametrize(("module_name", "name"), _cases())
def test_exported_name_exists_and_imports(module_name: str, name: str) -> None:
    module = importlib.import_module(module_name)
    assert hasattr(module, name), f"{module_name}.__all__ lists {name!r}, which is missing"
    namespace: dict[str, object] = {}
    exec(f"from {module_name} import {name}", namespace)
    assert namespace[name] is getattr(module, name)


@pytest.mark.parametrize("module", PUBLIC_MODULES, ids=lambda m: m.__name__)
def test_star_import_gives_exactly_all(module: types.ModuleType) -> None:
    namespace: dict[str, object] = {}
    exec(f"from {module.__name__} import *", namespace)
    namespace.pop("__builtins__", None)
    assert set(namespace) == set(module.__all__)


def _defined_in_package(obj: object) -> bool:
    if not (inspect.isclass(obj) or inspect.isfunction(obj)):
        return False
    return (getattr(obj, "__module__", None) or "").split(".")[0] == "evalledger"


def test_ledger_leaves_nothing_public_out_of_all() -> None:
    module = evalledger.ledger
    missing = sorted(
        name
        for name, obj in vars(module).items()
        if not name.startswith("_") and _defined_in_package(obj) and name not in module.__all__
    )
    assert not missing, f"public in evalledger.ledger but not in __all__: {missing}"


def test_ledger_exports_every_error_class() -> None:
    """Every LedgerError subclass a caller might catch is reachable from evalledger.ledger."""
    from evalledger.ledger import _errors

    errors = {
        name
        for name, obj in vars(_errors).items()
        if inspect.isclass(obj) and issubclass(obj, evalledger.ledger.LedgerError)
    }
    assert errors <= set(evalledger.ledger.__all__)
    for name in errors:
        assert getattr(evalledger.ledger, name) is getattr(_errors, name)


def test_version_is_a_string() -> None:
    assert isinstance(evalledger.__version__, str)
    assert evalledger.__version__
