"""Checkpoints are data: a state round-trips bit-identical through .npz + JSON, a planted pickle is
refused and never executed, and a checkpoint that cannot be used (garbage, truncated, another trial's)
is set aside with a note while its trial starts from round 1."""

import io
import json
import pickle
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from paths import GOLDEN
from sharded_cases import MemoryCheckpoints, local_shards, sharded_spec

sys.path.insert(0, str(GOLDEN))
from cases import DATA, specs  # noqa: E402

from banditsweep.core.engine.state_codec import StateFormatError, decode_state, encode_state  # noqa: E402
from banditsweep.core.engine.trial import TrialRun, TrialSpec, checkpoint_key, run_trial  # noqa: E402
from banditsweep.sweeps.cli.main import main  # noqa: E402
from banditsweep.workers.storage.store import SweepStore  # noqa: E402


@pytest.mark.parametrize("case", ["linucb_h1", "lints_h3", "ga_shuttle", "pc_shuttle", "ucb_mushroom",
                                  "bootstrap_h3", "ucb_batch_h1", "ga_batch_shuttle", "apg_kernel",
                                  "kernel_exp3_batch", "rls_kernel_exp3", "rls_amvr_setting1"])
def test_a_run_restored_from_its_stored_state_ends_bit_identical(case, monkeypatch):
    monkeypatch.setenv("BANDITSWEEP_DATA", str(DATA))
    whole = TrialRun(specs(case))
    whole.advance()
    halted = TrialRun(specs(case))
    halted.advance(7)
    state = halted.snapshot()
    assert state[:2] == b"PK"   # a zip of .npy entries and one JSON entry, no pickle stream
    with np.load(io.BytesIO(state), allow_pickle=False) as stored:
        assert all(stored[name].dtype != object for name in stored.files)
    resumed = TrialRun.restore(state, specs(case))
    resumed.advance()
    for before, after in zip(whole.results(), resumed.results()):
        for name in ("arm", "reward", "regret", "cum_regret"):
            np.testing.assert_array_equal(getattr(after, name), getattr(before, name), err_msg=f"{case} {name}")
        for name, values in before.extras.items():
            np.testing.assert_array_equal(after.extras[name], values, err_msg=f"{case} {name}")
        assert after.diagnostics["resumed_from_round"] == 8.0


