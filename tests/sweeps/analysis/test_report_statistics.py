"""The report's statistics on a small stored result (docs/results/kernel_exact_vs_rls: 4 algorithms,
5 seeds): each cell's interval, and every pair compared by seed with Holm-adjusted p-values and the
seeds a comparison needs (values checked against scipy, computed here from the stored trials)."""

import shutil

import numpy as np
import pandas as pd
import pytest
from paths import REPO
from scipy import stats

from banditsweep.sweeps.cli.main import main

SPEC = REPO / "sweeps" / "kernel_exp3" / "exact_vs_rls.yaml"
EXACT, MVR, RANDOM = "Kernelized Exp3 (exact)", "RLS-Kernelized Exp3 (MVR)", "Random"


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    results = tmp_path_factory.mktemp("stored")
    shutil.copytree(REPO / "docs" / "results" / "kernel_exact_vs_rls", results / "kernel_exact_vs_rls")
    assert main(["report", str(SPEC), "--results", str(results), "--mlflow-uri",
                 f"sqlite:///{results}/mlflow.db"]) == 0
    trials = pd.read_parquet(results / "kernel_exact_vs_rls" / "trials")
    finals = trials.pivot_table(index="seed", columns="label", values="final_regret")
    return results / "kernel_exact_vs_rls" / "report", finals


def test_each_cell_has_its_interval_and_n(report):
    folder, finals = report
    cells = pd.read_csv(folder / "final_regret_ci.csv").set_index("algorithm")
    values = finals[EXACT].to_numpy()
    half = stats.t.ppf(0.975, 4) * values.std(ddof=1) / np.sqrt(5)
    assert cells.loc[EXACT, "n"] == 5 and cells.loc[EXACT, "ci_method"] == "t"
    assert cells.loc[EXACT, "ci_low"] == pytest.approx(values.mean() - half)
    assert cells.loc[EXACT, "ci_high"] == pytest.approx(values.mean() + half)
    text = (folder / "final_regret_ci.md").read_text()
    assert f"{values.mean():.1f} [{values.mean() - half:.1f}, {values.mean() + half:.1f}] (n = 5)" in text
    assert "a t-interval below 30 seeds" in text


def test_pairs_are_compared_by_seed_with_holm_and_seeds_needed(report):
    folder, finals = report
    pairs = pd.read_csv(folder / "pairs.csv")
    assert len(pairs) == 6 and set(pairs["test"]) == {"paired t"}
    row = pairs[pairs["a"].isin([EXACT, MVR]) & pairs["b"].isin([EXACT, MVR])].iloc[0]   # a, b in the spec's order
    test = stats.ttest_rel(finals[row["a"]], finals[row["b"]])
    assert row["difference"] == pytest.approx((finals[row["a"]] - finals[row["b"]]).mean())
    assert row["p"] == pytest.approx(test.pvalue)
    if row["ci_low"] < 0 < row["ci_high"]:
        assert row["verdict"] == f"cannot be told apart at n = 5 ({row['seeds_needed']})"
        assert row["seeds_needed"].endswith("seeds would (the difference may be 0)")
    else:
        assert row["verdict"].startswith(row["a"] if row["ci_high"] < 0 else row["b"])
    assert (row["p"] < 0.05) == (not row["ci_low"] < 0 < row["ci_high"])   # one test gives both
    # Holm over the environment's six pairs: the smallest p times 6, and never below a smaller one's.
    ordered = pairs.sort_values("p")
    assert ordered["p_holm"].iloc[0] == pytest.approx(min(1.0, 6 * ordered["p"].iloc[0]))
    assert (ordered["p_holm"].diff().dropna() >= -1e-12).all()
    beaten = pairs[pairs["b"] == RANDOM]
    assert (beaten["verdict"] == beaten["a"] + " lower").all()
    # One configuration per algorithm: nothing was chosen, so no seed flatters a choice.
    assert "Each cell has one configuration: no grid point was chosen" in (folder / "pairs.md").read_text()
    assert (folder / "pairs.tex").read_text().startswith("\\begin{table}")
