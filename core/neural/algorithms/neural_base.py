"""What every neural bandit of SPEC 1.4-1.5 shares: parameters, the stacked network, the history,
the optimiser and lockstep trial batching.

Each algorithm is written once, batched: its state carries a leading *group* axis, one group per
trial. A policy built through the ordinary constructor is the batch of one; ``create_batch`` builds one
policy for several compatible trials (same algorithm, environment and structural parameters,
different seeds and per-trial values such as nu or lr) and steps them in lockstep, so each trial's
result equals running it alone (to float tolerance; tests/core/neural/test_neural_batching.py).

Per-trial randomness comes only from each trial's own policy stream (core.engine.seeding), consumed in the
same order whether the trial runs alone or in a batch.

Two training recipes (``training``, a parameter of the four baselines NeuralUCB, NeuralTS, DeepFPL
and BootstrappedNN; NeuralRBMLE-GA/-PC always use ``paper``):

- ``paper``: J steps of gradient ascent with step size eta on the (mean-scaled) Gaussian l_lambda of
  eq. (10) — ridge m lambda / 2 ||theta - theta_0||^2 — on the bias-free network of eq. (2); the
  recipe the NeuralRBMLE paper states for all neural methods (App. F: eta = 0.001, J = 100).
- ``reference`` (default for the baselines): what the baselines' open-source code does, which the
  paper says it ran (App. F: "we leverage the open-source implementation provided by NeuralTS";
  uclaml/NeuralTS). ``learner_diag.py`` (NeuralUCB, NeuralTS; DeepFPL, which that code lacks, is
  given the same recipe on its perturbed rewards):

  * lines 9-16: ``nn.Linear(d, m)``, ReLU, ``nn.Linear(m, 1)``: biases, PyTorch's default
    initialisation, no sqrt(m) output factor (``init="default"``, core.neural.networks);
  * line 48: ``self.len += 1`` per observation, so len = t, the rows in the history;
  * line 49: ``optim.SGD(lr=1e-2, weight_decay=lamdba / len)``: a fresh plain SGD (no momentum, no
    state) per training call; weight decay lambda / t pulls every parameter, biases included,
    towards 0 (not theta_0);
  * lines 56-57: training only when len % delay == 0 (``train_every`` = delay; t % k == 0, where the
    paper recipe trains in rounds 1, 1 + k, ...);
  * lines 58-64: 100 full-batch steps of ``nn.MSELoss()`` (the mean, gradient 2 (f - r) / n) on the
    whole history (``steps`` = 100);
  * lines 25-26, 37-38, 44: U = lambda + sum g^2 over every parameter, biases included; the
    exploration term sqrt(sum lambda nu g^2 / U) (``form="reference"``, core.neural.z_matrix).

  ``neural_boost.py`` (BootstrappedNN): lines 8-18 the same network per bootstrap member; line 48
  ``optim.SGD(lr=1e-2)`` without weight decay; line 53 the MSE mean over that member's own data;
  lines 51-55 100 steps every call (no delay); lines 41-47: each member takes the observation with
  probability p, in member order, and the loop stops at the first member still without data.

  In core.neural.training's terms: c1 = 2 lr, row weights 1/n, c2 = lr lambda / t (0 for BootstrappedNN),
  decay target 0. Parameters that recipe fixes default to its values (lr = 0.01, init = default,
  form = reference); under ``training="paper"`` they default to the paper's (0.001, paper, paper).
"""

from __future__ import annotations

import time
from abc import abstractmethod
from typing import ClassVar, Literal

import numpy as np
import torch
from pydantic import Field, model_validator

from banditsweep.core.engine import seeding
from banditsweep.core.engine.contracts import (BatchDecision, BatchedPolicy, Config, Decision, NonFiniteError, Policy,
                                               Problem, first_non_finite)
from banditsweep.core.neural.networks import (StackedNetwork, initial_biases, initial_parameters, output_scale,
                                              rows_of_contexts, rows_to_arms)
from banditsweep.core.neural.training import History, gradient_ascent
from banditsweep.core.engine.canonical import canonical_json
from banditsweep.core.neural.z_matrix import ZMatrix


