"""Sweeps on a Ray cluster of three separate hosts on this machine (tests/hosts.py): each host a
network namespace with its own address on a private bridge, and its own /tmp, HOME, results folder and
data folder. Host 0 runs the Ray head (no CPUs of its own: the trials run on the worker hosts) and the
driver; hosts 1 and 2 run a Ray worker node each, one CPU.

- a sweep run from host 0 with `banditsweep run SPEC --address HEAD` runs its trials on hosts 1 and
  2, each exactly once, with the final regrets of the same spec on one host (the embedded Ray), and
  writes nothing on the worker hosts;
- the same as a Ray job submitted to the head's dashboard from host 0;
- a classification sweep whose dataset is only in host 0's data folder: the trials on the worker
  hosts read the driver's copy, sent through Ray's object store, not a file of theirs;
- a worker host cut off for 8 s, then reconnected: the run finishes, every trial once, the same values;
- a worker host lost mid-sweep (every process of it killed, its link removed) while the answers of
  its calls are still in its object store: the run finishes, no trial lost or recorded twice, the
  same values;
- a SIGTERM to the run: the trial actors on hosts 1 and 2 save their state into host 0's results
  folder (the stop and the states travel through Ray), and the run again resumes them there;
- the driver killed (SIGKILL) mid-sweep and the run started again: every trial once, the same values;
- a worker host lost after its trial's first checkpoint: the trial resumes on another host (a
  replacement joined after the earlier loss) from that checkpoint, kept in host 0's folder;
- a sharded trial (two shards, one per worker host) losing one host: the shards placed again, on
  a replacement host too, and the trial resumed from its checkpoint with the same final regret;
- a worker host cut off for 45 s, longer than Ray's node-death detection (pinned: hosts.HEALTH_CHECK):
  its trials run again elsewhere and nothing it computed is taken when it comes back;
- Slurm over the hosts (tests/slurm_cluster.py, SlurmOnHosts; its own hosts, with a shared folder):
  `sbatch --nodes=2 cluster-slurm.sbatch SPEC` from host 0 runs Ray over hosts 1 and 2, and an
  `scontrol requeue` resumes, every trial once.

The tests skip, saying why, where the namespaces cannot be made (not Linux, not root), or for the
Slurm case where Slurm and MUNGE are not installed; with BANDITSWEEP_REQUIRE_HOSTS=1 they fail instead.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from hosts import BIN, DATA, HOME, HOST_ROOT, NODE_DEATH_SECONDS, RESULTS, SHARED, Hosts, why_not_available
from local_ray import end_session, finished_trial_runs
from paths import REPO, TEST_DATASETS
from slurm_cluster import SlurmOnHosts, missing_commands

pytestmark = [pytest.mark.hosts, pytest.mark.timeout(900)]

# Trials long enough (about 0.2 - 1 s each) that both worker hosts' actors are up before the work is gone.
SYNTHETIC = {"horizon": 2000, "seeds": 6,
             "environments": [{"kind": "synthetic", "function": "h1"}],
             "algorithms": [{"name": "linucb"}, {"name": "random"}]}
# Trials of a few seconds each, so that both worker hosts are running some when one is lost (a host
# whose trial actor is slow to start would otherwise find the work gone).
LONG = {"horizon": 50000, "seeds": 12,
        "environments": [{"kind": "synthetic", "function": "h1"}],
        "algorithms": [{"name": "linucb"}]}
# Link cuts on either side of Ray's node-death detection (pinned, hosts.HEALTH_CHECK: about 25 s).
SHORT_CUT_SECONDS = 8
LONG_CUT_SECONDS = 45
assert SHORT_CUT_SECONDS < NODE_DEATH_SECONDS < LONG_CUT_SECONDS - 10
CLASSIFICATION = {"horizon": 200, "seeds": 2,
                  "environments": [{"kind": "classification", "dataset": "mushroom"}],
                  "algorithms": [{"name": "linucb"}, {"name": "random"}]}


def require_hosts() -> None:
    reason = why_not_available()
    if reason is None:
        return
    if os.environ.get("BANDITSWEEP_REQUIRE_HOSTS") == "1":
        pytest.fail(f"BANDITSWEEP_REQUIRE_HOSTS=1, but {reason}")
    pytest.skip(reason)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    require_hosts()
    started = time.monotonic()
    with Hosts(3, logs=tmp_path_factory.mktemp("hosts-logs")) as hosts:
        for dataset in TEST_DATASETS.glob("*.parquet"):   # the driver's data folder
            shutil.copy(dataset, hosts[0].path(DATA))
        hosts.start_ray()
        print(f"\n3 hosts and their Ray nodes up in {time.monotonic() - started:.1f} s")
        yield hosts
    assert not hosts.leftovers()


# ---- single-host references ---------------------------------------------------------------------

REFERENCES: dict[str, pd.DataFrame] = {}


def reference(spec: dict, tmp_path_factory) -> pd.DataFrame:
    """The trials of ``spec`` run by a plain `banditsweep run` on this machine (the embedded Ray), in a
    folder of their own outside the hosts; once per spec."""
    key = json.dumps(spec, sort_keys=True)
    if key not in REFERENCES:
        folder = tmp_path_factory.mktemp("reference")
        (folder / "spec.yaml").write_text(yaml.safe_dump({"sweep": "reference", **spec}))
        env = {**os.environ, "BANDITSWEEP_RESULTS": str(folder / "results"), "HOME": str(folder)}
        process = subprocess.Popen([sys.executable, "-m", "banditsweep", "run", "spec.yaml", "--no-progress",
                                    "--sink", "none", "--data-dir", str(TEST_DATASETS)], cwd=folder, env=env,
                                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                   start_new_session=True)
        try:
            out, _ = process.communicate(timeout=300)
        finally:
            end_session(process, grace=5)
        assert process.returncode == 0, out
        REFERENCES[key] = pd.read_parquet(folder / "results" / "reference" / "trials")
    return REFERENCES[key]


def assert_same_values(trials: pd.DataFrame, expected: pd.DataFrame) -> None:
    """Every trial of the reference, once, finished, with its final regret (relative 1e-9)."""
    assert sorted(trials["trial_id"]) == sorted(expected["trial_id"])
    assert trials["trial_id"].is_unique and (trials["status"] == "finished").all()
    ours = trials.set_index("trial_id")["final_regret"].sort_index()
    theirs = expected.set_index("trial_id")["final_regret"].sort_index()
    np.testing.assert_allclose(ours.to_numpy(), theirs.to_numpy(), rtol=1e-9, atol=0)


# ---- on the hosts -------------------------------------------------------------------------------

def write_spec(hosts: Hosts, name: str, spec: dict, folder: str = HOME) -> str:
    path = f"{folder}/{name}.yaml"
    hosts[0].path(path).write_text(yaml.safe_dump({"sweep": name, **spec}))
    return path


def run_on_head(hosts: Hosts, spec_path: str, *args: str, timeout: float = 400) -> subprocess.CompletedProcess:
    return hosts[0].run(BIN / "banditsweep", "run", spec_path, "--address", hosts.address, "--no-progress", *args,
                        timeout=timeout)


def results_of(hosts: Hosts, sweep: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    folder = hosts[0].path(f"{RESULTS}/{sweep}")
    return pd.read_parquet(folder / "trials"), pd.read_parquet(folder / "curves")


def written_on(host) -> list[str]:
    """What of a results store is on a host's own disk: its results folder, MLflow stores, journals,
    checkpoints (the shared folder, where the hosts have one, is not the host's)."""
    shared = host.path(SHARED)
    found = [str(p) for p in host.path(HOST_ROOT).rglob("*")
             if (p.name in ("mlflow.db", "mlruns", "mlartifacts", ".journal", "trials", "curves", "running.json",
                            ".checkpoints") or p.suffix == ".state") and not p.is_relative_to(shared)]
    return found + ([RESULTS] if host.path(RESULTS).exists() else [])


def first_starts(trials: pd.DataFrame) -> str:
    """Per node: how many trials, and when its first one started (after the run's first)."""
    starts = pd.to_datetime(trials["started_at"], utc=True)
    return ", ".join(f"{node}: {len(group)} trials, the first at +{(starts[group.index].min() - starts.min()).total_seconds():.1f} s"
                     for node, group in trials.groupby("node"))


def worker_addresses(hosts: Hosts) -> set[str]:
    return {host.address for host in hosts[1:]}


def this_machines_address() -> str | None:
    """The address this machine's own traffic leaves from (None: no route out)."""
    route = subprocess.run(["ip", "-4", "route", "get", "1.1.1.1"], capture_output=True, text=True).stdout.split()
    return route[route.index("src") + 1] if "src" in route else None


def test_hosts_are_separate_machines(tmp_path):
    """The helper itself: an address each, only the subnet reachable, /tmp and HOME private; a host
    cut off cannot be reached until it is reconnected; nothing of the hosts is left afterwards."""
    require_hosts()
    listen = ("import socket, sys\ns = socket.socket(); s.bind((sys.argv[1], 7777)); s.listen()\n"
              "while True:\n    c, _ = s.accept(); c.sendall(b'here'); c.close()\n")
    reach = ("import socket, sys\ntry:\n    print(socket.create_connection((sys.argv[1], 7777), timeout=2).recv(4).decode())\n"
             "except OSError as error:\n    print(type(error).__name__)\n")
    with Hosts(2, logs=tmp_path / "logs") as hosts:
        a, b = hosts
        assert a.address != b.address and {a.address, b.address} <= {str(h) for h in hosts.subnet.hosts()}
        routes = a.run("ip", "-4", "route").stdout.strip().splitlines()
        assert routes == [f"{hosts.subnet} dev eth0 proto kernel scope link src {a.address}"], routes
        a.path("/tmp/mine").write_text("a\n")
        assert not b.path("/tmp/mine").exists() and not Path("/tmp/mine").exists()
        assert a.run("sh", "-c", "cat /tmp/mine; echo $HOME").stdout.split() == ["a", HOME]
        b.popen(BIN / "python", "-c", listen, b.address)
        deadline = time.monotonic() + 20
        while a.python(reach, b.address).stdout.strip() != "here":
            assert time.monotonic() < deadline
            time.sleep(0.2)
        outside = this_machines_address()
        if outside:   # this machine's own address is beyond the subnet: unreachable
            assert a.python(reach, outside).stdout.strip() == "OSError"
        b.cut()
        assert a.python(reach, b.address).stdout.strip() in ("TimeoutError", "OSError")
        b.reconnect()
        deadline = time.monotonic() + 20
        while a.python(reach, b.address).stdout.strip() != "here":
            assert time.monotonic() < deadline
            time.sleep(0.2)
        listener = b.namespace_processes()
        assert listener
        assert b.lose() >= 1 and not b.namespace_processes()
        assert a.python(reach, b.address).stdout.strip() != "here"
    assert not hosts.leftovers()
    assert not any(Path(f"/proc/{pid}").exists() for pid in listener)


# Trials of a few seconds each, saving every 3,000 rounds: the requeue finds trials past a checkpoint.
SLURM_SWEEP = {"horizon": 20000, "seeds": 6, "checkpoint_every": 3000,
               "environments": [{"kind": "synthetic", "function": "h1"}],
               "algorithms": [{"name": "linucb"}]}


def test_slurm_over_two_hosts_runs_ray_on_both_and_a_requeue_resumes(tmp_path, tmp_path_factory):
    """Slurm over separate hosts (tests/slurm_cluster.py, SlurmOnHosts): slurmctld on host 0, a slurmd
    on hosts 1 and 2, and a folder of this machine's mounted on all three as the cluster's shared
    filesystem, where the spec, the job's output and the results are. `sbatch --nodes=2
    cluster-slurm.sbatch SPEC` from host 0: the batch script runs on the first allocated node, which
    starts the Ray head at its own address and a Ray node on the other through srun; the trials run
    on both. `scontrol requeue` once a trial is durable and another is past a checkpoint: the job
    starts again and resumes. Every trial once, finished, the values of a clean run on one host, no
    result or checkpoint on the nodes' own disks, and no process of the job left on them."""
    require_hosts()
    missing = missing_commands()
    if missing:
        reason = f"Slurm/MUNGE not installed (missing {', '.join(missing)}): apt-get install slurm-wlm munge"
        if "1" in (os.environ.get("BANDITSWEEP_REQUIRE_HOSTS"), os.environ.get("BANDITSWEEP_REQUIRE_SLURM")):
            pytest.fail(reason)
        pytest.skip(reason)
    sweep, every, horizon = "slurm_hosts", SLURM_SWEEP["checkpoint_every"], SLURM_SWEEP["horizon"]
    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / "spec.yaml").write_text(yaml.safe_dump({"sweep": sweep, **SLURM_SWEEP}))
    results = shared / "results"
    started = time.monotonic()
    with Hosts(3, logs=tmp_path / "logs", shared=shared) as hosts, SlurmOnHosts(hosts, cpus=1) as slurm:
        nodes = {name: host.address for name, host in slurm.nodes.items()}
        slurm.env["BANDITSWEEP_PYTHON"] = sys.executable   # sbatch passes host 0's environment to the job
        job = slurm.run("sbatch", "--parsable", "--nodes=2", "--cpus-per-task=1", "--time=15",
                        "-o", f"{SHARED}/job.out", REPO / "cluster-slurm.sbatch", f"{SHARED}/spec.yaml",
                        "--results", f"{SHARED}/results", cwd=SHARED).stdout.strip()
        folder = results / sweep
        deadline = time.monotonic() + 300

        def journal() -> int:
            return sum(len(path.read_text().splitlines()) for path in (folder / ".journal").glob("*.jsonl"))

        # A trial durable and another saved at a checkpoint (its state file is there until it finishes).
        while not ((folder / ".journal").exists() and journal() >= 1 and list(folder.glob(".checkpoints/*.state"))):
            assert time.monotonic() < deadline and slurm.job(job).get("JobState") in ("PENDING", "RUNNING"), \
                (shared / "job.out").read_text() if (shared / "job.out").exists() else slurm.logs()
            time.sleep(0.2)
        durable = journal()
        slurm.run("scontrol", "requeue", job)
        requeued = time.time()
        # The clean run's values, computed while Slurm holds the requeued job (a minute or more) and
        # this machine's cores are idle.
        slurm.wait_for_state(job, {"PENDING"}, 120)
        expected = reference(SLURM_SWEEP, tmp_path_factory)
        fields = slurm.wait_for_state(job, {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"}, 300)
        output = (shared / "job.out").read_text()
        print(output)
        assert fields["JobState"] == "COMPLETED" and fields.get("Restarts") == "1", f"{fields}\n{output}"
        # No process of the job left on the nodes: only the Slurm daemons (slurmd, munged) run there.
        daemons = {name: process.pid for name, process in slurm.processes}
        for host in hosts[1:]:
            ours = {pid for name, pid in daemons.items() if name.endswith(f"-{host.index}")}
            assert set(host.namespace_processes()) == ours, [
                Path(f"/proc/{pid}/cmdline").read_bytes() for pid in set(host.namespace_processes()) - ours]
            # The job's local folders (Ray's sessions, the staged MLflow store) are gone too.
            left = [str(path) for folder in host.path("/tmp").glob("bs-*") for path in [folder, *folder.rglob("*")]]
            assert written_on(host) == [] and left == [], (host, written_on(host), left[:20])
    seconds = time.monotonic() - started
    assert not hosts.leftovers() and not any(Path(f"/proc/{pid}").exists() for pid in daemons.values())

    assert "Traceback" not in output, output
    starts = re.findall(r"job \d+ \(restart (\d)\) on (\S+), batch script on (\w+): Ray \S+ head at ([\d.]+):", output)
    assert [restart for restart, *_ in starts] == ["0", "1"], output
    for _, allocation, batch, head in starts:   # the head on the node the batch script ran on, not host 0
        assert allocation == "h[1-2]" and batch in nodes and head == nodes[batch], output
    trials = pd.read_parquet(results / sweep / "trials")
    curves = pd.read_parquet(results / sweep / "curves")
    assert len(trials) == 6 and trials["trial_id"].is_unique and (trials["status"] == "finished").all()
    assert set(trials["node"]) == set(nodes.values()), trials["node"].tolist()   # both nodes ran trials
    assert len(curves) == 6 * horizon and not curves.duplicated(["trial_id", "t"]).any()
    assert_same_values(trials, expected)
    resumed = trials["diag_resumed_from_round"].dropna()
    assert len(resumed) >= 1 and (resumed >= every + 1).all(), trials.filter(regex="resumed|attempts|node")
    assert finished_trial_runs(results / "mlflow.db", sweep) == 6   # the staged store copied back
    # Its artifacts (the spec of each parent run) in the results root, not next to the staged copy.
    with sqlite3.connect(f"file:{results / 'mlflow.db'}?mode=ro", uri=True) as db:
        [(location,)] = db.execute("SELECT artifact_location FROM experiments WHERE name = ?", (sweep,)).fetchall()
    assert location == f"file://{SHARED}/results/mlartifacts", location
    assert len(list((results / "mlartifacts").rglob("*.yaml"))) == 2   # the first job's parent run and the requeued one's
    assert not list((results / sweep / ".checkpoints").glob("*.state"))
    begun = pd.to_datetime(trials["started_at"], utc=True).map(lambda t: t.timestamp())
    names = {address: name for name, address in nodes.items()}
    before, after = (trials[begun <= requeued]["node"], trials[begun > requeued]["node"])
    print(f"\nSlurm over 2 hosts: requeued at {durable} durable trial(s); batch script on "
          f"{' then '.join(batch for _, _, batch, _ in starts)}; the requeued job's first trial started "
          f"{begun[begun > requeued].min() - requeued:.1f} s after the requeue; trials finished by the first job "
          f"{before.map(names).value_counts().to_dict()}, by the requeued one {after.map(names).value_counts().to_dict()}; "
          f"resumed from rounds {sorted(resumed.astype(int))}; {seconds:.0f} s in all")


def test_a_sweep_from_host_0_runs_its_trials_on_the_worker_hosts(cluster, tmp_path_factory):
    hosts = cluster
    for host in hosts[1:]:   # every node with the datasets in its own data folder, as README says
        for dataset in TEST_DATASETS.glob("*.parquet"):
            shutil.copy(dataset, host.path(DATA))
    try:
        started = time.monotonic()
        done = run_on_head(hosts, write_spec(hosts, "hosts", SYNTHETIC))
        seconds = time.monotonic() - started
    finally:
        for host in hosts[1:]:
            for dataset in host.path(DATA).iterdir():
                dataset.unlink()
    assert done.returncode == 0, done.stdout + done.stderr
    assert "12 finished, 0 failed" in done.stdout and f"cluster at {hosts.address}: 3 node(s), 2 CPU" in done.stdout
    trials, curves = results_of(hosts, "hosts")
    assert len(trials) == 12 and (trials["attempts"] == 1).all()
    # Every trial on a worker host (the head has no CPU), both of them at work.
    assert set(trials["node"]) == worker_addresses(hosts), trials["node"].tolist()
    nodes = hosts.alive_nodes()
    assert {nodes[node_id] for node_id in trials["node_id"]} == worker_addresses(hosts)
    assert len(curves) == 12 * 2000 and not curves.duplicated(["trial_id", "t"]).any()
    assert_same_values(trials, reference(SYNTHETIC, tmp_path_factory))
    # SQLite follows the links of a path (/proc/PID/root among them): it reads a copy.
    store = tmp_path_factory.mktemp("mlflow")
    for part in hosts[0].path(RESULTS).glob("mlflow.db*"):
        shutil.copy(part, store)
    assert finished_trial_runs(store / "mlflow.db", "hosts") == 12
    for host in hosts[1:]:
        assert written_on(host) == [], host
    print(f"\nbanditsweep run on 3 hosts: 12 trials in {seconds:.1f} s "
          f"({first_starts(trials)})")


def test_a_ray_job_submitted_from_host_0_runs_on_the_worker_hosts(cluster, tmp_path_factory):
    hosts = cluster
    checkout = f"{HOME}/checkout"
    skipped = shutil.ignore_patterns(".venv", ".git", "*.egg-info", "__pycache__", ".pytest_cache")

    def ignore(folder: str, names: list[str]) -> set[str]:
        # The stored results (docs/results) and a results root in the checkout stay behind; the
        # package's own sweeps/results room travels.
        here = Path(folder).resolve()
        big = {"results"} if here in (REPO, REPO / "docs") else set()
        return set(skipped(folder, names)) | (big & set(names))

    shutil.copytree(REPO, hosts[0].path(checkout), ignore=ignore)
    write_spec(hosts, "hosts_job", SYNTHETIC, folder=checkout)
    started = time.monotonic()
    done = hosts[0].run(BIN / "ray", "job", "submit", "--address", hosts.dashboard, "--working-dir", ".", "--",
                        "banditsweep", "run", "hosts_job.yaml", "--no-progress", "--sink", "none",
                        cwd=checkout, timeout=400)
    seconds = time.monotonic() - started
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    assert "succeeded" in output and "12 finished, 0 failed" in output
    assert f"results: {RESULTS}/hosts_job" in output   # the head's results root
    trials, curves = results_of(hosts, "hosts_job")
    assert len(trials) == 12 and (trials["attempts"] == 1).all()
    assert set(trials["node"]) == worker_addresses(hosts)
    assert len(curves) == 12 * 2000
    assert_same_values(trials, reference(SYNTHETIC, tmp_path_factory))
    for host in hosts[1:]:
        assert written_on(host) == [], host
        # The job's code reached each worker host through Ray (its package, unpacked there).
        # (session_latest is a link to an absolute path: a path of the host's, not of this process's.)
        unpacked = list(host.path("/tmp/ray").glob("session_2*/runtime_resources/py_modules_files/*"))
        assert unpacked, list(host.path("/tmp/ray").glob("session_2*/runtime_resources/*"))
    print(f"\nray job submit on 3 hosts: 12 trials in {seconds:.1f} s ({first_starts(trials)})")


def test_a_dataset_only_on_the_driver_reaches_the_worker_hosts(cluster, tmp_path_factory):
    """mushroom is in host 0's data folder only: the trials on hosts 1 and 2 read the driver's copy,
    which Ray's object store carried there; nothing is written to their data folders."""
    hosts = cluster
    for host in hosts[1:]:
        assert list(host.path(DATA).iterdir()) == []
    done = run_on_head(hosts, write_spec(hosts, "hosts_mushroom", CLASSIFICATION), "--sink", "none")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "4 finished, 0 failed" in done.stdout, done.stdout + done.stderr
    trials, _ = results_of(hosts, "hosts_mushroom")
    assert set(trials["node"]) <= worker_addresses(hosts) and trials["error"].isna().all()
    assert_same_values(trials, reference(CLASSIFICATION, tmp_path_factory))
    digest = hashlib.sha256(hosts[0].path(f"{DATA}/mushroom.parquet").read_bytes()).hexdigest()
    for host in hosts[1:]:
        assert list(host.path(DATA).iterdir()) == [], host      # the user's data folder is left alone
        if host.address in set(trials["node"]):                  # the copy it read, as the driver's
            copies = list(host.path("/tmp").glob("banditsweep-*-datasets/*/mushroom.parquet"))
            assert [hashlib.sha256(c.read_bytes()).hexdigest() for c in copies] == [digest], copies


def wait_for_running(hosts: Hosts, sweep: str, run: subprocess.Popen, ready) -> None:
    """Until ``ready(trials)`` holds of the trials the run's running.json (on host 0) lists."""
    running = hosts[0].path(f"{RESULTS}/{sweep}/running.json")
    deadline = time.monotonic() + 240
    while True:
        assert run.poll() is None and time.monotonic() < deadline, run.communicate()
        try:
            trials = json.loads(running.read_text())["trials"]
        except (OSError, ValueError, KeyError):
            trials = []
        if ready(trials):
            return
        time.sleep(0.1)


def wait_for_a_trial_on(hosts: Hosts, host, sweep: str, run: subprocess.Popen, past: int = 0) -> None:
    """Until the run's running.json lists a trial on ``host`` past round ``past``."""
    wait_for_running(hosts, sweep, run, lambda trials: any(t["node"] == host.address and t["round"] > past
                                                           for t in trials))


def wait_for_trials_midway(hosts: Hosts, on: list, sweep: str, run: subprocess.Popen) -> None:
    """Until running.json lists, on every host of ``on`` at once, a trial between round 500 and half
    its horizon: none of them near its end, where it might finish before a signal reaches it."""
    wait_for_running(hosts, sweep, run, lambda trials: all(
        any(t["node"] == host.address and 500 < t["round"] < t["horizon"] // 2 for t in trials) for host in on))


def test_a_worker_host_cut_off_for_8_s(cluster, tmp_path_factory):
    """Host 2's link down for 8 s while it runs a trial, then up again: shorter than Ray takes to
    declare a node dead, so the node stays in the cluster, and the run finishes with every trial once
    and the same values. A call that was on the cut host may fail when its connection turns out to
    be reset at the reconnection (Ray's ACTOR_UNAVAILABLE, a worker death to the driver): its trials
    run again, once."""
    hosts = cluster
    cut = hosts[2]
    spec = write_spec(hosts, "hosts_cut", LONG)
    started = time.monotonic()
    run = hosts[0].popen(BIN / "banditsweep", "run", spec, "--address", hosts.address, "--no-progress",
                         "--sink", "none", text=True)
    wait_for_a_trial_on(hosts, cut, "hosts_cut", run)
    cut.cut()
    time.sleep(SHORT_CUT_SECONDS)
    cut.reconnect()
    out, err = run.communicate(timeout=500)
    seconds = time.monotonic() - started
    assert run.returncode == 0, out + err
    assert "12 finished, 0 failed" in out, out + err
    trials, curves = results_of(hosts, "hosts_cut")
    assert len(trials) == 12 and trials["trial_id"].is_unique and (trials["attempts"] <= 2).all()
    assert set(trials["node"]) <= worker_addresses(hosts)
    assert len(curves) == 12 * LONG["horizon"] and not curves.duplicated(["trial_id", "t"]).any()
    assert_same_values(trials, reference(LONG, tmp_path_factory))
    assert sorted(hosts.alive_nodes().values()) == sorted(host.address for host in hosts)
    print(f"\nhost 2 cut off for {SHORT_CUT_SECONDS} s: the run took {seconds:.1f} s, {int((trials['attempts'] > 1).sum())} trial(s) "
          "ran a second time")


def test_a_sigterm_to_the_run_saves_the_running_trials_in_the_drivers_folder(cluster, tmp_path_factory):
    """SIGTERM to `run` on host 0 while both worker hosts run trials (no periodic checkpoint): the
    driver's stop reaches the trial actors on hosts 1 and 2 through Ray, each saves its trials' state
    at the round reached, into host 0's results folder; the run again resumes them there and ends
    with the values of a clean run. Nothing is written on the worker hosts."""
    hosts = cluster
    spec = write_spec(hosts, "hosts_sigterm", {**LONG, "checkpoint_every": 100_000})
    run = hosts[0].popen(BIN / "banditsweep", "run", spec, "--address", hosts.address, "--no-progress",
                         "--sink", "none", text=True)
    wait_for_trials_midway(hosts, hosts[1:], "hosts_sigterm", run)
    os.kill(run.pid, signal.SIGTERM)
    out, err = run.communicate(timeout=120)
    assert run.returncode == 130, out + err
    saved = list(hosts[0].path(f"{RESULTS}/hosts_sigterm/.checkpoints").glob("*.state"))
    # Every trial still running when the stop reached it is saved; one a few thousand rounds from its
    # end (these take seconds) may finish first, and is kept. Both hosts had one running at the signal.
    said = re.search(r"saved the state of (\d+) of (\d+) running trial\(s\)[^(]*(?:\((\d+) more finished)?", out)
    assert said and int(said[1]) == int(said[2]) == len(saved) >= 1, out + err
    assert len(saved) + int(said[3] or 0) >= 2, out + err
    assert not written_on(hosts[1]) and not written_on(hosts[2])

    again = run_on_head(hosts, spec, "--sink", "none")
    assert again.returncode == 0, again.stdout + again.stderr
    assert "cannot be used" not in again.stdout + again.stderr   # no state refused
    trials, curves = results_of(hosts, "hosts_sigterm")
    resumed = trials["diag_resumed_from_round"].dropna()
    assert len(resumed) == len(saved) and (resumed > 500).all(), trials.filter(regex="resumed|rejected")
    assert len(curves) == 12 * LONG["horizon"] and not curves.duplicated(["trial_id", "t"]).any()
    assert_same_values(trials, reference(LONG, tmp_path_factory))
    assert not written_on(hosts[1]) and not written_on(hosts[2])
    print(f"\nSIGTERM on host 0: {len(saved)} state file(s) saved from the worker hosts; "
          f"{len(resumed)} trial(s) resumed from rounds {sorted(resumed.astype(int))}")


def test_the_driver_killed_mid_sweep_and_the_run_started_again(cluster, tmp_path_factory):
    """`run` on host 0 killed (SIGKILL: no clean stop) once a trial is done and both worker hosts run
    others; Ray ends the dead driver's trial actors. The same command again runs what was not
    recorded: every trial once, none lost or twice, the clean run's values."""
    hosts = cluster
    spec = write_spec(hosts, "hosts_driver", LONG)
    run = hosts[0].popen(BIN / "banditsweep", "run", spec, "--address", hosts.address, "--no-progress",
                         "--sink", "none", text=True)
    for host in hosts[1:]:
        wait_for_a_trial_on(hosts, host, "hosts_driver", run)
    running = hosts[0].path(f"{RESULTS}/hosts_driver/running.json")
    deadline = time.monotonic() + 240
    while (json.loads(running.read_text()).get("done") or 0) < 1:
        assert run.poll() is None and time.monotonic() < deadline, run.communicate()
        time.sleep(0.2)
    os.kill(run.pid, signal.SIGKILL)
    run.communicate(timeout=60)
    killed = time.monotonic()
    again = run_on_head(hosts, spec, "--sink", "none")
    seconds = time.monotonic() - killed
    assert again.returncode == 0, again.stdout + again.stderr
    trials, curves = results_of(hosts, "hosts_driver")
    assert len(trials) == 12 and trials["trial_id"].is_unique and (trials["status"] == "finished").all()
    assert len(curves) == 12 * LONG["horizon"] and not curves.duplicated(["trial_id", "t"]).any()
    assert_same_values(trials, reference(LONG, tmp_path_factory))
    assert not written_on(hosts[1]) and not written_on(hosts[2])
    finished_again = re.search(r"(\d+) finished, \d+ failed in", again.stdout)
    print(f"\ndriver killed: the run again ran {finished_again and finished_again.group(1)} trial(s) and ended "
          f"{seconds:.1f} s after the kill")


def actor_cpu_seconds(host) -> float | None:
    """The CPU time of the trial actor on ``host`` (None: none there)."""
    for pid in host.namespace_processes():
        try:
            if Path(f"/proc/{pid}/cmdline").read_bytes().startswith(b"ray::TrialActor"):
                fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
                return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        except OSError:
            pass
    return None


def wait_until_idle(host, timeout: float = 120) -> None:
    """Until the trial actor on ``host`` has used no CPU for 2 s: it ended the calls it held."""
    deadline = time.monotonic() + timeout
    last, still_since = actor_cpu_seconds(host), time.monotonic()
    while time.monotonic() - still_since < 2.0:
        assert time.monotonic() < deadline, "the trial actor did not go idle"
        time.sleep(0.25)
        now = actor_cpu_seconds(host)
        if now != last:
            last, still_since = now, time.monotonic()


def test_a_worker_host_lost_mid_sweep(cluster, tmp_path_factory):
    """Host 1 loses its power mid-sweep: every process in its namespaces killed at once, its link
    removed. The worst moment is taken: its trial actor has ended the calls it held and their answers
    (the trials' per-round arrays, in host 1's object store) are not yet fetched by the driver, whose
    process is stopped (SIGSTOP) from the moment host 1 runs a trial until the host is gone. The run
    finishes on host 2: every trial once, none lost, none failed, the same values."""
    hosts = cluster
    lost, kept = hosts[1], hosts[2]
    spec = write_spec(hosts, "hosts_lost", LONG)
    run = hosts[0].popen(BIN / "banditsweep", "run", spec, "--address", hosts.address, "--no-progress",
                         "--sink", "none", text=True)
    wait_for_a_trial_on(hosts, lost, "hosts_lost", run)
    os.kill(run.pid, signal.SIGSTOP)
    try:
        wait_until_idle(lost)
        fault = time.time()
        killed = lost.lose()
    finally:
        os.kill(run.pid, signal.SIGCONT)
    dead_after = None
    while run.poll() is None and time.time() - fault < 300:
        if dead_after is None and lost.address not in hosts.alive_nodes().values():
            dead_after = time.time() - fault
        time.sleep(0.5)
    out, err = run.communicate(timeout=300)
    assert run.returncode == 0, out + err
    assert "12 finished, 0 failed" in out, out + err
    trials, curves = results_of(hosts, "hosts_lost")
    assert len(trials) == 12 and trials["trial_id"].is_unique                       # none lost, none twice
    assert len(curves) == 12 * LONG["horizon"] and not curves.duplicated(["trial_id", "t"]).any()
    assert_same_values(trials, reference(LONG, tmp_path_factory))
    started = pd.to_datetime(trials["started_at"], utc=True).map(lambda t: t.timestamp())
    again = trials[(started > fault).to_numpy() & (trials["attempts"] > 1).to_numpy()]
    assert len(again) >= 1 and set(again["node"]) == {kept.address}, trials[["node", "attempts"]]
    started_again = started[again.index].min() - fault
    print(f"\nhost 1 lost ({killed} processes killed) holding the unfetched answers of its calls: its node declared "
          f"dead after {dead_after if dead_after is None else round(dead_after, 1)} s; its trial(s) started again on "
          f"host 2 after {started_again:.1f} s; {(started > fault).sum()} trial(s) started after the fault")


def test_a_trial_lost_with_its_host_resumes_on_another_from_its_checkpoint(cluster, tmp_path_factory):
    """After host 1's loss a replacement host joins (as an autoscaler's would); then host 2 is lost
    while it runs a trial past its first checkpoint. The checkpoint was saved through Ray into host
    0's folder, not on host 2's disk: the trial resumes on the replacement from it, not from round 1,
    and every value equals a clean run's."""
    hosts = cluster
    assert hosts[1].lost, "runs after test_a_worker_host_lost_mid_sweep"
    started = time.monotonic()
    replacement = hosts.add_host()
    joined = time.monotonic() - started
    lost = hosts[2]
    every = 3000
    spec = write_spec(hosts, "hosts_resume", {**LONG, "checkpoint_every": every})
    run = hosts[0].popen(BIN / "banditsweep", "run", spec, "--address", hosts.address, "--no-progress",
                         "--sink", "none", text=True)
    wait_for_a_trial_on(hosts, lost, "hosts_resume", run, past=every + 500)   # its state at round 3000 is saved
    assert not written_on(lost)
    fault = time.time()
    lost.lose()
    out, err = run.communicate(timeout=500)
    assert run.returncode == 0, out + err
    assert "12 finished, 0 failed" in out, out + err
    trials, curves = results_of(hosts, "hosts_resume")
    again = trials[trials["attempts"] > 1]
    assert len(again) >= 1 and set(again["node"]) == {replacement.address}, trials[["node", "attempts"]]
    assert (again["diag_resumed_from_round"] >= every + 1).all(), again.filter(like="resumed")
    assert len(curves) == 12 * LONG["horizon"] and not curves.duplicated(["trial_id", "t"]).any()
    assert_same_values(trials, reference(LONG, tmp_path_factory))
    assert not written_on(replacement)
    assert not list(hosts[0].path(f"{RESULTS}/hosts_resume/.checkpoints").glob("*.state"))   # removed when done
    starts = pd.to_datetime(again["started_at"], utc=True).map(lambda t: t.timestamp())
    print(f"\nreplacement host joined in {joined:.1f} s; host 2 lost: {len(again)} trial(s) resumed on it from rounds "
          f"{sorted(again['diag_resumed_from_round'].astype(int))}, {starts.min() - fault:.1f} s after the fault")


SHARDED = {"horizon": 400, "seeds": 1, "checkpoint_every": 50,
           "environments": [{"kind": "adversarial_kernel", "domain": {"grid": [60, 60]}, "kernel": "se", "shards": 2}],
           "algorithms": [{"name": "rls_kernel_exp3"}], "resources": {"cpus_per_shard": 1}}


def test_a_sharded_trial_losing_a_host_resumes_from_its_checkpoint(cluster, tmp_path_factory):
    """A trial of 3,600 points in two shards, one on each worker host (one CPU each), saving every 50
    rounds into host 0's folder through Ray; one shard's host lost after a checkpoint. Once Ray has
    declared that node dead the shards are placed again (on the survivor and a replacement host)
    and the trial goes on from its last checkpoint: the final regret of an uninterrupted run."""
    hosts = cluster
    alive = [host for host in hosts[1:] if not host.lost]
    while len(alive) < 2:
        alive.append(hosts.add_host())
    lost = alive[-1]
    spec = write_spec(hosts, "hosts_sharded", SHARDED)
    run = hosts[0].popen(BIN / "banditsweep", "run", spec, "--address", hosts.address, "--no-progress",
                         "--sink", "none", text=True)
    checkpoints = hosts[0].path(f"{RESULTS}/hosts_sharded/.checkpoints")
    deadline = time.monotonic() + 300
    while not list(checkpoints.glob("*/shard-*.r*.state")):
        assert run.poll() is None and time.monotonic() < deadline, run.communicate()
        time.sleep(0.2)
    assert not written_on(lost)
    fault = time.monotonic()
    lost.lose()
    hosts.add_host()   # the autoscaler's replacement, so that two shards fit again
    out, err = run.communicate(timeout=600)
    seconds = time.monotonic() - fault
    assert run.returncode == 0, out + err
    assert "a shard actor died" in out and "1 finished, 0 failed" in out, out + err
    trials, curves = results_of(hosts, "hosts_sharded")
    [row] = trials.to_dict("records")
    assert row["attempts"] == 2 and row["diag_resumed_from_round"] >= 51, row
    assert row["diag_shard_nodes"] == 2
    assert len(curves) == SHARDED["horizon"]
    assert_same_values(trials, reference(SHARDED, tmp_path_factory))
    assert not any(written_on(host) for host in hosts[1:] if not host.lost)
    print(f"\nsharded trial, a shard's host lost: resumed from round {int(row['diag_resumed_from_round'])}, "
          f"finished {seconds:.1f} s after the fault")


def test_a_worker_host_cut_off_for_longer_than_node_death_detection(cluster, tmp_path_factory):
    """A worker host's link down for 45 s while it runs a trial: longer than Ray takes to declare a node
    dead (about 25 s, hosts.HEALTH_CHECK), so its trials run again on the other host, and when the link comes back the
    cut host's late answers must neither add a second copy of a trial nor overwrite one. Every trial
    once, the clean run's values."""
    hosts = cluster
    alive = [host for host in hosts[1:] if not host.lost]
    while len(alive) < 2:
        alive.append(hosts.add_host())
    cut = alive[0]
    spec = write_spec(hosts, "hosts_long_cut", LONG)
    run = hosts[0].popen(BIN / "banditsweep", "run", spec, "--address", hosts.address, "--no-progress",
                         "--sink", "none", text=True)
    wait_for_a_trial_on(hosts, cut, "hosts_long_cut", run, past=500)
    cut.cut()
    started = time.monotonic()
    dead_after = None
    while time.monotonic() - started < LONG_CUT_SECONDS:
        if dead_after is None and cut.address not in hosts.alive_nodes().values():
            dead_after = time.monotonic() - started
        time.sleep(1.0)
    cut.reconnect()
    out, err = run.communicate(timeout=500)
    assert run.returncode == 0, out + err
    assert "12 finished, 0 failed" in out, out + err
    trials, curves = results_of(hosts, "hosts_long_cut")
    assert len(trials) == 12 and trials["trial_id"].is_unique and (trials["status"] == "finished").all()
    assert len(curves) == 12 * LONG["horizon"] and not curves.duplicated(["trial_id", "t"]).any()
    assert_same_values(trials, reference(LONG, tmp_path_factory))
    again = trials[trials["attempts"] > 1]
    assert len(again) >= 1 and cut.address not in set(again["node"]), trials[["node", "attempts"]]
    time.sleep(5)   # the cut host's late answers, had any been taken, would be in the store by now
    later, _ = results_of(hosts, "hosts_long_cut")
    pd.testing.assert_frame_equal(later, trials)
    print(f"\nhost cut off for {LONG_CUT_SECONDS} s: declared dead after {dead_after if dead_after is None else round(dead_after, 1)} s; "
          f"{len(again)} trial(s) ran again on another host; the run took {time.monotonic() - started:.1f} s from the cut")
