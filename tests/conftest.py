import os
from pathlib import Path

import pytest

os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")

REPO = Path(__file__).resolve().parents[1]
# The dataset files tests read (never the network): ../shared/datasets beside the checkout, or
# BANDITSWEEP_TEST_DATASETS.
SHARED_DATASETS = Path(os.environ.get("BANDITSWEEP_TEST_DATASETS", REPO.parent / "shared" / "datasets"))


@pytest.fixture
def repo() -> Path:
    return REPO
