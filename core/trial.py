"""A trial: (algorithm, params, environment, seed, horizon) -> per-round arrays and a summary.

A trial is a pure function of its content. That is what makes resume, retries and trial batching
safe: the same content always has the same ``trial_id`` and, on the same machine, bit-identical
results.

The round loop lives here, once: :class:`TrialRun` steps B >= 1 trials of one batch key in
lockstep (a single trial is the batch of one) through the batched-policy contract of
``core.contracts``. Its whole state (environments, policy, recorded arrays, next round) can be
captured between rounds (:meth:`TrialRun.snapshot`) and restored (:meth:`TrialRun.restore`), which
is where checkpoints and sharded trials plug in. :func:`run_trials` groups trials into batches.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Hashable, Protocol, Sequence

import numpy as np

from banditsweep.core import registry, seeding
from banditsweep.core.contracts import (BatchDecision, BatchedPolicy, Config, Environment, Feedback, NonFiniteError,
                                        Policy, first_non_finite)
from banditsweep.core.state_codec import StateFormatError, decode_state, encode_state


def canonical_json(value: Any) -> str:
    """JSON with sorted keys and no whitespace: the same content gives the same bytes everywhere."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=False)


def resolve_algorithm(name: str, params: dict[str, Any]) -> Config:
    return registry.algorithm_class(name).Params(**params)


def resolve_environment(config: dict[str, Any]) -> Config:
    settings = {k: v for k, v in config.items() if k not in ("kind", "horizon", "label")}
    return registry.environment_class(config["kind"]).Config(**settings)


def _label_value(value: Any) -> str:
    """A setting's value in a label: nested settings (a domain) as canonical JSON."""
    return canonical_json(value) if isinstance(value, (dict, list)) else str(value)


def environment_label(config: dict[str, Any]) -> str:
    """Short display name: the kind, its primary setting (``label_field``), the settings it always
    names (``label_always``, as key=value), then every other value that differs from its default."""
    if config.get("label"):
        return str(config["label"])
    env_cls = registry.environment_class(config["kind"])
    resolved = resolve_environment(config)
    defaults = {name: f.default for name, f in env_cls.Config.model_fields.items()}
    primary = env_cls.label_field
    always = env_cls.label_always
    values = resolved.model_dump(mode="json")
    parts = [config["kind"]]
    if primary:
        parts.append(str(values[primary]))
    parts += [f"{key}={_label_value(values[key])}" for key in always if values[key] is not None]
    for key, value in values.items():
        if key != primary and key not in always and value != defaults.get(key):
            parts.append(f"{key}={_label_value(value)}")
    return ":".join(parts[:2]) + "".join(f",{p}" for p in parts[2:])


# A parameter added to an algorithm after trials of it were recorded is marked with this key in its
# Field's json_schema_extra: at its default (the behaviour the recorded trials had) it is left out of
# the trial's id, so those trials keep their ids and results; it is still recorded with every trial.
ADDED_LATER = "added_later"


def _identifying(algorithm: str, params: dict[str, Any]) -> dict[str, Any]:
    """The parameters that name the trial: all of them, less later additions at their defaults."""
    fields = registry.algorithm_class(algorithm).Params.model_fields
    later = {name for name, f in fields.items() if (f.json_schema_extra or {}).get(ADDED_LATER)}
    return {k: v for k, v in params.items() if k not in later or v != fields[k].default}


