"""Every algorithm on every environment kind, alone and in lockstep batches, gives the results
recorded before the round loop was unified (tests/golden): framework changes move no number."""

import sys

import numpy as np
import pytest
from paths import GOLDEN

sys.path.insert(0, str(GOLDEN))

from cases import CASES, DATA, RECORDED, assert_recorded, flatten, quantity, specs  # noqa: E402
from cases import RESIDUALS  # noqa: E402

from banditsweep.core.engine.trial import run_trials  # noqa: E402


@pytest.fixture(scope="module")
def recorded():
    with np.load(RECORDED) as stored:
        return dict(stored)


@pytest.mark.parametrize("case", list(CASES))
def test_results_equal_the_recorded_ones(case, recorded, monkeypatch):
    monkeypatch.setenv("BANDITSWEEP_DATA", str(DATA))
    now = flatten(case, run_trials(specs(case)))
    before = {k: v for k, v in recorded.items() if k.startswith(f"{case}/")}
    assert set(now) == set(before)
    for key, value in now.items():
        assert_recorded(key, value, before[key])


def test_every_recorded_quantity_has_a_comparison_that_fits_its_scale(recorded):
    """A residual that is rounding noise passes at another CPU's value, a real change of it does not;
    counts and choices are exact; every other value is relative to its array's magnitude."""
    key = "apg_kernel/0/diag.pgreedy_max_power"
    assert_recorded(key, np.float64(2.33e-08), np.float64(2.11e-08))   # an AMD EPYC against the record
    with pytest.raises(AssertionError):
        assert_recorded(key, np.float64(1e-3), np.float64(2.11e-08))
    with pytest.raises(AssertionError):
        assert_recorded("case/0/arm", np.array([0, 1]), np.array([0, 2]))
    with pytest.raises(AssertionError):
        assert_recorded("case/0/diag.D_T", np.float64(48.0), np.float64(49.0))
    assert_recorded("case/0/regret", np.array([1.0, 1e-17]), np.array([1.0, 0.0]))
    with pytest.raises(AssertionError):
        assert_recorded("case/0/regret", np.array([1.0, 1e-6]), np.array([1.0, 0.0]))
    # Arrays are compared relative to their largest entry, so a rounding-noise entry of a per-round
    # array (a regret of -8.9e-16) is absorbed; a recorded scalar is its own scale, so one at
    # rounding-noise size must be named in RESIDUALS with the scale of what it is the residual of.
    for name, value in recorded.items():
        if value.dtype.kind == "f" and value.ndim == 0 and quantity(name) not in RESIDUALS:
            assert not 0 < abs(float(value)) < 1e-6, f"{name} = {float(value)} is at rounding-noise scale"