class NeuralParams(Config):
    """Shared by all neural methods; defaults are the paper's settings (SPEC 1.6)."""

    width: int = Field(100, ge=2, description="hidden width m")
    depth: int = Field(2, ge=2, description="depth L (2 = one hidden layer)")
    steps: int = Field(100, ge=0, description="gradient steps J per training")
    lr: float = Field(0.001, gt=0.0, description="step size eta")
    lam: float = Field(0.001, gt=0.0, description="regulariser lambda (m lambda / 2 ||theta - theta_0||^2, Z_0 = lambda I)")
    init: Literal["paper", "default"] = Field(
        "paper", description="paper: sec. 2.2 init with the sqrt(m) output factor; default: nn.Linear init, no factor")
    objective_scale: Literal["sum", "mean"] = Field(
        "mean", description="project choice: the objective as a sum over the history (eq. 10) or divided by its "
                            "length (same maximiser; keeps eta = 0.001 stable as t grows)")
    train_every: int = Field(1, ge=1, description="rounds between trainings (paper: every round)")
    precision: Literal["float32", "float64"] = Field("float32", description="floating-point type of the network")


class BiasedParams(NeuralParams):
    """The reward-bias weight alpha(t) = nu t^n of NeuralRBMLE (SPEC 1.4)."""

    nu: float = Field(1.0, ge=0.0, description="bias scale nu in alpha(t) = nu t^n")
    alpha_power: float = Field(0.5, ge=0.0, description="exponent n in alpha(t) = nu t^n (paper: 0.5)")


#: Defaults of parameters whose value the baselines' two recipes set differently: the reference
#: code's values are the fields' defaults, these are used under ``training="paper"``.
PAPER_RECIPE = {"lr": 0.001, "init": "paper", "form": "paper"}


class BaselineParams(NeuralParams):
    """NeuralParams of the four baselines, with the training recipe (module docstring)."""

    training: Literal["reference", "paper"] = Field(
        "reference", description="reference: the baselines' code (uclaml/NeuralTS learner_diag.py / neural_boost.py: "
                                 "biases, SGD lr 0.01, weight decay lambda/t towards 0, MSE mean, 100 steps); "
                                 "paper: eq. (10) ascent at eta = 0.001 like NeuralRBMLE, no biases")
    lr: float = Field(0.01, gt=0.0, description="step size: SGD lr (reference, learner_diag.py line 49) or eta "
                                                "(paper; default 0.001 under training=paper)")
    init: Literal["paper", "default"] = Field(
        "default", description="default: nn.Linear init, no factor (reference); paper: sec. 2.2 init with the "
                               "sqrt(m) output factor (the default under training=paper)")

    @model_validator(mode="before")
    @classmethod
    def _paper_recipe_defaults(cls, data):
        if isinstance(data, dict) and data.get("training") == "paper":
            data = dict(data)
            for name, value in PAPER_RECIPE.items():
                if name in cls.model_fields:
                    data.setdefault(name, value)
        return data

    @model_validator(mode="after")
    def _reference_is_the_code(self):
        if self.training == "reference":
            if self.init != "default":
                raise ValueError("training='reference' uses nn.Linear's default initialisation (init='default'), "
                                 "as the reference code does; use training='paper' for init='paper'")
            if self.objective_scale != "mean":
                raise ValueError("training='reference' trains on nn.MSELoss(), a mean (objective_scale='mean')")
        return self


# Parameters that fix tensor shapes or the program: equal within a lockstep batch.
SHARED_STRUCTURE = ("width", "depth", "steps", "init", "objective_scale", "train_every", "precision")
#: The baselines' structure: ``training`` adds the biases (tensor shapes) and changes the program.
BASELINE_STRUCTURE = SHARED_STRUCTURE + ("training",)


