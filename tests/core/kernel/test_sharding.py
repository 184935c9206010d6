"""One kernel trial split over shards (core.kernel.sharded; SPEC 4): the same answer for
any number of shards, the unsharded answer for random and APG-Exp3, resumable between rounds through
the one checkpoint driver (core.engine.round_loop.play_out)."""

import numpy as np
import pytest
import yaml

from banditsweep.core.kernel.sharded.coordinator import ShardedKernelTrial, run_sharded
from banditsweep.core.kernel.sharded.partition import (block_size, from_fixed, keyed_uniforms, max_shards, shard_ranges,
                                                       shards_for, to_fixed)
from banditsweep.core.engine.state_codec import decode_state, encode_state
from banditsweep.core.engine.trial import TrialSpec, checkpoint_key, run_trial
from banditsweep.sweeps.spec.model import SpecError, parse_sweep
from sharded_cases import ENVIRONMENTS, MemoryCheckpoints, local_shards, sharded_spec


def _curves(result):
    return np.stack([result.cum_regret, result.extras["expected_regret"], result.arm.astype(float)])


@pytest.mark.parametrize("algorithm", ["random", "apg_exp3", "rls_kernel_exp3"])
@pytest.mark.parametrize("environment", ["setting1", "setting2"])
def test_one_to_four_shards_give_the_same_trial(algorithm, environment):
    spec = sharded_spec(algorithm, environment, horizon=25)
    results = [run_sharded(spec, local_shards(spec, count)) for count in (1, 2, 3, 4)]
    reference = _curves(results[0])
    for count, result in zip((2, 3, 4), results[1:]):
        np.testing.assert_allclose(_curves(result), reference, rtol=1e-9, atol=1e-12, err_msg=f"{count} shards")
        assert result.diagnostics["shards"] == count
    assert np.ptp(reference[0]) > 0   # the trial played: regret moved


@pytest.mark.parametrize("algorithm", ["random", "apg_exp3"])
@pytest.mark.parametrize("environment", ["setting1", "uniform"])
def test_random_and_apg_sharded_agree_with_the_unsharded_trial(algorithm, environment):
    spec = sharded_spec(algorithm, environment)
    unsharded = run_trial(TrialSpec.create(algorithm, {}, ENVIRONMENTS[environment], 4, 40))
    sharded = run_sharded(spec, local_shards(spec, 3))
    np.testing.assert_array_equal(sharded.arm, unsharded.arm)
    np.testing.assert_allclose(_curves(sharded), _curves(unsharded), rtol=1e-9, atol=1e-12)
    for key, value in unsharded.diagnostics.items():
        assert sharded.diagnostics[key] == pytest.approx(value, rel=1e-9), key


def test_rls_sharded_is_the_same_algorithm_with_keyed_draws():
    """Same schedule and MVR design as the unsharded trial; landmark counts of the same size."""
    spec = sharded_spec("rls_kernel_exp3", "setting1", horizon=60)
    unsharded = run_trial(TrialSpec.create("rls_kernel_exp3", {}, ENVIRONMENTS["setting1"], 4, 60))
    sharded = run_sharded(spec, local_shards(spec, 2))
    for key in ("eta", "alpha", "beta", "mu", "mvr_length", "mvr_distinct_points"):
        assert sharded.diagnostics[key] == unsharded.diagnostics[key], key
    assert 0.5 < sharded.diagnostics["s_t_mean"] / unsharded.diagnostics["s_t_mean"] < 2.0
    assert sharded.diagnostics["effective_dimension_mean"] > 1


class Stopped(Exception):
    """The worker of a trial died."""


def _stopped(spec, every, round_):
    """The checkpoints a run of ``spec`` on two shards left, saved every ``every`` rounds, when its
    worker died in round ``round_``."""
    checkpoints = MemoryCheckpoints(every)

    def on_progress(_trial, t, _regret):
        if t == round_:
            raise Stopped

    with pytest.raises(Stopped):
        run_sharded(spec, local_shards(spec, 2), on_progress, progress_every=1, checkpoints=checkpoints)
    return checkpoints


