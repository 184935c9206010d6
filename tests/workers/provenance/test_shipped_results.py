"""The results shipped in docs/results read as computed by today's code (``banditsweep.status``), with
no re-stamp after a module moves: the code digest is of content, and the records stamped before it
was are read through the table made on the tree that stamped them (workers.provenance.legacy_identity).

Each folder's trials of other code are the ones docs/reproduction.md names: Mushroom at T = 8000's
NeuralRBMLE-GA trials (not re-checked on the code that followed them). The kernel folders were run
again under core.engine.ties' rule and are all today's code's, each read with the --set and --only
that docs/reproduction.md gives it (kernel_table3 holds two cuts of one spec).

The failed trials are the ones the doc names: GA's trials stopped by the NaN guard on Shuttle at
nu = 1 (one of the reproduction, seven of the dataset sensitivity). Nothing is running or pending."""

import shutil

import pytest
from paths import REPO

import banditsweep

RESULTS = REPO / "docs" / "results"

# folder -> (spec, --set values, trials of other code by label)
SHIPPED = {
    "kernel_exact_vs_rls": ("sweeps/kernel_exp3/exact_vs_rls.yaml", None, {}),
    "kernel_exploration": ("sweeps/kernel_exp3/exploration.yaml", ["seeds=5"], {}),
    "kernel_lower_bound": ("sweeps/kernel_exp3/lower_bound.yaml", ["seeds=5"], {}),
    "kernel_sampler": ("sweeps/kernel_exp3/sampler.yaml", ["seeds=5"], {}),
    "kernel_tuning": ("sweeps/kernel_exp3/tuning.yaml", ["seeds=3"], {}),
    "neural_fig2_likelihoods_cpu": ("sweeps/neural_rbmle/fig2_likelihoods_cpu.yaml", None, {}),
    "neural_fig3_alpha_cpu": ("sweeps/neural_rbmle/fig3_alpha_cpu.yaml", None, {}),
    "neural_mushroom_8000": ("sweeps/neural_rbmle/mushroom_8000.yaml", None, {"NeuralRBMLE-GA": 3}),
    "neural_reproduction_cpu": ("sweeps/neural_rbmle/reproduction_cpu.yaml", None, {}),
    "neural_sensitivity": ("sweeps/neural_rbmle/sensitivity.yaml", None, {}),
    "neural_sensitivity_baselines": ("sweeps/neural_rbmle/sensitivity_baselines.yaml", None, {}),
    "neural_sensitivity_datasets": ("sweeps/neural_rbmle/sensitivity_datasets.yaml", None, {}),
    "neural_sensitivity_long": ("sweeps/neural_rbmle/sensitivity_long.yaml", None, {}),
    "neural_table3_timing_cpu": ("sweeps/neural_rbmle/table3_timing_cpu.yaml", None, {}),
}
# folder -> failed trials by label (the NaN guard's, docs/reproduction.md)
FAILED = {
    "neural_reproduction_cpu": {"NeuralRBMLE-GA": 1},
    "neural_sensitivity_datasets": {"GA mean lr=0.001 J=100 init=paper": 1, "GA mean lr=0.01 J=20 init=paper": 3,
                                    "GA sum lr=0.001 J=100 init=paper": 3},
}
# kernel_table3's cuts: settings 1-2 at T = 1000, 5 seeds; settings 3-4 at T = 200, 3 seeds, learners
# that scale to |X| = 10^4 and Random.
TABLE3 = {
    "settings 1-2": (["seeds=5"], ["setting=1,2"], 120),
    "settings 3-4": (["horizon=200", "seeds=3"], ["setting=3,4", "algorithm=random,apg_exp3,rls_kernel_exp3"], 54),
}


@pytest.mark.parametrize("folder", sorted(SHIPPED))
def test_a_shipped_folder_reads_as_todays_code(folder, tmp_path):
    spec, overrides, stale = SHIPPED[folder]
    shutil.copytree(RESULTS / folder, tmp_path / folder)   # status may set damaged files aside: on a copy
    status = banditsweep.status(str(REPO / spec), results=tmp_path, overrides=overrides, quiet=True)
    assert status.consistent, status.problems
    other = status.cells[status.cells["other_code"] > 0]
    found = other.groupby("algorithm")["other_code"].sum().to_dict() if len(other) else {}
    assert {label: int(count) for label, count in found.items()} == stale
    failed = status.cells[status.cells["failed"] > 0].groupby("algorithm")["failed"].sum().to_dict()
    assert {label: int(count) for label, count in failed.items()} == FAILED.get(folder, {})
    assert not status.cells[["running", "pending"]].to_numpy().any()


@pytest.mark.parametrize("cut", sorted(TABLE3))
def test_each_cut_of_the_shipped_kernel_table3_reads_as_todays_code(cut, tmp_path):
    overrides, only, trials = TABLE3[cut]
    shutil.copytree(RESULTS / "kernel_table3", tmp_path / "kernel_table3")
    status = banditsweep.status(str(REPO / "sweeps/kernel_exp3/table3.yaml"), results=tmp_path,
                                overrides=overrides, only=only, quiet=True)
    assert status.consistent, status.problems
    cells = status.cells
    assert int(cells["done"].sum()) == trials and not cells[["failed", "running", "pending", "other_code"]].to_numpy().any()
