"""cluster-slurm.sbatch on a real Slurm: a private one-node cluster (tests/slurm_cluster.py: munged,
slurmctld and slurmd with their own config, ports and folders, ended by PID) runs the quick-start
sweep with the shipped template.

- ``scontrol requeue`` once some trials are durable: Slurm signals every process of the job (the
  batch script, the run, Ray's processes); the run stops cleanly within KillWait, the requeued job
  resumes, and every trial is finished exactly once (journal, trials table, MLflow), with no
  traceback in the job's output.
- A job with a short ``--time``: Slurm's USR1 before the limit stops the run; the job requeues
  itself and completes.

Marked ``slurm`` (``pytest -m slurm``). Without Slurm and MUNGE (``apt-get install slurm-wlm
munge``) the tests skip saying so, except where ``BANDITSWEEP_REQUIRE_SLURM=1`` (set by .ci/run):
there they fail.
"""

from __future__ import annotations

import os
import re
import sqlite3
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
from paths import REPO
from slurm_cluster import SlurmCluster, missing_commands

pytestmark = [pytest.mark.slurm, pytest.mark.timeout(600)]

TEMPLATE = REPO / "cluster-slurm.sbatch"
SPEC = REPO / "sweeps" / "quickstart.yaml"
TRIALS = 28


def _python_path() -> str:
    """PYTHONPATH that imports this checkout as ``banditsweep`` in the job's processes."""
    import banditsweep

    package = Path(banditsweep.__file__).resolve().parent
    here = str(Path(banditsweep.__file__).parent.parent)
    if package != REPO:
        pytest.skip(f"banditsweep is imported from {package}, not this checkout {REPO}")
    return os.pathsep.join(p for p in [here, os.environ.get("PYTHONPATH", "")] if p)


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    missing = missing_commands()
    if missing:
        reason = f"Slurm/MUNGE not installed (missing {', '.join(missing)}): apt-get install slurm-wlm munge"
        if os.environ.get("BANDITSWEEP_REQUIRE_SLURM") == "1":
            pytest.fail(reason)
        pytest.skip(reason)
    root = tmp_path_factory.mktemp("slurm")
    cluster = SlurmCluster(root, kill_wait=30, cpus=2)
    home = root / "home"
    home.mkdir()
    cluster.env.update({"PYTHONPATH": _python_path(), "BANDITSWEEP_PYTHON": sys.executable, "HOME": str(home),
                        "RAY_USAGE_STATS_ENABLED": "0"})
    for name in list(cluster.env):
        if name.startswith(("RAY_ADDRESS", "MLFLOW_", "BANDITSWEEP_RESULTS")):
            del cluster.env[name]
    with cluster:
        yield cluster


def _journal(results: Path, sweep: str = "quickstart") -> list[dict]:
    import json

    records = []
    folder = results / sweep / ".journal"
    for path in sorted(folder.glob("*.jsonl")) if folder.exists() else []:
        for line in path.read_text().splitlines():
            if line.strip():
                try:
                    records.append(json.loads(line))
                except ValueError:
                    pass   # a segment being written
    return records


def _submit(slurm: SlurmCluster, work: Path, *sbatch_args: str, spec: Path = SPEC, seeds: int = 2,
            horizon: int = 2000) -> str:
    sizes = ["--set", f"horizon={horizon}", "--set", f"seeds={seeds}"]
    return slurm.run("sbatch", "--parsable", "--cpus-per-task=2", "-o", str(work / "job.out"), *sbatch_args,
                     str(TEMPLATE), str(spec), "--results", str(work / "results"), *sizes, cwd=work).stdout.strip()


def _check_complete(work: Path, output: str, trials_wanted: int = TRIALS, horizon: int = 2000,
                    sweep: str = "quickstart") -> None:
    TRIALS = trials_wanted
    results = work / "results"
    assert "Traceback" not in output, output
    journal = _journal(results, sweep)
    ids = [record["trial_id"] for record in journal]
    assert len(ids) == TRIALS and len(set(ids)) == TRIALS, f"{len(ids)} records of {len(set(ids))} trials\n{output}"
    assert all(record["status"] == "finished" for record in journal)
    trials = pd.read_parquet(results / sweep / "trials")
    assert len(trials) == TRIALS and trials["trial_id"].is_unique and (trials["status"] == "finished").all()
    assert len(pd.read_parquet(results / sweep / "curves")) == TRIALS * horizon
    # The MLflow store, staged on the node's disk, was copied back: one FINISHED run per trial, none RUNNING.
    with sqlite3.connect(results / "mlflow.db") as db:
        rows = db.execute("select r.status, t.value from runs r join tags t on t.run_uuid = r.run_uuid "
                          "where t.key = 'trial_id' and r.lifecycle_stage = 'active'").fetchall()
        parents = db.execute("select r.status from runs r join tags t on t.run_uuid = r.run_uuid "
                             "where t.key = 'kind' and t.value = 'sweep'").fetchall()
    assert sorted(trial for _, trial in rows) == sorted(ids), output
    assert {status for status, _ in rows} == {"FINISHED"}
    assert "RUNNING" not in {status for (status,) in parents}


