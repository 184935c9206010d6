"""Surrogate log-likelihoods of NeuralRBMLE (SPEC 1.4, paper eq. 9 and sec. 6).

Each term is log p(r | x; theta) = r f - b(f) for a canonical exponential family with log-partition b,
evaluated at f = f(x; theta):

- ``gaussian``:  b(z) = z^2 / 2            -> r f - f^2 / 2   (= -(f - r)^2 / 2 up to a constant)
- ``bernoulli``: b(z) = log(1 + e^z)       -> r f - log(1 + e^f)
- ``mixture``:   the Gaussian term plus the Bernoulli term (paper sec. 6, Fig. 2).

``derivative`` is d/df of the term; the optimiser (core.neural.training) multiplies it by g(x; theta)
to get the gradient of the log-likelihood, so no autograd graph is built per step.
"""

from __future__ import annotations

import torch
from torch.nn import functional



def value(name: str, reward: torch.Tensor, f: torch.Tensor) -> torch.Tensor:
    """r f - b(f), elementwise."""
    if name == "gaussian":
        return reward * f - 0.5 * f * f
    if name == "bernoulli":
        return reward * f - functional.softplus(f)
    if name == "mixture":
        return 2.0 * reward * f - 0.5 * f * f - functional.softplus(f)
    raise ValueError(f"unknown likelihood {name!r}")


def derivative(name: str, reward: torch.Tensor, f: torch.Tensor) -> torch.Tensor:
    """d/df (r f - b(f)) = r - b'(f), elementwise."""
    if name == "gaussian":
        return reward - f
    if name == "bernoulli":
        return reward - torch.sigmoid(f)
    if name == "mixture":
        return 2.0 * reward - f - torch.sigmoid(f)
    raise ValueError(f"unknown likelihood {name!r}")
