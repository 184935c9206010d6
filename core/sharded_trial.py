"""The coordinator of one sharded adversarial-kernel trial (SPEC 4; the shards: core.kernel_shards):
the kind of the one round loop (core.round_loop.RoundLoop) whose state is held by shards in other
processes.

:class:`ShardedKernelTrial` differs from the in-process ``core.trial.TrialRun`` only where the round
loop lets a kind differ: a round is played by a few small messages to the shards (the shards learn
and move the environment on while they report, so the loop has nothing left to learn after its
checks), and the state is saved as each shard's part, written where the shard runs, and then the
coordinator's own, which names the round of the parts. The loop itself, the recording and its
finiteness checks, the results and the checkpoint driver are the round loop's. The preparation
shares core.exp3's schedules and Fedorov-Wynn iteration with the unsharded algorithms.

:func:`run_sharded` plays a trial out over a :class:`~banditsweep.core.sharding.ShardGroup`:
``core.sharding.LocalShards`` in one process, ``workers.execution.sharded_trials.RayShards`` over Ray actors.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import linalg

from banditsweep.core import domains, seeding
from banditsweep.core.contracts import Feedback
from banditsweep.core.environments.adversarial_kernel import AdversarialKernelBandit, RegretTally, kernel_problem
from banditsweep.core.exp3 import (RLS_BETA_FACTOR, APGSchedule, DesignStep, Exp3Schedule, fedorov_wynn,
                                   pgreedy_tolerance)
from banditsweep.core.kernel_shards import MAX_LEVELS, check_shardable
from banditsweep.core.kernels import Kernel
from banditsweep.core.round_loop import (Checkpoints, Played, ProgressCallback, RoundLoop, TrialResult, check_values,
                                         play_out)
from banditsweep.core.sharding import ShardGroup, derive_key, fixed_bound, from_fixed, global_argmax, owner
from banditsweep.core.state_codec import StateFormatError, encode_state
from banditsweep.core.trial import TrialSpec, checkpoint_key, resolve_algorithm, resolve_environment

# The seeding stream of the sampler's keyed draws (core.seeding has 0: environment, 1: policy).
SAMPLER_STREAM = 2


@dataclass
class Landmarks:
    """The landmarks S_t of RLS-Kernelized Exp3's sampler, gathered from the shards."""

    index: np.ndarray      # global indices, increasing
    points: np.ndarray
    roots: np.ndarray      # sqrt(P_t) at the landmarks
    weights: np.ndarray    # 1 / sqrt(p_i)

    @classmethod
    def gather(cls, parts) -> "Landmarks":
        index, points, probabilities, *weights = (np.concatenate(column) for column in zip(*parts))
        return cls(index, points, np.sqrt(probabilities), weights[0] if weights else np.ones(len(index)))

    def block(self, kernel: Kernel) -> np.ndarray:
        """S^T K~ S, with K~ the P_t-weighted kernel."""
        return self.roots[:, None] * kernel(self.points, self.points) * self.roots[None, :]