class NeuralPolicy(Policy, BatchedPolicy):
    """Base of the neural policies: G trials in lockstep (G = 1 through the ordinary constructor)."""

    STATE = ("params_list", "rngs", "groups", "num_arms", "disjoint", "blocks", "block_dim", "width", "depth",
             "dtype", "torch_device", "block_of_arm", "block_of_arm_np", "reference", "network", "initial", "anchor",
             "history", "seconds_training")

    Params: ClassVar[type[Config]] = NeuralParams
    structural: ClassVar[tuple[str, ...]] = SHARED_STRUCTURE
    # A round trains on the whole history: its cost grows linearly with t (sweeps.planning.plan's cost model).
    round_cost_grows: ClassVar[bool] = True

    def __init__(self, params: Config, problem: Problem, rng: np.random.Generator, device: str = "cpu"):
        super().__init__(params, problem, rng, device)
        self._setup([params], [rng])

    @classmethod
    def create_batch(cls, params: list[Config], problem: Problem, rngs: list[np.random.Generator],
                     environments=(), device: str = "cpu") -> "NeuralPolicy":
        """One policy for several trials of the same problem (lockstep batching)."""
        params_list = params
        policy = cls.__new__(cls)
        Policy.__init__(policy, params_list[0], problem, rngs[0], device)
        policy._setup(params_list, rngs)
        return policy

    # ---- construction ---------------------------------------------------------------------------

    def _setup(self, params_list: list[Config], rngs: list[np.random.Generator]) -> None:
        first = params_list[0]
        for params in params_list[1:]:
            for name in self.structural:
                if getattr(params, name) != getattr(first, name):
                    raise ValueError(f"trials of one batch differ in structural parameter {name!r}")
        self.params_list, self.rngs = params_list, rngs
        self.groups = len(params_list)
        problem = self.problem
        self.num_arms = problem.num_arms
        self.disjoint = problem.disjoint_block is not None
        self.blocks = self.num_arms if self.disjoint else 1
        self.block_dim = problem.disjoint_block or problem.dim
        if self.disjoint and self.block_dim * self.num_arms != problem.dim:
            raise ValueError("disjoint_block * num_arms must equal the context dimension")
        self.width, self.depth = first.width, first.depth
        self.dtype = torch.float64 if first.precision == "float64" else torch.float32
        self.torch_device = torch.device(self.device)
        self.block_of_arm = (torch.arange(self.num_arms) if self.disjoint
                             else torch.zeros(self.num_arms, dtype=torch.long)).to(self.torch_device)
        self.block_of_arm_np = self.block_of_arm.cpu().numpy()
        self.reference = getattr(first, "training", "paper") == "reference"
        # theta_0 is drawn on the CPU from each trial's stream, so CPU and CUDA runs start equal; the
        # reference recipe's biases are drawn after each network's weights.
        networks = []
        for rng in rngs:
            generator = seeding.torch_generator(rng, "cpu")

            def draw(generator=generator):
                weights = initial_parameters(self.width, self.depth, problem.dim, first.init, generator)
                if not self.reference:
                    return weights
                return (*weights, initial_biases(self.width, self.depth, problem.dim, generator))

            networks.append(self.initial_networks(draw))
        self.network = StackedNetwork.stack(networks, self.blocks, self.parameter_sets(),
                                            output_scale(self.width, first.init), self.torch_device, self.dtype)
        self.initial = self.network.clone()
        # What the regulariser pulls towards: theta_0 (eq. 10), or 0 (the reference code's weight decay).
        self.anchor = self.network.zeros_like() if self.reference else self.initial
        self.history = History(self.groups, self.blocks, self.block_dim, self.reserved_rows(), self.mask_sets(),
                               self.torch_device, self.dtype)
        self.seconds_training = 0.0
        self.setup()

    def parameter_sets(self) -> int:
        """S, the networks kept per trial."""
        return 1

    def mask_sets(self) -> int:
        """Columns of the history's likelihood weights (1, or S for per-network resampling)."""
        return 1

    def reserved_rows(self) -> int:
        """Rows per block reserved for the current contexts (used by GA's reward bias)."""
        return 0

    def initial_networks(self, draw) -> list[tuple]:
        """theta_0 of each of the S networks of one trial; ``draw()`` draws one network."""
        network = draw()
        return [network] * self.parameter_sets()

    def setup(self) -> None:
        """Algorithm-specific state (after network and history exist)."""

    # ---- helpers ---------------------------------------------------------------------------------

    def per_trial(self, name: str) -> np.ndarray:
        return np.array([getattr(params, name) for params in self.params_list], dtype=np.float64)

    def alpha(self, t: int) -> np.ndarray:
        """alpha(t) = nu t^n per trial (SPEC 1.4)."""
        return self.per_trial("nu") * float(t) ** self.per_trial("alpha_power")

    def active(self, contexts: np.ndarray) -> torch.Tensor:
        """(G, K, d) contexts -> (G, K, d_b): each arm's own block under the disjoint encoding (SPEC 1.3)."""
        x = torch.as_tensor(np.ascontiguousarray(contexts), device=self.torch_device, dtype=self.dtype)
        if not self.disjoint:
            return x
        G, K = x.shape[:2]
        arms = torch.arange(K, device=self.torch_device)
        return x.view(G, K, K, self.block_dim)[:, arms, arms]

    def should_train(self, t: int) -> bool:
        """Paper recipe: rounds 1, 1 + k, 1 + 2k, ...; reference: when len % delay == 0 with len = t
        (learner_diag.py lines 48, 56-57), i.e. rounds k, 2k, ... (every round for k = 1 either way)."""
        if self.reference:
            return t % self.params.train_every == 0
        return (t - 1) % self.params.train_every == 0

    def weight_decay(self) -> bool:
        """Whether the reference recipe decays the weights (learner_diag.py line 49; not neural_boost.py)."""
        return True

    def step_sizes(self) -> tuple[np.ndarray, np.ndarray]:
        """(c1, c2) per trial. Paper recipe: (eta * scale, eta * scale * m * lambda), scale = 1 or 1 / history
        length. Reference recipe: (2 lr, lr * lambda / t) — SGD on the MSE mean (the 1/n is in the row
        weights, see :meth:`train`) with weight_decay = lambda / len (learner_diag.py line 49), or
        (2 lr, 0) without weight decay (neural_boost.py line 48)."""
        rows = np.maximum(self.history.rows, 1).astype(np.float64)
        lr = self.per_trial("lr")
        if self.reference:
            decay = lr * self.per_trial("lam") / rows if self.weight_decay() else np.zeros(self.groups)
            return 2.0 * lr, decay
        scale = np.ones(self.groups) if self.params.objective_scale == "sum" else 1.0 / rows
        c1 = lr * scale
        return c1, c1 * self.width * self.per_trial("lam")

    def train(self, likelihood: str = "gaussian", bias: torch.Tensor | None = None,
              reward: torch.Tensor | None = None) -> None:
        """J steps of gradient ascent on l_lambda (+ bias) over the history (core.neural.training); under the
        reference recipe the same steps are SGD on the MSE mean with weight decay towards 0 (module
        docstring): each row weighs 1/n, n the rows of that network's data (all rows, or the
        bootstrap member's own, neural_boost.py line 53)."""
        start = time.perf_counter()
        X, observed, mask = self.history.view()
        if self.reference:
            mask = mask / mask.sum(dim=(1, 2), keepdim=True).clamp(min=1.0)
        c1, c2 = self.step_sizes()
        gradient_ascent(self.network, self.anchor, X, observed if reward is None else reward, mask,
                        likelihood, self.params.steps, c1, c2, bias,
                        block_rows=self.history.reserved + self.history.counts)
        self.check_trained()   # also waits for the device, as the training time needs
        self.seconds_training += time.perf_counter() - start

    def check_trained(self) -> None:
        """Raise NonFiniteError when a trial's network parameters left the numbers after training
        (a step size that diverges: the scores of every later round would be NaN). One isfinite
        pass over the parameters, one (G,) flag back from the device."""
        tensors = self.network.tensors()
        finite = torch.stack([p.isfinite().flatten(start_dim=1).all(dim=1) for p in tensors]).all(dim=0).cpu()
        if bool(finite.all()):
            return
        group = int(np.flatnonzero(~finite.numpy())[0])
        value = next(found[1] for found in (first_non_finite(p[group]) for p in tensors) if found is not None)
        raise NonFiniteError(f"the {self.label or type(self).__name__} training diverged: a network parameter "
                             f"is {value} after training", group)

    def current_values(self, x: torch.Tensor) -> torch.Tensor:
        """f(x_{t,a}; theta_s) for every arm and network: (G, K, S)."""
        f, _ = self.network.forward_rows(rows_of_contexts(x, self.disjoint))
        return rows_to_arms(f, self.disjoint)

    def record(self, t: int, x: torch.Tensor, arms: np.ndarray, rewards: np.ndarray,
               weights: np.ndarray | None = None) -> None:
        """Append (x_{t,a_t}, r_t) of every trial to the history."""
        chosen = x[torch.arange(self.groups, device=self.torch_device), torch.as_tensor(arms, device=self.torch_device)]
        self.history.append(chosen, self.block_of_arm_np[arms], rewards, weights)

    # ---- the batched policy -----------------------------------------------------------------------

    def select_batch(self, t: int, contexts: np.ndarray) -> BatchDecision:
        arms, scores = self.choose_arms(t, contexts)
        return BatchDecision(arms, scores=scores, quantity=self.quantity())

    @abstractmethod
    def choose_arms(self, t: int, contexts: np.ndarray) -> tuple[np.ndarray, torch.Tensor]:
        """Contexts (G, K, d) of round t -> one arm per trial (G,) and the (G, K) scores it was chosen
        by, left on the device (the round loop checks them)."""

    @abstractmethod
    def update_batch(self, t: int, contexts: np.ndarray, arms: np.ndarray, rewards: np.ndarray) -> None:
        """Feedback of round t for every trial."""

    def diagnostics_batch(self) -> list[dict[str, float]]:
        """Per-trial diagnostics; times are the batch's totals divided by the batch size."""
        share = {"seconds_training": self.seconds_training / self.groups, **self.extra_diagnostics()}
        return [dict(share) for _ in range(self.groups)]

    def extra_diagnostics(self) -> dict[str, float]:
        return {}

    # ---- the Policy contract (a batch of one) -------------------------------------------------------

    def select(self, t: int, contexts: np.ndarray) -> Decision:
        return self.select_batch(t, contexts[None]).of(0)

    def update(self, t: int, contexts: np.ndarray, arm: int, reward: float) -> None:
        self.update_batch(t, contexts[None], np.array([arm]), np.array([reward], dtype=np.float64))

    @classmethod
    def footprint(cls, params, arms: int, dim: int, horizon: int) -> int:
        """p = d m + (L - 2) m^2 + m network parameters (and biases) per network: the parameters, their
        gradient, theta_0 and the diagonal Z; the round's per-arm gradients (K x p); the history
        (T x d contexts) and the training's activations (T x m per layer); the full Z (p x p, and the
        Sherman-Morrison outer product as large) where ``z: full``."""
        width, depth = params.width, params.depth
        p = dim * width + (depth - 2) * width * width + width + (depth - 1) * width + 1
        networks = getattr(params, "q", 1)
        full = 2 * p * p if getattr(params, "z", "diag") == "full" else 0
        itemsize = 8 if params.precision == "float64" else 4
        return itemsize * (4 * networks * p + 2 * arms * p + horizon * dim + 3 * horizon * width * depth + full)

    def diagnostics(self) -> dict[str, float]:
        return self.diagnostics_batch()[0]

    # ---- lockstep trial batching --------------------------------------------------------------------

    @classmethod
    def batch_key(cls, spec) -> tuple:
        """Trials with equal keys run in one batch: same algorithm, environment and horizon, same
        structural parameters; seeds and the remaining parameters (nu, lr, lam, ...) may differ."""
        structure = tuple((name, spec.params[name]) for name in cls.structural)
        return (spec.algorithm, canonical_json(spec.environment), spec.horizon, structure)


