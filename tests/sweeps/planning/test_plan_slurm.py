"""``banditsweep plan SPEC --slurm``: the #SBATCH lines for cluster-slurm.sbatch (values checked),
Slurm's time format, and the warning about trials longer than a job's time limit that cannot
checkpoint (also what ``run`` says inside a Slurm job)."""

from __future__ import annotations

import argparse
import re
import subprocess

import pytest
import yaml

from banditsweep.sweeps.planning import slurm
from banditsweep.sweeps.cli.main import main
from banditsweep.sweeps.planning.plan import CellCost, SweepPlan


@pytest.mark.parametrize("text, seconds", [("90", 5400), ("5:30", 330), ("4:00:00", 14400), ("1-12", 129600),
                                           ("2-00:30", 174600), ("1-01:02:03", 90123), ("0:45", 45)])
def test_slurm_times_are_read_in_every_form_slurm_accepts(text, seconds):
    assert slurm.parse_time(text) == seconds


@pytest.mark.parametrize("text", ["", "1h", "UNLIMITED", "1:2:3:4", "-5", "1-"])
def test_other_times_are_refused(text):
    with pytest.raises(ValueError):
        slurm.parse_time(text)


@pytest.mark.parametrize("seconds, text", [(1, "00:01:00"), (60, "00:01:00"), (61, "00:02:00"),
                                           (3600 * 5 + 1, "05:01:00"), (86400 + 3600, "1-01:00:00")])
def test_times_are_written_in_whole_minutes_rounded_up(seconds, text):
    assert slurm.format_time(seconds) == text
    assert slurm.parse_time(text) >= seconds


def _plan(seconds_per_trial: float, trials: int = 10, workers: int = 4, horizon: int = 1000) -> SweepPlan:
    return SweepPlan("s", [CellCost("LinUCB", "synthetic:h1", horizon, trials, seconds_per_trial, 1 << 20, 0.0,
                                    "probe")], workers=workers)


def _resources(cpus_per_trial=1.0, gpus_per_trial=None):
    """What Allocation.of reads of a spec's ``resources:``."""
    return argparse.Namespace(cpus_per_trial=cpus_per_trial, gpus_per_trial=gpus_per_trial)


SUBMIT = ["sbatch", "cluster-slurm.sbatch", "sweeps/x.yaml"]


def _hour_job() -> slurm.Allocation:
    return slurm.Allocation.of(_resources(), time_limit=3600)


def test_gpu_nodes_give_one_trial_actor_per_gpu_and_a_time_from_the_cost_model():
    job = slurm.Allocation.of(_resources(cpus_per_trial=2), nodes=2, gpus_per_node=4)
    assert (job.workers, job.cpus_per_node) == (8, 8)
    plan = _plan(600.0, trials=80, workers=job.workers)   # 80 x 10 min over 8 GPUs: 100 min
    lines = slurm.sbatch_lines(job, plan, [*SUBMIT, "--set", "horizon=500"], None)
    sbatch = [line for line in lines if line.startswith("#SBATCH")]
    assert sbatch == ["#SBATCH --nodes=2", "#SBATCH --ntasks-per-node=1", "#SBATCH --cpus-per-task=8",
                      "#SBATCH --gpus-per-node=4", "#SBATCH --time=02:35:00", "#SBATCH --requeue",
                      "#SBATCH --signal=B:USR1@120", "#SBATCH --open-mode=append"]
    # 100 min x 1.5 + 180 s start + 120 s stop = 155 min
    assert slurm.job_seconds(plan) == 6000 * 1.5 + 300
    assert "# then: sbatch cluster-slurm.sbatch sweeps/x.yaml --set horizon=500" in lines
    assert not any(line.startswith("warning") for line in lines)


def test_cpu_trials_fill_the_cpus_per_node_given():
    job = slurm.Allocation.of(_resources(cpus_per_trial=2), nodes=3, cpus_per_node=16)
    assert (job.workers, job.gpus_per_trial) == (24, 0.0)


def test_trials_that_ask_for_gpus_need_gpu_nodes():
    with pytest.raises(Exception, match="gpus_per_trial"):
        slurm.Allocation.of(_resources(gpus_per_trial=1))


