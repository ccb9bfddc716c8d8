"""A Python worker's first backfill task runs as a process's start (spark_udf.backfill._worker_start)."""

from __future__ import annotations

import gc

import pytest

import spark_udf.backfill as backfill


def test_the_first_task_of_a_worker_runs_without_the_collector_until_its_first_output():
    seen: list[bool] = []

    def task(n: int):
        for i in range(n):
            seen.append(gc.isenabled())
            yield i

    old = backfill._STARTED
    frozen = gc.get_freeze_count()
    backfill._STARTED = False
    try:
        assert list(backfill._worker_start(task(3))) == [0, 1, 2]
        # off while the first output was made, on from the second; the start's objects frozen
        assert seen == [False, True, True] and gc.isenabled() and gc.get_freeze_count() > frozen
        seen.clear()
        assert list(backfill._worker_start(task(2))) == [0, 1]  # a later task: nothing changes
        assert seen == [True, True]
        backfill._STARTED = False
        assert list(backfill._worker_start(task(0))) == [] and gc.isenabled()  # a task with no output
        backfill._STARTED = False
        with pytest.raises(ValueError):  # a task that fails: the collector is on again all the same
            list(backfill._worker_start(_raises()))
        assert gc.isenabled()
    finally:
        backfill._STARTED = old
        gc.unfreeze()


def _raises():
    raise ValueError("bad input")
    yield  # (a generator)