@dataclass(frozen=True)
class TrialSpec:
    """The canonical content of one trial. ``params`` and ``environment`` are fully resolved
    (defaults filled in), so the trial id and the recorded parameters name every choice."""

    algorithm: str
    params: dict[str, Any]
    environment: dict[str, Any]  # includes "kind"
    seed: int
    horizon: int
    # Run with its domain split over shards (core.kernel_shards). Part of the content because the
    # sharded engine draws the Nystrom sampler's random numbers per point; the number of shards is
    # not: it does not change the results.
    sharded: bool = False

    @classmethod
    def create(cls, algorithm: str, params: dict, environment: dict, seed: int, horizon: int,
               sharded: bool = False) -> "TrialSpec":
        resolved_params = resolve_algorithm(algorithm, params).model_dump(mode="json")
        resolved_env = {"kind": environment["kind"], **resolve_environment(environment).model_dump(mode="json")}
        return cls(algorithm, resolved_params, resolved_env, int(seed), int(horizon), bool(sharded))

    def content(self) -> dict[str, Any]:
        content = {
            "algorithm": self.algorithm,
            "params": _identifying(self.algorithm, self.params),
            "environment": self.environment,
            "seed": self.seed,
            "horizon": self.horizon,
        }
        if self.sharded:   # unsharded trials keep the ids they always had
            content["sharded"] = True
        return content

    @property
    def trial_id(self) -> str:
        return hashlib.sha256(canonical_json(self.content()).encode()).hexdigest()[:20]

    @property
    def environment_label(self) -> str:
        return environment_label(self.environment)

    def build_environment(self) -> Environment:
        """The trial's environment, drawing from the trial's environment stream."""
        env_cls = registry.environment_class(self.environment["kind"])
        return env_cls(resolve_environment(self.environment), self.horizon,
                       seeding.stream(self.seed, seeding.ENVIRONMENT_STREAM))

    @property
    def policy_class(self) -> type[Policy]:
        return registry.algorithm_class(self.algorithm)

    def build(self, device: str = "cpu") -> tuple[Environment, Policy]:
        """The trial's environment and its policy run alone (for inspecting one trial's objects)."""
        env = self.build_environment()
        policy_cls = self.policy_class
        _check_supported(policy_cls, self, env)
        policy = policy_cls(resolve_algorithm(self.algorithm, self.params), env.problem,
                            seeding.stream(self.seed, seeding.POLICY_STREAM), device=device)
        return env, policy


def _check_supported(policy_cls: type[Policy], spec: TrialSpec, env: Environment) -> None:
    if env.interaction not in policy_cls.supports:
        raise ValueError(
            f"algorithm {spec.algorithm!r} does not run on environment kind "
            f"{spec.environment['kind']!r} (it supports: {', '.join(sorted(policy_cls.supports))})"
        )


@dataclass
class TrialResult:
    """Per-round arrays (round t = index + 1) and the trial's summary."""

    arm: np.ndarray
    reward: np.ndarray
    regret: np.ndarray
    cum_regret: np.ndarray
    seconds: np.ndarray
    extras: dict[str, np.ndarray] = field(default_factory=dict)
    diagnostics: dict[str, float] = field(default_factory=dict)

    @property
    def final_regret(self) -> float:
        return float(self.cum_regret[-1])

    @property
    def wall_seconds(self) -> float:
        return float(self.seconds.sum())

    @property
    def seconds_per_round(self) -> float:
        return float(self.seconds.mean())


# on_progress(index of the trial in the batch, round t, cumulative regret)
ProgressCallback = Callable[[int, int, float], None]


class TrialRecorder:
    """The per-round arrays of ``count`` trials run side by side (one trial, or a lockstep batch)."""

    def __init__(self, count: int, horizon: int):
        self.count, self.horizon = count, horizon
        self.arm = np.zeros((count, horizon), dtype=np.int64)
        self.reward = np.zeros((count, horizon))
        self.regret = np.zeros((count, horizon))
        self.cum_regret = np.zeros((count, horizon))
        self.seconds = np.zeros((count, horizon))
        self.extras: list[dict[str, np.ndarray]] = [{} for _ in range(count)]

    def record(self, trial: int, index: int, arm: int, feedback: Feedback) -> None:
        self.arm[trial, index] = arm
        self.reward[trial, index] = feedback.reward
        self.regret[trial, index] = feedback.regret
        self.cum_regret[trial, index] = feedback.cumulative_regret
        for key, value in feedback.extras.items():
            self.extras[trial].setdefault(key, np.zeros(self.horizon))[index] = value

    def results(self, diagnostics: list[dict[str, float]]) -> list[TrialResult]:
        return [TrialResult(self.arm[i], self.reward[i], self.regret[i], self.cum_regret[i], self.seconds[i],
                            self.extras[i], diagnostics[i]) for i in range(self.count)]


