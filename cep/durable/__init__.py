"""Durable embedded runs: follow a log directory, checkpoint offsets with the engine state, exactly-once output.

``cep run RULES --input DIR --state STATE --output OUT [--follow]`` is a log consumer:

* **Input.** A file, or a directory whose files are read in name order (names starting with a dot
  are ignored, so write ``.name.tmp`` and rename it to add a file). Only JSON lines. A line is
  consumed once its newline is written; a file's unterminated last line is taken only once the
  file is closed (a later file exists) or the run was told the input ends (``--finish``).
* **Batches** are the next ``--batch-size`` lines of one file, shorter at the end of a closed
  file, at the end of the input without ``--follow``, and (``--follow``) whenever less is there
  when the run looks: what has arrived is processed at once. Checkpoints fall on batch boundaries.
* **Rows leave after every batch**: written and flushed (not fsynced) before the next batch, on
  their own clock, not the checkpoint's.
* **Checkpoint.** One file ``STATE/checkpoint`` holds the consumer offsets, the engine snapshot,
  the rule text in force and the byte length of every output file, written together (temporary
  file, fsync, rename, fsync of the directory) every N lines or T seconds, after a reload, and
  at a clean stop. ``STATE/cuts`` records where each batch since began and ended, before its rows
  are written.
* **Exactly-once output.** Every row carries a deterministic ``_id``; at restart each output file
  is cut back to the length recorded in the checkpoint, and the input is replayed from the
  offsets recorded with it, in the batches recorded in ``STATE/cuts``: the rows written after the
  checkpoint come back byte for byte, so a reader that keeps its byte offset sees each row once.
  Standard output (``--output -``) cannot be cut back: there the rows after the checkpoint are
  written again (at-least-once, the same ``_id``s).
* **Signals.** SIGINT / SIGTERM: finish the batch, checkpoint, exit 0. SIGHUP: reload the rules
  (as ``--watch-rules`` does when the rule file's modification time changes, or the content of a
  search rule's ``queries_file``).

See docs/reliability.md for what is and is not guaranteed.

The package, one concept per module:

* ``config``: :class:`DurableConfig` and how ``cep run`` arguments make one;
* ``source``: :class:`LogSource`, the input read in batches from recorded offsets, and the wait for more;
* ``sinks``: the output files (cut back at restart) and standard output;
* ``cuts``: the cut log ``STATE/cuts``;
* ``checkpoint``: the checkpoint file, its background writer and the state lock;
* ``run``: :func:`run_durable`, the run loop;
* ``errors``: :class:`DurableError` and :class:`StateMismatch`.
"""

from __future__ import annotations

from cep.durable.checkpoint import Checkpoint, read_checkpoint, write_checkpoint
from cep.durable.config import DurableConfig, config_from_args, limits_from_args
from cep.durable.errors import DurableError, StateMismatch
from cep.durable.run import run_durable
from cep.durable.sinks import STDOUT, dumps_row, dumps_rows
from cep.durable.source import MAX_LINE_BYTES, LogSource

__all__ = [
    "DurableConfig",
    "DurableError",
    "StateMismatch",
    "LogSource",
    "Checkpoint",
    "read_checkpoint",
    "write_checkpoint",
    "run_durable",
    "config_from_args",
    "limits_from_args",
    "dumps_row",
    "dumps_rows",
    "MAX_LINE_BYTES",
    "STDOUT",
]

# the parts the reliability tests drive by hand (a run with a fake clock, the cut log, the writer)
from cep.durable.checkpoint import _CheckpointWriter as _CheckpointWriter  # noqa: E402
from cep.durable.cuts import _CutLog as _CutLog  # noqa: E402
from cep.durable.run import _Run as _Run  # noqa: E402
