"""A private Slurm cluster for the tests: munged with its own key and socket, slurmctld and slurmd
with their own slurm.conf, ports, state and spool folders. Every daemon is started in the foreground
as a child of the test and ended by its PID; clients (sbatch, scontrol, squeue) find the cluster
through ``SLURM_CONF``.

- :class:`SlurmCluster`: one node, this machine, its files under a temporary folder (the tests
  marked ``slurm``);
- :class:`SlurmOnHosts`: the controller and the nodes on separate hosts (tests/hosts.py) of the
  tests marked ``hosts``."""

from __future__ import annotations

import getpass
import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

from hosts import HOST_ROOT, Hosts

DAEMONS = ("munged", "mungekey", "slurmctld", "slurmd", "sbatch", "scontrol", "squeue", "srun")


def missing_commands() -> list[str]:
    """The Slurm and MUNGE commands this machine lacks (``apt-get install slurm-wlm munge``)."""
    found = lambda name: shutil.which(name) or os.path.exists(f"/usr/sbin/{name}")   # noqa: E731
    return [name for name in DAEMONS if not found(name)]


def _command(name: str) -> str:
    return shutil.which(name) or f"/usr/sbin/{name}"


def _free_ports(count: int) -> list[int]:
    sockets = []
    for _ in range(count):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        sockets.append(s)
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


def _cpus() -> int:
    return len(os.sched_getaffinity(0))


def _memory_mb() -> int:
    with open("/proc/meminfo") as handle:
        for line in handle:
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) // 1024
    return 1024


