"""Package attributes imported on first use (PEP 562).

Every ``evalledger`` command imports the packages it names, and people feel start-up
time on every command: ``--version`` should not pay for pydantic models, nor
``runs`` for the executor. A package lists where each public name lives and hands
this module's ``__getattr__`` to Python.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any


def attributes(package: str, where: dict[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` that imports ``package + where[name]`` when ``name`` is
    first asked for, and keeps the value in the package (later lookups are plain)."""

    def __getattr__(name: str) -> Any:
        module = where.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module if module.startswith("evalledger")
                                                else f"{package}.{module}"), name)
        setattr(importlib.import_module(package), name, value)
        return value

    return __getattr__
