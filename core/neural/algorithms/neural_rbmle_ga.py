"""NeuralRBMLE-GA (paper Algorithm 1; SPEC 1.4).

Each arm a keeps its own parameter vector theta~_{t,a}, all starting at theta_0. In round t, for every
arm, J steps of gradient ascent with step size eta, warm-started from the arm's previous vector, on

    l_lambda(F_t; theta) + alpha(t) f(x_{t,a}; theta)                        (eq. 12, with eq. 9-10)

and then the arm with the largest index

    I_{t,a} = l_lambda(F_t; theta~_{t,a}) + alpha(t) zeta f(x_{t,a}; theta~_{t,a})    (eq. 13, Alg. 1 line 8)

is played, with alpha(t) = nu t^n (n = ``alpha_power``, paper 0.5) and the surrogate likelihood
r f - b(f) of ``likelihood`` (gaussian | bernoulli | mixture, core.neural.likelihoods).

The K optimisations are one batched computation: the K vectors are the S = K stacked parameter sets
of core.neural.networks, trained together by core.neural.training.gradient_ascent, with the reward bias entering as
a per-set weight alpha(t) on arm a's context (the "reserved" history rows). No loop over arms.
With ``train_every`` > 1 the vectors are re-optimised only every that many rounds; the index (eq. 13)
is evaluated every round.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
import torch
from pydantic import Field

from banditsweep.core.neural.algorithms.neural_base import SHARED_STRUCTURE, BiasedParams, NeuralPolicy
from banditsweep.core.neural.networks import rows_of_contexts
from banditsweep.core.neural.training import log_likelihood


class NeuralRBMLEGAParams(BiasedParams):
    likelihood: Literal["gaussian", "bernoulli", "mixture"] = Field(
        "gaussian", description="surrogate likelihood b of eq. (9) (paper sec. 6)")
    zeta: float = Field(1.0, ge=0.0, description="zeta(t) in the index of Alg. 1 line 8 (constant)")


class NeuralRBMLEGA(NeuralPolicy):
    """NeuralRBMLE-GA (NeuralRBMLE paper, Algorithm 1): reward-biased MLE by gradient ascent, one network per arm."""

    STATE = ("last_index",)

    Params = NeuralRBMLEGAParams
    label = "NeuralRBMLE-GA"
    score_name = "index"
    structural = SHARED_STRUCTURE + ("likelihood",)

    def parameter_sets(self) -> int:
        return self.num_arms  # one theta~_{t,a} per arm

    def reserved_rows(self) -> int:
        # Arm a's current context, in its own block (disjoint) or all K in the single dense block.
        return 1 if self.disjoint else self.num_arms

    def _current(self, f: torch.Tensor) -> torch.Tensor:
        """Entries of a (G, B, n, S) row tensor at (arm a's reserved row, set a): (G, K)."""
        arms = torch.arange(self.num_arms, device=self.torch_device)
        return f[:, arms, 0, arms] if self.disjoint else f[:, 0, arms, arms]

    def choose_arms(self, t: int, contexts: np.ndarray):
        """Alg. 1, one round for G lockstep trials of K arms.

        Shapes: ``contexts`` (G, K, d); the history view ``X`` (G, B, n, d') with B blocks (K when the
        arms' features are disjoint, else 1) of n rows, ``reward`` and ``mask`` (G, B, n); the index
        (G, K). Returns the chosen arms (G,) and the index."""
        x = self.active(contexts)
        # Arm a's current context x_{t,a} joins the history as its reserved row (the bias term's input).
        self.history.set_current(rows_of_contexts(x, self.disjoint))
        X, reward, mask = self.history.view()
        alpha = self.alpha(t)                                    # alpha(t) = nu t^n, (G,)
        # Alg. 1 lines 4-7: for every arm a, J ascent steps on l_lambda(F_t; theta) + alpha(t) f(x_{t,a}; theta)
        # (eq. 12), warm-started: the K problems as K parameter sets of one batched network.
        if self.should_train(t):
            # d/df of alpha(t) f(x_{t,a}; theta_a): alpha(t) on arm a's row, for parameter set a only.
            bias = torch.zeros(*X.shape[:3], self.num_arms, device=self.torch_device, dtype=self.dtype)
            arms = torch.arange(self.num_arms, device=self.torch_device)
            alpha_t = torch.as_tensor(alpha, device=self.torch_device, dtype=self.dtype).view(-1, 1)
            if self.disjoint:
                bias[:, arms, 0, arms] = alpha_t
            else:
                bias[:, 0, arms, arms] = alpha_t
            self.train(self.params.likelihood, bias=bias)
        # Alg. 1 line 8 (eq. 13): I_{t,a} = l_lambda(F_t; theta~_{t,a}) + alpha(t) zeta f(x_{t,a}; theta~_{t,a}).
        likelihood, f = log_likelihood(self.network, self.initial, X, reward, mask, self.params.likelihood,
                                       self.width * self.per_trial("lam"))          # (G, K), (G, B, n, K)
        index = likelihood + torch.as_tensor(alpha * self.per_trial("zeta"), device=self.torch_device,
                                             dtype=self.dtype).view(-1, 1) * self._current(f)
        self.last_index = index
        return index.argmax(dim=1).cpu().numpy(), index

    def update_batch(self, t: int, contexts: np.ndarray, arms: np.ndarray, rewards: np.ndarray) -> None:
        # Alg. 1 line 9: (x_{t,a_t}, r_t) joins F_{t+1}; the next round's ascent starts from theta~_{t,a}.
        self.record(t, self.active(contexts), arms, rewards)
