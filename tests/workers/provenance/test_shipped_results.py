"""The results shipped in docs/results read as computed by today's code (``banditsweep.status``), with
no re-stamp after a module moves: the code digest is of content, and the records stamped before it
was are read through the table made on the tree that stamped them (workers.provenance.legacy_identity).

Each folder's trials of other code are the ones docs/reproduction.md names: Mushroom at T = 8000's
NeuralRBMLE-GA trials (not re-checked on the code that followed them). A kernel folder computed
before the design's ties were decided by core.engine.ties' rule is other code until it is run again."""

import shutil

import pytest
from paths import REPO

import banditsweep

RESULTS = REPO / "docs" / "results"

# folder -> (spec, --set values, trials of other code by label)
SHIPPED = {
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


@pytest.mark.parametrize("folder", sorted(SHIPPED))
def test_a_shipped_folder_reads_as_todays_code(folder, tmp_path):
    spec, overrides, stale = SHIPPED[folder]
    shutil.copytree(RESULTS / folder, tmp_path / folder)   # status may set damaged files aside: on a copy
    status = banditsweep.status(str(REPO / spec), results=tmp_path, overrides=overrides, quiet=True)
    assert status.consistent, status.problems
    other = status.cells[status.cells["other_code"] > 0]
    found = other.groupby("algorithm")["other_code"].sum().to_dict() if len(other) else {}
    assert {label: int(count) for label, count in found.items()} == stale
