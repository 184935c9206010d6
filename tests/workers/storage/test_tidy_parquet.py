"""The Parquet results as an analysis reads them: typed columns, curves that name their trial,
few files, ``banditsweep.load``, a pyarrow.dataset read, and stores of the earlier layout."""

import json

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

import banditsweep
from banditsweep.workers.storage.record import FAILED, FINISHED
from banditsweep.workers.storage.store import CURVE_SCHEMA, MAX_CURVE_FILES, SweepStore, TrialsTable
from store_builders import H1, RECORDS, make_outcome, make_record, make_store


def test_every_parameter_setting_and_diagnostic_is_a_typed_column(tmp_path):
    store = make_store(tmp_path)
    trials = pd.read_parquet(store.trials_dir).set_index("trial_id")
    assert trials["nu"].dtype == np.float64 and trials.loc["a" * 20, "nu"] == 0.1 and pd.isna(trials.loc["c" * 20, "nu"])
    schema = pq.read_schema(store.trials_dir / "trials.parquet")
    assert schema.field("env_dim").type == pa.int64() and schema.field("env_noise").type == pa.float64()
    assert schema.field("env_kind").type == pa.string() and schema.field("env_domain").type == pa.string()
    assert schema.field("diag_update_seconds").type == pa.float64() and schema.field("diag_batch_size").type == pa.int64()
    assert schema.field("finished_at").type == pa.timestamp("us", tz="UTC")
    assert trials.loc["a" * 20, "env_function"] == "h1" and trials.loc["a" * 20, "env_noise"] == 0.1
    assert trials.loc["c" * 20, "env_kernel"] == "se" and trials.loc["c" * 20, "env_candidates"] == 20
    assert json.loads(trials.loc["c" * 20, "env_domain"]) == {"grid": [5, 5]} and pd.isna(trials.loc["a" * 20, "env_domain"])
    assert trials.loc["a" * 20, "diag_update_seconds"] == 1e-5 and pd.isna(trials.loc["d" * 20, "diag_update_seconds"])
    assert str(trials["finished_at"].dtype) == "datetime64[us, UTC]"
    assert trials.loc["a" * 20, "finished_at"] == pd.Timestamp("2023-11-14 22:13:20.25", tz="UTC")


def test_curves_name_their_trial_and_few_files_hold_them(tmp_path):
    store = make_store(tmp_path)
    files = list(store.curves_dir.glob("*.parquet"))
    assert len(files) == 1   # two groups, one compacted file
    schema = pq.read_schema(files[0])
    for name in ("algorithm", "label", "environment"):
        assert schema.field(name).type == pa.dictionary(pa.int32(), pa.string())
    assert schema.field("seed").type == pa.int64()
    curves = pd.read_parquet(store.curves_dir)
    assert isinstance(curves["label"].dtype, pd.CategoricalDtype)
    assert len(curves) == 9   # three finished trials x three rounds; the failed one has none
    rows = curves[curves["trial_id"] == "b" * 20].sort_values("t")
    assert rows[["label", "environment", "seed", "algorithm"]].astype(object).drop_duplicates().values.tolist() == \
        [["LinUCB", "synthetic:h1", 1, "linucb"]]
    assert rows["cum_regret"].tolist() == [1.0, 2.0, 6.0] and rows["regret"].tolist() == [1.0, 1.0, 4.0]

    # Each run leaves one file; past MAX_CURVE_FILES they are merged into one.
    for i in range(MAX_CURVE_FILES + 1):
        record = make_record(f"{i:020d}", "LinTS", "synthetic:h1", H1, i, {"nu": 1.0}, final=float(i))
        store.write_outcomes([make_outcome(record)])
        store.compact()
        assert 1 <= len(list(store.curves_dir.glob("*.parquet"))) <= MAX_CURVE_FILES
    assert len(store.read_curves()) == 3 * (3 + MAX_CURVE_FILES + 1)


def test_load_returns_both_tables_ready_for_pandas(tmp_path):
    make_store(tmp_path)
    trials, curves = banditsweep.load(tmp_path / "results", "s")
    assert len(trials) == 4 and set(trials["status"]) == {FINISHED, FAILED}
    assert sorted(curves["trial_id"].unique()) == ["a" * 20, "b" * 20, "c" * 20]
    mean = curves[curves["t"] == 3].groupby(["label", "environment"], observed=True)["cum_regret"].mean()
    assert mean.to_dict() == {("LinUCB", "synthetic:h1"): 5.0, ("Random", "kernel:se"): 9.0}
    assert curves["seed"].dtype == np.int64 and isinstance(curves["environment"].dtype, pd.CategoricalDtype)
    # The sweep folder itself, and a clear error for a sweep that is not there.
    same_trials, same_curves = banditsweep.load(str(tmp_path / "results" / "s"))
    pd.testing.assert_frame_equal(same_trials, trials)
    assert len(same_curves) == len(curves)
    with pytest.raises(FileNotFoundError, match=r"no sweep results here .*holds the sweeps s"):
        banditsweep.load(tmp_path / "results", "quickstart")


