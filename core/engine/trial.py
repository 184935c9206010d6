"""A trial: (algorithm, params, environment, seed, horizon) -> per-round arrays and a summary.

A trial is a pure function of its content. That is what makes resume, retries and trial batching
safe: the same content always has the same ``trial_id`` and, on the same machine, bit-identical
results.

:class:`TrialRun` is the in-process kind of the one round loop (core.engine.round_loop.RoundLoop): it
steps B >= 1 trials of one batch key in lockstep (a single trial is the batch of one) through the
batched-policy contract of ``core.engine.contracts``. Its whole state (environments, policy, recorded
arrays, next round) can be captured between rounds (:meth:`TrialRun.snapshot`) and restored
(:meth:`TrialRun.restore`). :func:`run_trials` groups trials into batches and plays each out
through the one checkpoint driver (core.engine.round_loop.play_out).
"""

from __future__ import annotations

import functools
import hashlib
from dataclasses import dataclass
from typing import Any, Callable, Hashable, Sequence

import numpy as np

from banditsweep.core.engine import registry, seeding
from banditsweep.core.engine.canonical import canonical_json
from banditsweep.core.engine.contracts import BatchedPolicy, Config, Environment, NonFiniteError, Policy
from banditsweep.core.engine.round_loop import (Checkpoints, Played, ProgressCallback, RoundLoop, TrialResult, at_round,
                                                check_decision, play_out)
from banditsweep.core.engine.state_codec import encode_state
from banditsweep.core.engine.state_declaration import attributes_to_save



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


def environment_title(config: dict[str, Any]) -> str:
    """How a figure or a paper names the environment: a spec's ``label`` as given, else its kind's
    ``title`` ("Mushroom") with the settings the title does not name, where not at their default, in
    parentheses ("synthetic h1 (dim = 5)"); a kind without a title by :func:`environment_label`."""
    if config.get("label"):
        return str(config["label"])
    env_cls = registry.environment_class(config["kind"])
    resolved = resolve_environment(config)
    title = env_cls.title(resolved)
    if title is None:
        return environment_label(config)
    defaults = {name: f.default for name, f in env_cls.Config.model_fields.items()}
    others = [f"{key} = {_label_value(value)}" for key, value in resolved.model_dump(mode="json").items()
              if key not in env_cls.title_fields and value != defaults.get(key)]
    return f"{title} ({', '.join(others)})" if others else title


# A parameter added to an algorithm after trials of it were recorded is marked with this key in its
# Field's json_schema_extra: at its default (the behaviour the recorded trials had) it is left out of
# the trial's id, so those trials keep their ids and results; it is still recorded with every trial.
ADDED_LATER = "added_later"


def _identifying(algorithm: str, params: dict[str, Any]) -> dict[str, Any]:
    """The parameters that name the trial: all of them, less later additions at their defaults."""
    later = _added_later(registry.algorithm_class(algorithm).Params)
    return {k: v for k, v in params.items() if k not in later or v != later[k]}


@functools.lru_cache(maxsize=256)
def _added_later(params_cls: type[Config]) -> dict[str, Any]:
    """The parameters of ``params_cls`` added later, with their defaults."""
    return {name: f.default for name, f in params_cls.model_fields.items()
            if (f.json_schema_extra or {}).get(ADDED_LATER)}


@dataclass(frozen=True)
class TrialSpec:
    """The canonical content of one trial. ``params`` and ``environment`` are fully resolved
    (defaults filled in), so the trial id and the recorded parameters name every choice."""

    algorithm: str
    params: dict[str, Any]
    environment: dict[str, Any]  # includes "kind"
    seed: int
    horizon: int
    # Run with its domain split over shards (core.kernel.sharded). Part of the content because the
    # sharded engine draws the Nystrom sampler's random numbers per point; the number of shards is
    # not: it does not change the results.
    sharded: bool = False

    TRANSIENT = ("trial_id",)   # the cached id: computed again from the content when asked

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

    @functools.cached_property
    def trial_id(self) -> str:
        # Cached: a sweep of 10^6 trials asks each for its id several times (planning, journal, jobs).
        return hashlib.sha256(canonical_json(self.content()).encode()).hexdigest()[:20]

    def with_seed(self, seed: int) -> "TrialSpec":
        """The same trial with another seed: the resolved settings shared, not validated again (a
        sweep's seeds of one grid point differ only in the seed)."""
        return TrialSpec(self.algorithm, self.params, self.environment, int(seed), self.horizon, self.sharded)

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


