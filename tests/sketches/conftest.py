"""Fixtures for the sketch tests: a shared local SparkSession and the real data sets."""

from __future__ import annotations

import csv
import functools
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """One local Spark session for every Spark test (getOrCreate reuses a running one)."""
    pyspark_sql = pytest.importorskip("pyspark.sql")
    session = (
        pyspark_sql.SparkSession.builder.master("local[1]")
        .appName("sketches-tests")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.ui.enabled", "false")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session


@functools.cache
def _nasa_columns(path: Path) -> dict[str, list[str]]:
    hosts: list[str] = []
    urls: list[str] = []
    with open(path, encoding="utf-8", errors="replace") as f:
        for row in csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE):
            hosts.append(row["host"])
            urls.append(row["url"])
    return {"host": hosts, "url": urls}


@functools.cache
def _headline_words(path: Path) -> list[str]:
    words: list[str] = []
    with open(path, encoding="utf-8") as f:
        for row in csv.DictReader(f):
            words.extend(row["headline_text"].split())
    return words


@pytest.fixture
def nasa_log(shared_data: Path) -> dict[str, list[str]]:
    """Columns host and url of the NASA HTTP log of 1995-08-01 (read once per process)."""
    return _nasa_columns(shared_data / "nasa_http_1995-08-01.tsv")


@pytest.fixture
def headline_words(shared_data: Path) -> list[str]:
    """Every word of the ABC news headlines of 2003, in order (read once per process)."""
    return _headline_words(shared_data / "abcnews_headlines_2003.csv")
