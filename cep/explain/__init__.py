"""``cep explain``: why a rule did or did not match, row by row, through the engine's own code."""

from __future__ import annotations

from cep.explain.model import VERDICT_KINDS, ExplainedRow, ExplainError, Explanation, Verdict

__all__ = ["Verdict", "ExplainedRow", "Explanation", "VERDICT_KINDS", "ExplainError"]
