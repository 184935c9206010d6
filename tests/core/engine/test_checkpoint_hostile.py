"""Hostile checkpoints: a results folder may come from anyone, so every ``.checkpoints/*.state`` is
read as hostile data. A state nested too deep, one whose arrays claim absurd sizes, one naming a
class of a module outside the library (the package root's tests/ and benchmarks/ hold plugin modules
with import-time side effects) and one the project never writes (a "finished" loop, a recorder that
does not match its round) are each refused: set aside in quarantine, never imported from, and the
trial starts from round 1 with the results of a clean run."""

import io
import json
import os
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest
import yaml

from banditsweep.core.engine.state_codec import MAX_DEPTH, StateFormatError, decode_state
from banditsweep.core.engine.trial import TrialRun, TrialSpec, checkpoint_key, run_trial
from banditsweep.sweeps.cli.main import main
from banditsweep.workers.storage.store import SweepStore

HORIZON = 20
ENVIRONMENT = {"kind": "synthetic", "function": "h1", "dim": 4}
PLUGIN_MODULE = "banditsweep.tests.plugins.late_starts"   # patches the sinks' Mirror when imported
FORMAT = "banditsweep-state/1"


def _trial() -> TrialSpec:
    return TrialSpec.create("linucb", {}, ENVIRONMENT, 3, HORIZON)


def _write_spec(tmp_path: Path) -> str:
    spec = {"sweep": "hostile", "horizon": HORIZON, "seeds": [3], "checkpoint_every": 5,
            "environments": [ENVIRONMENT], "algorithms": [{"name": "linucb", "params": {}}]}
    (tmp_path / "hostile.yaml").write_text(yaml.safe_dump(spec))
    return "hostile.yaml"


def _npz(structure, **arrays) -> bytes:
    text = structure if isinstance(structure, str) else json.dumps(structure)
    buffer = io.BytesIO()
    np.savez(buffer, state_json=np.frombuffer(text.encode(), dtype=np.uint8), **arrays)
    return buffer.getvalue()


def _deep_state(depth: int = 100_000) -> bytes:
    return _npz(f'{{"format":"{FORMAT}","root":' + '{"t":"list","id":0,"v":[' * depth + "]}" * depth + "}")


def _oversized_state() -> bytes:
    """A stored zip whose array header claims 10^11 float64 (800 GB) for 24 bytes of data."""
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(header, {"descr": "<f8", "fortran_order": False, "shape": (10**11,)})
    state_json = io.BytesIO()
    np.lib.format.write_array(state_json, np.frombuffer(json.dumps(
        {"format": FORMAT, "root": {"t": "ndarray", "a": "a0", "id": 0}}).encode(), dtype=np.uint8))
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_STORED) as archive:
        archive.writestr("state_json.npy", state_json.getvalue())
        archive.writestr("a0.npy", header.getvalue() + bytes(24))
    return buffer.getvalue()


def _plugin_class_state() -> bytes:
    return _npz({"format": FORMAT, "root": {"t": "object", "cls": [PLUGIN_MODULE, "X"],
                                            "attrs": {"t": "dict", "v": [], "id": 1}, "id": 0}})


def _finished_state() -> bytes:
    """A real state of the trial made to say it has played every round, its records zeroed."""
    run = TrialRun([_trial()])
    run.advance(10)
    run.next_round = HORIZON + 1
    for name in ("arm", "reward", "regret", "cum_regret", "seconds"):
        getattr(run.recorder, name)[:] = 0
    return run.snapshot()


def _policy_replaced_state() -> bytes:
    """A real state of round 10 whose policy is a number: it decodes, and fails only when played."""
    run = TrialRun([_trial()])
    run.advance(10)
    run.policy = 7
    return run.snapshot()


PLANTED = {"deep": _deep_state, "oversized": _oversized_state, "plugin class": _plugin_class_state,
           "finished": _finished_state, "policy replaced": _policy_replaced_state, "fifo": None}


