"""Where the suite's files are, for a test in any folder under tests/: the repository (the package
root), the tests folder and the folders of files the tests read. Test files import these names
(``from paths import REPO, PLUGINS``) instead of counting their own folder's parents, so that a test
reads the same files wherever it lives in the tree of folders by room.

pytest puts tests/ on ``sys.path`` (tests/conftest.py is there, and the folders below hold no
``__init__.py``), so the helper modules at tests/ root, this one included, import by their names."""

import os
from pathlib import Path

TESTS = Path(__file__).resolve().parent
REPO = TESTS.parent
# The test plugins (algorithms, environments, sinks with their own behaviour) that $BANDITSWEEP_PLUGINS names.
PLUGINS = TESTS / "plugins"
# 1000-row copies of the datasets (made by tests/data/make_test_datasets.py, provenance in
# tests/data/SOURCES.md).
DATA = TESTS / "data"
# Results an earlier release wrote (checkpoints, stores) that today's code must still read.
FIXTURES = TESTS / "fixtures"
# The arrays recorded before the round loop was unified, and the cases that made them (cases.py).
GOLDEN = TESTS / "golden"
# The dataset files tests read (never the network): the copies in DATA, or the directory
# BANDITSWEEP_TEST_DATASETS names. Tests assert the copies' exact row and class counts, so a
# directory named there must hold the same copies.
TEST_DATASETS = Path(os.environ.get("BANDITSWEEP_TEST_DATASETS", DATA))
