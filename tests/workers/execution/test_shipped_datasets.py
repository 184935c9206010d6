"""The driver's dataset files for nodes that lack them (workers.execution.shipped_datasets), in this
process on the shared embedded Ray: what a trial actor on a node without the file does before its
trials run. tests/clusters/test_hosts.py runs it on separate hosts."""

import hashlib
import os
import tempfile
from types import SimpleNamespace

import pytest

from banditsweep.core.engine.trial import TrialSpec
from banditsweep.workers.execution.shipped_datasets import provide_datasets, ship_datasets

from paths import TEST_DATASETS


def jobs(*datasets):
    return [SimpleNamespace(spec=TrialSpec.create("linucb", {}, {"kind": "classification", "dataset": name}, 0, 50))
            for name in datasets] + [SimpleNamespace(spec=TrialSpec.create("linucb", {}, {"kind": "synthetic",
                                                                                         "function": "h1"}, 0, 50))]


@pytest.fixture
def node(tmp_path, monkeypatch, shared_ray):
    """This process as a trial actor on a node whose data folder is empty and whose temp folder is new."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "node-tmp"))
    (tmp_path / "node-tmp").mkdir()
    (tmp_path / "node-data").mkdir()
    monkeypatch.setenv("BANDITSWEEP_DATA", str(tmp_path / "node-data"))
    return tmp_path


def test_nothing_is_shipped_on_an_embedded_ray(shared_ray):
    assert ship_datasets(jobs("mushroom"), SimpleNamespace(data_dir=str(TEST_DATASETS)), None) == ()


def test_a_node_without_the_file_reads_the_drivers_copy(node):
    shipped = ship_datasets(jobs("mushroom", "shuttle", "mushroom"), SimpleNamespace(data_dir=str(TEST_DATASETS)),
                            "10.0.0.1:6379")
    assert [d.name for d in shipped] == ["mushroom", "shuttle"]
    original = (TEST_DATASETS / "mushroom.parquet").read_bytes()
    assert shipped[0].digest == hashlib.sha256(original).hexdigest()
    (node / "node-data" / "shuttle.parquet").write_bytes((TEST_DATASETS / "shuttle.parquet").read_bytes())

    provide_datasets([job.spec for job in jobs("mushroom")], shipped)
    links = os.environ["BANDITSWEEP_DATA"]
    assert links != str(node / "node-data") and links.startswith(str(node / "node-tmp"))
    assert (node / "node-data" / "mushroom.parquet").exists() is False      # the user's folder is left alone
    mushroom = os.path.realpath(os.path.join(links, "mushroom.parquet"))
    assert open(mushroom, "rb").read() == original and shipped[0].digest[:32] in mushroom
    # The node's own file where it has one.
    assert os.path.realpath(os.path.join(links, "shuttle.parquet")) == str(node / "node-data" / "shuttle.parquet")

    # Another actor of the node: the same links, the copy not fetched again.
    before = os.stat(mushroom).st_mtime_ns
    os.environ["BANDITSWEEP_DATA"] = str(node / "node-data")
    provide_datasets([job.spec for job in jobs("mushroom")], shipped)
    assert os.environ["BANDITSWEEP_DATA"] == links and os.stat(mushroom).st_mtime_ns == before

    # A copy whose bytes are not the driver's (a write cut short) is fetched again.
    with open(mushroom, "r+b") as copy:
        copy.truncate(100)
    os.environ["BANDITSWEEP_DATA"] = str(node / "node-data")
    provide_datasets([job.spec for job in jobs("mushroom")], shipped)
    assert open(mushroom, "rb").read() == original


def test_a_node_with_the_files_reads_its_own(node):
    shipped = ship_datasets(jobs("mushroom"), SimpleNamespace(data_dir=str(TEST_DATASETS)), "10.0.0.1:6379")
    (node / "node-data" / "mushroom.parquet").write_bytes(b"the node's own file, whatever it holds")
    provide_datasets([job.spec for job in jobs("mushroom")], shipped)
    assert os.environ["BANDITSWEEP_DATA"] == str(node / "node-data")
    assert list((node / "node-tmp").iterdir()) == []                         # nothing fetched
    # Trials without datasets ask nothing either.
    provide_datasets([job.spec for job in jobs()], shipped)
    assert os.environ["BANDITSWEEP_DATA"] == str(node / "node-data")
