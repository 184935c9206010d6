"""Classification datasets of the NeuralRBMLE experiments (SPEC 1.2): reading, checking, preprocessing.

One Parquet file per dataset, ``<data dir>/<name>.parquet``: the feature columns first (numeric, or
strings for categorical features, a missing value being a real null), then a string column
``class``. The data directory is ``BANDITSWEEP_DATA`` if set, else a per-user cache directory
(``$XDG_CACHE_HOME/banditsweep/datasets``, by default ``~/.cache/banditsweep/datasets``).

This module only reads. Fetching a missing file from OpenML and writing it into the data
directory is the user's side (``banditsweep.sweeps.planning.datasets``); a worker never downloads.

Preprocessing, as the reference code of NeuralUCB / NeuralTS / NeuralRBMLE (uclaml/NeuralTS
``data_multi.py``, ``Bandit_multi``: ``fetch_openml(name, version, return_X_y=True)``, then
``X[np.isnan(X)] = -1`` and ``normalize(X)``, lines 11-50):

- categorical columns are ordinal-encoded (``encoding="ordinal_openml"``) with the codes that code got from
  ``fetch_openml``: the scikit-learn of 2020 returned a NumPy array (``as_frame=False``) whose nominal
  columns are liac-arff's ``encode_nominal`` codes, the position of the value in the ``@attribute``
  declaration of OpenML's ARFF file — not sorted order, and counting declared values that never
  occur (mushroom's gill-attachment declares {a, d, f, n}, the data holds a and f: f is 2).
  The dataset files store categories as strings without that declaration, so it is kept here
  (:data:`OPENML_CATEGORIES`, for the two datasets with categorical columns, adult and mushroom);
- a missing value becomes -1;
- every row is scaled to unit L2 norm (``scaling="rownorm"``).

Project choices offered beside it: ``encoding="ordinal"`` (codes in sorted order of the values
present in the file: this project's encoding before the declared order was added, under the name it
had then, so that trials recorded with it keep their ids and their results), one-hot encoding of
the categorical columns (indicator columns in sorted order of the values present; a missing value is
the all-zero indicator vector) and per-column standardisation (zero mean, unit variance) instead of the
row scaling. The class labels are numbered in sorted order (numeric labels numerically), as the
reference code's ``OrdinalEncoder`` on the labels does (``data_multi.py`` lines 59-60).

A file is checked against :data:`DATASETS` every time it is read: the column count, the ``class``
column, the column types, the number of classes (exactly) and the number of rows (at least a
minimum and at most the full dataset, because the files for tests hold subsamples of covertype and
mnist). Anything wrong raises :class:`DatasetError` naming the file and the fault; there is no
silent fallback.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

DATA_ENV_VAR = "BANDITSWEEP_DATA"
CLASS_COLUMN = "class"
MIN_ROWS = 1000

Encoding = Literal["ordinal_openml", "ordinal", "onehot"]
ENCODINGS = ("ordinal_openml", "ordinal", "onehot")
Scaling = Literal["rownorm", "standard"]


class DatasetError(ValueError):
    """A dataset file is missing, unreadable, or not in the expected format."""

    # Its message is the project's own sentences (what is missing, the cause, the remedy): said whole.
    message_limit = 2000


@dataclass(frozen=True)
class DatasetInfo:
    """What a dataset file must look like (SPEC 1.2)."""

    name: str
    openml_id: int
    openml_name: str
    features: int  # d', feature columns before encoding
    classes: int   # K, the number of arms
    rows: int      # size of the full dataset; a file may hold a subsample of at least MIN_ROWS rows

    @property
    def columns(self) -> int:
        return self.features + 1


DATASETS: dict[str, DatasetInfo] = {
    info.name: info
    for info in (
        DatasetInfo("adult", 1590, "adult", features=14, classes=2, rows=48842),
        DatasetInfo("covertype", 1596, "covertype", features=54, classes=7, rows=581012),
        DatasetInfo("magictelescope", 1120, "MagicTelescope", features=10, classes=2, rows=19020),
        DatasetInfo("mushroom", 24, "mushroom", features=22, classes=2, rows=8124),
        DatasetInfo("shuttle", 40685, "shuttle", features=9, classes=7, rows=58000),
        DatasetInfo("mnist", 554, "mnist_784", features=784, classes=10, rows=70000),
    )
}


def _declared(values: str | tuple[str, ...]) -> tuple[str, ...]:
    return tuple("".join(values).split())


#: The order in which OpenML's ARFF file declares each categorical column's values (``@attribute name
#: {v0, v1, ...}``): value ``v_i`` gets the ordinal code i, as in the reference code (module docstring).
#: adult: OpenML 1590's ARFF (file 1595261), whose header is bundled with scikit-learn's tests
#: (sklearn/datasets/tests/data/openml/id_1590; tests/core/neural/test_datasets.py compares it when present): the
#: order of UCI's adult.names, not sorted. mushroom: OpenML 24, one of OpenML's first datasets, taken
#: from Weka's UCI ARFF collection (as OpenML 3, whose bundled copy keeps Weka's declarations and
#: summary); Weka's mushroom.arff declares every value of agaricus-lepiota.names in sorted order,
#: including values that never occur. Not checked against OpenML 24's own file (no copy offline).
OPENML_CATEGORIES: dict[str, dict[str, tuple[str, ...]]] = {
    "adult": {name: _declared(values) for name, values in {
        "workclass": "Private Self-emp-not-inc Self-emp-inc Federal-gov Local-gov State-gov Without-pay Never-worked",
        "education": (
            "Bachelors Some-college 11th HS-grad Prof-school Assoc-acdm Assoc-voc 9th 7th-8th 12th Masters "
            "1st-4th 10th Doctorate 5th-6th Preschool"
        ),
        "marital-status": (
            "Married-civ-spouse Divorced Never-married Separated Widowed Married-spouse-absent "
            "Married-AF-spouse"
        ),
        "occupation": (
            "Tech-support Craft-repair Other-service Sales Exec-managerial Prof-specialty Handlers-cleaners "
            "Machine-op-inspct Adm-clerical Farming-fishing Transport-moving Priv-house-serv Protective-serv "
            "Armed-Forces"
        ),
        "relationship": "Wife Own-child Husband Not-in-family Other-relative Unmarried",
        "race": "White Asian-Pac-Islander Amer-Indian-Eskimo Other Black",
        "sex": "Female Male",
        "native-country": (
            "United-States Cambodia England Puerto-Rico Canada Germany Outlying-US(Guam-USVI-etc) India Japan "
            "Greece South China Cuba Iran Honduras Philippines Italy Poland Jamaica Vietnam Mexico Portugal "
            "Ireland France Dominican-Republic Laos Ecuador Taiwan Haiti Columbia Hungary Guatemala Nicaragua "
            "Scotland Thailand Yugoslavia El-Salvador Trinadad&Tobago Peru Hong Holand-Netherlands"
        ),
    }.items()},
    "mushroom": {name: _declared(values) for name, values in {
        "cap-shape": "b c f k s x",
        "cap-surface": "f g s y",
        "cap-color": "b c e g n p r u w y",
        "bruises": "f t",
        "odor": "a c f l m n p s y",
        "gill-attachment": "a d f n",
        "gill-spacing": "c d w",
        "gill-size": "b n",
        "gill-color": "b e g h k n o p r u w y",
        "stalk-shape": "e t",
        "stalk-root": "b c e r u z",
        "stalk-surface-above-ring": "f k s y",
        "stalk-surface-below-ring": "f k s y",
        "stalk-color-above-ring": "b c e g n o p w y",
        "stalk-color-below-ring": "b c e g n o p w y",
        "veil-type": "p u",
        "veil-color": "n o w y",
        "ring-number": "n o t",
        "ring-type": "c e f l n p s z",
        "spore-print-color": "b h k n o r u w y",
        "population": "a c n s v y",
        "habitat": "d g l m p u w",
    }.items()},
}


class Dataset(NamedTuple):
    """A preprocessed dataset: ``features`` (n, d') float32, ``labels`` (n,) int64 in [0, K),
    ``class_names[k]`` the original label of class k. The arrays are read-only (shared by a cache)."""

    features: np.ndarray
    labels: np.ndarray
    class_names: tuple[str, ...]


def data_directory() -> Path:
    """Where dataset files live: ``BANDITSWEEP_DATA``, else the per-user cache directory."""
    configured = os.environ.get(DATA_ENV_VAR)
    if configured:
        return Path(configured).expanduser()
    cache_home = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache_home).expanduser() / "banditsweep" / "datasets"


def dataset_info(name: str) -> DatasetInfo:
    if name not in DATASETS:
        raise DatasetError(f"unknown dataset {name!r}; known: {', '.join(sorted(DATASETS))}")
    return DATASETS[name]


def dataset_path(name: str, data_dir: str | os.PathLike | None = None) -> Path:
    dataset_info(name)
    directory = Path(data_dir).expanduser() if data_dir is not None else data_directory()
    return directory / f"{name}.parquet"


def how_to_provide(name: str, directory: Path, downloader_installed: bool = False) -> str:
    """The sentence every 'file missing' message ends with. Where the downloader (scikit-learn) is
    installed already, installing it is no advice: the network is what was missing."""
    info = dataset_info(name)
    download = (f"or run again where this machine reaches openml.org: banditsweep then downloads it from OpenML "
                f"({info.openml_name}, id {info.openml_id})" if downloader_installed else
                f"with network access, `pip install 'banditsweep[openml]'` lets banditsweep download it "
                f"from OpenML ({info.openml_name}, id {info.openml_id}) on first use")
    return (
        f"To provide it, copy {name}.parquet (features, then a string 'class' column) into "
        f"{directory}, or point --data-dir / {DATA_ENV_VAR} at a directory that holds it; {download}."
    )


def missing_message(name: str, directory: Path) -> str:
    return (f"dataset {name!r} not found: there is no file {name}.parquet in {directory}. "
            + how_to_provide(name, directory))


def _is_string(kind: pa.DataType) -> bool:
    return pa.types.is_string(kind) or pa.types.is_large_string(kind)


def _is_numeric(kind: pa.DataType) -> bool:
    return pa.types.is_integer(kind) or pa.types.is_floating(kind) or pa.types.is_boolean(kind)


def _class_sort_key(value: str):
    # Numeric labels ('1'..'7', '0'..'9') in numeric order, anything else alphabetically.
    try:
        return (0, float(value), value)
    except ValueError:
        return (1, 0.0, value)


def class_names_of(table: pa.Table) -> tuple[str, ...]:
    values = table.column(CLASS_COLUMN).unique().to_pylist()
    return tuple(sorted((v for v in values if v is not None), key=_class_sort_key))


def verify_table(name: str, table: pa.Table, source: str | os.PathLike) -> None:
    """Check ``table`` against the expected shape of dataset ``name``; raise DatasetError naming
    ``source`` and what is wrong."""
    info = dataset_info(name)
    where = f"dataset file {source} ({name})"
    if table.num_columns != info.columns:
        raise DatasetError(
            f"{where} has the wrong shape: {table.num_columns} columns, expected {info.columns} "
            f"({info.features} features and '{CLASS_COLUMN}')")
    last = table.schema.names[-1]
    if last != CLASS_COLUMN:
        raise DatasetError(f"{where} has the wrong shape: its last column is {last!r}, "
                           f"expected the label column '{CLASS_COLUMN}'")
    if not _is_string(table.schema.field(CLASS_COLUMN).type):
        raise DatasetError(f"{where}: column '{CLASS_COLUMN}' has type "
                           f"{table.schema.field(CLASS_COLUMN).type}, expected string")
    for field in list(table.schema)[:-1]:
        if not (_is_numeric(field.type) or _is_string(field.type)):
            raise DatasetError(f"{where}: feature column {field.name!r} has type {field.type}, "
                               "expected a number or a string (categorical)")
    if not info.rows >= table.num_rows >= MIN_ROWS:
        raise DatasetError(f"{where} has the wrong shape: {table.num_rows} rows, expected between "
                           f"{MIN_ROWS} and {info.rows} (the full dataset)")
    if table.column(CLASS_COLUMN).null_count:
        raise DatasetError(f"{where}: {table.column(CLASS_COLUMN).null_count} rows have no "
                           f"'{CLASS_COLUMN}' value")
    classes = class_names_of(table)
    if len(classes) != info.classes:
        raise DatasetError(f"{where} has {len(classes)} classes {list(classes)[:12]}, "
                           f"expected {info.classes}")


def read_table(name: str, path: str | os.PathLike) -> pa.Table:
    """Read and verify one dataset file."""
    path = Path(path)
    if not path.is_file():
        raise DatasetError(missing_message(name, path.parent))
    try:
        table = pq.read_table(path)
    except (pa.ArrowException, OSError) as error:
        raise DatasetError(
            f"dataset file {path} ({name}) is not a readable Parquet file ({error}); it may be "
            f"corrupt or truncated: delete it, or replace it with a good copy. "
            + how_to_provide(name, path.parent)) from error
    verify_table(name, table, path)
    return table


def _numeric_column(column: pa.ChunkedArray) -> np.ndarray:
    values = column.cast(pa.float64()).fill_null(-1.0).to_numpy()
    return np.where(np.isnan(values), -1.0, values)


def _category_values(column: pa.ChunkedArray) -> pa.Array:
    values = [v for v in column.unique().to_pylist() if v is not None]
    return pa.array(sorted(values), type=column.type)


def _ordinal_column(column: pa.ChunkedArray, categories: pa.Array | None = None) -> np.ndarray:
    codes = pc.index_in(column, value_set=_category_values(column) if categories is None else categories)
    return codes.cast(pa.float64()).fill_null(-1.0).to_numpy()


def declared_categories(name: str | None, column_name: str, column: pa.ChunkedArray, source: str = "") -> pa.Array:
    """The values of a categorical column in OpenML's declared order (:data:`OPENML_CATEGORIES`).

    Raises DatasetError if the order is not known for that column or the column holds a value the
    declaration lacks (a file that is not the OpenML dataset): no silent fallback to sorted order."""
    declared = OPENML_CATEGORIES.get(name or "", {}).get(column_name)
    where = f"dataset file {source} ({name})" if source else f"dataset {name!r}"
    if declared is None:
        raise DatasetError(f"{where}: no OpenML category order is known for column {column_name!r}; "
                           "use encoding='ordinal' or 'onehot'")
    unknown = sorted(set(v for v in column.unique().to_pylist() if v is not None) - set(declared))
    if unknown:
        raise DatasetError(f"{where}: column {column_name!r} holds {unknown[:5]}, which OpenML's declaration "
                           f"{list(declared)[:12]} lacks")
    return pa.array(declared, type=column.type)


def _onehot_columns(column: pa.ChunkedArray) -> np.ndarray:
    categories = _category_values(column)
    codes = pc.index_in(column, value_set=categories).fill_null(-1).to_numpy()
    indicators = np.zeros((len(codes), len(categories)))
    present = codes >= 0
    indicators[np.flatnonzero(present), codes[present]] = 1.0
    return indicators


def encode_features(table: pa.Table, encoding: Encoding = "ordinal_openml", name: str | None = None,
                    source: str = "") -> np.ndarray:
    """The feature columns of a verified table as an (n, d') float32 matrix, before scaling.

    ``encoding="ordinal_openml"`` needs the dataset ``name`` for OpenML's declared category order."""
    if encoding not in ENCODINGS:
        raise ValueError(f"unknown encoding {encoding!r}; expected one of {', '.join(ENCODINGS)}")
    blocks = []
    for field, column in zip(list(table.schema)[:-1], table.columns[:-1]):
        if _is_numeric(field.type):
            blocks.append(_numeric_column(column)[:, None])
        elif encoding == "onehot":
            blocks.append(_onehot_columns(column))
        elif encoding == "ordinal":
            blocks.append(_ordinal_column(column)[:, None])
        else:
            blocks.append(_ordinal_column(column, declared_categories(name, field.name, column, source))[:, None])
    width = sum(block.shape[1] for block in blocks)
    features = np.empty((table.num_rows, width), dtype=np.float32)
    start = 0
    for block in blocks:
        features[:, start:start + block.shape[1]] = block
        start += block.shape[1]
    return features


def scale_features(features: np.ndarray, scaling: Scaling = "rownorm") -> np.ndarray:
    """Scale in place: rows to unit L2 norm, or columns to zero mean and unit variance.
    A zero row (or a constant column) is left as it is."""
    if scaling == "rownorm":
        norms = np.sqrt(np.einsum("ij,ij->i", features, features, dtype=np.float64))
        norms[norms == 0.0] = 1.0
        features /= norms[:, None].astype(features.dtype)
    elif scaling == "standard":
        mean = features.mean(axis=0, dtype=np.float64)
        std = features.std(axis=0, dtype=np.float64)
        std[std == 0.0] = 1.0
        features -= mean.astype(features.dtype)
        features /= std.astype(features.dtype)
    else:
        raise ValueError(f"unknown scaling {scaling!r}; expected 'rownorm' or 'standard'")
    return features


def load_dataset(name: str, data_dir: str | os.PathLike | None = None, encoding: Encoding = "ordinal_openml",
                 scaling: Scaling = "rownorm") -> Dataset:
    """Read, verify and preprocess ``<data dir>/<name>.parquet``.

    The result is cached per process (keyed by the file's path, size and modification time), so
    the many trials a worker runs on one dataset read it once.
    """
    if encoding not in ENCODINGS:
        raise ValueError(f"unknown encoding {encoding!r}; expected one of {', '.join(ENCODINGS)}")
    path = dataset_path(name, data_dir).absolute()
    try:
        stat = path.stat()
    except FileNotFoundError:
        raise DatasetError(missing_message(name, path.parent)) from None
    return _load_cached(name, str(path), stat.st_size, stat.st_mtime_ns, encoding, scaling)


@functools.lru_cache(maxsize=16)
def _load_cached(name: str, path: str, size: int, mtime_ns: int, encoding: Encoding,
                 scaling: Scaling) -> Dataset:
    table = read_table(name, path)
    features = scale_features(encode_features(table, encoding, name, path), scaling)
    class_names = class_names_of(table)
    column = table.column(CLASS_COLUMN)
    labels = pc.index_in(column, value_set=pa.array(class_names, type=column.type)).to_numpy()
    labels = labels.astype(np.int64)
    features.flags.writeable = False
    labels.flags.writeable = False
    return Dataset(features, labels, class_names)