def slurm_conf(name: str, controller: tuple[str, str], nodes: list[tuple[str, str]], folder: str, ctld_port: int,
               slurmd_port: int, cpus: int, kill_wait: int) -> str:
    """A slurm.conf: the controller and the nodes as (name, address), each node with ``cpus`` CPUs, one
    partition ``test`` of them all; state, spool, pid and log files and MUNGE's socket under ``folder``
    (on each machine that reads it: a node's own disk where the machines are separate)."""
    user = getpass.getuser()
    memory = max(256, _memory_mb() // (2 * len(nodes)))
    lines = "".join(f"NodeName={node} NodeAddr={address} CPUs={cpus} RealMemory={memory} State=UNKNOWN\n"
                    for node, address in nodes)
    return f"""\
ClusterName={name}
SlurmctldHost={controller[0]}({controller[1]})
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
SlurmUser={user}
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={folder}/munge/munge.socket,cred_expire=15
StateSaveLocation={folder}/state
SlurmdSpoolDir={folder}/spool/%n
SlurmctldPidFile={folder}/run/slurmctld.pid
SlurmdPidFile={folder}/run/slurmd.pid
SlurmctldLogFile={folder}/log/slurmctld.log
SlurmdLogFile={folder}/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/builtin
ReturnToService=2
KillWait={kill_wait}
MinJobAge=300
JobRequeue=1
MpiDefault=none
SwitchType=switch/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SlurmctldTimeout=30
SlurmdTimeout=60
InactiveLimit=0
Waittime=0
SchedulerParameters=defer_batch=0
{lines}PartitionName=test Nodes={",".join(node for node, _ in nodes)} Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
"""


def make_munge_key(path: Path) -> None:
    """A new MUNGE key at ``path``, readable by its owner alone (munged refuses any other)."""
    subprocess.run([_command("mungekey"), "--create", f"--keyfile={path}"], check=True, capture_output=True)
    os.chmod(path, 0o600)


def munged_argv(folder: str, key: Path | str) -> list[str]:
    """munged in the foreground with the key at ``key`` and its socket, pid, seed and log files under
    ``folder`` (the socket where slurm_conf's AuthInfo says)."""
    return [_command("munged"), "--foreground", "--force", f"--key-file={key}", f"--socket={folder}/munge/munge.socket",
            f"--pid-file={folder}/munge/munged.pid", f"--log-file={folder}/log/munged.log",
            f"--seed-file={folder}/munge/munged.seed"]


class SlurmCluster:
    """``with SlurmCluster(tmp) as slurm:`` a cluster of one node (this host) for the block."""

    def __init__(self, root: Path, kill_wait: int = 30, cpus: int | None = None):
        self.root = Path(root)
        self.kill_wait = kill_wait
        self.cpus = cpus or _cpus()
        self.node = socket.gethostname().split(".")[0]
        self.processes: list[tuple[str, subprocess.Popen]] = []
        self.env = dict(os.environ)

    # ---- set-up ---------------------------------------------------------------------------------

    def _write_config(self) -> None:
        r = self.root
        for folder in ("munge", "state", "spool", "log", "run"):
            (r / folder).mkdir(parents=True, exist_ok=True)
        os.chmod(r / "munge", 0o711)
        ctld_port, slurmd_port = _free_ports(2)
        self.conf = r / "slurm.conf"
        self.conf.write_text(slurm_conf(f"bstest{ctld_port}", (self.node, "127.0.0.1"), [(self.node, "127.0.0.1")],
                                        str(r), ctld_port, slurmd_port, self.cpus, self.kill_wait))
        self.env["SLURM_CONF"] = str(self.conf)

    def _start(self, name: str, argv: list[str]) -> subprocess.Popen:
        log = open(self.root / "log" / f"{name}.out", "ab")
        process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                   env=self.env, start_new_session=True)
        log.close()
        self.processes.append((name, process))
        return process

    def start(self) -> SlurmCluster:
        self._write_config()
        r = self.root
        key = r / "munge" / "munge.key"
        make_munge_key(key)
        self._start("munged", munged_argv(str(r), key))
        self._wait_for(lambda: (r / "munge" / "munge.socket").exists(), 20, "munged's socket")
        self._start("slurmctld", [_command("slurmctld"), "-D", "-i", "-f", str(self.conf)])
        self._wait_for(lambda: self._answers(["scontrol", "ping"], "UP"), 60, "slurmctld")
        self._start("slurmd", [_command("slurmd"), "-D", "-f", str(self.conf), "-N", self.node])
        self._wait_for(lambda: self._answers(["sinfo", "-h", "-o", "%T"], "idle"), 90, "slurmd (node idle)")
        return self

    def _answers(self, argv: list[str], wanted: str) -> bool:
        return wanted in self.run(*argv, check=False, timeout=20).stdout

    def _wait_for(self, condition, seconds: float, what: str) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            for name, process in self.processes:
                if process.poll() is not None:
                    raise RuntimeError(f"{name} ended (exit {process.returncode}) while waiting for {what}:\n"
                                       + self.logs())
            try:
                if condition():
                    return
            except (subprocess.TimeoutExpired, OSError):
                pass
            time.sleep(0.5)
        raise RuntimeError(f"timed out waiting for {what}:\n" + self.logs())

    def log_files(self) -> list[tuple[str, Path]]:
        """(name, path) of the daemons' log files."""
        return [(path.name, path) for path in sorted((self.root / "log").glob("*"))]

    def logs(self) -> str:
        parts = []
        for name, path in self.log_files():
            try:
                parts.append(f"--- {name}\n" + path.read_text(errors="replace")[-3000:])
            except OSError:
                pass
        return "\n".join(parts)

    # ---- use ------------------------------------------------------------------------------------

    def run(self, *argv: str, check: bool = True, timeout: float = 60, cwd=None) -> subprocess.CompletedProcess:
        """A Slurm client (sbatch, scontrol, squeue, ...) of this cluster, to its end."""
        done = self._client([str(arg) for arg in argv], timeout, cwd)
        if check and done.returncode != 0:
            raise RuntimeError(f"{' '.join(map(str, argv))}: exit {done.returncode}\n{done.stdout}\n{done.stderr}")
        return done

    def _client(self, argv: list[str], timeout: float, cwd) -> subprocess.CompletedProcess:
        return subprocess.run(argv, env=self.env, capture_output=True, text=True, timeout=timeout, cwd=cwd)

    def job(self, job_id: str) -> dict[str, str]:
        """``scontrol show job``'s fields of the job (the first line of each key)."""
        out = self.run("scontrol", "-o", "show", "job", job_id, check=False).stdout
        fields = {}
        for item in out.split():
            key, _, value = item.partition("=")
            fields.setdefault(key, value)
        return fields

    def wait_for_state(self, job_id: str, states: set[str], seconds: float) -> dict[str, str]:
        deadline = time.monotonic() + seconds
        fields: dict[str, str] = {}
        while time.monotonic() < deadline:
            fields = self.job(job_id)
            if fields.get("JobState") in states:
                return fields
            time.sleep(0.5)
        raise TimeoutError(f"job {job_id} is {fields.get('JobState')} after {seconds:.0f} s, not in {states}\n"
                           + self.logs())

    # ---- tear-down ------------------------------------------------------------------------------

    def stop(self) -> None:
        """Cancel this cluster's jobs and wait for them to end (slurmd ends their processes), then
        end the daemons (slurmd first, munged last), each by its PID: SIGTERM, then SIGKILL."""
        if any(name.startswith("slurmd") and process.poll() is None for name, process in self.processes):
            try:
                self.run("scancel", "--user", getpass.getuser(), check=False, timeout=20)
                deadline = time.monotonic() + self.kill_wait + 30
                while time.monotonic() < deadline and self.run("squeue", "-h", check=False, timeout=20).stdout.strip():
                    time.sleep(1)
            except (subprocess.SubprocessError, OSError):
                pass
        for name, process in reversed(self.processes):
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
                try:
                    process.wait(20)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait(10)
        self.processes = []

    def __enter__(self) -> SlurmCluster:
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc) -> None:
        self.stop()