@pytest.mark.parametrize("planted", sorted(PLANTED))
def test_a_hostile_checkpoint_is_set_aside_and_its_trial_starts_from_round_1(planted, tmp_path, monkeypatch,
                                                                             shared_ray):
    monkeypatch.chdir(tmp_path)
    spec_file, trial = _write_spec(tmp_path), _trial()
    checkpoint = tmp_path / "results" / "hostile" / ".checkpoints" / f"{checkpoint_key([trial])}.state"
    checkpoint.parent.mkdir(parents=True)
    if planted == "fifo":
        os.mkfifo(checkpoint)   # reading it would block the trial for ever
    else:
        checkpoint.write_bytes(PLANTED[planted]())
    assert main(["run", spec_file, "--no-progress", "--sink", "none"]) == 0
    store = SweepStore.for_sweep(tmp_path / "results", "hostile")
    row = store.read_trials().iloc[0]
    assert row["status"] == "finished"
    diagnostics = json.loads(row["diagnostics"])
    assert diagnostics["checkpoint_rejected"] == 1.0 and "resumed_from_round" not in diagnostics
    clean = run_trial(trial).cum_regret
    assert clean[-1] > 0
    np.testing.assert_allclose(float(row["final_regret"]), clean[-1], rtol=1e-9)
    curve = store.read_curves([row["trial_id"]]).sort_values("t")
    np.testing.assert_allclose(curve["cum_regret"].to_numpy(), clean, rtol=1e-9)
    quarantine = tmp_path / "results" / "hostile" / "quarantine"
    assert sorted(p.name for p in quarantine.iterdir()) == [f"checkpoint-{checkpoint.name}",
                                                             f"checkpoint-{checkpoint.name}.reason.txt"]
    assert not checkpoint.exists()
    assert PLUGIN_MODULE not in sys.modules
    # Nothing is left stuck: the next run finds the trial done.
    assert main(["run", spec_file, "--no-progress", "--sink", "none"]) == 0
    assert len(SweepStore.for_sweep(tmp_path / "results", "hostile").read_trials()) == 1


def test_an_honest_checkpoint_planted_the_same_way_is_resumed(tmp_path, monkeypatch, shared_ray):
    """The checks refuse only what the project never writes: its own state of round 10 resumes."""
    monkeypatch.chdir(tmp_path)
    spec_file, trial = _write_spec(tmp_path), _trial()
    checkpoint = tmp_path / "results" / "hostile" / ".checkpoints" / f"{checkpoint_key([trial])}.state"
    checkpoint.parent.mkdir(parents=True)
    run = TrialRun([trial])
    run.advance(10)
    checkpoint.write_bytes(run.snapshot())
    assert main(["run", spec_file, "--no-progress", "--sink", "none"]) == 0
    row = SweepStore.for_sweep(tmp_path / "results", "hostile").read_trials().iloc[0]
    diagnostics = json.loads(row["diagnostics"])
    assert diagnostics["resumed_from_round"] == 11.0 and "checkpoint_rejected" not in diagnostics
    np.testing.assert_allclose(float(row["final_regret"]), run_trial(trial).cum_regret[-1], rtol=1e-9)
    assert not (tmp_path / "results" / "hostile" / "quarantine").exists()


def test_a_ray_worker_decoding_a_state_that_names_a_test_plugin_module_does_not_import_it(shared_ray):
    import ray

    state, trial = _plugin_class_state(), _trial()

    def probe(data: bytes, spec) -> tuple[str, bool]:
        import sys as worker_sys

        from banditsweep.core.engine.state_codec import StateFormatError as Refused
        from banditsweep.core.engine.trial import TrialRun as Run

        try:
            Run.restore(data, [spec])
            refused = ""
        except Refused as error:
            refused = str(error)
        return refused, PLUGIN_MODULE in worker_sys.modules

    refused, imported = ray.get(ray.remote(probe).remote(state, trial), timeout=120)
    assert "not one of banditsweep's" in refused
    assert not imported


def _restore(run: TrialRun) -> None:
    TrialRun.restore(run.snapshot(), [_trial()])


@pytest.mark.parametrize("module", [PLUGIN_MODULE, "banditsweep.tests.plugins.crash_midway",
                                    "banditsweep.benchmarks.plugins.sleep_algorithm", "banditsweep.benchmarks.sweep_scale",
                                    "banditsweep.sweeps.cli.main", "banditsweep.tests.conftest", "banditsweep"])
