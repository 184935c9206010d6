"""The two results tables as a researcher reads them: the same dtypes for the trial's names in both
(they join in pandas, polars and DuckDB), docs/results.md's polars and DuckDB recipe run as written, and
``banditsweep.load`` of a part (algorithms, environments, rounds, columns) equal to that part of the
whole, with a clear error for a name the sweep does not hold."""

import re

import numpy as np
import pandas as pd
import pytest
from paths import REPO
from store_builders import write_spec_results

import banditsweep
from banditsweep.sweeps.spec.model import parse_sweep
from banditsweep.workers import InputError

HORIZON = 30


SPEC = {"sweep": "quickstart", "horizon": HORIZON, "seeds": 2,
        "environments": [{"kind": "synthetic", "function": "h1"},
                         {"kind": "synthetic", "function": "h3", "arms": 4, "dim": 20}],
        "algorithms": [{"name": "linucb", "label": "LinUCB"}, {"name": "random", "label": "Random"}]}


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    """A sweep of two algorithms on two environments, 2 seeds, final regret 10 + the trial's index
    in the plan; the results root."""
    folder = tmp_path_factory.mktemp("results")
    index = {trial.trial_id: number for number, trial in enumerate(parse_sweep(SPEC).trials)}
    write_spec_results(folder, SPEC, lambda trial: 10.0 + index[trial.trial_id])
    return folder / "results"


def test_the_names_have_one_dtype_in_both_tables_and_join(results):
    trials, curves = banditsweep.load(results, "quickstart")
    for name in ("algorithm", "label", "environment"):
        assert isinstance(trials[name].dtype, pd.CategoricalDtype), name
        assert isinstance(curves[name].dtype, pd.CategoricalDtype), name
    joined = curves[curves["t"] == HORIZON].merge(trials[["trial_id", "label", "final_regret"]],
                                                  on=["trial_id", "label"])
    assert len(joined) == 8 and np.allclose(joined["cum_regret"], joined["final_regret"])


def test_the_docs_polars_and_duckdb_recipe_runs_as_written(results):
    page = (REPO / "docs" / "results.md").read_text()
    block = next(code for code in re.findall(r"```python\n(.*?)```", page, re.S) if "import os, duckdb, polars" in code)
    code = block.replace('os.path.expanduser("~/banditsweep-results/quickstart")', repr(str(results / "quickstart")))
    assert code != block
    names: dict = {}
    exec(compile(code, "docs/results.md", "exec"), names)   # the project's own docs, not user data
    final, by_label = names["final"], names["by_label"].set_index("label")
    assert final.height == 8 and sorted(final["final_regret"].to_list()) == [10.0 + i for i in range(8)]
    # LinUCB's trials are the first four of the plan (10..13), Random's the next four (14..17).
    assert by_label.loc["LinUCB", "mean_regret"] == pytest.approx(11.5)
    assert by_label.loc["Random", "mean_regret"] == pytest.approx(15.5)


def test_load_of_a_part_equals_that_part_of_the_whole(results):
    trials, curves = banditsweep.load(results, "quickstart")
    part_trials, part = banditsweep.load(results, "quickstart", algorithms=["LinUCB"], environments=["h1"],
                                         rounds=(10, 20), columns=["cum_regret"])
    assert set(part_trials["label"]) == {"LinUCB"} and len(part_trials) == 2
    assert list(part.columns) == ["trial_id", "t", "algorithm", "label", "environment", "seed", "cum_regret"]
    whole = curves[(curves["label"] == "LinUCB") & (curves["environment"] == "synthetic:h1")
                   & curves["t"].between(10, 20)]
    key = ["trial_id", "t"]
    assert np.array_equal(part.sort_values(key)["cum_regret"].to_numpy(), whole.sort_values(key)["cum_regret"].to_numpy())
    _, rounds = banditsweep.load(results, "quickstart", rounds=[1, HORIZON], algorithms="linucb")
    assert sorted(set(rounds["t"])) == [1, HORIZON] and len(rounds) == 2 * 4
    with pytest.raises(InputError, match="algorithms: 'LinUCBB' names no trial of this sweep; it holds LinUCB"):
        banditsweep.load(results, "quickstart", algorithms=["LinUCBB"])
    with pytest.raises(InputError, match="columns: 'regrets' is not a curves column"):
        banditsweep.load(results, "quickstart", columns=["regrets"])
