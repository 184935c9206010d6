"""`ray up` for real on this machine: cluster-local.yaml (Ray's `local` provider) brought up over SSH
to 127.0.0.1, the quick-start sweep submitted with `ray submit --tmux` as docs/cluster.md writes it, its
Parquet results and MLflow runs checked on the head, then `ray down`.

The "head machine" is this machine seen through namespaces of its own, so that nothing the cluster
does can reach anything the test did not start: a new PID namespace (`ray down` runs `ray stop`,
which ends every Ray process it can see; here it sees only the namespace), a new network namespace
(the config's fixed ports, 22, 6379, 8265, 5000, ..., are free there whatever runs on the machine),
and a new mount namespace with a private /tmp/ray. sshd is that namespace's first process: ending it
ends everything in the namespace. The SSH user is root with a throwaway key and its own HOME.

The head's network namespace has no route out, so the setup commands run offline, as on an
air-gapped on-premise machine: ~/venv is prepared beforehand (a venv that sees this test's
packages), pip installs from a local wheel folder (PIP_NO_INDEX / PIP_FIND_LINKS), the datasets are
the 1000-row test copies. openssh-server, rsync, sudo and python3-venv come from apt, installed
before the namespace starts; the test skips, saying why, where that cannot be done.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd
import pytest
import yaml
from local_ray import end_session, finished_trial_runs
from paths import DATA, REPO

BIN = Path(sys.executable).parent
PACKAGES = ("openssh-server", "rsync", "sudo", "python3-venv")

pytestmark = [pytest.mark.cluster_up, pytest.mark.timeout(1800)]


def run(*args, timeout=600, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(list(args), capture_output=True, text=True, timeout=timeout, start_new_session=True,
                          **kwargs)


def install_packages() -> None:
    missing = [p for p in PACKAGES if run("dpkg", "-s", p).returncode != 0]
    if not missing:
        return
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        pytest.skip(f"needs the Debian packages {', '.join(missing)}: not root or no apt-get to install them")
    # Installing must not start the packages' services (sshd on port 22): a policy that says so,
    # only if the system has none, and only while apt runs.
    policy = Path("/usr/sbin/policy-rc.d")
    own_policy = not policy.exists()
    if own_policy:
        policy.write_text("#!/bin/sh\nexit 101\n")
        policy.chmod(0o755)
    try:
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        done = run("apt-get", "update", "-qq", env=env)
        if done.returncode == 0:
            done = run("apt-get", "install", "-y", "-qq", *missing, env=env)
    finally:
        if own_policy:
            policy.unlink()
    if done.returncode != 0:
        pytest.skip(f"cannot install {', '.join(missing)} with apt-get: {done.stderr.strip()[-300:]}")


def namespaces_work() -> bool:
    return run("unshare", "--pid", "--net", "--mount", "--fork", "--mount-proc", "--", "true", timeout=30).returncode == 0


class HeadMachine:
    """This machine in its own PID, network and mount namespaces, reachable as root@127.0.0.1 over
    SSH with a throwaway key (from inside the network namespace: commands go in with nsenter)."""

    def __init__(self):
        self.base = Path(tempfile.mkdtemp(prefix="bsup-"))
        self.home = self.base / "home"           # the SSH user's HOME on the head
        self.client = self.base / "client"       # the HOME `ray up` runs with
        for folder in (self.home, self.client, self.base / "ray-tmp", self.base / "tmux", self.base / "ssh"):
            folder.mkdir(mode=0o700)
        self.key = self.base / "ssh" / "id_ed25519"
        self.process: subprocess.Popen | None = None
        self.init_pid = 0
        self.cluster_name = f"banditsweep-test-{os.getpid()}-{self.base.name[-6:]}"

    # ---- preparation (this machine's network: wheels are downloaded here) ----------------------

    def prepare(self) -> None:
        for key in (self.key, self.base / "ssh" / "host_key"):
            made = run("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "banditsweep-test", "-f", str(key))
            assert made.returncode == 0, made.stderr
        shutil.copy(f"{self.key}.pub", self.base / "ssh" / "authorized_keys")
        (self.base / "ssh" / "sshd_config").write_text("\n".join([
            "ListenAddress 127.0.0.1", "Port 22", f"HostKey {self.base / 'ssh' / 'host_key'}",
            f"AuthorizedKeysFile {self.base / 'ssh' / 'authorized_keys'}", "PermitRootLogin prohibit-password",
            "PasswordAuthentication no", "KbdInteractiveAuthentication no", "UsePAM no", "StrictModes no",
            "PidFile none", "X11Forwarding no", "PrintMotd no",
            # The SSH user's own HOME (the config's ~ paths), tmux server, and offline pip.
            f"SetEnv HOME={self.home} TMUX_TMPDIR={self.base / 'tmux'} PIP_NO_INDEX=1 "
            f"PIP_FIND_LINKS={self.base / 'wheels'} RAY_USAGE_STATS_ENABLED=0",
        ]) + "\n")
        # ~/venv as setup_commands leave it, without downloading torch and Ray again: a venv that
        # sees this test's packages, with its own `ray` and `mlflow` commands.
        made = run(sys.executable, "-m", "venv", str(self.home / "venv"))
        assert made.returncode == 0, made.stderr
        import site

        venv_site = next((self.home / "venv" / "lib").glob("python3*/site-packages"))
        (venv_site / "test-packages.pth").write_text(site.getsitepackages()[0] + "\n")
        for command in ("ray", "mlflow"):
            script = (BIN / command).read_text().splitlines()
            script[0] = f"#!{self.home / 'venv' / 'bin' / 'python'}"
            (self.home / "venv" / "bin" / command).write_text("\n".join(script) + "\n")
            (self.home / "venv" / "bin" / command).chmod(0o755)
        # What `pip install -e ~/banditsweep[openml]` needs that this venv does not have.
        wheels = run(str(BIN / "python"), "-m", "pip", "download", "-q", "--dest", str(self.base / "wheels"),
                     "--only-binary", ":all:", "setuptools>=68", "wheel", "packaging", "scikit-learn", "joblib", "threadpoolctl",
                     "--no-deps")
        if wheels.returncode != 0:
            pytest.skip(f"cannot download the wheels the head's offline pip needs: {wheels.stderr.strip()[-300:]}")
        (self.home / "banditsweep-data").mkdir()
        for dataset in DATA.glob("*.parquet"):
            shutil.copy(dataset, self.home / "banditsweep-data")

    # ---- the namespace ---------------------------------------------------------------------------

    def start(self) -> None:
        Path("/tmp/ray").mkdir(exist_ok=True)   # the mount point of the head's private /tmp/ray
        script = (f"ip link set lo up && mount --bind {self.base / 'ray-tmp'} /tmp/ray && mkdir -p /run/sshd && "
                  f"exec /usr/sbin/sshd -D -e -f {self.base / 'ssh' / 'sshd_config'}")
        self.log = open(self.base / "sshd.log", "w")
        self.process = subprocess.Popen(
            ["unshare", "--pid", "--net", "--mount", "--fork", "--kill-child", "--mount-proc", "--",
             "bash", "-c", script], stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.time() + 30
        while time.time() < deadline and not self.init_pid:
            children = Path(f"/proc/{self.process.pid}/task/{self.process.pid}/children")
            if children.exists() and children.read_text().split():
                self.init_pid = int(children.read_text().split()[0])
            time.sleep(0.2)
        assert self.init_pid, (self.base / "sshd.log").read_text()
        while time.time() < deadline:
            if self.inside("ssh", *self.ssh_options(), "root@127.0.0.1", "true", timeout=20).returncode == 0:
                return
            time.sleep(0.5)
        raise AssertionError(f"sshd did not answer: {(self.base / 'sshd.log').read_text()}")

    def ssh_options(self) -> list[str]:
        return ["-i", str(self.key), "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
                "-o", "BatchMode=yes", "-o", "LogLevel=ERROR"]

    def inside(self, *args, timeout=900, env_extra=None, **kwargs) -> subprocess.CompletedProcess:
        """A command of the user running `ray up`, in the head's network (it has 127.0.0.1 there)."""
        env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_", "BANDITSWEEP_", "MLFLOW_"))}
        env.update({"HOME": str(self.client), "RAY_TMPDIR": str(self.client), "RAY_USAGE_STATS_ENABLED": "0",
                    "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}", **(env_extra or {})})
        return run("nsenter", f"--target={self.init_pid}", "--net", "--", *args, timeout=timeout,
                   env=env, **kwargs)

    def namespace_processes(self) -> list[str]:
        """The command lines of the processes in the head's PID namespace but its first."""
        ns = os.readlink(f"/proc/{self.init_pid}/ns/pid")
        found = []
        for entry in os.listdir("/proc"):
            if entry.isdigit() and int(entry) != self.init_pid:
                try:
                    if os.readlink(f"/proc/{entry}/ns/pid") == ns:
                        found.append(Path(f"/proc/{entry}/cmdline").read_text().replace("\0", " ").strip())
                except OSError:
                    pass
        return found

    def stop(self) -> None:
        """End the namespace (its first process, then the kernel ends the rest), then whatever
        process outside it still uses the throwaway key (the SSH connection masters `ray up` keeps)."""
        if self.process is not None:
            end_session(self.process)
            self.process = None
            self.log.close()
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    if str(self.key) in Path(f"/proc/{entry}/cmdline").read_text():
                        os.kill(int(entry), signal.SIGKILL)
                except OSError:
                    pass

    def cleanup(self) -> None:
        self.stop()
        shutil.rmtree(self.base, ignore_errors=True)
        if self.cluster_name:   # the folder of the SSH connection sockets `ray up` made for this cluster
            import getpass
            import hashlib

            user, cluster = (hashlib.sha256(name.encode()).hexdigest()[:10]
                             for name in (getpass.getuser(), self.cluster_name))
            shutil.rmtree(f"/tmp/ray_ssh_{user}/{cluster}", ignore_errors=True)


