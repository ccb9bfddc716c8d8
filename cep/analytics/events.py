"""The events of one segment as columns: times, key ids, stream positions, prepared aggregate inputs."""

from __future__ import annotations

import numpy as np

from cep.analytics.kernels import _Kernel


class _Events:
    """The events of one segment: times, key ids, positions in the call's stream, prepared inputs."""

    __slots__ = ("ts", "kid", "pos", "inputs", "cols")

    def __init__(self, ts, kid, pos, inputs, cols):
        self.ts = ts
        self.kid = kid
        self.pos = pos
        self.inputs = inputs
        self.cols = cols

    def __len__(self) -> int:
        return len(self.ts)

    def take(self, sel: np.ndarray, kernels: list[_Kernel]) -> _Events:
        return _Events(
            self.ts[sel], self.kid[sel], self.pos[sel],
            [k.take(x, sel) for k, x in zip(kernels, self.inputs)],
            {c: v[sel] for c, v in self.cols.items()},
        )


def _cat_events(parts: list[_Events], kernels: list[_Kernel]) -> _Events:
    if len(parts) == 1:
        return parts[0]
    first = parts[0]
    return _Events(
        np.concatenate([e.ts for e in parts]), np.concatenate([e.kid for e in parts]),
        np.concatenate([e.pos for e in parts]),
        [k.concat([e.inputs[i] for e in parts]) for i, k in enumerate(kernels)],
        {c: _concat_cols([e.cols[c] for e in parts]) for c in first.cols},
    )


def _concat_cols(cols: list[np.ndarray]) -> np.ndarray:
    kinds = {c.dtype for c in cols}
    if len(kinds) > 1 and (any(k.kind == "O" for k in kinds) or len({k.kind for k in kinds}) > 1):
        return np.concatenate([c.astype(object) for c in cols])
    return np.concatenate(cols)


def _events_getstate(self):
    return (self.ts, self.kid, self.pos, self.inputs, self.cols)


def _events_setstate(self, st):
    self.ts, self.kid, self.pos, self.inputs, self.cols = st


_Events.__getstate__ = _events_getstate  # type: ignore[method-assign, assignment]
_Events.__setstate__ = _events_setstate  # type: ignore[attr-defined]
