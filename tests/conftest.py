"""Shared test fixtures: the public data sets beside the repo, seeded randomness."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SHARED_DATA = REPO.parent / "shared" / "data"
FIXTURES = Path(__file__).resolve().parent / "fixtures"


@pytest.fixture
def shared_data() -> Path:
    """Folder of the real public data sets; the test is skipped when it is absent."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"{SHARED_DATA} is absent (real data sets live beside the repo)")
    return SHARED_DATA
