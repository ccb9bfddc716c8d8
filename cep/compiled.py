"""Whether the loops compiled with numba may be used: one switch for every compiled path.

numba is a dependency, but it is imported only when a compiled path is first needed (its import
and cache load cost about a second of CPU). ``CEP_NO_NUMBA`` set to anything but ``""`` or ``0``
turns every compiled path off for a process: the flat JSON-lines scanner (``cep.json_flat``),
the batch DFA (``cep.batch_dfa``), the lane path's loop (``cep.lanes``) and the percolator's
token loops (``cep.percolator.tokens``).
Each then takes its pure-Python or numpy path, which gives the same answers (each is tested both
ways) and is the reference the compiled path is tested against.
"""

from __future__ import annotations

import importlib.util
import os

__all__ = ["NO_NUMBA_ENV", "numba_allowed"]

NO_NUMBA_ENV = "CEP_NO_NUMBA"


def numba_allowed() -> bool:
    """numba is installed and ``CEP_NO_NUMBA`` does not turn it off (read at each call).

    Example:
        >>> import os
        >>> os.environ["CEP_NO_NUMBA"] = "1"
        >>> numba_allowed()
        False
        >>> del os.environ["CEP_NO_NUMBA"]
    """
    if os.environ.get(NO_NUMBA_ENV, "").strip() not in ("", "0"):
        return False
    return importlib.util.find_spec("numba") is not None