class ShardedKernelTrial(RoundLoop):
    """The coordinator of one sharded trial: the one round loop (core.round_loop.RoundLoop) of a
    trial whose state is held by a group of :class:`KernelShard`. A round is played by messages to
    the shards (:meth:`play`); the state is saved as the coordinator's own under the trial's key and
    each shard's part beside it (:meth:`save`), and taken back by :meth:`resume`."""

    def __init__(self, spec: TrialSpec, group: ShardGroup):
        check_shardable(spec)
        self.begin([spec])
        config = resolve_environment(spec.environment)
        self.n, self.dim = domains.size(config.setting, config.domain, spec.horizon)
        self.kernel = Kernel.create(config.kernel, self.dim, config.lengthscale, config.nu)
        self.norm_bound = config.norm_bound
        self.params = resolve_algorithm(spec.algorithm, spec.params)
        self.rng = seeding.stream(spec.seed, seeding.POLICY_STREAM)
        self.sampler_key = derive_key(spec.seed, SAMPLER_STREAM)
        self.tally = RegretTally()
        self.choices = np.zeros(config.candidates, dtype=np.int64)
        self.landmark_counts: list[int] = []
        self.effective_dimensions: list[float] = []
        self.values: dict[str, float] = {}
        self.saved_round: int | None = None   # the round whose shard parts the saved coordinator state names
        self.group: ShardGroup | None = None
        self.attach(group)
        maxima = self.group.map("table_maxima")
        self.table_max = np.max(np.stack(maxima), axis=0)
        self.prepare()

    @property
    def spec(self) -> TrialSpec:
        return self.specs[0]

    def attach(self, group: ShardGroup) -> None:
        expected_n = group.ranges[-1][1] if group.ranges else 0
        if expected_n != self.n or group.ranges[0][0] != 0:
            raise ValueError(f"the shards cover 0..{expected_n}, the domain has {self.n} points")
        self.group = group

    # ---- checkpoints: the coordinator's state, each shard's part beside it -----------------------

    def coordinator_state(self) -> bytes:
        """The coordinator's own state between two rounds (the shards keep theirs: KernelShard.state)."""
        group, self.group = self.group, None
        try:
            return encode_state(self.__dict__)
        finally:
            self.group = group

    def save(self, checkpoints: Checkpoints, key: str) -> None:
        """Each shard saves its part of this round where it runs, then the coordinator its state: a
        round counts once the coordinator's state names it, and only then are the parts of the
        round saved before removed."""
        at = self.next_round - 1
        if not all(self.group.map("save_part", checkpoints, key, at)):
            return
        previous, self.saved_round = self.saved_round, at
        if not checkpoints.save(key, self.coordinator_state()):
            self.saved_round = previous
            return
        if previous is not None and previous != at:
            self.group.map("discard_part", checkpoints, key, previous)

    @classmethod
    def check_state(cls, state: bytes, spec: TrialSpec) -> dict:
        """The coordinator's stored attributes if they are ``spec``'s; :class:`StateFormatError` otherwise."""
        values = cls.saved_attributes(state, [spec])
        if values.get("saved_round") != values["next_round"] - 1:
            raise StateFormatError("the state names no shard parts of its round")
        return values

    @classmethod
    def resume(cls, state: bytes, group: ShardGroup, spec: TrialSpec, checkpoints: Checkpoints,
               key: str) -> "ShardedKernelTrial":
        """The trial saved under ``key`` (``state``: the coordinator's), on ``group``'s shards. Every
        shard checks its part before any takes it, so that a damaged, planted or foreign file is
        refused (:class:`StateFormatError`) and the trial starts from round 1 on untouched shards."""
        values = cls.check_state(state, spec)
        problems = [problem for problem in group.map("check_part", checkpoints, key, values["saved_round"]) if problem]
        if problems:
            raise StateFormatError("; ".join(problems))
        group.map("load_part", checkpoints, key, values["saved_round"])
        trial = cls.from_attributes(values)
        trial.attach(group)
        return trial

    # ---- preparation -----------------------------------------------------------------------------

    def pivots(self, length: int, noise: float | None, tolerance: float | None) -> tuple[list[int], float]:
        """Distributed pivoted Cholesky: MVR (``noise`` = lambda, fixed ``length``) or P-greedy (stop
        when max sqrt(power) <= ``tolerance``). Returns the pivots and the final largest power."""
        candidate = global_argmax(self.group.map("pivot_candidate"))
        sequence: list[int] = []
        while len(sequence) < length:
            value, pick = candidate
            if tolerance is not None and math.sqrt(max(value, 0.0)) <= tolerance:
                break
            sequence.append(pick)
            point, values = self.group.call(owner(self.group.ranges, pick), "pivot_row", pick)
            denominator = math.sqrt(value + noise) if noise is not None else math.sqrt(value)
            candidate = global_argmax(self.group.map("pivot_add", point, values, denominator))
        return sequence, candidate[0]

    def prepare(self) -> None:
        algorithm = self.spec.algorithm
        if algorithm == "random":
            self.dots = np.sum(np.stack(self.group.map("uniform_dots")), axis=0)
            return
        problem = kernel_problem(self.n, self.dim, self.horizon, self.kernel, self.norm_bound)
        if algorithm == "rls_kernel_exp3":
            self.schedule = Exp3Schedule(self.params, problem, beta_factor=RLS_BETA_FACTOR)
            sequence, _ = self.pivots(self.schedule.design_length, self.params.lam, None)
            self.group.map("pivots_done", False)
            self.group.map("set_exploration_sequence", np.asarray(sequence, dtype=np.int64))
            self.eta, self.alpha = self.schedule.eta, self.schedule.alpha
            self.values = {**self.schedule.as_dict(), "delta": self.params.delta,
                           "mvr_distinct_points": float(len(set(sequence))), "mvr_landmarks": 0.0}
        else:
            self.prepare_apg()
        self.log_totals = self.group.map("log_partition")

    def prepare_apg(self) -> None:
        """Newton basis by P-greedy, G-optimal design by Frank-Wolfe (SPEC 3.5; the schedule and the
        design's iteration are core.exp3's, as for the unsharded APG-Exp3)."""
        params = self.params
        pivots, max_power = self.pivots(self.n, None, pgreedy_tolerance(params, self.n, self.horizon))
        self.group.map("pivots_done", True)
        schedule = APGSchedule(params, self.n, self.horizon, len(pivots), math.sqrt(max(max_power, 0.0)))
        bound = fixed_bound(max(float(np.max(self.kernel.diag(np.zeros((1, self.dim))))), 1.0)
                            if self.kernel.name != "linear" else float(self.dim) / self.kernel.lengthscale ** 2)
        g_max, iterations = fedorov_wynn(ShardedDesign(self.group, bound), len(pivots), params.epsilon,
                                         params.max_iterations)
        support = sum(self.group.map("design_done"))
        self.eta, self.alpha = schedule.eta, schedule.alpha
        self.values = schedule.values(g_max, iterations, support)

    # ---- rounds ----------------------------------------------------------------------------------

    def play(self, t: int) -> Played:
        if self.spec.algorithm == "random":
            arm = int(self.rng.integers(self.n))
            dots = self.dots
            chosen = self.adversary(dots)
            results = self.group.map("play", chosen, arm)
            best = max(result[0] for result in results)
            reward = next(result[1] for result in results if result[1] is not None)
        else:
            arm, chosen, dots, reward, best = self.exp3_round(t)
        # The shards have learnt and moved the environment on already: nothing is left to learn.
        return Played(np.array([arm]), [self.feedback(chosen, reward, float(dots[chosen]), best)])

    def feedback(self, chosen: int, reward: float, expected: float, best: float) -> Feedback:
        """Both regret forms of SPEC 2.1, as AdversarialKernelBandit.step computes them."""
        self.choices[chosen] += 1
        increment, regret, expected_regret = self.tally.add(reward, expected, best)
        return Feedback(reward, increment, regret, {"expected_regret": expected_regret, "adversary_choice": float(chosen)})

    def reporter(self, trial: int) -> type[AdversarialKernelBandit]:
        return AdversarialKernelBandit

    def adversary(self, dots: np.ndarray) -> int:
        """argmax_i (max_x f^(i)(x) - sum_x P_t(x) f^(i)(x)), ties to the smallest i (SPEC 2.3)."""
        return int(np.argmax(self.table_max - dots))

    def exp3_round(self, t: int):
        # P_t from the log-partition partials, re-centred on the global maximum of the log-weights.
        shift = max(top for top, _ in self.log_totals)
        total = sum(part * math.exp(top - shift) for top, part in self.log_totals)
        parts = self.group.map("distribution", shift, math.log(total), self.alpha)
        masses = [mass for mass, _, _ in parts]
        # The round loop's check of P_t (core.round_loop.check_decision), on what reaches the coordinator: a
        # NaN or infinite P_t anywhere makes its shard's mass so.
        check_values(t, np.array([masses]), f"{self.spec.policy_class.quantity()} mass", entry="shard")
        dots = np.sum(np.stack([d for _, d, _ in parts]), axis=0)
        chosen = self.adversary(dots)
        # x_t ~ P_t by inversion (core.exp3.sample): one uniform number of the policy stream.
        target = self.rng.random() * sum(masses)
        shard, offset = len(masses) - 1, 0.0
        for i, mass in enumerate(masses):
            if target < offset + mass or i == len(masses) - 1:
                shard = i
                break
            offset += mass
        arm, features = self.group.call(shard, "locate", target - offset)
        if self.spec.algorithm == "apg_exp3":
            information = np.sum(np.stack([q for _, _, q in parts]), axis=0)
            reward_value = self.reward_at(shard, chosen, arm)
            try:
                theta = linalg.cho_solve(linalg.cho_factor(information, lower=True, check_finite=False),
                                         features * reward_value, check_finite=False)
            except linalg.LinAlgError:
                theta = np.linalg.lstsq(information, features * reward_value, rcond=None)[0]
            results = self.group.map("apg_update", theta, self.eta, chosen, arm)
        else:
            reward_value = self.reward_at(shard, chosen, arm)
            results = self.rls_estimate(t, chosen, arm, reward_value)
        self.log_totals = [(top, part) for top, part, _, _ in results]
        best = max(result[2] for result in results)
        return arm, chosen, dots, reward_value, best

    def reward_at(self, shard: int, chosen: int, arm: int) -> float:
        return float(self.group.call(shard, "value", chosen, arm))

    def landmarks(self, t: int) -> Landmarks:
        """S_t: recursive RLS-Nystrom (the practical fixed-ridge variant, core.nystrom) with the
        halvings and keep decisions drawn from keyed streams (module docstring)."""
        params, mu = self.params, self.schedule.mu
        level_key = derive_key(self.sampler_key, t, 0)
        counts = np.sum(np.stack(self.group.map("level_counts", level_key)), axis=0)
        smallest = next((level for level in range(MAX_LEVELS) if counts[level] <= params.base_size), MAX_LEVELS - 1)
        current = Landmarks.gather(self.group.map("level_members", level_key, smallest))
        effective = 0.0
        for level in range(smallest - 1, -1, -1) if smallest > 0 else [0]:
            block = current.block(self.kernel)
            parts = self.group.map("level_scores", level_key, level, current.points, current.roots, block,
                                   current.weights, mu)
            effective = float(sum(part[0] for part in parts))
            q = params.oversample * max(1.0, math.log(max(effective, 1e-300) / params.delta))
            kept = Landmarks.gather(self.group.map("level_keep", derive_key(self.sampler_key, t, level + 1), q))
            if not len(kept.index):
                # Project choice (core.nystrom.keep_columns): keep the point of largest score.
                _, best, where = max((part[1], -part[2], part[2]) for part in parts)
                del best
                shard = owner(self.group.ranges, where)
                point = self.group.call(shard, "point", where)
                root = math.sqrt(self.group.call(shard, "probability", where))
                kept = Landmarks(np.array([where]), point[None], np.array([root]), np.ones(1))
            current = kept
        self.effective_dimensions.append(effective)
        return current

    def rls_estimate(self, t: int, chosen: int, arm: int, reward: float):
        """eqs. (6)-(7) in the embedding g_t, A_t summed over the shards."""
        landmarks = self.landmarks(t)
        self.landmark_counts.append(len(landmarks.index))
        block = landmarks.block(self.kernel)
        eigenvalues, vectors = np.linalg.eigh(block)
        keep = eigenvalues > 1e-12 * max(eigenvalues.max(), 0.0)
        projection = vectors[:, keep] / np.sqrt(eigenvalues[keep])
        parts = self.group.map("embed", landmarks.points, landmarks.roots, projection, arm)
        system = np.sum(np.stack([p for p, _ in parts]), axis=0)
        system[np.diag_indices_from(system)] += self.schedule.mu
        chosen_row = next(row for _, row in parts if row is not None)
        factor = linalg.cholesky(system, lower=True, check_finite=False)
        solved_chosen = linalg.cho_solve((factor, True), chosen_row, check_finite=False)
        return self.group.map("rls_update", factor, solved_chosen, reward, self.schedule.mu, self.schedule.beta,
                              self.eta, chosen, arm)

    def diagnostics(self) -> list[dict[str, float]]:
        diagnostics = {"domain_size": float(self.n), "lengthscale": float(self.kernel.lengthscale),
                       "candidates_scaled_fraction": self.group.call(0, "candidates_scaled_fraction"),
                       "distinct_adversary_choices": float(np.count_nonzero(self.choices)),
                       "shards": float(len(self.group.ranges)), **self.values}
        if self.landmark_counts:
            counts = np.asarray(self.landmark_counts, dtype=np.float64)
            diagnostics.update({"s_t_mean": float(counts.mean()), "s_t_max": float(counts.max()),
                                "s_t_min": float(counts.min()),
                                "effective_dimension_mean": float(np.mean(self.effective_dimensions))})
        return [diagnostics]


