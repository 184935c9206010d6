"""Classification bandit (SPEC 1.2; NeuralRBMLE paper App. F, as the NeuralUCB/NeuralTS code).

A dataset row (x, y) with d' features and K classes becomes one round with K arms. Arm i's context
is the disjoint encoding

    x_{t,i} = (0_{d' i}, x, 0_{d' (K - i - 1)})  in R^{d' K},

i.e. x placed in the i-th block of d' columns. The reward is 1 if the chosen arm is the true class
y, else 0; the regret of the round is 1 - reward (the best arm always earns 1). Rows are drawn
without replacement, in a shuffled order drawn from the trial's environment stream, so a horizon
longer than the dataset is an error (the paper runs Mushroom, 8124 rows, for T = 8000).

The dataset file is read from the data directory (``BANDITSWEEP_DATA``, see
:mod:`banditsweep.core.neural.datasets`); the directory is where the data lives, not what the trial
computes, so it is not part of the configuration (nor of the trial id).
"""

from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import Field

from banditsweep.core.engine.contracts import Config, Decision, Environment, Feedback, Problem
from banditsweep.core.neural.datasets import DATASETS, Encoding, dataset_path, load_dataset


# The datasets as the papers name them.
DATASET_TITLES = {"adult": "Adult", "covertype": "Covertype", "magictelescope": "MagicTelescope",
                  "mushroom": "Mushroom", "shuttle": "Shuttle", "mnist": "MNIST"}


class ClassificationConfig(Config):
    dataset: Literal["adult", "covertype", "magictelescope", "mushroom", "shuttle", "mnist"] = Field(
        description="the OpenML dataset; its classes are the arms")
    encoding: Encoding = Field(
        "ordinal_openml", description="categorical features: ordinal_openml (codes in OpenML's declared order, the "
                                      "reference code's), ordinal (sorted values) or onehot")
    scaling: Literal["rownorm", "standard"] = Field(
        "rownorm", description="rownorm: each row scaled to unit norm; standard: each column to mean 0, std 1")


class ClassificationBandit(Environment):
    """Classification bandit: a dataset row per round, its classes the arms, reward 1 for the true class."""

    STATE = ("_block", "_features", "_labels", "_arms", "_order", "_cumulative")

    Config = ClassificationConfig
    label_field = "dataset"
    title_fields = ("dataset",)

    @classmethod
    def title(cls, config: ClassificationConfig) -> str:
        return DATASET_TITLES.get(config.dataset, config.dataset)

    def __init__(self, config: ClassificationConfig, horizon: int, rng: np.random.Generator):
        super().__init__(config, horizon, rng)
        data = load_dataset(config.dataset, encoding=config.encoding, scaling=config.scaling)
        rows, self._block = data.features.shape
        if horizon > rows:
            raise ValueError(
                f"horizon {horizon} exceeds the {rows} rows of {config.dataset} "
                f"({dataset_path(config.dataset)}); rows are drawn without replacement, so use a "
                f"horizon of at most {rows} for this dataset (an environment entry may set its own "
                f"`horizon:`)")
        self._features = data.features
        self._labels = data.labels
        self._arms = len(data.class_names)
        self._order = rng.permutation(rows)[:horizon]
        self._cumulative = 0.0

    @classmethod
    def footprint(cls, config: ClassificationConfig, horizon: int) -> tuple[int, int, int]:
        # The whole dataset as float32 features, read and encoded (two copies at the peak); one-hot
        # encoding widens it further (by the categories, unknown before reading).
        info = DATASETS[config.dataset]
        return info.classes, info.features * info.classes, 4 * 2 * info.rows * info.features + 8 * horizon

    @property
    def problem(self) -> Problem:
        return Problem(num_arms=self._arms, dim=self._block * self._arms, horizon=self.horizon,
                       disjoint_block=self._block)

    def row(self, t: int) -> int:
        """Index in the dataset of the row played in round t."""
        return int(self._order[t - 1])

    def contexts(self, t: int) -> np.ndarray:
        k, block = self._arms, self._block
        contexts = np.zeros((k, k, block))
        contexts[np.arange(k), np.arange(k)] = self._features[self._order[t - 1]]
        return contexts.reshape(k, k * block)

    def step(self, t: int, decision: Decision) -> Feedback:
        reward = 1.0 if decision.arm == self._labels[self._order[t - 1]] else 0.0
        regret = 1.0 - reward
        self._cumulative += regret
        return Feedback(reward=reward, regret=regret, cumulative_regret=self._cumulative)

    def diagnostics(self) -> dict[str, float]:
        return {"dataset_rows": float(len(self._labels)), "feature_dim": float(self._block)}
