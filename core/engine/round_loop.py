"""The one round loop: play B >= 1 trials of one horizon round by round, record every round with its
checks, report progress, assemble the results and drive the checkpoints.

Two kinds of trial implement :class:`RoundLoop`: ``core.engine.trial.TrialRun``, a lockstep batch of trials
held in this process, and ``core.kernel.sharded.coordinator.ShardedKernelTrial``, one trial whose domain is split
over shards that hold their state in other processes. They differ only in

- how a round is played (:meth:`RoundLoop.play`: the arms, each trial's :class:`Feedback`, and the
  learning step that follows the checks), and
- how their state is held and saved (:meth:`RoundLoop.save`, and the ``resume`` a caller hands
  :func:`play_out`).

Everything else is written here once: :meth:`RoundLoop.advance` and the progress callback, the
recording (:class:`TrialRecorder`) with the finiteness checks of :func:`check_feedback` applied to
every recorded round, the results with their diagnostics (``resumed_from_round``,
``checkpoint_rejected``), and the checkpoint driver :func:`play_out` over a :class:`Checkpoints`
store (core decides when to save, resume, reject and discard; the store, in ``workers``, writes the
files).
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

import numpy as np

from banditsweep.core.engine.contracts import BatchDecision, Environment, Feedback, NonFiniteError, first_non_finite
from banditsweep.core.engine.state_codec import StateFormatError, decode_state, declared_attributes

if TYPE_CHECKING:
    from banditsweep.core.engine.trial import TrialSpec


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

    STATE = ("count", "horizon", "arm", "reward", "regret", "cum_regret", "seconds", "extras")

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


# Relative tolerance of a recorded cumulative regret against the sum of its increments (they agree to
# rounding: an environment's cumulative regret is its running sum, or a tally whose increments are
# its differences).
_CUMULATIVE_RTOL = 1e-9


def check_saved_recorder(recorder, count: int, horizon: int, next_round: int) -> None:
    """:class:`StateFormatError` unless ``recorder`` is what a loop of ``count`` trials of ``horizon``
    rounds holds before round ``next_round``: a :class:`TrialRecorder` of that shape whose rounds
    1..next_round-1 are recorded (finite; arms >= 0; seconds >= 0; each cumulative regret the previous
    one plus the round's regret, to rounding) and whose later rounds are untouched (zero). Cheap
    consistency checks only: a state forged consistently passes."""
    played = next_round - 1

    def refuse(reason: str):
        raise StateFormatError(f"the state's recorder {reason}")

    if type(recorder) is not TrialRecorder:
        refuse("is missing")
    if recorder.__dict__.get("count") != count or recorder.__dict__.get("horizon") != horizon:
        refuse(f"is not of {count} trial(s) of {horizon} rounds")
    columns = {}
    for name, dtype in (("arm", np.int64), ("reward", np.float64), ("regret", np.float64),
                        ("cum_regret", np.float64), ("seconds", np.float64)):
        values = recorder.__dict__.get(name)
        if type(values) is not np.ndarray or values.dtype != dtype or values.shape != (count, horizon):
            refuse(f"{name} is not a ({count}, {horizon}) array of {np.dtype(dtype)}")
        columns[name] = values
    extras = recorder.__dict__.get("extras")
    if type(extras) is not list or len(extras) != count or any(type(table) is not dict for table in extras):
        refuse("extras are not one table per trial")
    for table in extras:
        for name, values in table.items():
            if (type(name) is not str or type(values) is not np.ndarray or values.dtype != np.float64
                    or values.shape != (horizon,)):
                refuse(f"extra {str(name)[:40]!r} is not an array of {horizon} rounds")
    rows = [*columns.values(), *(values[None] for table in extras for values in table.values())]
    for values in rows:
        if not np.isfinite(values[:, :played]).all():
            refuse("holds a value that is not finite")
        if np.any(values[:, played:]):
            refuse(f"holds values of rounds after round {played}, the last played")
    if np.any(columns["arm"][:, :played] < 0) or np.any(columns["seconds"][:, :played] < 0):
        refuse("holds a negative arm or time")
    regret, cumulative = columns["regret"][:, :played], columns["cum_regret"][:, :played]
    previous = np.concatenate([np.zeros((count, 1)), cumulative[:, :-1]], axis=1)
    scale = np.maximum(np.maximum(np.abs(cumulative), np.abs(previous)), np.abs(regret))
    if np.any(np.abs(cumulative - previous - regret) > _CUMULATIVE_RTOL * scale):
        refuse("holds a cumulative regret that is not the sum of its rounds' regrets")


@dataclass
class Played:
    """One round as a :class:`RoundLoop` played it: the arm of each trial (B,), each trial's feedback,
    and what learns from the recorded rewards (B,) once they have passed the checks (None: the
    round has learnt already, as the shards of a sharded trial do while they report)."""

    arms: np.ndarray
    feedback: list[Feedback]
    learn: Callable[[np.ndarray], None] | None = None


class RoundLoop(ABC):
    """B >= 1 trials of one horizon, played round by round (module docstring). A subclass calls
    :meth:`begin` in its constructor and implements :meth:`play`, :meth:`reporter`,
    :meth:`diagnostics` and :meth:`save`; a restored loop sets ``resumed_from``."""

    specs: list[TrialSpec]
    horizon: int
    recorder: TrialRecorder
    next_round: int
    resumed_from: int | None     # the round a restored loop went on from (recorded in the diagnostics)
    checkpoint_rejected: bool    # a saved state could not be used: the loop started anew

    STATE = ("specs", "horizon", "recorder", "next_round", "checkpoint_rejected")
    # Set by the restore itself (from_attributes), so a saved value would only be overwritten.
    TRANSIENT = ("resumed_from",)

    def begin(self, specs: Sequence[TrialSpec]) -> None:
        self.specs = list(specs)
        self.horizon = self.specs[0].horizon
        if any(spec.horizon != self.horizon for spec in self.specs):
            raise ValueError("trials of one lockstep batch must share the horizon")
        self.recorder = TrialRecorder(len(self.specs), self.horizon)
        self.next_round = 1
        self.resumed_from = None
        self.checkpoint_rejected = False

    @abstractmethod
    def play(self, t: int) -> Played:
        """Play round t: choose, observe (and possibly learn)."""

    @abstractmethod
    def reporter(self, trial: int) -> Environment | type[Environment]:
        """What reports trial ``trial``'s feedback: its environment, or the environment's class (its
        ``round_extras`` name the per-round values it may report)."""

    @abstractmethod
    def diagnostics(self) -> list[dict[str, float]]:
        """Each trial's diagnostics at the end (environment and policy)."""

    @abstractmethod
    def save(self, checkpoints: Checkpoints, key: str) -> bool:
        """Keep the state between two rounds under ``key`` (and its parts, ``key/...``); False when
        it could not be kept."""

    @classmethod
    def saved_attributes(cls, state: bytes, specs: Sequence[TrialSpec] | None, declared: bool = True) -> dict:
        """The attributes a saved loop's state holds (core.engine.state_codec). With ``specs``, the state must
        be of exactly those trials (in order) and one :func:`play_out` saves: between two of their
        rounds, at least one played and one to play (next round 2..horizon), its recorder holding
        exactly the rounds played (:func:`check_saved_recorder`). :class:`StateFormatError` says
        what is wrong. A state that passes these checks but was forged consistently is not detected."""
        attributes = decode_state(state)
        if not isinstance(attributes, dict) or not isinstance(attributes.get("specs"), list):
            raise StateFormatError(f"not the state of a {cls.__name__}")
        if not all(isinstance(name, str) for name in attributes):
            raise StateFormatError(f"not the state of a {cls.__name__}")
        if declared:   # (a loop that saves a layout of its own checks its names itself: declared=False)
            attributes = declared_attributes(cls, attributes)
        if specs is not None:
            stored = [str(getattr(spec, "trial_id", None)) for spec in attributes["specs"]]
            expected = [spec.trial_id for spec in specs]
            if stored != expected:
                raise StateFormatError(f"the state is of trial {', '.join(stored)}, not {', '.join(expected)}")
            horizon = specs[0].horizon
            if type(attributes.get("horizon")) is not int or attributes["horizon"] != horizon:
                raise StateFormatError(f"the state's horizon {attributes.get('horizon')!r} is not {horizon}")
            next_round = attributes.get("next_round")
            # play_out saves only after a step of >= 1 round and only while rounds are left.
            if type(next_round) is not int or not 2 <= next_round <= horizon:
                raise StateFormatError(f"the state's next round {next_round!r} is outside 2..{horizon} "
                                       "(a saved state has played a round and has one left)")
            check_saved_recorder(attributes.get("recorder"), len(specs), horizon, next_round)
        return attributes

    @classmethod
    def from_attributes(cls, attributes: dict) -> RoundLoop:
        """The loop whose state ``saved_attributes`` read; it records the round it goes on from (the
        results do not change)."""
        loop = cls.__new__(cls)
        loop.__dict__.update(attributes)
        loop.resumed_from = loop.next_round
        return loop

    @property
    def done(self) -> bool:
        return self.next_round > self.horizon

    def play_round(self) -> None:
        t, index = self.next_round, self.next_round - 1
        started = time.perf_counter()
        played = self.play(t)
        named = self.specs if len(self.specs) > 1 else ()   # a trial alone: its record is the trial
        for trial, feedback in enumerate(played.feedback):
            check_feedback(t, trial, feedback, self.reporter(trial), named)
            self.recorder.record(trial, index, int(played.arms[trial]), feedback)
        if played.learn is not None:
            played.learn(self.recorder.reward[:, index].copy())
        # Each trial's share of the round: summed over a batch, the batch's wall time.
        self.recorder.seconds[:, index] = (time.perf_counter() - started) / len(self.specs)
        self.next_round += 1

    def advance(self, rounds: int | None = None, on_progress: ProgressCallback | None = None,
                progress_every: int = 100, should_stop: Callable[[], bool] | None = None) -> None:
        """Play ``rounds`` more rounds (all that are left by default). ``on_progress(trial, t,
        cumulative regret)`` is called every ``progress_every`` rounds and at the last round;
        ``should_stop()``, asked after every round, ends the advance early when it says True."""
        last = self.horizon if rounds is None else min(self.horizon, self.next_round + rounds - 1)
        while self.next_round <= last:
            if should_stop is not None and should_stop():
                return
            self.play_round()
            t = self.next_round - 1
            if on_progress is not None and (t % progress_every == 0 or t == self.horizon):
                for trial in range(len(self.specs)):
                    on_progress(trial, t, float(self.recorder.cum_regret[trial, t - 1]))

    def results(self) -> list[TrialResult]:
        if not self.done:
            raise RuntimeError(f"the trials have played {self.next_round - 1} of {self.horizon} rounds")
        resumed = {"resumed_from_round": float(self.resumed_from)} if self.resumed_from else {}
        if self.checkpoint_rejected:
            resumed["checkpoint_rejected"] = 1.0
        return self.recorder.results([{**values, **resumed} for values in self.diagnostics()])


# ---- the checks of every round -------------------------------------------------------------------

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


# ---- checkpoints ---------------------------------------------------------------------------------

class Checkpoints(Protocol):
    """Where a run keeps the state of unfinished trials (the caller decides: core writes no files).
    ``every`` rounds a loop's state is saved under its key; a loop that starts again with the same
    key resumes from it. A loop whose state lives in several processes saves parts under
    ``key/<part>``; discarding or rejecting a key takes its parts with it."""

    every: int

    def load(self, key: str) -> bytes | None: ...

    def save(self, key: str, state: bytes) -> bool:
        """Keep ``state``; False when it could not be kept (a checkpoint only saves time: the run
        goes on, and a later attempt resumes from the previous one)."""

    def discard(self, key: str) -> None: ...

    def reject(self, key: str, reason: str) -> None:
        """The state under ``key`` cannot be used (damaged, another format, other trials): set it
        aside with a note; its loop starts from round 1."""

    def stop_requested(self) -> bool:
        """Whether the run asks its running trials to stop now (a scheduler's SIGTERM or a time
        limit reached the driver): the loop saves its state at the round it has reached and raises
        :class:`TrialStopped`, so that the next attempt loses no round. Optional: a store without
        it is never asked."""


class TrialStopped(Exception):
    """A loop stopped before its end because its run asked it to (``Checkpoints.stop_requested``);
    ``saved`` says whether its state at ``next_round`` was kept. Not a failure of the trial: it has
    no result, and its next attempt resumes from the saved state."""

    def __init__(self, key: str, next_round: int, saved: bool):
        super().__init__(key, next_round, saved)   # the arguments, so that it pickles (Ray sends it back)
        self.key, self.next_round, self.saved = key, next_round, saved

    def __str__(self) -> str:
        return f"{self.key}: stopped at round {self.next_round} (state {'saved' if self.saved else 'not saved'})"


def play_out(start: Callable[[], RoundLoop], resume: Callable[[bytes], RoundLoop], key: str,
             checkpoints: Checkpoints | None = None, on_progress: ProgressCallback | None = None,
             progress_every: int = 100) -> list[TrialResult]:
    """Play a loop to its end and return its trials' results: the loop ``resume`` makes of the state
    saved under ``key``, else a new one from ``start``. A saved state that ``resume`` refuses
    (:class:`StateFormatError`) is rejected (``Checkpoints.reject``) and the new loop records
    ``checkpoint_rejected``. With ``checkpoints`` the loop is saved every ``checkpoints.every``
    rounds and its state discarded once it has finished. The results are the same, bit for bit,
    with or without a resume."""
    loop, rejected, saved = None, False, None
    if checkpoints is not None:
        try:
            saved = checkpoints.load(key)
        except OSError as error:   # not a regular file (a FIFO would block for ever), or unreadable
            checkpoints.reject(key, f"not readable: {error.strerror or error}")
            rejected = True
    if saved is not None:
        try:
            loop = resume(saved)
        except StateFormatError as error:
            checkpoints.reject(key, str(error))
            rejected = True
    resumed = loop is not None
    if loop is None:
        loop = start()
        loop.checkpoint_rejected = rejected
    step = checkpoints.every if checkpoints is not None else None
    should_stop = getattr(checkpoints, "stop_requested", None)
    while not loop.done:
        try:
            loop.advance(step, on_progress=on_progress, progress_every=progress_every, should_stop=should_stop)
        except Exception as error:
            if not resumed:
                raise
            # A state that decodes but does not hold what a loop holds (a policy that is a number)
            # fails only when played: it is set aside and the trial starts again from round 1, as
            # for a state refused on reading; a failure of the trial itself then recurs on its own.
            checkpoints.reject(key, f"the trial resumed from it failed: {type(error).__name__}: {error}"[:500])
            loop, resumed = start(), False
            loop.checkpoint_rejected = True
            continue
        if checkpoints is not None and not loop.done:
            saved = loop.save(checkpoints, key)
            if should_stop is not None and should_stop():
                raise TrialStopped(key, loop.next_round, saved)
    results = loop.results()
    if checkpoints is not None:
        checkpoints.discard(key)
    return results
