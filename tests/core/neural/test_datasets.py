"""Dataset files: reading, checking, preprocessing (core) and fetching/converting (sweeps). No network."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest
from paths import TEST_DATASETS

from banditsweep.core.neural import datasets as core_datasets
from banditsweep.core.neural.datasets import DATASETS, DatasetError, data_directory, load_dataset, read_table
from banditsweep.sweeps.planning import datasets as sweep_datasets
from banditsweep.sweeps.planning.datasets import ensure_dataset, ensure_datasets_for

# name: (rows of the test copy in tests/data, d' ordinal, K); every copy keeps every class.
COPIES = {
    "adult": (1000, 14, 2),
    "covertype": (1000, 54, 7),
    "magictelescope": (1000, 10, 2),
    "mushroom": (1000, 22, 2),
    "shuttle": (1000, 9, 7),
    "mnist": (1000, 784, 10),
}


@pytest.fixture(scope="module")
def copies() -> Path:
    if not all((TEST_DATASETS / f"{name}.parquet").is_file() for name in COPIES):
        pytest.fail(f"the dataset copies for tests are expected in {TEST_DATASETS} "
                    "(tests/data, or the directory BANDITSWEEP_TEST_DATASETS names)")
    return TEST_DATASETS


@pytest.fixture
def no_network(monkeypatch):
    """Any attempt to download fails as it would offline."""
    calls = []

    def offline(data_id, data_home):
        calls.append(data_id)
        raise ConnectionError("network is unreachable")

    monkeypatch.setattr(sweep_datasets, "_fetch_openml", offline)
    return calls


@pytest.mark.parametrize("name", sorted(COPIES))
def test_copies_load_with_expected_shapes(copies, name):
    rows, features, classes = COPIES[name]
    data = load_dataset(name, data_dir=copies)
    assert data.features.shape == (rows, features) == (rows, DATASETS[name].features)
    assert data.features.dtype == np.float32
    assert len(data.class_names) == classes == DATASETS[name].classes
    assert data.labels.shape == (rows,)
    assert set(np.unique(data.labels)) == set(range(classes))
    norms = np.linalg.norm(data.features.astype(np.float64), axis=1)
    np.testing.assert_allclose(norms, 1.0, atol=1e-5)
    assert not data.features.flags.writeable


def test_labels_follow_the_class_column(copies):
    table = pq.read_table(copies / "shuttle.parquet", columns=["class"]).to_pandas()
    data = load_dataset("shuttle", data_dir=copies)
    assert data.class_names == tuple(str(k) for k in range(1, 8))  # numeric order, not '1','10',...
    np.testing.assert_array_equal(np.array(data.class_names)[data.labels], table["class"].to_numpy())
    assert np.bincount(data.labels).tolist() == [720, 22, 22, 149, 64, 10, 13]  # the copy's counts


def test_ordinal_encoding_and_missing_values(copies):
    table = read_table("mushroom", copies / "mushroom.parquet")
    raw = table.to_pandas()
    codes = core_datasets.encode_features(table, "ordinal_openml", "mushroom")
    sorted_codes = core_datasets.encode_features(table, "ordinal")
    column = raw["stalk-root"]
    stalk_root = codes[:, raw.columns.get_loc("stalk-root")]
    assert column.isna().sum() == 318  # of the copy's 1000 rows
    np.testing.assert_array_equal(stalk_root[column.isna().to_numpy()], -1.0)
    for name in raw.columns[:-1]:
        declared = core_datasets.OPENML_CATEGORIES["mushroom"][name]  # OpenML's order -> 0, 1, 2, ...
        expected = raw[name].map({value: index for index, value in enumerate(declared)}).fillna(-1.0)
        np.testing.assert_array_equal(codes[:, raw.columns.get_loc(name)], expected.to_numpy(), err_msg=name)
        present = sorted(raw[name].dropna().unique())  # ordinal: sorted values present -> 0, 1, 2, ...
        expected = raw[name].map({value: index for index, value in enumerate(present)}).fillna(-1.0)
        np.testing.assert_array_equal(sorted_codes[:, raw.columns.get_loc(name)], expected.to_numpy(), err_msg=name)
    # gill-attachment declares {a, d, f, n}; the data holds a and f: f is 2 (OpenML), 1 (sorted).
    attachment = raw.columns.get_loc("gill-attachment")
    assert set(codes[:, attachment]) == {0.0, 2.0} and set(sorted_codes[:, attachment]) == {0.0, 1.0}
    # Row scaling of the preprocessed data is applied to exactly these codes.
    data = load_dataset("mushroom", data_dir=copies)
    np.testing.assert_allclose(data.features * np.linalg.norm(codes, axis=1, keepdims=True), codes,
                               atol=1e-5)


def test_onehot_and_standard_scaling(copies):
    raw = pq.read_table(copies / "mushroom.parquet").to_pandas()
    onehot = load_dataset("mushroom", data_dir=copies, encoding="onehot", scaling="standard")
    width = sum(raw[c].nunique() for c in raw.columns if c != "class")
    assert onehot.features.shape == (1000, width)
    means = onehot.features.mean(axis=0, dtype=np.float64)
    np.testing.assert_allclose(means, 0.0, atol=1e-5)
    stds = onehot.features.std(axis=0, dtype=np.float64)
    constant = raw.drop(columns="class").nunique().to_numpy() == 1  # veil-type has one value
    assert constant.sum() == 1
    assert np.all((np.abs(stds - 1.0) < 1e-4) | (stds < 1e-6))
    unscaled = load_dataset("mushroom", data_dir=copies, encoding="onehot")
    # Row-normalised one-hot rows of 22 columns, one missing stalk-root: sqrt(22) or sqrt(21) ones.
    nonzero = (unscaled.features > 0).sum(axis=1)
    assert set(nonzero) == {21, 22}


def test_adult_mixes_numeric_and_categorical(copies):
    ordinal = load_dataset("adult", data_dir=copies)
    onehot = load_dataset("adult", data_dir=copies, encoding="onehot")
    assert ordinal.features.shape[1] == 14
    assert onehot.features.shape[1] > 14 + 8  # 6 numeric columns plus the categories of 8 columns
    # OpenML's (adult.names') order: 'Private' is workclass 0, not 'Federal-gov' (sorted first).
    table = read_table("adult", copies / "adult.parquet")
    raw = table.to_pandas()
    codes = core_datasets.encode_features(table, "ordinal_openml", "adult")
    workclass = codes[:, raw.columns.get_loc("workclass")]
    assert set(workclass[(raw["workclass"] == "Private").to_numpy()]) == {0.0}
    sorted_codes = core_datasets.encode_features(table, "ordinal")
    assert not np.array_equal(codes, sorted_codes)
    numeric = [raw.columns.get_loc(c) for c in ("age", "fnlwgt", "hours-per-week")]
    np.testing.assert_array_equal(codes[:, numeric], sorted_codes[:, numeric])


def test_declared_order_is_openml_arff_header():
    """The adult order equals the @attribute declarations of OpenML 1590's ARFF file, of which
    scikit-learn's tests bundle a copy (the file fetch_openml reads; liac-arff's codes follow it)."""
    import gzip
    import re
    sklearn = pytest.importorskip("sklearn")
    folder = Path(sklearn.__file__).parent / "datasets" / "tests" / "data" / "openml" / "id_1590"
    files = sorted(folder.glob("data-v1-dl-*.arff.gz"))
    if not files:
        pytest.skip("scikit-learn installed without its test data")
    declared = {}
    with gzip.open(files[0], "rt") as handle:
        for line in handle:
            match = re.match(r"@attribute (\S+) \{(.*)\}", line.strip())
            if match and match.group(1) != "class":
                declared[match.group(1)] = tuple(v.strip() for v in match.group(2).split(","))
    assert declared == core_datasets.OPENML_CATEGORIES["adult"]
    # liac-arff (what fetch_openml parsed ARFF with when the reference code ran) codes by that order.
    from sklearn.externals import _arff
    with gzip.open(files[0], "rt") as handle:
        parsed = _arff.load(handle, encode_nominal=True, return_type=_arff.DENSE)
    row = parsed["data"][0]  # 25, Private, 226802, 11th, ...
    names = [name for name, _ in parsed["attributes"]]
    assert row[names.index("workclass")] == 0 and row[names.index("education")] == 2


def test_unknown_category_or_order_is_an_error(copies):
    table = read_table("adult", copies / "adult.parquet")
    with pytest.raises(DatasetError, match="no OpenML category order"):
        core_datasets.encode_features(table, "ordinal_openml", "mushroom")
    with pytest.raises(ValueError, match="unknown encoding"):
        core_datasets.encode_features(table, "binary", "adult")


def test_loading_is_cached_per_file(copies, tmp_path):
    first = load_dataset("mushroom", data_dir=copies)
    assert load_dataset("mushroom", data_dir=copies) is first
    copy = tmp_path / "mushroom.parquet"
    copy.write_bytes((copies / "mushroom.parquet").read_bytes())
    other = load_dataset("mushroom", data_dir=tmp_path)
    assert other is not first
    np.testing.assert_array_equal(other.features, first.features)


def test_data_directory_from_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("BANDITSWEEP_DATA", str(tmp_path / "data"))
    assert data_directory() == tmp_path / "data"
    monkeypatch.delenv("BANDITSWEEP_DATA")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    assert data_directory() == tmp_path / "cache" / "banditsweep" / "datasets"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert data_directory() == Path.home() / ".cache" / "banditsweep" / "datasets"


def test_missing_file_offline_names_dataset_and_directory(tmp_path, no_network):
    with pytest.raises(DatasetError) as caught:
        ensure_dataset("shuttle", data_dir=tmp_path)
    message = str(caught.value)
    assert "'shuttle'" in message and str(tmp_path) in message
    assert "shuttle.parquet" in message and "BANDITSWEEP_DATA" in message and "--data-dir" in message
    assert "network is unreachable" in message
    assert no_network == [40685]
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(DatasetError, match=r"no file shuttle\.parquet in"):
        load_dataset("shuttle", data_dir=tmp_path)


def test_missing_file_without_download(tmp_path, no_network):
    with pytest.raises(DatasetError, match="not found"):
        ensure_dataset("mnist", data_dir=tmp_path, allow_download=False)
    assert no_network == []


def test_missing_scikit_learn_says_how_to_install(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "sklearn.datasets", None)  # import fails as if not installed
    with pytest.raises(DatasetError, match=r"pip install 'banditsweep\[openml\]'"):
        ensure_dataset("adult", data_dir=tmp_path)


def test_offline_download_names_the_network_in_full_and_no_install_advice(tmp_path, monkeypatch):
    """scikit-learn installed, the network missing: the cause is said (whole, through the CLI too),
    and the advice is the network or a file, not installing what is installed."""
    import urllib.error

    from banditsweep.sweeps.cli.main import main

    def offline(data_id, data_home):
        try:
            raise OSError(101, "Network is unreachable")
        except OSError as error:
            raise urllib.error.URLError(error) from error

    monkeypatch.setattr(sweep_datasets, "_fetch_openml", offline)
    with pytest.raises(DatasetError) as caught:
        ensure_dataset("shuttle", data_dir=tmp_path)
    message = str(caught.value)
    assert "this machine cannot reach OpenML (URLError: [Errno 101] Network is unreachable)" in message
    assert "pip install" not in message and "reaches openml.org" in message
    spec = tmp_path / "s.yaml"
    spec.write_text("sweep: s\nhorizon: 10\nseeds: 1\nenvironments: [{kind: classification, dataset: shuttle}]\n"
                    "algorithms: [{name: random}]\n")
    import contextlib
    import io

    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        assert main(["run", str(spec), "--data-dir", str(tmp_path), "--results", str(tmp_path / "r")]) == 2
    printed = err.getvalue()
    assert "Network is unreachable" in printed and printed.rstrip().endswith("downloads it from OpenML (shuttle, id 40685).")


def test_corrupt_file_is_an_error(tmp_path, no_network):
    (tmp_path / "mushroom.parquet").write_bytes(b"PAR1 this is not a parquet file" * 10)
    with pytest.raises(DatasetError, match="not a readable Parquet file") as caught:
        ensure_dataset("mushroom", data_dir=tmp_path)
    assert str(tmp_path / "mushroom.parquet") in str(caught.value)
    with pytest.raises(DatasetError, match="not a readable Parquet file"):
        load_dataset("mushroom", data_dir=tmp_path)
    assert no_network == []  # never silently replaced by a download


def test_wrong_shaped_file_is_an_error(copies, tmp_path, no_network):
    frame = pq.read_table(copies / "magictelescope.parquet").to_pandas()
    frame.drop(columns="fAlpha").to_parquet(tmp_path / "magictelescope.parquet", index=False)
    with pytest.raises(DatasetError, match=r"wrong shape: 10 columns, expected 11"):
        ensure_dataset("magictelescope", data_dir=tmp_path)
    with pytest.raises(DatasetError, match="wrong shape"):
        load_dataset("magictelescope", data_dir=tmp_path)
    assert no_network == []


@pytest.mark.parametrize("change, message", [
    (lambda f: f[[c for c in f.columns if c != "class"] + ["class"]].head(500), "500 rows"),
    (lambda f: f.assign(**{"class": f["class"].where(f["class"] != "h", "g")}), "1 classes"),
    (lambda f: f[["class"] + [c for c in f.columns if c != "class"]], "last column is 'fDist'"),
    (lambda f: f.assign(**{"class": f["class"].map({"g": 0, "h": 1})}), "expected string"),
])
def test_verification_names_the_fault(copies, tmp_path, change, message):
    frame = pq.read_table(copies / "magictelescope.parquet").to_pandas()
    change(frame).to_parquet(tmp_path / "magictelescope.parquet", index=False)
    with pytest.raises(DatasetError, match=message):
        read_table("magictelescope", tmp_path / "magictelescope.parquet")


def _openml_like(frame: pd.DataFrame, numeric_target: bool = False):
    """What fetch_openml(as_frame=True) hands back: categoricals, '?'-free NaNs, OpenML column names."""
    features = frame.drop(columns="class").copy()
    for column in features.columns:
        if features[column].dtype == object or str(features[column].dtype) in ("string", "str"):
            features[column] = pd.Categorical(features[column])
        else:
            features[column] = features[column].astype("float64")
    features = features.rename(columns={"bruises": "bruises%3F"})
    target = frame["class"].astype(float) if numeric_target else pd.Categorical(frame["class"])
    return features, pd.Series(target, name="class")


@pytest.mark.parametrize("name, numeric_target", [("mushroom", False), ("shuttle", True)])
def test_download_is_converted_verified_and_cached(copies, tmp_path, monkeypatch, name, numeric_target):
    source = pq.read_table(copies / f"{name}.parquet").to_pandas()
    calls = []

    def fake_fetch(data_id, data_home):
        calls.append(data_id)
        assert Path(data_home).is_dir()
        return _openml_like(source, numeric_target)

    monkeypatch.setattr(sweep_datasets, "_fetch_openml", fake_fetch)
    target_dir = tmp_path / "new" / "data"
    path = ensure_dataset(name, data_dir=target_dir)
    assert path == target_dir / f"{name}.parquet"
    assert calls == [DATASETS[name].openml_id]
    assert sorted(p.name for p in target_dir.iterdir()) == [f"{name}.parquet"]  # no temporary left
    written = read_table(name, path)
    assert written.schema.names == list(source.columns)
    pd.testing.assert_frame_equal(written.to_pandas(), source, check_dtype=False)
    np.testing.assert_array_equal(load_dataset(name, data_dir=target_dir).features,
                                  load_dataset(name, data_dir=copies).features)
    # Second call: the cached file is used, nothing is fetched.
    assert ensure_dataset(name, data_dir=target_dir) == path
    assert len(calls) == 1


def test_wrong_download_is_not_written(copies, tmp_path, monkeypatch):
    source = pq.read_table(copies / "mushroom.parquet").to_pandas().drop(columns="odor")
    monkeypatch.setattr(sweep_datasets, "_fetch_openml", lambda data_id, data_home: _openml_like(source))
    with pytest.raises(DatasetError, match="downloaded from OpenML id 24 .* wrong shape"):
        ensure_dataset("mushroom", data_dir=tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_ensure_datasets_for_a_sweep(copies, no_network):
    environments = [
        {"kind": "classification", "dataset": "shuttle"},
        {"kind": "synthetic", "function": "h1"},
        {"kind": "classification", "dataset": "mushroom", "horizon": 800},
        {"kind": "classification", "dataset": "shuttle", "encoding": "onehot"},
    ]
    paths = ensure_datasets_for(environments, data_dir=copies)
    assert paths == {"shuttle": copies / "shuttle.parquet", "mushroom": copies / "mushroom.parquet"}
    assert no_network == []


def test_unknown_dataset_name():
    with pytest.raises(DatasetError, match="unknown dataset 'iris'"):
        core_datasets.dataset_path("iris")
