"""Making sure a sweep's dataset files are there before any trial starts (SPEC 1.2).

A file that exists is verified and used as it is. A missing file is downloaded once from OpenML
(scikit-learn's ``fetch_openml``, the optional dependency ``banditsweep[openml]``), converted to
the project's format (features, then a string ``class`` column; categorical features as strings
with real nulls, numeric features float32), verified, and written into the data directory by an
atomic rename, so an interrupted download never leaves a half-written file behind.

A corrupt or wrong-shaped file is reported, never replaced behind the user's back: it may be a
file the user put there on purpose.

Categorical features are written as strings, so the order in which OpenML's ARFF file declares their
values (which gives the reference code's ordinal codes) is not in the file; the default ordinal
encoding takes it from ``banditsweep.core.neural.datasets.OPENML_CATEGORIES`` and rejects a value that the
declaration lacks.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any, Iterable
from urllib.parse import unquote

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from banditsweep.core.neural.datasets import (
    CLASS_COLUMN,
    DATA_ENV_VAR,
    DatasetError,
    dataset_info,
    dataset_path,
    how_to_provide,
    missing_message,
    read_table,
    verify_table,
)
from banditsweep.workers import write_atomically
from banditsweep.workers import InputError

INSTALL_HINT = "pip install 'banditsweep[openml]'"
_MISSING_VALUES = {"?", ""}


def _fetch_openml(data_id: int, data_home: str):
    """Download one OpenML dataset as pandas objects: (features DataFrame, target Series)."""
    try:
        from sklearn.datasets import fetch_openml
    except ImportError as error:
        raise ImportError(f"downloading from OpenML needs scikit-learn ({INSTALL_HINT})") from error
    bunch = fetch_openml(data_id=data_id, as_frame=True, parser="auto", data_home=data_home)
    return bunch.data, bunch.target


def download_cause(error: BaseException) -> str:
    """What stopped a download, in words: no network, an HTTP answer, or the error as it is."""
    import socket
    import urllib.error

    chain, seen = [], error
    while seen is not None and len(chain) < 5:
        chain.append(seen)
        seen = seen.__cause__ or seen.__context__
    for cause in chain:
        if isinstance(cause, urllib.error.HTTPError):
            return f"OpenML answered HTTP {cause.code} ({cause.reason})"
    for cause in chain:
        if isinstance(cause, (urllib.error.URLError, ConnectionError, socket.timeout, socket.gaierror, TimeoutError)):
            reason = getattr(cause, "reason", None) or cause
            return f"this machine cannot reach OpenML ({type(cause).__name__}: {reason})"
    return f"{type(error).__name__}: {error}"


def _column_name(name: Any) -> str:
    # OpenML spells some UCI names differently: 'bruises%3F' (mushroom), 'fLength:' (MagicTelescope).
    return unquote(str(name)).strip().rstrip(":?").strip()


def _as_float32(values: pd.Series) -> pa.Array:
    numbers = pd.to_numeric(values, errors="raise").astype("float64").to_numpy()
    return pa.array(numbers.astype(np.float32), type=pa.float32(), mask=np.isnan(numbers))


def _as_strings(values: pd.Series) -> pd.Series:
    """Values as stripped strings; missing (NaN, None, '?', '') as <NA>."""
    strings = values.astype("string").str.strip()
    return strings.mask(strings.isin(_MISSING_VALUES))


def _feature_column(values: pd.Series) -> pa.Array:
    if pd.api.types.is_bool_dtype(values) or pd.api.types.is_numeric_dtype(values):
        return _as_float32(values)
    strings = _as_strings(values)
    numbers = pd.to_numeric(strings, errors="coerce")
    if numbers.notna().sum() == strings.notna().sum():
        # A nominal column whose values are all numbers (covertype's 0/1 indicators) is numeric.
        return _as_float32(numbers)
    return pa.array(strings, type=pa.string(), from_pandas=True)


def _label_column(target: pd.Series) -> pa.Array:
    if pd.api.types.is_numeric_dtype(target):
        numbers = target.astype("float64")
        if (numbers.dropna() == numbers.dropna().round()).all():
            # 1.0 -> '1': the labels read the same as in the source files.
            target = numbers.astype("Int64")
    return pa.array(_as_strings(target), type=pa.string(), from_pandas=True)


def openml_to_table(name: str, features: pd.DataFrame, target: pd.Series | pd.DataFrame) -> pa.Table:
    """Convert what ``fetch_openml(as_frame=True)`` returns into the project's file format."""
    if isinstance(target, pd.DataFrame):
        if target.shape[1] != 1:
            raise DatasetError(f"OpenML data for {name} has {target.shape[1]} target columns, expected one")
        target = target.iloc[:, 0]
    columns = {_column_name(column): _feature_column(features[column]) for column in features.columns}
    if len(columns) != features.shape[1] or CLASS_COLUMN in columns:
        raise DatasetError(f"OpenML data for {name} has clashing column names: {list(features.columns)}")
    columns[CLASS_COLUMN] = _label_column(target)
    return pa.table(columns)