class SlurmOnHosts(SlurmCluster):
    """Slurm over separate hosts (tests/hosts.py): slurmctld on host 0, the login node that jobs are
    submitted from, and a slurmd on every other host, node ``h<i>`` at host i's bridge address, each
    node with ``cpus`` CPUs; one partition of the nodes (host 0 runs no jobs).

    Each host has a slurm.conf of its own with the same contents, and runs a munged of its own with the
    same key, as the machines of a real cluster do: the files are on each host's own disk at the same
    paths (under FOLDER), so the one AuthInfo socket path of slurm.conf leads every host's daemons and
    clients to its own munged. The daemons listen on Slurm's default ports, free in each host's new
    network namespace. Clients (sbatch, scontrol, squeue, scancel) run on host 0 (:meth:`run`). What
    this machine keeps (the key made here, the daemons' output) is in ``hosts.logs / "slurm"``."""

    FOLDER = f"{HOST_ROOT}/slurm"
    CONF = f"{FOLDER}/slurm.conf"

    def __init__(self, hosts: Hosts, kill_wait: int = 30, cpus: int = 1):
        super().__init__(hosts.logs / "slurm", kill_wait, cpus)
        self.hosts = hosts
        self.nodes = {f"h{host.index}": host for host in hosts[1:]}
        self.env = {"SLURM_CONF": self.CONF}   # on top of what a user's shell on the host has

    def start(self) -> SlurmOnHosts:
        self.root.mkdir(parents=True, exist_ok=True)
        key = self.root / "munge.key"
        make_munge_key(key)
        # slurmctld starts only on the machine SlurmctldHost names: the hosts share this machine's
        # hostname (they have no UTS namespace), host 0's address goes with it. The slurmds are told
        # their node names (-N).
        conf = slurm_conf("bshosts", (self.node, self.hosts[0].address),
                          [(name, host.address) for name, host in self.nodes.items()], self.FOLDER, 6817, 6818,
                          self.cpus, self.kill_wait)
        for host in self.hosts:
            folder = host.path(self.FOLDER)
            for sub in ("munge", "state", "spool", "log", "run"):
                (folder / sub).mkdir(parents=True, exist_ok=True)
            os.chmod(folder / "munge", 0o711)
            shutil.copy(key, folder / "munge" / "munge.key")
            os.chmod(folder / "munge" / "munge.key", 0o600)
            (folder / "slurm.conf").write_text(conf)
            # slurmd loads a cgroup plugin whatever slurm.conf's plugins are, and by default looks for
            # which cgroup version /sys/fs/cgroup has: a host has none mounted there (`ip netns exec`
            # mounts a /sys of the host's network namespace, without the machine's cgroup mounts).
            # Named, the plugin loads without looking; nothing uses it (proctrack/linuxproc, task/none).
            (folder / "cgroup.conf").write_text("CgroupPlugin=cgroup/v1\n")
        for name, host in self.nodes.items():
            host.path(f"{self.FOLDER}/spool/{name}").mkdir()   # slurmd's, SlurmdSpoolDir's %n
        for host in self.hosts:
            self._start(f"munged-{host.index}", munged_argv(self.FOLDER, f"{self.FOLDER}/munge/munge.key"), host)
        for host in self.hosts:
            socket_path = host.path(f"{self.FOLDER}/munge/munge.socket")
            self._wait_for(socket_path.exists, 20, f"munged's socket on host {host.index}")
        self._start("slurmctld", [_command("slurmctld"), "-D", "-i", "-f", self.CONF], self.hosts[0])
        self._wait_for(lambda: self._answers(["scontrol", "ping"], "UP"), 60, "slurmctld")
        for name, host in self.nodes.items():
            self._start(f"slurmd-{host.index}", [_command("slurmd"), "-D", "-f", self.CONF, "-N", name], host)
        self._wait_for(lambda: self.run("sinfo", "-h", "-N", "-o", "%N %T", check=False, timeout=20).stdout.split()
                       == [word for name in self.nodes for word in (name, "idle")], 90, "every slurmd (nodes idle)")
        return self

    def _start(self, name: str, argv: list[str], host=None) -> subprocess.Popen:
        process = host.popen(*argv, env=self.env, log=self.root / f"{name}.out")
        self.processes.append((name, process))
        return process

    def _client(self, argv: list[str], timeout: float, cwd) -> subprocess.CompletedProcess:
        """On host 0, the login node (``cwd``: a folder of host 0's)."""
        return self.hosts[0].run(*argv, env=self.env, cwd=cwd, timeout=timeout)

    def log_files(self) -> list[tuple[str, Path]]:
        files = [(path.name, path) for path in sorted(self.root.glob("*.out"))]
        for host in self.hosts:
            if host.holder is not None:
                files += [(f"host {host.index}: {path.name}", path)
                          for path in sorted(host.path(f"{self.FOLDER}/log").glob("*"))]
        return files