def test_a_time_limit_splits_a_long_sweep_into_requeued_jobs():
    plan = _plan(600.0, trials=80, workers=8)   # 100 min of trials, 150 with the margin
    lines = slurm.sbatch_lines(_hour_job(), plan, SUBMIT, None)
    assert "#SBATCH --time=01:00:00" in lines
    # 60 min - 5 min of start and stop = 55 min of trials per job: 150 / 55 -> 3 jobs
    assert any("about 3 jobs of --time 01:00:00" in line for line in lines)
    assert not any(line.startswith("warning") for line in lines)   # a 10-min trial fits in a job


def test_a_trial_longer_than_the_time_limit_without_checkpoints_is_named():
    plan = _plan(2 * 3600.0, trials=4, horizon=10_000)
    lines = slurm.sbatch_lines(_hour_job(), plan, SUBMIT, None)
    [warning] = [line for line in lines if line.startswith("warning")]
    assert "LinUCB | synthetic:h1 takes about 2.0 h" in warning
    assert "never finishes" in warning and "--set checkpoint_every=833" in warning   # about every 10 minutes
    # With checkpoints it resumes from the last one in the next job: no warning.
    lines = slurm.sbatch_lines(_hour_job(), plan, SUBMIT, 500)
    assert not any(line.startswith("warning") for line in lines)


def test_run_inside_a_slurm_job_names_trials_longer_than_its_time_limit(monkeypatch):
    plan = _plan(2 * 3600.0)
    environ = {"SLURM_JOB_ID": "42", "SLURM_JOB_START_TIME": "1000", "SLURM_JOB_END_TIME": str(1000 + 3600)}
    [note] = slurm.time_limit_notes(plan, None, environ)
    assert note.startswith("warning (Slurm job 42): a trial of LinUCB | synthetic:h1")
    assert slurm.time_limit_notes(plan, 100, environ) == []
    assert slurm.time_limit_notes(plan, None, {}) == []   # not in a Slurm job

    # Without the variables (Slurm before 23.02): squeue's %l.
    def squeue(argv, **kwargs):
        assert argv == ["squeue", "-h", "-j", "42", "-o", "%l"]
        return subprocess.CompletedProcess(argv, 0, "1:00:00\n", "")

    monkeypatch.setattr(slurm.subprocess, "run", squeue)
    assert slurm.job_time_limit({"SLURM_JOB_ID": "42"}) == 3600
    monkeypatch.setattr(slurm.subprocess, "run", lambda argv, **kw: subprocess.CompletedProcess(argv, 0, "UNLIMITED\n", ""))
    assert slurm.job_time_limit({"SLURM_JOB_ID": "42"}) is None


def test_plan_slurm_prints_the_sbatch_lines(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    spec = {"sweep": "tiny", "horizon": 50, "seeds": 2, "environments": [{"kind": "synthetic", "function": "h1"}],
            "algorithms": [{"name": "linucb"}, {"name": "random"}], "resources": {"cpus_per_trial": 1}}
    (tmp_path / "tiny.yaml").write_text(yaml.safe_dump(spec))
    assert main(["plan", "tiny.yaml", "--results", "res", "--slurm", "--nodes", "2", "--cpus-per-node", "4",
                 "--probe-seconds", "0.05", "--time", "30", "--set", "seeds=3"]) == 0
    out = capsys.readouterr().out
    assert "6 trials" in out
    assert "# Slurm: 2 node(s) x 4 trial(s) at once = 8 worker(s)" in out
    for line in ("#SBATCH --nodes=2", "#SBATCH --cpus-per-task=4", "#SBATCH --requeue", "#SBATCH --signal=B:USR1@120"):
        assert line in out.splitlines()
    [time_line] = [line for line in out.splitlines() if line.startswith("#SBATCH --time=")]
    assert slurm.parse_time(time_line.split("=", 1)[1]) <= 30 * 60
    assert "# then: sbatch cluster-slurm.sbatch tiny.yaml --results res --set seeds=3" in out
    assert not re.search(r"^#SBATCH --gpus", out, re.M)


def test_plan_slurm_refuses_a_bad_time(tmp_path, capsys):
    with pytest.raises(SystemExit) as stopped:
        main(["plan", "x.yaml", "--slurm", "--time", "1h"])
    assert stopped.value.code == 2
    assert "not a Slurm time" in capsys.readouterr().err