def test_pyarrow_dataset_reads_the_curves_and_the_sweep_folder_cannot_mix_the_tables(tmp_path):
    store = make_store(tmp_path)
    with store.exclusive():   # what every `run` holds: it writes the folder's README.txt
        pass
    table = ds.dataset(store.curves_dir).to_table(
        filter=(ds.field("label") == "LinUCB") & (ds.field("t") == 3), columns=["seed", "cum_regret"])
    assert sorted(table.to_pylist(), key=lambda r: r["seed"]) == [{"seed": 0, "cum_regret": 4.0},
                                                                  {"seed": 1, "cum_regret": 6.0}]
    assert ds.dataset(store.trials_dir).to_table().num_rows == 4
    readme = (store.root / "README.txt").read_text()
    assert "banditsweep.load(" in readme and str(store.root.parent) in readme
    with pytest.raises(pa.ArrowInvalid, match="README.txt"):
        pd.read_parquet(store.root)
    with pytest.raises(pa.ArrowInvalid, match="README.txt"):
        ds.dataset(store.root).to_table()


def test_stores_of_the_earlier_layout_are_read_and_upgraded(tmp_path):
    """Curves without their trials' names and a trials table with settings as JSON text only, as
    earlier versions wrote them: `load` fills both in, and the next compaction rewrites the curves."""
    store = make_store(tmp_path)
    for path in store.curves_dir.glob("*.parquet"):   # named without a checksum, as they were then
        table = pq.read_table(path)
        pq.write_table(table.drop_columns(["algorithm", "label", "environment", "seed"]),
                       path.with_name(path.name.rsplit("-", 1)[0] + ".parquet"))
        path.unlink()
    path = store.trials_dir / "trials.parquet"
    table = pq.read_table(path)
    old = [n for n in table.column_names if n.startswith(("env_", "diag_"))]
    pq.write_table(table.drop_columns(old).replace_schema_metadata(None), path)

    trials, curves = banditsweep.load(tmp_path / "results", "s")
    trials = trials.set_index("trial_id")
    assert trials.loc["a" * 20, "env_function"] == "h1" and trials.loc["c" * 20, "env_candidates"] == 20
    assert trials.loc["a" * 20, "diag_update_seconds"] == 1e-5
    rows = curves[curves["trial_id"] == "c" * 20]
    assert set(rows["label"]) == {"Random"} and set(rows["seed"]) == {0} and len(rows) == 3
    assert isinstance(curves["label"].dtype, pd.CategoricalDtype)

    store.compact()
    files = list(store.curves_dir.glob("*.parquet"))
    assert len(files) == 1 and pq.read_schema(files[0]).names == CURVE_SCHEMA.names
    raw = pd.read_parquet(store.curves_dir)
    assert set(raw.loc[raw["trial_id"] == "b" * 20, "seed"]) == {1}


def test_the_docs_analysis_snippets_run(tmp_path, monkeypatch, repo):
    """The code of docs/results.md's "Analysing the Parquet results", on a store where `~` points."""
    monkeypatch.setenv("HOME", str(tmp_path))
    store = SweepStore.for_sweep(tmp_path / "banditsweep-results", "quickstart")
    store.write_outcomes([make_outcome(r) for r in RECORDS])
    TrialsTable(store).flush()
    page = (repo / "docs" / "results.md").read_text()
    section = page.split("## Analysing the Parquet results", 1)[1].split("\n## ", 1)[0]
    blocks = [block.split("```", 1)[0] for block in section.split("```python\n")[1:]]
    assert len(blocks) == 4   # load and compare, the polars and DuckDB recipe, pyarrow alone
    names: dict = {}
    for block in blocks:
        exec(compile(block, "docs/results.md", "exec"), names)
    best = names["best"].set_index(["label", "environment"])
    assert best.loc[("LinUCB", "synthetic:h1"), "mean"] == 5.0 and best.loc[("LinUCB", "synthetic:h1"), "count"] == 2
    assert best.loc[("Random", "kernel:se"), "mean"] == 9.0
    assert list(names["h3"]["trial_id"]) == [] and len(names["trials"]) == 4
    assert list(names["last"].columns) == ["label", "environment", "seed", "cum_regret"]
    # compare: LinUCB's two seeds (4, 6) give mean 5 with a t-interval; the two algorithms share no
    # environment, so no pair is judged, and one environment each gives no across-environment table.
    cells = names["stats"].cells.set_index(["algorithm", "environment"])
    linucb = cells.loc[("LinUCB", "synthetic:h1")]
    assert linucb["mean"] == pytest.approx(5.0) and linucb["n"] == 2
    assert linucb["ci_low"] < 5.0 < linucb["ci_high"]
    assert linucb["ci_high"] - 5.0 == pytest.approx(12.706, rel=1e-3)   # t(0.975, 1) x std sqrt(2) / sqrt(2)
    assert names["stats"].pairs.empty and names["stats"].across is None