class TrialRun:
    """The round loop of B >= 1 trials of one batch key, stepped in lockstep.

    Each trial has its own environment and random streams, exactly as when it runs alone; one
    round is one batched ``select``, one ``step`` per environment (which may read the trial's P_t)
    and one batched ``update``. A trial's per-round ``seconds`` is the round's time divided by B,
    so summed over a batch it is the batch's wall time.
    """

    def __init__(self, specs: Sequence[TrialSpec], device: str = "cpu"):
        if not specs:
            raise ValueError("a trial run needs at least one trial")
        self.specs = list(specs)
        self.horizon = self.specs[0].horizon
        if any(spec.horizon != self.horizon for spec in self.specs):
            raise ValueError("trials of one lockstep batch must share the horizon")
        if len({spec.algorithm for spec in self.specs}) > 1:
            raise ValueError("trials of one lockstep batch must share the algorithm")
        policy_cls = self.specs[0].policy_class
        self.environments = [spec.build_environment() for spec in self.specs]
        problem = self.environments[0].problem
        if any(env.problem != problem for env in self.environments[1:]):
            raise ValueError("trials of one lockstep batch must share the environment shape")
        _check_supported(policy_cls, self.specs[0], self.environments[0])
        params = [resolve_algorithm(spec.algorithm, spec.params) for spec in self.specs]
        rngs = [seeding.stream(spec.seed, seeding.POLICY_STREAM) for spec in self.specs]
        self.policy: BatchedPolicy = policy_cls.create_batch(params, problem, rngs, self.environments, device)
        self.recorder = TrialRecorder(len(self.specs), self.horizon)
        self.next_round = 1
        self.resumed_from: int | None = None   # the round a restored run went on from
        self.checkpoint_rejected = False        # a saved state could not be used: started anew

    @property
    def done(self) -> bool:
        return self.next_round > self.horizon

    def contexts(self, t: int) -> np.ndarray:
        """(B, K, d): a view for one trial, stacked for several."""
        if len(self.environments) == 1:
            return self.environments[0].contexts(t)[None]
        return np.stack([env.contexts(t) for env in self.environments])

    def play_round(self) -> None:
        t, index = self.next_round, self.next_round - 1
        started = time.perf_counter()
        contexts = self.contexts(t)
        trials = self.specs if len(self.specs) > 1 else ()   # a trial alone: its record is the trial
        try:
            decision = self.policy.select_batch(t, contexts)
        except NonFiniteError as error:   # raised inside the policy (a diverged training): add the round
            raise at_round(t, error, trials) from error
        check_decision(t, decision, self.environments[0].problem.num_arms, trials)
        for trial, env in enumerate(self.environments):
            feedback = env.step(t, decision.of(trial))
            check_feedback(t, trial, feedback, env, trials)
            self.recorder.record(trial, index, int(decision.arms[trial]), feedback)
        try:
            self.policy.update_batch(t, contexts, decision.arms, self.recorder.reward[:, index].copy())
        except NonFiniteError as error:
            raise at_round(t, error, trials) from error
        self.recorder.seconds[:, index] = (time.perf_counter() - started) / len(self.environments)
        self.next_round += 1

    def advance(self, rounds: int | None = None, on_progress: ProgressCallback | None = None,
                progress_every: int = 100) -> None:
        """Play ``rounds`` more rounds (all that are left by default). ``on_progress(trial, t,
        cumulative regret)`` is called every ``progress_every`` rounds and at the last round."""
        last = self.horizon if rounds is None else min(self.horizon, self.next_round + rounds - 1)
        while self.next_round <= last:
            self.play_round()
            t = self.next_round - 1
            if on_progress is not None and (t % progress_every == 0 or t == self.horizon):
                for trial in range(len(self.environments)):
                    on_progress(trial, t, float(self.recorder.cum_regret[trial, t - 1]))

    def results(self) -> list[TrialResult]:
        if not self.done:
            raise RuntimeError(f"the trials have played {self.next_round - 1} of {self.horizon} rounds")
        policy_diagnostics = self.policy.diagnostics_batch()
        resumed = {"resumed_from_round": float(self.resumed_from)} if self.resumed_from else {}
        if self.checkpoint_rejected:
            resumed["checkpoint_rejected"] = 1.0
        return self.recorder.results([{**env.diagnostics(), **policy_diagnostics[i], **resumed}
                                      for i, env in enumerate(self.environments)])

    # ---- capture and restore between rounds --------------------------------------------------------

    def snapshot(self) -> bytes:
        """The whole state between two rounds (random streams included), as data (core.state_codec):
        restoring it and playing on gives the same results as never stopping."""
        return encode_state(self.__dict__)

    @classmethod
    def restore(cls, state: bytes, specs: Sequence[TrialSpec] | None = None) -> "TrialRun":
        """The run ``snapshot`` captured. With ``specs``, the state must be of exactly those trials
        (in order) between two of their rounds; :class:`StateFormatError` says what is wrong."""
        attributes = decode_state(state)
        if not isinstance(attributes, dict) or not isinstance(attributes.get("specs"), list):
            raise StateFormatError("not the state of a trial run")
        if specs is not None:
            stored = [spec.trial_id if isinstance(spec, TrialSpec) else None for spec in attributes["specs"]]
            if stored != [spec.trial_id for spec in specs]:
                raise StateFormatError("the state is of other trials")
            next_round = attributes.get("next_round")
            if type(next_round) is not int or not 1 <= next_round <= specs[0].horizon + 1:
                raise StateFormatError(f"the state's next round {next_round!r} is outside 1..{specs[0].horizon + 1}")
        run = cls.__new__(cls)
        run.__dict__.update(attributes)
        run.resumed_from = run.next_round   # recorded in the diagnostics (the results do not change)
        return run