def _part(spec, shard, at):
    return f"{checkpoint_key([spec])}/shard-{local_shards(spec, 2).ranges[shard][0]}.r{at}"


def test_a_sharded_trial_resumes_through_the_checkpoint_driver_bit_identical():
    """Saved every 5 rounds, stopped at round 13: new shards, rebuilt from the seed, take their parts
    of round 10 and the trial ends as if never stopped; the finished trial leaves no state."""
    spec = sharded_spec("rls_kernel_exp3", "setting2", horizon=30)
    checkpoints = _stopped(spec, 5, 13)
    assert sorted(checkpoints.states) == [checkpoint_key([spec]), _part(spec, 0, 10), _part(spec, 1, 10)]
    result = run_sharded(spec, local_shards(spec, 2), checkpoints=checkpoints)
    np.testing.assert_array_equal(_curves(result), _curves(run_sharded(spec, local_shards(spec, 2))))
    assert result.diagnostics["resumed_from_round"] == 11 and "checkpoint_rejected" not in result.diagnostics
    assert checkpoints.states == {} and checkpoints.rejected == []


def test_a_sharded_checkpoint_with_a_foreign_part_starts_anew_on_untouched_shards():
    spec = sharded_spec("apg_exp3", "setting1", horizon=20)
    checkpoints = _stopped(spec, 5, 7)
    checkpoints.states[_part(spec, 1, 5)] = checkpoints.states[_part(spec, 0, 5)]   # the other shard's part
    result = run_sharded(spec, local_shards(spec, 2), checkpoints=checkpoints)
    np.testing.assert_array_equal(_curves(result), _curves(run_sharded(spec, local_shards(spec, 2))))
    assert result.diagnostics["checkpoint_rejected"] == 1.0 and "resumed_from_round" not in result.diagnostics
    assert len(checkpoints.rejected) == 1 and "another trial or shard" in checkpoints.rejected[0]


@pytest.mark.parametrize("algorithm", ["random", "apg_exp3"])
def test_a_coordinator_state_in_the_landed_layout_resumes(algorithm):
    """The landed release saved the coordinator's attributes whole (its shard group None among them;
    tests/core/engine/test_landed_checkpoints.py holds an RLS one): such a state is read into today's declared
    fields, and the trial ends as it does resumed from today's layout; where the state holds a design
    chosen under the earlier tie rule (APG-Exp3's), it is refused and the trial starts again."""
    spec = sharded_spec(algorithm, "setting1", horizon=20)
    checkpoints = _stopped(spec, 5, 7)
    key = checkpoint_key([spec])
    todays = MemoryCheckpoints(5)
    todays.states = dict(checkpoints.states)
    today = decode_state(checkpoints.states[key])
    half = today.pop("algorithm")
    built = ShardedKernelTrial(spec, local_shards(spec, 2))
    landed = {**today, **half, "group": None, "resumed_from": None, "landmark_counts": [], "effective_dimensions": [],
              **{name: getattr(built, name) for name in ("n", "dim", "kernel", "norm_bound", "params", "table_max")}}
    landed.pop("tie_rule", None)   # the landed release saved no tie rule (core.engine.ties)
    if algorithm == "random":
        landed["dots"] = landed.pop("uniform_sums")
    else:
        landed["log_totals"] = [(part.top, part.total) for part in landed["log_totals"]]
    checkpoints.states[key] = encode_state(landed)
    result = run_sharded(spec, local_shards(spec, 2), checkpoints=checkpoints)
    if algorithm == "random":   # no design: nothing a tie decided, and it resumes
        assert result.diagnostics["resumed_from_round"] == 6 and checkpoints.rejected == []
        np.testing.assert_array_equal(_curves(result), _curves(run_sharded(spec, local_shards(spec, 2), checkpoints=todays)))
    else:   # its design's ties were the smallest index's: refused, saying so, and run again from round 1
        assert "resumed_from_round" not in result.diagnostics and result.diagnostics["checkpoint_rejected"] == 1.0
        assert "before its design's ties were decided" in checkpoints.rejected[0]
        np.testing.assert_array_equal(_curves(result), _curves(run_sharded(spec, local_shards(spec, 2))))