def _stop_seconds(output: str) -> list[int]:
    return [int(s) for s in re.findall(r"run ended \(exit 130\) (\d+) s after SIG", output)]


def test_a_requeued_job_resumes_and_finishes_every_trial_exactly_once(slurm, tmp_path):
    work = tmp_path
    started = time.monotonic()
    job = _submit(slurm, work, "--time=15")
    deadline = time.monotonic() + 300
    while len(_journal(work / "results")) < 3:
        assert time.monotonic() < deadline, slurm.logs()
        assert slurm.job(job).get("JobState") in ("PENDING", "RUNNING"), (work / "job.out").read_text()
        time.sleep(0.3)
    durable = len(_journal(work / "results"))
    slurm.run("scontrol", "requeue", job)
    fields = slurm.wait_for_state(job, {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"}, 400)
    output = (work / "job.out").read_text()
    print(output)
    print(f"requeued at {durable} durable trials; done {time.monotonic() - started:.0f} s after submitting")
    assert fields["JobState"] == "COMPLETED" and fields.get("Restarts") == "1", f"{fields}\n{output}"
    assert "quickstart: 28 trials, 0 finished" in output
    assert re.search(r"quickstart: 28 trials, ([3-9]|1\d|2[0-7]) finished", output), output
    stops = _stop_seconds(output)
    assert stops and stops[0] < 25, output   # within Slurm's KillWait (30 s)
    _check_complete(work, output)


SLEEP_TRIALS, SLEEP_SECONDS = 30, 10.0


@pytest.mark.timeout(900)
def test_a_job_at_its_time_limit_stops_requeues_itself_and_completes(slurm, tmp_path):
    """A job whose time limit comes while trials run, with USR1 30 s before it (Slurm sends it up to
    a minute early): the run stops before the limit (exit 130), the template requeues the job, and
    the jobs resumed complete the sweep.

    The trials are the benchmarks' ``sleep`` plugin (each takes exactly 10 s of wall time, no CPU):
    30 of them on 2 workers are 150 s of work, more than a 2-minute limit holds on any machine. The
    limit is cut to 2 minutes once the first trial is durable (Ray's start is then behind us)."""
    work = tmp_path
    spec = work / "sleep_limit.yaml"
    spec.write_text("sweep: sleep_limit\nhorizon: 50\nseeds: 1\nenvironments:\n  - {kind: synthetic, function: h1}\n"
                    f"algorithms:\n  - {{name: sleep, params: {{seconds: {SLEEP_SECONDS}}}}}\n"
                    "resources: {cpus_per_trial: 1}\nlog_every: 10\n")
    plugins = REPO / "benchmarks" / "plugins"
    export = f"--export=ALL,BANDITSWEEP_PLUGINS=sleep_algorithm,PYTHONPATH={plugins}{os.pathsep}{slurm.env['PYTHONPATH']}"
    started = time.monotonic()
    job = _submit(slurm, work, "--time=30", "--signal=B:USR1@30", export, spec=spec, seeds=SLEEP_TRIALS, horizon=50)
    deadline = time.monotonic() + 300
    while not _journal(work / "results", "sleep_limit"):
        assert time.monotonic() < deadline, slurm.logs()
        assert slurm.job(job).get("JobState") in ("PENDING", "RUNNING"), (work / "job.out").read_text()
        time.sleep(0.3)
    slurm.run("scontrol", "update", f"JobId={job}", "TimeLimit=2")
    fields = slurm.wait_for_state(job, {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"}, 780)
    output = (work / "job.out").read_text()
    print(output)
    print(f"done {time.monotonic() - started:.0f} s after submitting, {fields.get('Restarts')} restart(s)")
    assert fields["JobState"] == "COMPLETED", f"{fields}\n{output}"
    assert int(fields.get("Restarts", "0")) >= 1, output
    assert "got SIGUSR1" in output and "requeueing job" in output
    assert all(seconds < 25 for seconds in _stop_seconds(output)), output
    _check_complete(work, output, SLEEP_TRIALS, 50, sweep="sleep_limit")