def _trial_part(trial: int | None, trials: Sequence[TrialSpec]) -> str:
    """How a message names trial ``trial`` of a lockstep batch of ``trials`` (empty: a trial alone,
    whose record is the trial)."""
    return f" of trial {trials[trial].trial_id} of the lockstep batch" if trials and trial is not None else ""


def at_round(t: int, error: NonFiniteError, trials: Sequence[TrialSpec] = ()) -> NonFiniteError:
    """A NonFiniteError raised inside a policy, with the round (and the trial of a batch) named."""
    return NonFiniteError(f"round {t}: {error}{_trial_part(error.trial, trials)}", error.trial)


def check_values(t: int, values, quantity: str, trials: Sequence[TrialSpec] = (), entry: str = "arm") -> None:
    """Raise NonFiniteError naming the round, the quantity, the entry and the trial (of a batch)
    when an entry of ``values`` (B, n) is NaN or infinite. One ``isfinite().all()`` when all is well."""
    found = first_non_finite(values)
    if found is not None:
        (trial, position), value = found
        raise NonFiniteError(f"round {t}: the {quantity} of {entry} {position}{_trial_part(trial, trials)} "
                             f"is {value}", trial)


def check_decision(t: int, decision: BatchDecision, num_arms: int, trials: Sequence[TrialSpec] = ()) -> None:
    """Arms in range, finite scores (what each arm was chosen by: NaN indices make the argmax play
    arm 0 every round) and a finite P_t (a NaN P_t would make the adversary and the draw meaningless)."""
    outside = decision.arms[(decision.arms < 0) | (decision.arms >= num_arms)]
    if outside.size:
        raise ValueError(f"round {t}: the policy chose arm {int(outside[0])}; arms are 0..{num_arms - 1}")
    if decision.scores is not None:
        check_values(t, decision.scores, decision.quantity, trials)
    if decision.probabilities is not None and decision.probabilities is not decision.scores:
        check_values(t, decision.probabilities, "sampling distribution P_t", trials)


def check_feedback(t: int, trial: int, feedback: Feedback, env: Environment | type[Environment],
                   trials: Sequence[TrialSpec] = ()) -> None:
    """Finite reward, regret and extras, and only declared extras (each is stored as a column).
    ``env`` may be the environment's class (a sharded trial has no environment object)."""
    values = {"reward": feedback.reward, "regret": feedback.regret, "cumulative regret": feedback.cumulative_regret,
              **feedback.extras}
    for name, value in values.items():
        if not np.isfinite(value):
            where = _trial_part(trial, trials) or " of the trial"
            raise NonFiniteError(f"round {t}: the {name}{where} is {value}", trial)
    undeclared = set(feedback.extras) - set(env.round_extras)
    if undeclared:
        name = env.__name__ if isinstance(env, type) else type(env).__name__
        raise ValueError(f"environment {name} reports per-round values {sorted(undeclared)} it does "
                         f"not declare in round_extras (declared: {sorted(env.round_extras) or 'none'})")