class ShardedDesign:
    """The G-optimal design's points on the shards (core.exp3.DesignPoints): the information matrix
    V(pi) as an exact fixed-point sum over the shards' blocks (scale ``bound``), g(x) and the
    design's moves on each slice."""

    def __init__(self, group: ShardGroup, bound: float):
        self.group, self.bound = group, bound

    def _inverse(self, words) -> np.ndarray:
        return np.linalg.inv(from_fixed(np.sum(np.stack(words), axis=0), self.bound))

    def start(self) -> np.ndarray:
        return self._inverse(self.group.map("design_start", self.bound))

    def inverse(self) -> np.ndarray:
        return self._inverse(self.group.map("design_information"))

    def largest(self, inverse: np.ndarray) -> tuple[float, int, np.ndarray]:
        return global_argmax_with_row(self.group.map("design_leverage", inverse))

    def move(self, step: DesignStep, pick: int) -> tuple[float, int, np.ndarray]:
        return global_argmax_with_row(self.group.map("design_step", step, pick))


def global_argmax_with_row(partials) -> tuple[float, int, np.ndarray]:
    """global_argmax over (value, index, row) triples."""
    value, index = global_argmax([(v, i) for v, i, _ in partials])
    return next(item for item in partials if item[1] == index)


def run_sharded(spec: TrialSpec, group: ShardGroup, on_progress: ProgressCallback | None = None,
                progress_every: int = 100, checkpoints: Checkpoints | None = None) -> TrialResult:
    """Run a sharded trial to the end over ``group``, through the one checkpoint driver
    (core.round_loop.play_out): with ``checkpoints`` it resumes from the state saved under the
    trial's key, saves every ``checkpoints.every`` rounds and discards the state when finished."""
    key = checkpoint_key([spec])
    (result,) = play_out(lambda: ShardedKernelTrial(spec, group),
                         lambda state: ShardedKernelTrial.resume(state, group, spec, checkpoints, key),
                         key, checkpoints, on_progress, progress_every)
    return result
