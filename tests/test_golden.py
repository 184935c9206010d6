"""Every algorithm on every environment kind, alone and in lockstep batches, gives the results
recorded before the round loop was unified (tests/golden): framework changes move no number."""

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "golden"))

from cases import CASES, DATA, RECORDED, flatten, specs  # noqa: E402

from banditsweep.core.trial import run_trials  # noqa: E402


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
        if key.endswith("/arm"):
            np.testing.assert_array_equal(value, before[key], err_msg=key)
        else:
            # Bit-identical on the machine that recorded them; the tolerance only absorbs another
            # CPU's last-bit rounding in BLAS.
            np.testing.assert_allclose(value, before[key], rtol=1e-9, atol=1e-12, err_msg=key)