def batch_key(spec: TrialSpec) -> Hashable | None:
    """Trials with equal non-None keys may run in lockstep; None means the trial runs alone."""
    return spec.policy_class.batch_key(spec)


class Checkpoints(Protocol):
    """Where a run keeps the state of unfinished trials (the caller decides: core writes no files).
    ``every`` rounds the state of a lockstep batch is saved under ``key``; a batch that starts
    again with the same key resumes from it."""

    every: int

    def load(self, key: str) -> bytes | None: ...

    def save(self, key: str, state: bytes) -> None: ...

    def discard(self, key: str) -> None: ...

    def reject(self, key: str, reason: str) -> None:
        """The state under ``key`` cannot be used (damaged, another format, other trials): set it
        aside with a note; its batch starts from round 1."""


def checkpoint_key(specs: Sequence[TrialSpec]) -> str:
    """The name of a batch's checkpoint: its trials, in order."""
    return hashlib.sha256("".join(spec.trial_id for spec in specs).encode()).hexdigest()[:24]


def run_trials(specs: Sequence[TrialSpec], device: str = "cpu", on_progress: ProgressCallback | None = None,
               progress_every: int = 100, checkpoints: Checkpoints | None = None) -> list[TrialResult]:
    """Run ``specs`` and return their results in order. Trials that share one batch key run in
    lockstep batches (as large as the algorithm's ``largest_batch`` allows on ``device``); any
    other set runs one trial at a time. With ``checkpoints``, each batch saves its state every
    ``checkpoints.every`` rounds and resumes from a saved state; a finished batch's state is
    discarded. The results are the same, bit for bit, with or without a resume."""
    specs = list(specs)
    keys = {batch_key(spec) for spec in specs}
    if len(specs) > 1 and len(keys) == 1 and None not in keys:
        size = max(1, specs[0].policy_class.largest_batch(specs, device))
    else:
        size = 1
    results: list[TrialResult] = []
    for start in range(0, len(specs), size):
        chunk = specs[start:start + size]
        key = checkpoint_key(chunk)
        run, rejected = _resumed(chunk, key, checkpoints)
        if run is None:
            run = TrialRun(chunk, device)
            run.checkpoint_rejected = rejected
        callback = None if on_progress is None else (
            lambda trial, t, regret, offset=start: on_progress(offset + trial, t, regret))
        step = checkpoints.every if checkpoints is not None else None
        while not run.done:
            run.advance(step, on_progress=callback, progress_every=progress_every)
            if checkpoints is not None and not run.done:
                checkpoints.save(key, run.snapshot())
        results.extend(run.results())
        if checkpoints is not None:
            checkpoints.discard(key)
    return results


def _resumed(specs: list[TrialSpec], key: str, checkpoints: Checkpoints | None) -> tuple[TrialRun | None, bool]:
    """(the batch's saved run, False), or (None, whether a saved state was rejected): a state that
    cannot be used is set aside with a note (``Checkpoints.reject``) and the batch starts anew."""
    saved = checkpoints.load(key) if checkpoints is not None else None
    if saved is None:
        return None, False
    try:
        return TrialRun.restore(saved, specs), False
    except StateFormatError as error:
        checkpoints.reject(key, str(error))
        return None, True


def run_trial(spec: TrialSpec, device: str = "cpu", on_progress: Callable[[int, float], None] | None = None,
              progress_every: int = 100) -> TrialResult:
    """Run one trial. ``on_progress(t, cumulative_regret)`` is called every ``progress_every`` rounds
    and at the last round."""
    callback = None if on_progress is None else (lambda _trial, t, value: on_progress(t, value))
    return run_trials([spec], device, callback, progress_every)[0]