@pytest.fixture
def head_machine():
    if sys.platform != "linux" or not all(shutil.which(c) for c in ("unshare", "nsenter", "ip", "ssh-keygen")):
        pytest.skip("needs Linux with util-linux (unshare, nsenter), iproute2 and OpenSSH's ssh-keygen")
    if os.geteuid() != 0 or not namespaces_work():
        pytest.skip("needs root and new PID, network and mount namespaces (unshare), which this machine refuses")
    install_packages()
    machine = HeadMachine()
    try:
        machine.prepare()
        machine.start()
        yield machine
    finally:
        machine.cleanup()


def test_ray_up_submit_and_down_on_this_machine(head_machine, tmp_path):
    machine = head_machine
    # The user's copy of cluster-local.yaml: the fields its header says to change, nothing else.
    config = yaml.safe_load((REPO / "cluster-local.yaml").read_text())
    config["cluster_name"] = machine.cluster_name
    config["provider"].update(head_ip="127.0.0.1", worker_ips=[])
    config["auth"] = {"ssh_user": "root", "ssh_private_key": str(machine.key)}
    copy = tmp_path / "cluster-local.yaml"
    copy.write_text(yaml.safe_dump(config, sort_keys=False))

    up = machine.inside(str(BIN / "ray"), "up", "-y", str(copy), cwd=REPO)
    assert up.returncode == 0, up.stdout[-6000:] + up.stderr[-3000:]
    assert (machine.home / "banditsweep" / "sweeps" / "quickstart.yaml").is_file()   # the repo, synced
    assert not (machine.home / "banditsweep" / ".git").exists()
    token = (machine.home / ".ray" / "auth_token").read_text().strip()
    assert token

    # The token as docs/cluster.md fetches it for `ray job submit`: a file copied off the head.
    fetched = machine.inside(str(BIN / "ray"), "rsync-down", str(copy), "~/.ray/auth_token",
                             str(tmp_path / "cluster-token"), cwd=tmp_path)
    assert fetched.returncode == 0, fetched.stdout[-2000:] + fetched.stderr[-2000:]
    assert (tmp_path / "cluster-token").read_text().strip() == token

    started = time.time()
    submitted = machine.inside(str(BIN / "ray"), "submit", "--tmux", str(copy), "sweeps/cli/main.py", "--", "run",
                               "~/banditsweep/sweeps/quickstart.yaml", "--address", "auto",
                               "--mlflow-uri", "http://127.0.0.1:5000", cwd=REPO)
    assert submitted.returncode == 0, submitted.stdout[-3000:] + submitted.stderr[-3000:]
    results = machine.home / "banditsweep-results" / "quickstart"
    db = machine.home / "mlflow" / "mlflow.db"
    deadline = time.time() + 600
    trials = runs = 0
    while time.time() < deadline:
        if (results / "trials").exists() and db.exists():
            trials = len(pd.read_parquet(results / "trials"))
            runs = finished_trial_runs(db, "quickstart")
            if trials == 42 and runs == 42:
                break
        time.sleep(3)
    assert (trials, runs) == (42, 42), machine.namespace_processes()
    print(f"ray submit --tmux: 42 trials in Parquet and MLflow {time.time() - started:.0f} s after submitting")
    table = pd.read_parquet(results / "trials")
    assert (table["status"] == "finished").all() and table["trial_id"].nunique() == 42
    assert len(pd.read_parquet(results / "curves")) == 42 * 2000
    # The driver joined the cluster's Ray (--address auto), not an embedded one: its trials ran on
    # the head node the launcher started.
    assert table["node_id"].nunique() == 1

    # docs/cluster.md's Ray job, from "your machine" (in the head's network, its dashboard is on 127.0.0.1:8265
    # without `ray dashboard`), with the token file: the uploaded tree runs and writes to the head's
    # results root. Its own sweep name, else every trial is already finished.
    job = machine.inside(str(BIN / "ray"), "job", "submit", "--address", "http://127.0.0.1:8265", "--working-dir",
                         ".", "--", "banditsweep", "run", "sweeps/quickstart.yaml", "--mlflow-uri",
                         "http://127.0.0.1:5000", "--set", "sweep=quickstart_job", cwd=REPO,
                         env_extra={"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(tmp_path / "cluster-token")})
    assert job.returncode == 0, job.stdout[-4000:] + job.stderr[-3000:]
    assert "42 finished, 0 failed" in job.stdout
    assert len(pd.read_parquet(machine.home / "banditsweep-results" / "quickstart_job" / "trials")) == 42
    assert finished_trial_runs(db, "quickstart_job") == 42

    down = machine.inside(str(BIN / "ray"), "down", "-y", str(copy), cwd=REPO)
    assert down.returncode == 0, down.stdout[-3000:] + down.stderr[-3000:]
    deadline = time.time() + 60
    while time.time() < deadline and [p for p in machine.namespace_processes() if "raylet" in p or "gcs_server" in p]:
        time.sleep(1)
    assert not [p for p in machine.namespace_processes() if "raylet" in p or "gcs_server" in p]
