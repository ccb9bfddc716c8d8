"""The runtime: events and event time, keyed NFA execution, the embedded engine and the CLI."""

from cep.engine import Engine, EngineOutput
from cep.operator import PatternOperator

__all__ = ["Engine", "EngineOutput", "PatternOperator"]