def test_partition_keyed_draws_and_exact_sums_do_not_depend_on_the_split():
    n = 10_000
    assert block_size(n) == 128 and max_shards(n) == 79
    for count in (1, 2, 3, 7, 79):
        ranges = shard_ranges(n, count)
        assert ranges[0][0] == 0 and ranges[-1][1] == n and len(ranges) == count
        assert all(a < b and a % 128 == 0 for a, b in ranges)
        pieces = np.concatenate([keyed_uniforms(99, a, b) for a, b in ranges])
        assert pieces.tolist() == keyed_uniforms(99, 0, n).tolist()
    u = keyed_uniforms(7, 0, 200_000)
    assert 0 <= u.min() and u.max() < 1 and abs(u.mean() - 0.5) < 0.01 and abs(np.corrcoef(u[:-1], u[1:])[0, 1]) < 0.01
    with pytest.raises(ValueError, match="splits into 1 to 79 shards"):
        shard_ranges(n, 80)
    assert shards_for(n, None, 2600) == 4 and shards_for(n, 3, None) == 3
    # Fixed-point sums are exact: any order gives the same float.
    values = np.random.default_rng(0).uniform(-1, 1, size=(1000, 3)) * np.logspace(-12, 0, 1000)[:, None]
    words = to_fixed(values, 1.0)
    forward = from_fixed(words.sum(axis=0), 1.0)
    backward = from_fixed(np.flip(words, 0).cumsum(axis=0)[-1], 1.0)
    assert forward.tolist() == backward.tolist()
    np.testing.assert_allclose(forward, values.sum(axis=0), rtol=1e-12)


def _sweep(**extra):
    spec = {"sweep": "big", "horizon": 20, "seeds": 1,
            "environments": [{"kind": "adversarial_kernel", "setting": 1, "candidates": 20, "centers": 5}],
            "algorithms": [{"name": "random"}]}
    for key, value in extra.items():
        if key == "environment":
            spec["environments"][0].update(value)
        else:
            spec["algorithms"][0][key] = value
    return parse_sweep(yaml.safe_load(yaml.safe_dump(spec)), "big.yaml")


def test_spec_asks_for_shards_per_environment_or_algorithm():
    assert [t.shards for t in _sweep(environment={"shards": 3}).trials] == [3]
    assert [t.shards for t in _sweep(shard_points=100).trials] == [4]
    plain, sharded = _sweep().trials[0], _sweep(shards=2).trials[0]
    assert plain.shards == 0 and sharded.spec.sharded and plain.trial_id != sharded.trial_id
    assert _sweep(shards=2).trials[0].trial_id == _sweep(shards=4).trials[0].trial_id   # the count is not content


@pytest.mark.parametrize("extra, where, message", [
    ({"name": "kernel_exp3", "shards": 2}, "algorithms[0].shards", "cannot be sharded; shardable: random, apg_exp3"),
    ({"shards": 500}, "algorithms[0].shards", "splits into at most 100 shards"),
    ({"shards": 2, "shard_points": 10}, "algorithms[0].shards", "give one of 'shards' and 'shard_points'"),
    ({"name": "rls_kernel_exp3", "params": {"sampler": "theory"}, "shards": 2}, "algorithms[0].shards",
     "practical sampler"),
    ({"environment": {"shards": 0}}, "environments[0].shards", "must be a positive integer"),
])
def test_bad_shard_requests_name_the_key(extra, where, message):
    with pytest.raises(SpecError) as error:
        _sweep(**extra)
    assert error.value.location == where and message in error.value.message
