"""The atheris fuzzer is run by hand (it needs atheris); pytest does not import it."""

from tests.spark_udf.conftest import spark  # noqa: F401 - the shared Spark session, for the Spark tests here

collect_ignore = ["fuzz_parsers.py"]