def test_decode_refuses_classes_outside_the_library_without_importing_them(module):
    imported = module in sys.modules
    forged = _npz({"format": FORMAT, "root": {"t": "object", "cls": [module, "X"],
                                              "attrs": {"t": "dict", "v": [], "id": 1}, "id": 0}})
    with pytest.raises(StateFormatError, match="not one of banditsweep's"):
        decode_state(forged)
    assert (module in sys.modules) == imported


def test_decode_turns_every_failure_into_a_state_format_error():
    with pytest.raises(StateFormatError, match="deeper than"):
        decode_state(_deep_state())
    with pytest.raises(StateFormatError, match="deeper than"):
        decode_state(_deep_state(MAX_DEPTH))   # each list node nests two levels
    with pytest.raises(StateFormatError, match="claims more data"):
        decode_state(_oversized_state())
    # A deflated entry (a zip bomb unpacks from a small file) is not what np.savez writes.
    bomb = io.BytesIO()
    with zipfile.ZipFile(bomb, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("state_json.npy", bytes(10**6))
    with pytest.raises(StateFormatError, match="compressed"):
        decode_state(bomb.getvalue())
    # Wrong types and shapes deep inside a well-formed structure.
    for root in ({"t": "dict", "v": 5, "id": 0}, {"t": "dict", "v": [[1]], "id": 0},
                 {"t": "list", "v": [{"t": "ref", "id": [1]}], "id": 0}, {"t": "float", "v": "x" * 10},
                 {"t": "np_generator", "kind": "PCG64", "state": {"t": "dict", "v": [], "id": 1}, "id": 0},
                 {"t": "object", "cls": ["banditsweep.core.engine.trial", "TrialRun.__init__"], "attrs": {}, "id": 0},
                 {"t": "object", "cls": ["banditsweep.core.engine.trial", "<locals>"], "attrs": {}, "id": 0}):
        with pytest.raises(StateFormatError):
            decode_state(_npz({"format": FORMAT, "root": root}))
    # A moderately nested but legal structure is still read.
    nested = {"t": "list", "v": [], "id": 0}
    for depth in range(1, 30):
        nested = {"t": "list", "v": [nested], "id": depth}
    value = decode_state(_npz({"format": FORMAT, "root": nested}))
    for _ in range(29):
        (value,) = value
    assert value == []


def _advanced(rounds: int = 10) -> TrialRun:
    run = TrialRun([_trial()])
    run.advance(rounds)
    return run


@pytest.mark.parametrize("forgery", ["finished", "not started", "horizon", "cumulative", "nan", "future round",
                                     "shape", "dtype", "negative arm", "recorder"])
def test_a_state_the_project_never_writes_is_refused(forgery):
    run = _advanced()
    recorder = run.recorder
    if forgery == "finished":
        run.next_round = HORIZON + 1
    elif forgery == "not started":
        run.next_round = 1
    elif forgery == "horizon":
        run.horizon = HORIZON - 5
    elif forgery == "cumulative":
        recorder.cum_regret[0, 4] += 0.5
    elif forgery == "nan":
        recorder.reward[0, 3] = np.nan
    elif forgery == "future round":
        recorder.regret[0, 15] = 1.0
    elif forgery == "shape":
        recorder.reward = recorder.reward[:, :10]
    elif forgery == "dtype":
        recorder.arm = recorder.arm.astype(np.float64)
    elif forgery == "negative arm":
        recorder.arm[0, 2] = -1
    else:
        run.recorder = {"arm": recorder.arm}
    with pytest.raises(StateFormatError):
        _restore(run)


def test_the_recorder_checks_pass_every_honest_round_and_tolerate_rounding():
    run = TrialRun([_trial()])
    for _ in range(HORIZON - 1):
        run.advance(1)
        restored = TrialRun.restore(run.snapshot(), [_trial()])
        assert restored.next_round == run.next_round
    # Large cumulative values summed in floating point still pass (relative tolerance).
    run = _advanced()
    played = run.next_round - 1
    run.recorder.regret[0, :played] = 1e6 / 3
    run.recorder.cum_regret[0, :played] = np.cumsum(np.full(played, 1e6 / 3))
    _restore(run)
