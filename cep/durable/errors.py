"""The errors of durable runs: a state directory that cannot be used, or one the command line disagrees with."""

from __future__ import annotations

from patterns.errors import CepError

__all__ = ["DurableError", "StateMismatch"]

class DurableError(CepError):
    """A state directory that cannot be used: locked, corrupt, or written by another version."""


class StateMismatch(DurableError):
    """The command line disagrees with what the state directory was written with."""
