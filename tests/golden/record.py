"""Record the golden results (run once, before a change that must not move a number).

    BANDITSWEEP_DATA=tests/data python tests/golden/record.py            # every case
    BANDITSWEEP_DATA=tests/data python tests/golden/record.py CASE ...   # those cases, the rest kept

Re-record a case only for a change that is meant to move its numbers, and write the reason beside
it in cases.py (RERECORDED).
"""

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np  # noqa: E402
from cases import CASES, DATA, RECORDED, flatten, specs  # noqa: E402

from banditsweep.core.engine.trial import run_trials  # noqa: E402

if __name__ == "__main__":
    os.environ["BANDITSWEEP_DATA"] = str(DATA)
    chosen = sys.argv[1:] or list(CASES)
    unknown = sorted(set(chosen) - set(CASES))
    if unknown:
        sys.exit(f"record.py: no case {', '.join(unknown)} (cases: {', '.join(CASES)})")
    arrays = {} if not sys.argv[1:] else {key: value for key, value in np.load(RECORDED).items()
                                           if key.split("/")[0] not in chosen}
    for case in chosen:
        arrays.update(flatten(case, run_trials(specs(case))))
        print(case, "recorded")
    np.savez_compressed(RECORDED, **arrays)
