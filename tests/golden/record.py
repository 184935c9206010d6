"""Record the golden results (run once, before a change that must not move a number).

    BANDITSWEEP_DATA=tests/data python tests/golden/record.py
"""

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np  # noqa: E402
from cases import CASES, DATA, RECORDED, flatten, specs  # noqa: E402

from banditsweep.core.trial import run_trials  # noqa: E402

if __name__ == "__main__":
    os.environ["BANDITSWEEP_DATA"] = str(DATA)
    arrays = {}
    for case in CASES:
        arrays.update(flatten(case, run_trials(specs(case))))
        print(case, "recorded")
    np.savez_compressed(RECORDED, **arrays)