class Payload:
    """What an attacker plants: unpickling it touches a file (it would run any command the same way)."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (Path.touch, (self.marker,))


def test_the_codec_reads_no_pickle_and_names_no_class_outside_the_project(tmp_path):
    marker = tmp_path / "executed"
    with pytest.raises(StateFormatError, match="not a stored state"):
        decode_state(pickle.dumps(Payload(marker)))
    assert not marker.exists()
    # A well-formed state naming a class outside the project (os.system's module, builtins) is refused
    # before anything is imported or built.
    for module, name in (("os", "system"), ("builtins", "eval"), ("subprocess", "Popen"), ("pathlib", "Path")):
        forged = {"format": "banditsweep-state/1",
                  "root": {"t": "object", "cls": [module, name], "attrs": {"t": "dict", "v": [], "id": 1}, "id": 0}}
        buffer = io.BytesIO()
        np.savez(buffer, state_json=np.frombuffer(json.dumps(forged).encode(), dtype=np.uint8))
        with pytest.raises(StateFormatError, match="not one of banditsweep's"):
            decode_state(buffer.getvalue())
    # Truncated and garbage bytes.
    state = encode_state({"x": np.arange(5), "y": [1.5, float("nan")]})
    for damaged in (state[: len(state) // 2], b"\x00" * 64, b"", state[:-10]):
        with pytest.raises(StateFormatError):
            decode_state(damaged)
    again = decode_state(state)
    np.testing.assert_array_equal(again["x"], np.arange(5))
    assert again["y"][0] == 1.5 and np.isnan(again["y"][1])


def _spec(tmp_path: Path) -> tuple[str, TrialSpec]:
    params = {"width": 8, "steps": 3, "lr": 0.01}
    environment = {"kind": "synthetic", "function": "h1", "dim": 4}
    spec = {"sweep": "planted", "horizon": 20, "seeds": [3], "checkpoint_every": 5,
            "environments": [environment], "algorithms": [{"name": "neural_rbmle_ga", "params": params}]}
    (tmp_path / "planted.yaml").write_text(yaml.safe_dump(spec))
    return "planted.yaml", TrialSpec.create("neural_rbmle_ga", params, environment, 3, 20)


@pytest.mark.parametrize("planted", ["pickle", "garbage", "truncated", "other trial"])
def test_a_planted_or_unusable_checkpoint_is_set_aside_and_its_trial_starts_from_round_1(
        planted, tmp_path, monkeypatch, shared_ray, capsys):
    monkeypatch.chdir(tmp_path)
    spec_file, trial = _spec(tmp_path)
    marker = tmp_path / "executed"
    checkpoint = tmp_path / "results" / "planted" / ".checkpoints" / f"{checkpoint_key([trial])}.state"
    checkpoint.parent.mkdir(parents=True)
    if planted == "pickle":
        checkpoint.write_bytes(pickle.dumps(Payload(marker)))
    elif planted == "garbage":
        checkpoint.write_bytes(np.random.default_rng(0).bytes(4096))
    else:
        other = TrialSpec.create(trial.algorithm, trial.params, trial.environment, 4, 20)
        run = TrialRun([other] if planted == "other trial" else [trial])
        run.advance(10)
        state = run.snapshot()
        checkpoint.write_bytes(state[: len(state) // 3] if planted == "truncated" else state)
    assert main(["run", spec_file, "--no-progress", "--sink", "none"]) == 0
    assert not marker.exists()   # the pickle was never loaded
    store = SweepStore.for_sweep(tmp_path / "results", "planted")
    row = store.read_trials().iloc[0]
    assert row["status"] == "finished"
    diagnostics = json.loads(row["diagnostics"])
    assert diagnostics["checkpoint_rejected"] == 1.0 and "resumed_from_round" not in diagnostics
    curve = store.read_curves([row["trial_id"]]).sort_values("t")
    np.testing.assert_array_equal(curve["cum_regret"].to_numpy(), run_trial(trial).cum_regret)
    quarantined = sorted(p.name for p in (tmp_path / "results" / "planted" / "quarantine").iterdir())
    assert quarantined == [f"checkpoint-{checkpoint.name}", f"checkpoint-{checkpoint.name}.reason.txt"]
    assert not checkpoint.exists()
    # The next run finds nothing to do and nothing stuck: the trial is done.
    assert main(["run", spec_file, "--no-progress", "--sink", "none"]) == 0
    assert len(pd.read_parquet(tmp_path / "results" / "planted" / "trials")) == 1


def test_a_sharded_trials_states_refuse_a_pickle_and_another_trials_state(tmp_path):
    from banditsweep.core.kernel.sharded.coordinator import ShardedKernelTrial

    spec = sharded_spec("rls_kernel_exp3", "setting2", horizon=20)
    other = sharded_spec("rls_kernel_exp3", "setting2", horizon=21)
    group = local_shards(spec, 2)
    trial = ShardedKernelTrial(spec, group)
    trial.advance(5)
    memory = MemoryCheckpoints(every=5)
    trial.save(memory, "key")
    mine = memory.states["key"]
    states = [memory.states[shard.part("key", 5)] for shard in group.shards]
    marker = tmp_path / "executed"
    shard = local_shards(spec, 2).shards[0]
    for damaged in (pickle.dumps(Payload(marker)), states[1], mine[:100]):
        with pytest.raises(StateFormatError):
            shard.check_state(damaged)   # a pickle, the other shard's state, a truncated file
    with pytest.raises(StateFormatError, match="of trial"):
        ShardedKernelTrial.check_state(mine, other)
    with pytest.raises(StateFormatError):
        ShardedKernelTrial.check_state(pickle.dumps(Payload(marker)), spec)
    assert not marker.exists()
    shard.restore(states[0])   # its own state is taken
