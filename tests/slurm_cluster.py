"""A private one-node Slurm cluster for the tests marked ``slurm``: munged with its own key and
socket, slurmctld and slurmd with their own slurm.conf, ports, state and spool folders under a
temporary folder. Every daemon is started in the foreground as a child of the test and ended by
its PID; clients (sbatch, scontrol, squeue) find the cluster through ``SLURM_CONF``."""

from __future__ import annotations

import getpass
import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

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
        user = getpass.getuser()
        self.conf = r / "slurm.conf"
        self.conf.write_text(f"""\
ClusterName=bstest{ctld_port}
SlurmctldHost={self.node}(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
SlurmUser={user}
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={r}/munge/munge.socket,cred_expire=15
StateSaveLocation={r}/state
SlurmdSpoolDir={r}/spool/%n
SlurmctldPidFile={r}/run/slurmctld.pid
SlurmdPidFile={r}/run/slurmd.pid
SlurmctldLogFile={r}/log/slurmctld.log
SlurmdLogFile={r}/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/builtin
ReturnToService=2
KillWait={self.kill_wait}
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
NodeName={self.node} NodeAddr=127.0.0.1 CPUs={self.cpus} RealMemory={max(256, _memory_mb() // 2)} State=UNKNOWN
PartitionName=test Nodes={self.node} Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
""")
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
        subprocess.run([_command("mungekey"), "--create", f"--keyfile={key}"], check=True, capture_output=True)
        os.chmod(key, 0o600)
        self._start("munged", [_command("munged"), "--foreground", "--force", f"--key-file={key}",
                               f"--socket={r}/munge/munge.socket", f"--pid-file={r}/munge/munged.pid",
                               f"--log-file={r}/log/munged.log", f"--seed-file={r}/munge/munged.seed"])
        self._wait_for(lambda: (r / "munge" / "munge.socket").exists(), 20, "munged's socket")
        self._start("slurmctld", [_command("slurmctld"), "-D", "-i", "-f", str(self.conf)])
        self._wait_for(lambda: self._answers(["scontrol", "ping"], "UP"), 60, "slurmctld")
        self._start("slurmd", [_command("slurmd"), "-D", "-f", str(self.conf), "-N", self.node])
        self._wait_for(lambda: self._answers(["sinfo", "-h", "-o", "%T"], "idle"), 90, "slurmd (node idle)")
        return self

    def _answers(self, argv: list[str], wanted: str) -> bool:
        done = subprocess.run(argv, env=self.env, capture_output=True, text=True, timeout=20)
        return wanted in done.stdout

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

    def logs(self) -> str:
        parts = []
        for path in sorted((self.root / "log").glob("*")):
            try:
                parts.append(f"--- {path.name}\n" + path.read_text(errors="replace")[-3000:])
            except OSError:
                pass
        return "\n".join(parts)

    # ---- use ------------------------------------------------------------------------------------

    def run(self, *argv: str, check: bool = True, timeout: float = 60, cwd=None) -> subprocess.CompletedProcess:
        done = subprocess.run(list(argv), env=self.env, capture_output=True, text=True, timeout=timeout, cwd=cwd)
        if check and done.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)}: exit {done.returncode}\n{done.stdout}\n{done.stderr}")
        return done

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
        if any(name == "slurmd" and process.poll() is None for name, process in self.processes):
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
