"""Number types for values people write in YAML (task, experiment and pricing files)."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BeforeValidator


def _not_a_boolean(value: Any) -> Any:
    # YAML reads `yes` as True and pydantic would take True as 1: `timeout: yes`
    # must not become a one-second timeout, nor `input: yes` a price of $1.
    if isinstance(value, bool):
        raise ValueError("expected a number, not a boolean")
    return value


Number = Annotated[float, BeforeValidator(_not_a_boolean)]
Count = Annotated[int, BeforeValidator(_not_a_boolean)]
