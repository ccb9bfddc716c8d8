"""Test helpers: a Python without the engine, and a standalone Spark cluster on 127.0.0.1."""

from __future__ import annotations

import os
import re
import shutil
import signal
import site
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from spark_udf.shipping import ENGINE_PACKAGES

REPO = Path(__file__).resolve().parents[2]


def python_without_engine(folder: Path) -> Path:
    """An interpreter wrapper whose imports find the installed dependencies but not the engine.

    It runs this interpreter with ``-S`` (no site: no ``.pth`` file, so no editable install of
    the project) and ``PYTHONPATH`` set to a folder of links to every entry of this
    environment's site-packages except the engine's packages and their install records. Cheap
    (links, no copy, no download) and the same on any machine where the project is installed,
    editable or not. Spark's ``PYTHONPATH`` for the worker is replaced on purpose: that is how a
    cluster whose workers never saw the project looks.
    """
    lib = folder / "site"
    lib.mkdir(parents=True, exist_ok=True)
    skip = set(ENGINE_PACKAGES)
    for sp in site.getsitepackages():
        for entry in Path(sp).iterdir():
            name = entry.name
            if name in skip or name.startswith(("__editable__", "cep_engine")) or name.endswith(".pth"):
                continue
            link = lib / name
            if not link.exists():
                link.symlink_to(entry)
    wrapper = folder / "python"
    wrapper.write_text(f'#!/bin/sh\nPYTHONPATH="{lib}" exec "{sys.executable}" -S "$@"\n')
    wrapper.chmod(0o755)
    return wrapper


def java_or_skip() -> None:
    """Skip the test cleanly when no Java runtime is installed (Spark needs one)."""
    java_home = os.environ.get("JAVA_HOME")
    if not (java_home and (Path(java_home) / "bin" / "java").exists()) and shutil.which("java") is None:
        pytest.skip("Java is not installed (Spark needs Java 17)")


def _wait_for(log: Path, pattern: str, proc: subprocess.Popen, what: str, patience: float) -> re.Match[str]:
    """Poll ``log`` until ``pattern`` appears; fail with the log's tail if the process dies or time runs out."""
    end = time.monotonic() + patience
    while time.monotonic() < end:
        m = re.search(pattern, log.read_text(errors="replace"))
        if m:
            return m
        if proc.poll() is not None:
            break
        time.sleep(0.2)
    tail = "\n".join(log.read_text(errors="replace").splitlines()[-20:])
    raise AssertionError(f"the Spark {what} did not start (exit code {proc.poll()}):\n{tail}")


def _stop(proc: subprocess.Popen) -> None:
    """Stop a daemon and everything it started (its executors): its own process group."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
        except ProcessLookupError:
            pass
    try:  # executors the worker left behind, if any
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


@contextmanager
def standalone_cluster(folder: Path, cores: int = 1, memory: str = "1g",
                       patience: float = 180.0) -> Iterator[str]:
    """One master and one worker on 127.0.0.1 from the pyspark wheel's ``spark-class``; yields the master URL.

    Both run in process groups of their own, without the project on ``PYTHONPATH``, and are
    stopped (with the executors the worker started) when the block ends, whatever happens.
    """
    java_or_skip()
    import pyspark

    spark_home = Path(pyspark.__file__).resolve().parent
    spark_class = spark_home / "bin" / "spark-class"
    folder.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYSPARK_PYTHON")}
    env.update(SPARK_HOME=str(spark_home), SPARK_LOCAL_IP="127.0.0.1", SPARK_DAEMON_MEMORY="256m")
    procs: list[subprocess.Popen] = []

    def start(name: str, *args: str) -> tuple[subprocess.Popen, Path]:
        log = folder / f"{name}.log"
        with open(log, "wb") as out:
            proc = subprocess.Popen(["bash", str(spark_class), *args], stdout=out, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, env=env, cwd=folder, start_new_session=True)
        procs.append(proc)
        return proc, log

    try:
        master_proc, master_log = start("master", "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                                        "--port", "0", "--webui-port", "0")
        url = _wait_for(master_log, r"Starting Spark master at (spark://\S+)", master_proc, "master",
                        patience).group(1)
        worker_proc, worker_log = start("worker", "org.apache.spark.deploy.worker.Worker", url,
                                        "--host", "127.0.0.1", "--port", "0", "--webui-port", "0",
                                        "--cores", str(cores), "--memory", memory,
                                        "--work-dir", str(folder / "work"))
        _wait_for(worker_log, r"Successfully registered with master", worker_proc, "worker", patience)
        yield url
    finally:
        for proc in reversed(procs):
            _stop(proc)
