"""``banditsweep status SPEC``: done / failed / pending trials per algorithm and environment, and
whether the result files are whole and agree with each other (exit 4 when not)."""

from __future__ import annotations

import argparse
import sys
from dataclasses import asdict

import pandas as pd

from banditsweep.sweeps.commands import EXIT_INCONSISTENT
from banditsweep.sweeps.commands.shared import jobs_of, say_health, store_of
from banditsweep.sweeps.report import markdown_table
from banditsweep.sweeps.spec import Sweep
from banditsweep.workers.status import status_summary


def main(args: argparse.Namespace, sweep: Sweep) -> int:
    summary = status_summary(store_of(args, sweep), jobs_of(sweep))
    say_health(summary.health)
    print(markdown_table(pd.DataFrame([asdict(cell) for cell in summary.cells]), index=False))
    selected = f" (selected by {sweep.selected_by})" if sweep.selected_by else ""
    print(f"\n{sweep.name}: {len(sweep.trials)} trials{selected}: {summary.total('done')} done, {summary.total('failed')} failed, "
          f"{summary.total('pending')} pending")
    if summary.consistency is None:
        return 0
    print(f"verified: {summary.consistency.summary()}")
    for note in summary.consistency.notes:
        print(f"note: {note}")
    for problem in summary.consistency.problems:
        print(f"inconsistent: {problem}", file=sys.stderr)
    return EXIT_INCONSISTENT if summary.inconsistent else 0
