import os
from pathlib import Path

import pytest

os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")

REPO = Path(__file__).resolve().parents[1]
# The dataset files tests read (never the network): the 1000-row copies shipped in tests/data
# (made by tests/data/make_test_datasets.py, provenance in tests/data/SOURCES.md), or the directory
# BANDITSWEEP_TEST_DATASETS names. Tests assert the copies' exact row and class counts, so a
# directory named there must hold the same copies.
TEST_DATASETS = Path(os.environ.get("BANDITSWEEP_TEST_DATASETS", REPO / "tests" / "data"))


@pytest.fixture
def repo() -> Path:
    return REPO
