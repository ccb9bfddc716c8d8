"""A registered query: its id, text, metadata, analysed tree and index plan."""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from cep.percolator.presearcher import QueryPlan
from patterns.lucene import Node

__all__ = ["QueryId", "RegisteredQuery"]


QueryId = Hashable


@dataclass(frozen=True)
class RegisteredQuery:
    """A registered query: id, text, metadata, analysed tree and index plan."""

    id: QueryId
    query: str
    metadata: Mapping[str, Any]
    node: Node
    plan: QueryPlan
    slot: int = 0

    def __reduce__(self) -> tuple[Any, ...]:
        # (metadata is a read-only view, which pickle cannot write: a saved index holds a dict)
        return _registered, (self.id, self.query, dict(self.metadata), self.node, self.plan,
                             self.slot)


def _registered(query_id: QueryId, query: str, metadata: dict[str, Any], node: Node,
                plan: QueryPlan, slot: int) -> RegisteredQuery:
    return RegisteredQuery(query_id, query, MappingProxyType(metadata), node, plan, slot)
