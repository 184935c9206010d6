"""The classification bandit (SPEC 1.2) on the dataset files for tests."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pydantic
import pytest
from paths import TEST_DATASETS

from banditsweep.core.engine import registry, seeding
from banditsweep.core.engine.contracts import Decision
from banditsweep.core.neural.datasets import DatasetError, load_dataset
from banditsweep.core.neural.classification import ClassificationBandit, ClassificationConfig
from banditsweep.core.engine.trial import TrialSpec, run_trial

ROWS = 1000  # every dataset copy in tests/data


@pytest.fixture(autouse=True)
def data_dir(monkeypatch) -> Path:
    if not (TEST_DATASETS / "shuttle.parquet").is_file():
        pytest.fail(f"the dataset copies for tests are expected in {TEST_DATASETS} "
                    "(tests/data, or the directory BANDITSWEEP_TEST_DATASETS names)")
    monkeypatch.setenv("BANDITSWEEP_DATA", str(TEST_DATASETS))
    return TEST_DATASETS


def make(dataset: str, horizon: int, seed: int = 0, **settings) -> ClassificationBandit:
    config = ClassificationConfig(dataset=dataset, **settings)
    return ClassificationBandit(config, horizon, seeding.stream(seed, seeding.ENVIRONMENT_STREAM))


def test_registered_under_its_kind():
    assert registry.environment_class("classification") is ClassificationBandit


@pytest.mark.parametrize("dataset, arms, block", [("shuttle", 7, 9), ("mushroom", 2, 22), ("covertype", 7, 54)])
def test_problem_shape(dataset, arms, block):
    env = make(dataset, 50)
    problem = env.problem
    assert (problem.num_arms, problem.dim, problem.disjoint_block, problem.horizon) == (arms, arms * block, block, 50)
    assert env.contexts(1).shape == (arms, arms * block)


def test_onehot_changes_the_block_width():
    env = make("mushroom", 10, encoding="onehot")
    width = load_dataset("mushroom", encoding="onehot").features.shape[1]
    assert width > 22
    assert env.problem.disjoint_block == width and env.problem.dim == 2 * width


def test_disjoint_encoding():
    env = make("shuttle", 30, seed=3)
    data = load_dataset("shuttle")
    k, block = 7, 9
    for t in (1, 2, 30):
        contexts = env.contexts(t).reshape(k, k, block)
        row = data.features[env.row(t)]
        for arm in range(k):
            for other in range(k):
                expected = row if arm == other else np.zeros(block)
                np.testing.assert_array_equal(contexts[arm, other], expected)


def test_reward_and_regret():
    env = make("shuttle", 100, seed=1)
    data = load_dataset("shuttle")
    cumulative = 0.0
    for t in range(1, 101):
        label = int(data.labels[env.row(t)])
        arm = label if t % 3 else (label + 1) % 7
        feedback = env.step(t, Decision(arm=arm))
        assert feedback.reward == (1.0 if arm == label else 0.0)
        assert feedback.regret == 1.0 - feedback.reward
        cumulative += feedback.regret
        assert feedback.cumulative_regret == cumulative
    assert cumulative == 33.0  # exactly the rounds t = 3, 6, ..., 99 played a wrong arm


def test_rows_without_replacement_in_a_seed_dependent_order():
    env = make("mushroom", 800, seed=0)
    rows = [env.row(t) for t in range(1, 801)]
    assert len(set(rows)) == 800
    again = make("mushroom", 800, seed=0)
    assert [again.row(t) for t in range(1, 801)] == rows
    other = make("mushroom", 800, seed=1)
    assert [other.row(t) for t in range(1, 801)] != rows
    assert rows != sorted(rows)
    full = make("mushroom", ROWS, seed=0)
    assert sorted(full.row(t) for t in range(1, ROWS + 1)) == list(range(ROWS))


def test_horizon_larger_than_dataset_is_an_error():
    with pytest.raises(ValueError, match="horizon 1001 exceeds the 1000 rows of mushroom"):
        make("mushroom", ROWS + 1)


def test_config_is_validated():
    with pytest.raises(pydantic.ValidationError):
        ClassificationConfig(dataset="iris")
    with pytest.raises(pydantic.ValidationError):
        ClassificationConfig(dataset="adult", encoding="binary")
    with pytest.raises(pydantic.ValidationError):
        ClassificationConfig(dataset="adult", shuffle=False)


def test_missing_file_is_a_dataset_error(monkeypatch, tmp_path):
    monkeypatch.setenv("BANDITSWEEP_DATA", str(tmp_path))
    with pytest.raises(DatasetError, match=f"'adult' not found: there is no file adult.parquet in {tmp_path}"):
        make("adult", 10)


def test_trial_through_the_registry():
    spec = TrialSpec.create("linucb", {}, {"kind": "classification", "dataset": "shuttle"}, 0, 200)
    assert spec.environment == {"kind": "classification", "dataset": "shuttle",
                                "encoding": "ordinal_openml", "scaling": "rownorm"}
    assert spec.environment_label == "classification:shuttle"
    result = run_trial(spec)
    assert result.arm.shape == (200,) and set(np.unique(result.arm)) <= set(range(7))
    np.testing.assert_array_equal(result.regret, 1.0 - result.reward)
    np.testing.assert_array_equal(result.cum_regret, np.cumsum(result.regret))
    assert result.diagnostics["dataset_rows"] == float(ROWS)
    # Shuttle (the copy too) is over 70% class 1; a learner should beat playing one fixed wrong arm by far.
    assert result.final_regret < 100
    np.testing.assert_array_equal(run_trial(spec).arm, result.arm)
    standardised = TrialSpec.create("linucb", {}, {"kind": "classification", "dataset": "shuttle",
                                            "scaling": "standard"}, 0, 200)
    assert standardised.trial_id != spec.trial_id
    assert standardised.environment_label == "classification:shuttle,scaling=standard"


def test_ga_on_shuttle_is_unchanged_by_buckets_gram_form_and_threads(monkeypatch):
    """Shuttle's skewed classes give blocks of very different heights (buckets), d' = 9 gives the Gram
    form while blocks are short, and 2 threads split GA's 7 optimisations: the trial through the
    registry equals the one computed by the generic layer-by-layer optimiser on one thread."""
    import torch

    from banditsweep.core.neural import training

    spec = TrialSpec.create("neural_rbmle_ga", {"width": 8, "steps": 4, "lr": 0.05, "nu": 0.1,
                                                "precision": "float64"},
                            {"kind": "classification", "dataset": "shuttle"}, 3, 60)
    threads = torch.get_num_threads()
    monkeypatch.setattr(training, "MIN_CHUNK_FLOPS", 0.0)  # this small network still splits
    monkeypatch.setattr(training, "BUCKET_OVERHEAD_FLOPS", {"cpu": 0.0, "cuda": 0.0})  # and still cuts buckets
    buckets = []
    cut = training.bucket_blocks
    monkeypatch.setattr(training, "bucket_blocks", lambda *args, **kw: buckets.append(cut(*args, **kw)) or buckets[-1])
    torch.set_num_threads(2)
    try:
        fast = run_trial(spec)
    finally:
        torch.set_num_threads(threads)
    heights = []

    def layerwise(*args):
        heights.append(np.asarray(args[10]).max(axis=0))  # block_rows of the call
        return training.ascend_layers(*args)

    monkeypatch.setattr(training, "ascend_one_hidden_layer", layerwise)
    monkeypatch.setattr(training, "MIN_CHUNK_FLOPS", float("inf"))
    plain = run_trial(spec)
    assert np.ptp(heights[-1]) > 10 and min(heights[-1]) < 9  # skewed blocks, some shorter than d'
    assert len(buckets[-1]) == 3 and min(height for _, height in buckets[-1]) < 9  # Gram form in use
    np.testing.assert_array_equal(fast.arm, plain.arm)
    np.testing.assert_allclose(fast.cum_regret, plain.cum_regret)
