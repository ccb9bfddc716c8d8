"""The query index readers use: segments, dead slots, queries by slot; never mutated after a
build."""

from __future__ import annotations

from typing import Any

import numpy as np

from cep.percolator.query import QueryId, RegisteredQuery
from cep.percolator.segment import _Segment

__all__ = ["_Snapshot"]


class _Snapshot:
    """What readers use: segments, dead slots, slot -> query. Never mutated after build."""

    __slots__ = ("segments", "dead", "by_slot", "ids", "ids_arr", "dead_mask")

    def __reduce__(self) -> tuple[Any, ...]:
        return _Snapshot, (self.segments, self.dead, self.by_slot)

    def __init__(
        self, segments: tuple[_Segment, ...], dead: frozenset[int],
        by_slot: dict[int, RegisteredQuery],
    ) -> None:
        self.segments = segments
        self.dead = dead
        self.by_slot = by_slot
        size = max(max(by_slot, default=-1), max(dead, default=-1)) + 1
        ids: list[QueryId] = [None] * size
        for slot in sorted(by_slot):
            qid = by_slot[slot].id
            # string ids copied side by side in slot order: results touch dozens per document
            ids[slot] = (qid + "\0")[:-1] if type(qid) is str else qid
        self.ids = ids
        self.ids_arr = np.empty(size, dtype=object)
        self.ids_arr[:] = ids
        self.dead_mask = np.zeros(size, dtype=bool)
        if dead:
            self.dead_mask[list(dead)] = True
