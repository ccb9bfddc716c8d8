"""One line for a failed Spark job: what failed, its first cause, and what to do (never a traceback).

Spark reports a failure inside a Python worker as a driver-side exception whose text holds the
worker's traceback, the JVM's stack and the query plan. :func:`first_cause` finds the line
that names the error; :func:`describe_failure` adds what to do for the failures a user can fix
(a worker that cannot import the engine or a dependency, a worker Python that does not start
or differs from the driver's, a missing input path, a JVM that does not start, a checkpoint
that no longer fits the query).
"""

from __future__ import annotations

import re
import textwrap

__all__ = ["first_cause", "describe_failure", "check_master"]

MAX_LINE = 600

_OUR_ERRORS = r"(\w*(?:StateEncodingError|RuleChangedError|SparkStateError|StateVersionError): .*)"
_EXC_LINE = re.compile(r"^([A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt))(?:: (.*))?$")

_CHECKPOINT_SHAPE = ("sources in the checkpoint offsets", "without stateful operators but restarted with stateful")
_CHECKPOINT_HINT = (
    "; the query no longer has the shape its checkpoint recorded: named inputs (--input NAME=PATH) were "
    "added or removed, a stream's search rules gained or lost their only event time (with one they run in "
    "the stateful stage), or the checkpoint was written by an earlier cep whose search rules ran beside "
    "that stage (reading the source again): finish it with the rules and version that wrote it, or start "
    "a new checkpoint (the input is read again) or run a backfill first"
)

_MASTER = re.compile(
    r"local|local\[\s*(?:\d+|\*)\s*(?:,\s*\d+\s*)?\]|local-cluster\[\s*\d+\s*,\s*\d+\s*,\s*\d+\s*\]"
    r"|spark://\S+|k8s://\S+|yarn"
)


def check_master(master: str) -> str | None:
    """Why Spark would refuse ``master``, or None when it has one of the forms Spark accepts.

    Example:
        >>> [check_master(m) for m in ("local[*]", "local[2,3]", "spark://h:7077,h2:7077", "yarn")]
        [None, None, None, None]
        >>> check_master("sparkk://h:7077")
        "--master 'sparkk://h:7077': expected local, local[N], local[*], spark://HOST:PORT, yarn or k8s://https://HOST:PORT"
    """
    if _MASTER.fullmatch(master.strip()):
        return None
    return (f"--master {master!r}: expected local, local[N], local[*], spark://HOST:PORT, yarn or "
            "k8s://https://HOST:PORT")


def _python_error(text: str) -> str | None:
    """The exception line of the first Python traceback in ``text`` (its first cause)."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if "Traceback (most recent call last)" not in line:
            continue
        for nxt in lines[i + 1:]:
            if nxt[:1].isspace() or not nxt.strip():
                continue  # the frames and their source lines are indented
            m = _EXC_LINE.match(nxt.strip())
            if m:  # without the module path: PySparkRuntimeError, not pyspark.errors.exceptions.base.PySpark...
                return re.sub(r"^(?:[a-z_]\w*\.)+(?=\w+:)", "", nxt.strip())
            break
    return None


def _java_error(text: str) -> str:
    """The first line of a JVM error that says what went wrong, without Spark's wrappers."""
    m = re.search(r"most recent failure: Lost task [^\n]*?\): (.*\S)", text)  # the task's own exception
    if m:
        line = m.group(1)
    else:
        causes = [c.group(1) for c in re.finditer(r"^Caused by: (.*\S)\s*$", text, re.M)]
        body = re.sub(r"^An error occurred while calling [^\n]*\n: ", "", text.strip())
        line = causes[-1] if causes else (body.splitlines()[0] if body else "")
    line = re.sub(r"^(?:[a-z]\w*\.)+(\w+(?:Exception|Error)): ", r"\1: ", line)  # drop the Java package
    return re.sub(r"(?: SQLSTATE: \w+)+\s*$", "", line).strip()


def _worker_stderr(text: str) -> str | None:
    """What a Python worker that did not start printed (Spark quotes it, indented, after this header)."""
    m = re.search(r"Error from python worker:\n((?:[ \t]+.*\n?|\n)+?)PYTHONPATH was:", text)
    if not m:
        return None
    err = textwrap.dedent(m.group(1)).strip()
    line = _python_error(err) or next((x.strip() for x in err.splitlines() if x.strip()), "")
    return f"the Python worker did not start: {line or 'it printed nothing'}"