def download_dataset(name: str, path: Path) -> Path:
    """Fetch ``name`` from OpenML, convert, verify and write it to ``path``."""
    info = dataset_info(name)
    directory = path.parent
    with tempfile.TemporaryDirectory(prefix="banditsweep-openml-") as scratch:
        try:
            features, target = _fetch_openml(info.openml_id, scratch)
        except ImportError as error:
            raise DatasetError(f"{missing_message(name, directory)} ({error})") from error
        except Exception as error:  # network, HTTP, parsing: "no file", with the real cause named
            raise DatasetError(
                f"dataset {name!r} not found in {directory}, and downloading it from OpenML "
                f"({info.openml_name}, id {info.openml_id}) failed: {download_cause(error)}. "
                + how_to_provide(name, directory, downloader_installed=True)) from error
        table = openml_to_table(name, features, target)
    verify_table(name, table, f"downloaded from OpenML id {info.openml_id}")
    write_atomically(path, lambda temporary: pq.write_table(table, temporary, compression="zstd"))
    return path


def ensure_dataset(name: str, data_dir: str | os.PathLike | None = None, allow_download: bool = True) -> Path:
    """The path of a verified ``<name>.parquet`` in the data directory, downloading it if missing.

    Raises DatasetError if the file is corrupt or wrong-shaped, or if it is missing and cannot be
    downloaded (offline, scikit-learn missing, or ``allow_download=False``); the message names the
    dataset, the directory searched and how to provide the file.
    """
    path = dataset_path(name, data_dir)
    if path.exists():
        read_table(name, path)
        return path
    if not allow_download:
        raise DatasetError(missing_message(name, path.parent))
    return download_dataset(name, path)


def datasets_of(environment_configs: Iterable[dict[str, Any]]) -> list[str]:
    """The datasets the classification environments of a sweep read, in first-use order."""
    names: list[str] = []
    for config in environment_configs:
        if config.get("kind") == "classification" and config.get("dataset") not in names:
            names.append(config["dataset"])
    return names


def ensure_datasets_for(environment_configs: Iterable[dict[str, Any]], data_dir: str | os.PathLike | None = None,
                        allow_download: bool = True) -> dict[str, Path]:
    """Ensure every dataset a sweep needs; returns name -> path."""
    return {name: ensure_dataset(name, data_dir, allow_download)
            for name in datasets_of(environment_configs)}


def chosen_data_dir(data_dir: str | None) -> Path | None:
    """The data directory a run uses, absolute: ``--data-dir``, else ``$BANDITSWEEP_DATA``; None:
    the default (core.neural.datasets), wherever each process looks. A path that is a file is refused
    (exit 2), naming where it came from."""
    if data_dir is not None:
        source, value = "--data-dir", data_dir
    elif os.environ.get(DATA_ENV_VAR):
        source, value = f"${DATA_ENV_VAR}", os.environ[DATA_ENV_VAR]
    else:
        return None
    directory = Path(value).expanduser().resolve()
    if os.path.lexists(directory) and not directory.is_dir():
        raise InputError(f"{source}: {directory} is a file, not a directory; give the directory that holds (or will "
                         f"hold) the <dataset>.parquet files")
    return directory


def ensure_datasets_of_trials(source: str, specs: Iterable[Any], data_dir: str | os.PathLike | None = None
                              ) -> dict[str, Path]:
    """Every dataset the trials (``TrialSpec``s) read, present and verified (downloaded if missing),
    with rows enough for the longest horizon that reads it: rows are drawn without replacement
    (SPEC 1.2), so T cannot exceed the dataset. ``source`` (the spec) begins the message of a
    horizon too long. Returns name -> path."""
    horizons: dict[str, int] = {}
    for spec in specs:
        if spec.environment["kind"] == "classification":
            name = spec.environment["dataset"]
            horizons[name] = max(horizons.get(name, 0), spec.horizon)
    paths = {}
    for name, horizon in horizons.items():
        path = paths[name] = ensure_dataset(name, data_dir)
        rows = pq.ParquetFile(path).metadata.num_rows
        if horizon > rows:
            raise DatasetError(f"{source}: horizon {horizon} exceeds the {rows} rows of {name} ({path}); "
                               f"use a horizon <= {rows} for this dataset (e.g. an environment `horizon:`)")
    return paths
