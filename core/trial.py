"""A trial: (algorithm, params, environment, seed, horizon) -> per-round arrays and a summary.

A trial is a pure function of its content. That is what makes resume, retries and trial batching
safe: the same content always has the same ``trial_id`` and, on the same machine, bit-identical
results.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from banditsweep.core import registry, seeding
from banditsweep.core.contracts import Config, Environment, Feedback, Policy


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
    primary = getattr(env_cls, "label_field", None)
    always = tuple(getattr(env_cls, "label_always", ()))
    values = resolved.model_dump(mode="json")
    parts = [config["kind"]]
    if primary:
        parts.append(str(values[primary]))
    parts += [f"{key}={_label_value(values[key])}" for key in always if values[key] is not None]
    for key, value in values.items():
        if key != primary and key not in always and value != defaults.get(key):
            parts.append(f"{key}={_label_value(value)}")
    return ":".join(parts[:2]) + "".join(f",{p}" for p in parts[2:])


@dataclass(frozen=True)
class TrialSpec:
    """The canonical content of one trial. ``params`` and ``environment`` are fully resolved
    (defaults filled in), so the trial id and the recorded parameters name every choice."""

    algorithm: str
    params: dict[str, Any]
    environment: dict[str, Any]  # includes "kind"
    seed: int
    horizon: int

    @classmethod
    def create(cls, algorithm: str, params: dict, environment: dict, seed: int, horizon: int) -> "TrialSpec":
        resolved_params = resolve_algorithm(algorithm, params).model_dump(mode="json")
        resolved_env = {"kind": environment["kind"], **resolve_environment(environment).model_dump(mode="json")}
        return cls(algorithm, resolved_params, resolved_env, int(seed), int(horizon))

    def content(self) -> dict[str, Any]:
        return {
            "algorithm": self.algorithm,
            "params": self.params,
            "environment": self.environment,
            "seed": self.seed,
            "horizon": self.horizon,
        }

    @property
    def trial_id(self) -> str:
        return hashlib.sha256(canonical_json(self.content()).encode()).hexdigest()[:20]

    @property
    def environment_label(self) -> str:
        return environment_label(self.environment)

    def build(self, device: str = "cpu") -> tuple[Environment, Policy]:
        env_cls = registry.environment_class(self.environment["kind"])
        env = env_cls(resolve_environment(self.environment), self.horizon,
                      seeding.stream(self.seed, seeding.ENVIRONMENT_STREAM))
        policy_cls = registry.algorithm_class(self.algorithm)
        if env.interaction not in policy_cls.supports:
            raise ValueError(
                f"algorithm {self.algorithm!r} does not run on environment kind "
                f"{self.environment['kind']!r} (it supports: {', '.join(sorted(policy_cls.supports))})"
            )
        policy = policy_cls(resolve_algorithm(self.algorithm, self.params), env.problem,
                            seeding.stream(self.seed, seeding.POLICY_STREAM), device=device)
        return env, policy


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


ProgressCallback = Callable[[int, float], None]


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

    def round_done(self, index: int, started: float, on_progress: Callable[[int, int, float], None] | None,
                   progress_every: int) -> None:
        """Close round ``index``: each trial's seconds are the round's time divided by the trial count
        (so a batch's seconds sum to its wall time); report progress every ``progress_every`` rounds."""
        self.seconds[:, index] = (time.perf_counter() - started) / self.count
        t = index + 1
        if on_progress is not None and (t % progress_every == 0 or t == self.horizon):
            for trial in range(self.count):
                on_progress(trial, t, float(self.cum_regret[trial, index]))

    def results(self, diagnostics: list[dict[str, float]]) -> list[TrialResult]:
        return [TrialResult(self.arm[i], self.reward[i], self.regret[i], self.cum_regret[i], self.seconds[i],
                            self.extras[i], diagnostics[i]) for i in range(self.count)]


def run_trial(spec: TrialSpec, device: str = "cpu", on_progress: ProgressCallback | None = None,
              progress_every: int = 100) -> TrialResult:
    """Run one trial. ``on_progress(t, cumulative_regret)`` is called every ``progress_every`` rounds
    and at the last round."""
    env, policy = spec.build(device)
    recorder = TrialRecorder(1, spec.horizon)
    callback = None if on_progress is None else (lambda _trial, t, value: on_progress(t, value))
    for index in range(spec.horizon):
        t = index + 1
        started = time.perf_counter()
        contexts = env.contexts(t)
        decision = policy.select(t, contexts)
        feedback = env.step(t, decision)
        policy.update(t, contexts, decision.arm, feedback.reward)
        recorder.record(0, index, decision.arm, feedback)
        recorder.round_done(index, started, callback, progress_every)
    return recorder.results([{**env.diagnostics(), **policy.diagnostics()}])[0]
