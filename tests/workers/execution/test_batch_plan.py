"""How the dispatcher cuts trials into lockstep batches."""

from banditsweep.core.engine.trial import TrialSpec
from banditsweep.workers.execution.batches import make_batches
from banditsweep.workers.execution.run_values import Job

SYNTHETIC = {"kind": "synthetic", "function": "h1", "dim": 4}
KERNEL = {"kind": "adversarial_kernel", "setting": 1, "kernel": "se"}


def _jobs(algorithm, environment, seeds, params=None):
    return [Job(TrialSpec.create(algorithm, params or {}, environment, seed, 20), {}) for seed in range(seeds)]


def _sizes(batches):
    return sorted(len(batch) for batch in batches)


def test_cpu_defaults_follow_the_measured_benefit():
    neural = _jobs("neural_ucb", SYNTHETIC, 6, {"width": 8, "steps": 2})
    kernel = _jobs("kernel_exp3", KERNEL, 12)
    linear = _jobs("linucb", SYNTHETIC, 3)
    batches = make_batches(neural + kernel + linear, batch_trials=None, on_gpu=False, workers=1)
    # neural: one at a time on a CPU; kernel_exp3 on |X| = 400: batches of 8; linear: never batched
    assert _sizes(batches) == [1] * 9 + [4, 8]
    assert all(len({job.spec.algorithm for job in batch}) == 1 for batch in batches)


NEURAL = ("neural_ucb", SYNTHETIC, 40, {"width": 8, "steps": 2})


def test_on_a_gpu_the_default_batch_is_32_trials_or_fewer_to_leave_no_worker_idle():
    neural = _jobs(*NEURAL)
    assert _sizes(make_batches(neural, None, on_gpu=True, workers=1)) == [8, 32]
    assert _sizes(make_batches(neural, None, on_gpu=True, workers=4)) == [10, 10, 10, 10]  # no idle worker


def test_an_explicit_batch_size_bounds_the_batches():
    assert _sizes(make_batches(_jobs(*NEURAL), batch_trials=16, on_gpu=False, workers=1)) == [8, 16, 16]


def test_trials_that_differ_in_structure_never_share_a_batch():
    wide = _jobs("neural_ucb", SYNTHETIC, 2, {"width": 8, "steps": 2})
    narrow = _jobs("neural_ucb", SYNTHETIC, 2, {"width": 4, "steps": 2})
    batches = make_batches(wide + narrow, batch_trials=8, on_gpu=False, workers=1)
    assert _sizes(batches) == [2, 2]
    assert {len({job.spec.params["width"] for job in batch}) for batch in batches} == {1}


def test_a_batch_with_a_saved_state_is_formed_again_as_it_was():
    """The next run cuts its batches from fewer trials (or for other workers), which would name
    another batch than the one whose state was saved: that batch is formed first, as it was."""
    jobs = _jobs("neural_ucb", {"kind": "synthetic", "function": "h1"}, 5, {"width": 8})
    ids = [job.spec.trial_id for job in jobs]
    batches = make_batches(jobs, 3, False, 1, saved=[[ids[3], ids[1]], [ids[0], "another sweep's trial"]])
    assert [[job.spec.trial_id for job in batch] for batch in batches] == [[ids[3], ids[1]], [ids[0], ids[2], ids[4]]]


def test_the_note_of_saved_batches_names_only_batches_with_a_state_and_reads_as_data(tmp_path):
    from banditsweep.core.engine.trial import checkpoint_key
    from banditsweep.workers.storage.checkpoint_files import BATCHES, CheckpointFiles

    files = CheckpointFiles(tmp_path / ".checkpoints", 10)
    jobs = _jobs("neural_ucb", {"kind": "synthetic", "function": "h1"}, 4, {"width": 8})
    ids = [job.spec.trial_id for job in jobs]
    key = checkpoint_key([job.spec for job in jobs[:2]])
    files.note_batches({key: ids[:2], checkpoint_key([jobs[2].spec]): ids[2:3]})
    assert files.saved_batches() == []                  # no state saved yet
    files.save(key, b"state")
    with open(files.directory / BATCHES, "a") as note:   # what a damaged or planted note may hold
        note.write('{"key": "%s", "trials": ["a", "b"]}\n' % key)   # a later line for the same key
        note.write('{"key": "../../escape", "trials": ["x"]}\nnot json\n{"key": 1}\n[]\n')
    assert files.saved_batches() == [ids[:2]]
    files.forget_batches()
    assert (files.directory / BATCHES).exists()         # a state is left to find by it
    files.discard(key)
    files.forget_batches()
    assert not (files.directory / BATCHES).exists()
