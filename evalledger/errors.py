"""Errors any layer may raise for the CLI to turn into one line and exit code 2."""

from __future__ import annotations


class Unavailable(Exception):
    """Something a command needs is not there: Ray not installed, a cluster that does
    not answer. The message says what to do about it."""


__all__ = ["Unavailable"]
