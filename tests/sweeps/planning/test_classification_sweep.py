"""Classification bandits through the CLI: data directory resolution and early horizon errors."""

import os

import numpy as np
import pyarrow.parquet as pq
import yaml

from banditsweep.sweeps.cli.main import main

from paths import TEST_DATASETS


def _spec(tmp_path, horizon, dataset="mushroom"):
    spec = {"sweep": "cls", "horizon": horizon, "seeds": 1,
            "environments": [{"kind": "classification", "dataset": dataset}],
            "algorithms": [{"name": "linucb"}]}
    (tmp_path / "cls.yaml").write_text(yaml.safe_dump(spec))


def test_horizon_beyond_the_dataset_exits_2_before_anything_runs(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("BANDITSWEEP_DATA", raising=False)
    _spec(tmp_path, 1001)  # the copies in tests/data hold 1000 rows
    assert main(["run", "cls.yaml", "--data-dir", str(TEST_DATASETS)]) == 2
    assert "horizon 1001 exceeds the 1000 rows of mushroom" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cls.yaml"]


def test_missing_dataset_offline_exits_2_naming_dataset_and_directory(tmp_path, monkeypatch, capsys):
    import banditsweep.sweeps.planning.datasets as datasets

    def offline(*args, **kwargs):
        raise OSError("network is unreachable")

    monkeypatch.setattr(datasets, "_fetch_openml", offline)
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("BANDITSWEEP_DATA", raising=False)
    empty = tmp_path / "data"
    empty.mkdir()
    _spec(tmp_path, 100, dataset="shuttle")
    assert main(["run", "cls.yaml", "--data-dir", str(empty)]) == 2
    err = capsys.readouterr().err
    assert "shuttle" in err and str(empty) in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cls.yaml", "data"]
    assert list(empty.iterdir()) == []


def test_the_data_directory_reaches_the_trial_actors_as_a_value(tmp_path, monkeypatch, shared_ray):
    """``--data-dir`` names a copy of mushroom with its rows in reverse order. The trials read the
    copy although the shared Ray's workers have the test copies' directory in their environment, and
    the driver's environment is left as it was."""
    import banditsweep
    from banditsweep.core.engine.trial import TrialSpec, run_trial

    data = tmp_path / "data"
    data.mkdir()
    table = pq.read_table(TEST_DATASETS / "mushroom.parquet")
    pq.write_table(table.take(np.arange(table.num_rows)[::-1]), data / "mushroom.parquet")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("BANDITSWEEP_DATA", raising=False)
    _spec(tmp_path, 50)
    before = dict(os.environ)
    assert main(["run", "cls.yaml", "--data-dir", str(data), "--results", str(tmp_path / "results"),
                 "--sink", "none", "--no-progress"]) == 0
    assert dict(os.environ) == before
    trials, _ = banditsweep.load(tmp_path / "results", "cls")
    spec = TrialSpec.create("linucb", {}, {"kind": "classification", "dataset": "mushroom"}, 0, 50)
    monkeypatch.setenv("BANDITSWEEP_DATA", str(data))
    on_the_copy = run_trial(spec).final_regret
    monkeypatch.setenv("BANDITSWEEP_DATA", str(TEST_DATASETS))
    assert run_trial(spec).final_regret != on_the_copy   # else the test could not tell them apart
    assert trials["final_regret"].tolist() == [on_the_copy]