class TrialRun(RoundLoop):
    """The round loop of B >= 1 trials of one batch key in this process, stepped in lockstep.

    Each trial has its own environment and random streams, exactly as when it runs alone; one
    round is one batched ``select``, one ``step`` per environment (which may read the trial's P_t)
    and, once the round is recorded and checked, one batched ``update``. A trial's per-round
    ``seconds`` is the round's time divided by B, so summed over a batch it is the batch's wall time.
    """

    STATE = ("environments", "policy")

    def __init__(self, specs: Sequence[TrialSpec], device: str = "cpu"):
        if not specs:
            raise ValueError("a trial run needs at least one trial")
        self.begin(specs)
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

    def contexts(self, t: int) -> np.ndarray:
        """(B, K, d): a view for one trial, stacked for several."""
        if len(self.environments) == 1:
            return self.environments[0].contexts(t)[None]
        return np.stack([env.contexts(t) for env in self.environments])

    def play(self, t: int) -> Played:
        contexts = self.contexts(t)
        trials = self.specs if len(self.specs) > 1 else ()   # a trial alone: its record is the trial
        try:
            decision = self.policy.select_batch(t, contexts)
        except NonFiniteError as error:   # raised inside the policy (a diverged training): add the round
            raise at_round(t, error, trials) from error
        check_decision(t, decision, self.environments[0].problem.num_arms, trials)
        feedback = [env.step(t, decision.of(trial)) for trial, env in enumerate(self.environments)]

        def learn(rewards: np.ndarray) -> None:
            try:
                self.policy.update_batch(t, contexts, decision.arms, rewards)
            except NonFiniteError as error:
                raise at_round(t, error, trials) from error

        return Played(decision.arms, feedback, learn)

    def reporter(self, trial: int) -> Environment:
        return self.environments[trial]

    def diagnostics(self) -> list[dict[str, float]]:
        policy_diagnostics = self.policy.diagnostics_batch()
        return [{**env.diagnostics(), **policy_diagnostics[i]} for i, env in enumerate(self.environments)]

    # ---- capture and restore between rounds --------------------------------------------------------

    def snapshot(self) -> bytes:
        """The state between two rounds (random streams included), as data (core.engine.state_codec): the
        attributes each class declares (core.engine.state_declaration); restoring it and playing on gives
        the same results as never stopping."""
        return encode_state(attributes_to_save(self))

    def save(self, checkpoints: Checkpoints, key: str) -> bool:
        return checkpoints.save(key, self.snapshot())

    @classmethod
    def restore(cls, state: bytes, specs: Sequence[TrialSpec] | None = None) -> "TrialRun":
        """The run ``snapshot`` captured. With ``specs``, the state must be of exactly those trials
        (in order) between two of their rounds; :class:`StateFormatError` says what is wrong."""
        return cls.from_attributes(cls.saved_attributes(state, specs))


def batch_key(spec: TrialSpec) -> Hashable | None:
    """Trials with equal non-None keys may run in lockstep; None means the trial runs alone."""
    return spec.policy_class.batch_key(spec)


def checkpoint_key(specs: Sequence[TrialSpec]) -> str:
    """The name of a batch's checkpoint: its trials, in order."""
    return hashlib.sha256("".join(spec.trial_id for spec in specs).encode()).hexdigest()[:24]


def run_trials(specs: Sequence[TrialSpec], device: str = "cpu", on_progress: ProgressCallback | None = None,
               progress_every: int = 100, checkpoints: Checkpoints | None = None) -> list[TrialResult]:
    """Run ``specs`` and return their results in order. Trials that share one batch key run in
    lockstep batches (as large as the algorithm's ``largest_batch`` allows on ``device``); any
    other set runs one trial at a time. Each batch is played out by the one checkpoint driver
    (core.engine.round_loop.play_out): with ``checkpoints``, it saves its state every
    ``checkpoints.every`` rounds, resumes from a saved state and discards it when finished. The
    results are the same, bit for bit, with or without a resume."""
    specs = list(specs)
    keys = {batch_key(spec) for spec in specs}
    if len(specs) > 1 and len(keys) == 1 and None not in keys:
        size = max(1, specs[0].policy_class.largest_batch(specs, device))
    else:
        size = 1
    results: list[TrialResult] = []
    for offset in range(0, len(specs), size):
        chunk = specs[offset:offset + size]
        callback = None if on_progress is None else (
            lambda trial, t, regret, offset=offset: on_progress(offset + trial, t, regret))
        results.extend(play_out(lambda chunk=chunk: TrialRun(chunk, device),
                                lambda state, chunk=chunk: TrialRun.restore(state, chunk),
                                checkpoint_key(chunk), checkpoints, callback, progress_every))
    return results


def run_trial(spec: TrialSpec, device: str = "cpu", on_progress: Callable[[int, float], None] | None = None,
              progress_every: int = 100) -> TrialResult:
    """Run one trial. ``on_progress(t, cumulative_regret)`` is called every ``progress_every`` rounds
    and at the last round."""
    callback = None if on_progress is None else (lambda _trial, t, value: on_progress(t, value))
    return run_trials([spec], device, callback, progress_every)[0]
