"""Every random stream of a trial derives from its seed.

The environment and the policy get independent streams, so that for one seed every algorithm
meets the same environment draws (common random numbers make algorithm comparisons sharper).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # torch is imported by the algorithms that use it, not by every trial
    import torch

ENVIRONMENT_STREAM = 0
POLICY_STREAM = 1


def stream(seed: int, which: int) -> np.random.Generator:
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence([seed, which])))


def torch_generator(rng: np.random.Generator, device: "str | torch.device" = "cpu") -> "torch.Generator":
    """A torch generator seeded from (and advancing) a numpy stream."""
    import torch

    generator = torch.Generator(device=device)
    generator.manual_seed(int(rng.integers(0, 2**63 - 1)))
    return generator
