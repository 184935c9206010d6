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

# case -> (folder, spec, --set values, --only values): each folder read as docs/reproduction.md reads it;
# kernel_table3 holds two cuts of one spec (settings 1-2 at T = 1000, 5 seeds; settings 3-4 at T = 200,
# 3 seeds, the learners that scale to |X| = 10^4 and Random).
READS = {
    "kernel_exact_vs_rls": ("kernel_exact_vs_rls", "sweeps/kernel_exp3/exact_vs_rls.yaml", None, None),
    "kernel_exploration": ("kernel_exploration", "sweeps/kernel_exp3/exploration.yaml", ["seeds=5"], None),
    "kernel_lower_bound": ("kernel_lower_bound", "sweeps/kernel_exp3/lower_bound.yaml", ["seeds=5"], None),
    "kernel_sampler": ("kernel_sampler", "sweeps/kernel_exp3/sampler.yaml", ["seeds=5"], None),
    "kernel_table3 settings 1-2": ("kernel_table3", "sweeps/kernel_exp3/table3.yaml", ["seeds=5"], ["setting=1,2"]),
    "kernel_table3 settings 3-4": ("kernel_table3", "sweeps/kernel_exp3/table3.yaml", ["horizon=200", "seeds=3"],
                                   ["setting=3,4", "algorithm=random,apg_exp3,rls_kernel_exp3"]),
    "kernel_tuning": ("kernel_tuning", "sweeps/kernel_exp3/tuning.yaml", ["seeds=3"], None),
    **{folder: (folder, f"sweeps/neural_rbmle/{folder.removeprefix('neural_')}.yaml", None, None)
       for folder in ("neural_fig2_likelihoods_cpu", "neural_fig3_alpha_cpu", "neural_mushroom_8000",
                      "neural_reproduction_cpu", "neural_sensitivity", "neural_sensitivity_baselines",
                      "neural_sensitivity_datasets", "neural_sensitivity_long", "neural_table3_timing_cpu")},
}
# case -> trials of other code by label (docs/reproduction.md names them)
STALE = {"neural_mushroom_8000": {"NeuralRBMLE-GA": 3}}
# case -> failed trials by label (the NaN guard's, docs/reproduction.md)
FAILED = {
    "neural_reproduction_cpu": {"NeuralRBMLE-GA": 1},
    "neural_sensitivity_datasets": {"GA mean lr=0.001 J=100 init=paper": 1, "GA mean lr=0.01 J=20 init=paper": 3,
                                    "GA sum lr=0.001 J=100 init=paper": 3},
}
# case -> its trials, all done (the cuts of one folder must each find theirs)
DONE = {"kernel_table3 settings 1-2": 120, "kernel_table3 settings 3-4": 54}


def _by_label(cells, column: str) -> dict[str, int]:
    found = cells[cells[column] > 0].groupby("algorithm")[column].sum().to_dict()
    return {label: int(count) for label, count in found.items()}


@pytest.mark.parametrize("case", sorted(READS))
def test_a_shipped_folder_reads_as_todays_code(case, tmp_path):
    folder, spec, overrides, only = READS[case]
    shutil.copytree(RESULTS / folder, tmp_path / folder)   # status may set damaged files aside: on a copy
    status = banditsweep.status(str(REPO / spec), results=tmp_path, overrides=overrides, only=only, quiet=True)
    assert status.consistent, status.problems
    cells = status.cells
    assert _by_label(cells, "other_code") == STALE.get(case, {})
    assert _by_label(cells, "failed") == FAILED.get(case, {})
    assert not cells[["running", "pending"]].to_numpy().any()
    if case in DONE:
        assert int(cells["done"].sum()) == DONE[case]