def first_cause(e: BaseException) -> str:
    """The one line of a Spark failure that names its first cause.

    Example:
        >>> first_cause(RuntimeError("failed: RuleChangedError: rule 'r': the pattern changed"))
        "RuleChangedError: rule 'r': the pattern changed"
        >>> first_cause(RuntimeError("An exception was thrown from the Python worker:\\nTraceback (most "
        ...     "recent call last):\\n  File \\"w.py\\", line 3, in f\\n    import x\\n"
        ...     "ModuleNotFoundError: No module named 'spark_udf'"))
        "ModuleNotFoundError: No module named 'spark_udf'"
        >>> first_cause(RuntimeError("[PATH_NOT_FOUND] Path does not exist: file:/in. SQLSTATE: 42K03"))
        '[PATH_NOT_FOUND] Path does not exist: file:/in.'
    """
    text = str(e)
    m = re.search(_OUR_ERRORS, text)
    line = m.group(1).strip() if m else (_python_error(text) or _worker_stderr(text) or _java_error(text))
    if not line:
        line = type(e).__name__
    if len(line) > MAX_LINE:
        line = line[: MAX_LINE - 1] + "…"
    if any(s in text for s in _CHECKPOINT_SHAPE):  # Spark's own words, not what to do here
        line += _CHECKPOINT_HINT
    return line


def _what_to_do(text: str, cause: str) -> str:
    from spark_udf.shipping import ENGINE_PACKAGES  # inside: cep loads spark_udf only to run a job

    m = re.search(r"No module named '([\w.]+)'", cause)
    if m:
        top = m.group(1).split(".")[0]
        if top in ENGINE_PACKAGES:
            return ("the executors' Python workers cannot import the engine: let cep ship it (--ship-engine; the "
                    "default unless --master is local) or install cep-engine into the Python that PYSPARK_PYTHON "
                    "names on every executor")
        return (f"the Python that Spark's workers run lacks {top!r}, a dependency of the engine: install the "
                "engine's dependencies there, or ship a packed virtualenv with --conf spark.archives=ENV.tar.gz#env "
                "and PYSPARK_PYTHON=./env/bin/python (docs/spark.md, 'Executors')")
    m = re.search(r'Cannot run program "([^"]+)"', text)
    if m:
        return (f"the executors cannot start the Python worker {m.group(1)!r}: set PYSPARK_PYTHON to an "
                "interpreter every executor has, with the engine's dependencies (docs/spark.md, 'Executors')")
    if "Error from python worker" in text:
        return ("set PYSPARK_PYTHON to an interpreter with the engine's dependencies on every executor (in local "
                "mode cep starts its own interpreter unless PYSPARK_PYTHON says otherwise)")
    if "PYTHON_VERSION_MISMATCH" in text:
        return ("the executors' Python is another minor version than this driver's: point PYSPARK_PYTHON at the "
                "same Python version on every executor")
    if "PATH_NOT_FOUND" in text or "Path does not exist" in text:
        return "check --input (a folder, a file or a glob)"
    if "JAVA_GATEWAY_EXITED" in text:
        return ("Spark's JVM did not start: Spark needs Java 17 (java on PATH, or JAVA_HOME); the lines above "
                "are the JVM's own")
    if "Python worker exited unexpectedly" in text or "crashed" in cause:
        return ("a Python worker died (often out of memory: raise spark.executor.memory or "
                "spark.executor.pyspark.memory, or raise --buckets so a call holds fewer keys); rerun with --verbose for "
                "Spark's log")
    if re.search(_OUR_ERRORS, text) or any(s in text for s in _CHECKPOINT_SHAPE):
        return ""  # our errors and the checkpoint hint say what to do themselves
    return "rerun with --verbose for Spark's log and the whole error"


def describe_failure(e: BaseException, what: str) -> str:
    """``"{what} failed: {first cause}; {what to do}"`` on one line.

    Example:
        >>> describe_failure(RuntimeError("Traceback (most recent call last):\\n  File \\"x\\", line 1\\n"
        ...     "ModuleNotFoundError: No module named 'pandas'"), "the arrival-order pass")[:91]
        "the arrival-order pass failed: ModuleNotFoundError: No module named 'pandas'; the Python th"
    """
    text = str(e)
    cause = first_cause(e)
    todo = _what_to_do(text, cause)
    return f"{what} failed: {cause}" + (f"; {todo}" if todo else "")