class GradientExplorationPolicy(NeuralPolicy):
    """Base of the methods that explore with g^T Z^{-1} g (PC, NeuralUCB, NeuralTS): owns Z (SPEC 1.4-1.5)."""

    STATE = ("z",)

    z_scale_reference = False  # True when Z accumulates g g^T without the 1/m (reference code form)

    def setup(self) -> None:
        scale = 1.0 if self.z_scale_reference else 1.0 / self.width
        self.z = ZMatrix(self.network, self.per_trial("lam"), scale, self.params.z, self.params.z_inverse)

    def gradients(self, x: torch.Tensor):
        """f(x_{t,a}; theta_hat) and g(x_{t,a}; theta_hat) for every arm (per-sample gradients; with the
        bias gradients under the reference recipe, as BackPACK's grad_batch in learner_diag.py line 37)."""
        return self.network.arm_parameters(self.block_of_arm).forward(x, with_gradient=True)

    def chosen(self, g, arms: np.ndarray):
        """The chosen arm's gradient per trial, as ArmParameters with K = 1."""
        rows = torch.arange(self.groups, device=self.torch_device)
        index = torch.as_tensor(arms, device=self.torch_device)
        return g.select(rows, index), self.block_of_arm[index]

    def extra_diagnostics(self) -> dict[str, float]:
        return {"z_inverse_seconds": self.z.seconds / self.groups}
