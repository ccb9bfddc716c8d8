"""The atheris fuzzer is run by hand (it needs atheris); pytest does not import it."""

collect_ignore = ["fuzz_parsers.py"]
