"""Classification bandits through the CLI: data directory resolution and early horizon errors."""

import yaml

from banditsweep.sweeps.cli import main

from conftest import TEST_DATASETS


def _spec(tmp_path, horizon, dataset="mushroom"):
    spec = {"sweep": "cls", "horizon": horizon, "seeds": 1,
            "environments": [{"kind": "classification", "dataset": dataset}],
            "algorithms": [{"name": "linucb"}]}
    (tmp_path / "cls.yaml").write_text(yaml.safe_dump(spec))


def test_horizon_beyond_the_dataset_exits_2_before_anything_runs(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("BANDITSWEEP_DATA", raising=False)  # `run --data-dir` sets it; restored afterwards
    _spec(tmp_path, 1001)  # the copies in tests/data hold 1000 rows
    assert main(["run", "cls.yaml", "--data-dir", str(TEST_DATASETS)]) == 2
    assert "horizon 1001 exceeds the 1000 rows of mushroom" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cls.yaml"]


def test_missing_dataset_offline_exits_2_naming_dataset_and_directory(tmp_path, monkeypatch, capsys):
    import banditsweep.sweeps.datasets as datasets

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
