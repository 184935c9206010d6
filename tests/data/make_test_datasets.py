"""Make the small dataset copies the test suite reads (``tests/data/<name>.parquet``).

Each copy holds 1000 rows (``banditsweep.core.neural.datasets.MIN_ROWS``, the fewest a dataset file may
have) of the full file, in the full file's schema: every class is kept (the rarest classes of
shuttle and covertype with all their rows up to 20), the rest drawn uniformly with a fixed seed,
and the rows stay in the source order. ``tests/data/SOURCES.md`` records the sha256 of each source
file and of each copy.

    python tests/data/make_test_datasets.py SOURCE_DIR     # e.g. the full files in ~/.cache/banditsweep/datasets
"""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

ROWS = 1000
PER_CLASS = 20
SEED = 20261201
NAMES = ("adult", "covertype", "magictelescope", "mnist", "mushroom", "shuttle")
HERE = Path(__file__).resolve().parent


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def subsample(labels: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Row indices (sorted): up to PER_CLASS rows of every class, the rest uniform without replacement."""
    keep: set[int] = set()
    for value in np.unique(labels):
        rows = np.flatnonzero(labels == value)
        keep.update(rng.choice(rows, size=min(PER_CLASS, len(rows)), replace=False).tolist())
    rest = np.setdiff1d(np.arange(len(labels)), np.fromiter(keep, dtype=np.int64))
    keep.update(rng.choice(rest, size=ROWS - len(keep), replace=False).tolist())
    return np.sort(np.fromiter(keep, dtype=np.int64))


def main(source_dir: Path) -> None:
    lines = ["# Sources of the test dataset copies", "",
             f"Made by `make_test_datasets.py` (seed {SEED}): {ROWS} rows of each full file, every class kept.",
             "The full files are described in the project's dataset notes (OpenML ids in",
             "`banditsweep.core.neural.datasets.DATASETS`).", "",
             "| copy | rows | source sha256 | copy sha256 |", "|---|---:|---|---|"]
    for name in NAMES:
        source = source_dir / f"{name}.parquet"
        table = pq.read_table(source)
        labels = table.column("class").to_numpy(zero_copy_only=False)
        rng = np.random.default_rng([SEED, NAMES.index(name)])
        copy = table.take(subsample(labels, rng))
        target = HERE / f"{name}.parquet"
        pq.write_table(copy, target, compression="zstd", compression_level=19, store_schema=False)
        lines.append(f"| {name}.parquet | {copy.num_rows} | `{sha256(source)}` | `{sha256(target)}` |")
    (HERE / "SOURCES.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    main(Path(sys.argv[1]))
