"""Separate hosts on this one machine: a private bridge, one network namespace per host with an
address of its own on a private subnet, and per host a mount namespace with its own /tmp and /dev/shm
(private tmpfs), its own HOME, results folder and data folder. The installed software and the
repository are shared as they are (the rest of the file system is this machine's).

What two hosts share is what two machines on one switch share: the bridge. Each host has loopback
and one interface on the subnet, and no route beyond it; nothing outside the subnet can be reached
from a host, and no address of this machine's is on the bridge. A Ray started on host 0 with
``ray start --head`` is a cluster of its own that nodes on hosts 1, 2, ... join over the bridge.

Every host keeps the same paths (HOME is ``/tmp/h/home`` on each, as ``/home/<user>`` is the same
path on the nodes of a real cluster) with contents of its own: a file written under one host's HOME
is not under another's. The test reads and writes a host's files through ``host.path(...)``
(``/proc/<pid>/root`` of the process that holds the host's mount namespace).

``Hosts(shared=folder)`` adds what the nodes of a Slurm cluster have in common: a folder of this
machine's mounted at ``/tmp/h/shared`` on every host, the cluster's shared filesystem (a file one
host writes there, every other host and the test read at once, the test at the folder's own path).

Every process is started in a session of its own and ended by its process group, then by SIGKILL to
what is left of its session, then to any process still in the host's namespaces; nothing else on
the machine is ever signalled (Ray's own stop command, which ends every Ray process of a machine,
is never called). The bridge, the veth pairs and the namespaces carry
a name unique to this run and are deleted when the :class:`Hosts` context ends, also after a failure
or a KeyboardInterrupt (and at interpreter exit, should the context never have been left).
"""

from __future__ import annotations

import atexit
import ipaddress
import os
import random
import secrets
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from local_ray import end_session

BIN = Path(sys.executable).parent

# Inside every host (its private /tmp): short, since Ray's socket paths must fit in 107 bytes.
HOST_ROOT = "/tmp/h"
HOME = f"{HOST_ROOT}/home"
DATA = f"{HOST_ROOT}/data"
RESULTS = f"{HOME}/banditsweep-results"   # the default results root (~/banditsweep-results)
RAY_TEMP = "/tmp/ray"
SHARED = f"{HOST_ROOT}/shared"           # where Hosts(shared=...) mounts the shared folder on every host

GCS_PORT = 6379          # a host's network namespace is new: Ray's default ports are free there
DASHBOARD_PORT = 8265
OBJECT_STORE_BYTES = 150 * 1024 * 1024
# Ray's health check of the nodes, pinned on every node (the head's GCS acts on them): a check every
# 2 s that fails after 3 s, five failures in a row and the node is dead, about 25 s after it stopped
# answering. Ray's defaults (3 s, 10 s, 5) take about 65 s: the lost-host cases would wait that long.
HEALTH_CHECK = {"RAY_health_check_period_ms": "2000", "RAY_health_check_timeout_ms": "3000",
                "RAY_health_check_failure_threshold": "5"}
NODE_DEATH_SECONDS = 25


class HostsUnavailable(RuntimeError):
    """This machine cannot make the namespaces (not Linux, not root, no iproute2 / util-linux)."""


def _run(*args: str, check: bool = True, timeout: float = 30) -> subprocess.CompletedProcess:
    done = subprocess.run(list(args), capture_output=True, text=True, timeout=timeout, start_new_session=True)
    if check and done.returncode != 0:
        raise RuntimeError(f"{' '.join(args)}: exit {done.returncode}: {done.stderr.strip()}")
    return done


def hidden_by_a_host() -> list[str]:
    """The folders of the checkout and of its Python that lie under /tmp or /dev/shm (each host mounts
    its own there), outermost only."""
    found: list[str] = []
    for folder in sorted({str(Path(__file__).resolve().parent.parent), str(Path(sys.prefix).resolve())}):
        if folder.startswith(("/tmp/", "/dev/shm/")) and not any(folder.startswith(f + "/") for f in found):
            found.append(folder)
    return found


def why_not_available() -> str | None:
    """Why hosts cannot be made here (None: they can)."""
    if sys.platform != "linux":
        return "separate hosts need Linux network and mount namespaces"
    missing = [c for c in ("ip", "unshare", "nsenter") if shutil.which(c) is None]
    if missing:
        return f"separate hosts need iproute2 and util-linux: {', '.join(missing)} not found"
    if os.geteuid() != 0:
        return "separate hosts need root (network namespaces, a bridge, tmpfs mounts)"
    name = f"bsq{secrets.token_hex(3)}"
    try:
        made = _run("ip", "netns", "add", name, check=False)
        if made.returncode != 0:
            return f"this machine refuses network namespaces: {made.stderr.strip()}"
        inside = _run("ip", "netns", "exec", name, "unshare", "-m", "--propagation", "private", "--", "sh", "-c",
                      "mount -t tmpfs bsq /tmp", check=False)
        if inside.returncode != 0:
            return f"this machine refuses mount namespaces or tmpfs mounts: {inside.stderr.strip()}"
        bridge = _run("ip", "link", "add", name, "type", "bridge", check=False)
        if bridge.returncode != 0:
            return f"this machine refuses a bridge: {bridge.stderr.strip()}"
        return None
    finally:
        _run("ip", "link", "del", name, check=False)
        _run("ip", "netns", "del", name, check=False)


def _used_networks() -> list[ipaddress.IPv4Network]:
    """The IPv4 networks this machine's own addresses and routes are on."""
    used = []
    for command in (("ip", "-4", "-o", "addr", "show"), ("ip", "-4", "route", "show", "table", "all")):
        for line in _run(*command, check=False).stdout.splitlines():
            for word in line.split():
                try:
                    if "/" in word or word[0].isdigit():
                        used.append(ipaddress.ip_network(word, strict=False))
                except ValueError:
                    pass
    return used


def free_subnet() -> ipaddress.IPv4Network:
    """A 10.x.y.0/24 that no address or route of this machine is on."""
    used = _used_networks()
    for _ in range(200):
        subnet = ipaddress.ip_network(f"10.{random.randint(16, 250)}.{random.randint(1, 254)}.0/24")
        if not any(subnet.overlaps(network) for network in used if network.prefixlen > 0):
            return subnet
    raise RuntimeError("no free 10.x.y.0/24 subnet on this machine")


def _netns_processes(netns_inode: int, mnt: str | None = None) -> list[int]:
    """The processes in the network namespace with that inode (or in the mount namespace ``mnt``)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            if (os.stat(f"/proc/{entry}/ns/net").st_ino == netns_inode
                    or (mnt is not None and os.readlink(f"/proc/{entry}/ns/mnt") == mnt)):
                found.append(int(entry))
        except OSError:
            pass
    return found


class Host:
    """One host: its network namespace, its mount namespace (held by a ``sleep`` started inside it),
    its address, its processes."""

    def __init__(self, hosts: "Hosts", index: int, address: str):
        self.hosts, self.index, self.address = hosts, index, address
        self.netns = f"{hosts.tag}-h{index}"
        self.veth = f"{hosts.tag}v{index}"          # the bridge's side of the host's link
        self.holder: subprocess.Popen | None = None  # `sleep infinity` in the host's mount namespace
        self.mnt = ""                                # its mount namespace ("mnt:[inode]")
        self.netns_inode = 0
        self.processes: list[subprocess.Popen] = []
        self.lost = False

    def __repr__(self) -> str:
        return f"Host({self.index}, {self.address})"

    # ---- building -------------------------------------------------------------------------------

    def build(self, bridge: str, prefix: int) -> None:
        _run("ip", "netns", "add", self.netns)
        self.netns_inode = os.stat(f"/run/netns/{self.netns}").st_ino
        _run("ip", "link", "add", self.veth, "type", "veth", "peer", "name", "eth0", "netns", self.netns)
        _run("ip", "link", "set", self.veth, "master", bridge, "up")
        _run("ip", "-n", self.netns, "addr", "add", f"{self.address}/{prefix}", "dev", "eth0")
        _run("ip", "-n", self.netns, "link", "set", "eth0", "up")
        _run("ip", "-n", self.netns, "link", "set", "lo", "up")
        steps = ["mount -t tmpfs -o size=2g,mode=1777 bsh-tmp /tmp",
                 "mount -t tmpfs -o size=512m,mode=1777 bsh-shm /dev/shm",
                 f"mkdir -p {HOME} {DATA}"]
        # A folder under this machine's /tmp or /dev/shm, which the host's own hide, is opened before
        # those mounts and bound through its descriptor after them (a bind from a path of another mount
        # namespace, /proc/PID/root/..., is refused by the kernel): the shared folder, at SHARED, and
        # the checkout and its Python where they lie there, at their own paths (installed software is
        # at the same path on every host). Not canonicalized: mount would resolve the descriptor to its
        # path, which at the same path names the host's new, empty folder.
        binds = [(folder, folder) for folder in hidden_by_a_host()]
        if self.hosts.shared is not None:
            binds.append((str(self.hosts.shared), SHARED))
        for fd, (source, target) in enumerate(binds, start=3):
            steps = [f"exec {fd}< {shlex.quote(source)}", *steps, f"mkdir -p {shlex.quote(target)}",
                     f"mount --no-canonicalize --bind /proc/self/fd/{fd} {shlex.quote(target)}", f"exec {fd}<&-"]
        script = " && ".join([*steps, "exec sleep infinity"])
        self.holder = subprocess.Popen(["ip", "netns", "exec", self.netns, "unshare", "-m", "--propagation", "private",
                                        "--", "sh", "-c", script], stdin=subprocess.DEVNULL,
                                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
        ours = os.readlink("/proc/self/ns/mnt")
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if self.holder.poll() is not None:
                raise RuntimeError(f"host {self.index}: its mount namespace did not start: "
                                   f"{self.holder.stderr.read().decode(errors='replace')}")
            try:
                if (Path(f"/proc/{self.holder.pid}/comm").read_text().strip() == "sleep"
                        and os.readlink(f"/proc/{self.holder.pid}/ns/mnt") != ours):
                    self.mnt = os.readlink(f"/proc/{self.holder.pid}/ns/mnt")
                    return
            except OSError:
                pass
            time.sleep(0.05)
        raise RuntimeError(f"host {self.index}: its mount namespace did not start in 20 s")

    # ---- files ----------------------------------------------------------------------------------

    def path(self, inside: str | os.PathLike) -> Path:
        """The file the host sees at ``inside`` (an absolute path), as this process reaches it. A link
        on the way to an absolute path leads to this process's file, not the host's; and SQLite, which
        follows every link of a path, opens this process's: copy a database out first."""
        return Path(f"/proc/{self.holder.pid}/root{os.fspath(inside)}")

    def env(self, extra: dict | None = None) -> dict[str, str]:
        """What a user's shell on this host has: its HOME and data folder, the installed commands first
        on PATH; nothing of this process's Ray, banditsweep or MLflow settings."""
        base = {k: v for k, v in os.environ.items()
                if not k.startswith(("RAY_", "BANDITSWEEP_", "MLFLOW_")) and k not in ("TMPDIR", "PYTHONPATH")}
        # Every node of a cluster runs with RAY_AUTH_MODE=token (README.md: its ~/.bashrc says so).
        return {**base, "HOME": HOME, "BANDITSWEEP_DATA": DATA, "RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "token",
                "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '/usr/bin:/bin')}",
                # Ray gives its raylet 30 s to register; a 2-core machine running three nodes can take longer.
                "RAY_raylet_start_wait_time_s": "120", **HEALTH_CHECK, **(extra or {})}

    # ---- processes ------------------------------------------------------------------------------

    def command(self, args, cwd: str | os.PathLike | None = None) -> list[str]:
        """``args`` as run inside the host's network and mount namespaces (in ``cwd``, a path the host
        sees; its HOME by default)."""
        # nsenter's --wd opens its folder before entering the namespaces: env changes to it after.
        return ["nsenter", "-t", str(self.holder.pid), "-m", "-n", "--", "env", "-C", str(cwd or HOME), "--",
                *map(str, args)]

    def popen(self, *args, env: dict | None = None, cwd=None, log: str | os.PathLike | None = None,
              **kwargs) -> subprocess.Popen:
        """Start a command on the host, in a session of its own (ended by :meth:`Hosts.close`, by its
        process group). ``log``: a file (of this process's) for its stdout and stderr; else pipes."""
        if self.lost:
            raise RuntimeError(f"host {self.index} is lost")
        if log is not None:
            out = open(log, "ab")
            kwargs.update(stdout=out, stderr=subprocess.STDOUT)
        else:
            kwargs.setdefault("stdout", subprocess.PIPE)
            kwargs.setdefault("stderr", subprocess.PIPE)
        kwargs.setdefault("stdin", subprocess.DEVNULL)
        process = subprocess.Popen(self.command(args, cwd), env=self.env(env), start_new_session=True, **kwargs)
        if log is not None:
            out.close()
        self.processes.append(process)
        return process

    def run(self, *args, env: dict | None = None, cwd=None, timeout: float = 300,
            input: str | None = None) -> subprocess.CompletedProcess:
        """Run a command on the host to its end (text output); on a timeout its whole session is ended."""
        process = self.popen(*args, env=env, cwd=cwd, text=True,
                             stdin=subprocess.PIPE if input is not None else subprocess.DEVNULL)
        try:
            out, err = process.communicate(input=input, timeout=timeout)
        finally:
            end_session(process, grace=2)   # whatever it left in its session
            self.processes.remove(process)
        return subprocess.CompletedProcess(process.args, process.returncode, out, err)

    def python(self, code: str, *args: str, **kwargs) -> subprocess.CompletedProcess:
        return self.run(BIN / "python", "-c", code, *args, **kwargs)

    def namespace_processes(self) -> list[int]:
        """Every process in the host's namespaces but the one that holds them."""
        holder = self.holder.pid if self.holder is not None else -1
        return [pid for pid in _netns_processes(self.netns_inode, self.mnt) if pid != holder]

    def kill_everything(self) -> int:
        """SIGKILL every process in the host's namespaces (but the holder: the host's disk stays
        readable); how many there were."""
        killed = set()
        for _ in range(5):
            pids = self.namespace_processes()
            if not pids:
                break
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                    killed.add(pid)
                except ProcessLookupError:
                    pass
            time.sleep(0.1)
        for process in self.processes:
            try:
                process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
        return len(killed)

    # ---- faults ---------------------------------------------------------------------------------

    def lose(self) -> int:
        """The host is gone, as a machine that lost its power: every process in its namespaces
        killed at once, then its link removed. Returns how many processes were killed."""
        _run("ip", "link", "set", self.veth, "down", check=False)   # nothing said on the way out
        killed = self.kill_everything()
        _run("ip", "link", "del", self.veth, check=False)
        self.lost = True
        return killed

    def cut(self) -> None:
        """Unplug the host's cable: its link down (its processes run on, unreachable)."""
        _run("ip", "link", "set", self.veth, "down")

    def reconnect(self) -> None:
        _run("ip", "link", "set", self.veth, "up")

    # ---- teardown -------------------------------------------------------------------------------

    def close(self) -> None:
        for process in reversed(self.processes):
            end_session(process, grace=5)
        self.processes = []
        if self.netns_inode:
            self.kill_everything()
        if self.holder is not None:
            end_session(self.holder, grace=2)
            self.holder = None
        _run("ip", "link", "del", self.veth, check=False)
        _run("ip", "netns", "del", self.netns, check=False)


class Hosts:
    """``count`` hosts on a private bridge (host i at the subnet's address i + 1). Use as a context
    manager; :meth:`start_ray` makes host 0 a Ray head and the others its worker nodes."""

    def __init__(self, count: int = 3, object_store_bytes: int = OBJECT_STORE_BYTES, logs: Path | None = None,
                 shared: Path | None = None):
        reason = why_not_available()
        if reason:
            raise HostsUnavailable(reason)
        self.tag = f"bs{secrets.token_hex(3)}"       # names of this run's bridge, links and namespaces
        self.bridge = f"{self.tag}br"
        self.subnet = free_subnet()
        addresses = list(self.subnet.hosts())
        self.hosts = [Host(self, i, str(addresses[i])) for i in range(count)]
        self.object_store_bytes = object_store_bytes
        # A folder of this machine's, mounted at SHARED on every host (None: the hosts share nothing).
        self.shared = Path(shared).resolve() if shared is not None else None
        self.ray: dict[int, subprocess.Popen] = {}
        self.token = ""
        # The Ray nodes' output (this machine's files); kept where the caller gives a folder.
        self.own_logs = logs is None
        self.logs = Path(logs) if logs is not None else Path(os.environ.get("TMPDIR", "/tmp")) / f"banditsweep-{self.tag}"
        self.closed = False

    def __getitem__(self, index: int) -> Host:
        return self.hosts[index]

    def __iter__(self):
        return iter(self.hosts)

    def __len__(self) -> int:
        return len(self.hosts)

    def __enter__(self) -> "Hosts":
        atexit.register(self.close)
        try:
            self.logs.mkdir(mode=0o700, parents=True, exist_ok=not self.own_logs)
            _run("ip", "link", "add", self.bridge, "type", "bridge")
            _run("ip", "link", "set", self.bridge, "up")
            for host in self.hosts:
                host.build(self.bridge, self.subnet.prefixlen)
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ---- Ray ------------------------------------------------------------------------------------

    @property
    def head(self) -> Host:
        return self.hosts[0]

    @property
    def address(self) -> str:
        return f"{self.head.address}:{GCS_PORT}"

    @property
    def dashboard(self) -> str:
        return f"http://{self.head.address}:{DASHBOARD_PORT}"

    def log(self, name: str) -> Path:
        return self.logs / name

    def start_ray(self, timeout: float = 240, head_cpus: int = 0) -> "Hosts":
        """``ray start --head --block`` on host 0 (token authentication on, as Ray starts it; the head
        holds ``head_cpus`` CPUs: none by default, so that trials run on the worker hosts), then
        ``ray start --address <head> --block --num-cpus 1`` on every other host, each with the head's
        token copied into its HOME as a user copies it. Returns once every node is alive."""
        head = self.head
        made = head.run("sh", "-c", f"umask 077 && exec {BIN / 'ray'} get-auth-token --generate", timeout=60)
        assert made.returncode == 0, made.stderr
        self.token = made.stdout.strip()
        store = str(self.object_store_bytes)
        self.ray[0] = head.popen(
            BIN / "ray", "start", "--head", "--block", "--node-ip-address", head.address, "--port", GCS_PORT,
            "--num-cpus", head_cpus, "--num-gpus", "0", "--object-store-memory", store,
            "--include-dashboard", "true", "--dashboard-host", head.address, "--dashboard-port", DASHBOARD_PORT,
            "--temp-dir", RAY_TEMP, "--disable-usage-stats", log=self.log("ray-head.log"))
        self.wait_for_head(timeout)
        for host in self.hosts[1:]:
            self.start_worker(host)
        self.wait_for_nodes(len(self.hosts), timeout)
        return self

    def start_worker(self, host: Host) -> subprocess.Popen:
        token = host.path(f"{HOME}/.ray/auth_token")
        token.parent.mkdir(parents=True, exist_ok=True)
        token.write_text(self.token)
        token.chmod(0o600)
        self.ray[host.index] = host.popen(
            BIN / "ray", "start", "--address", self.address, "--block", "--node-ip-address", host.address,
            "--num-cpus", 1, "--num-gpus", 0, "--object-store-memory", str(self.object_store_bytes),
            "--temp-dir", RAY_TEMP, "--disable-usage-stats", log=self.log(f"ray-worker-{host.index}.log"))
        return self.ray[host.index]

    def add_host(self, timeout: float = 240) -> Host:
        """One more host on the bridge, at the next address: a replacement node, as an autoscaler
        starts one for a lost node. With Ray started, it joins the cluster as a worker node; returns
        once that node is alive."""
        index = len(self.hosts)
        host = Host(self, index, str(list(self.subnet.hosts())[index]))
        self.hosts.append(host)
        host.build(self.bridge, self.subnet.prefixlen)
        if self.ray:
            process = self.start_worker(host)
            deadline = time.monotonic() + timeout
            while host.address not in self.alive_nodes().values():
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"host {index}'s node did not join: {self.startup_log(index)}")
                time.sleep(1.0)
        return host

    def _ask_head(self, path: str) -> str | None:
        """GET ``path`` of the head's dashboard, with the token, from host 0 (None: no answer)."""
        code = ("import sys, urllib.request\n"
                "request = urllib.request.Request(sys.argv[1], headers={'Authorization': 'Bearer ' + sys.argv[2]})\n"
                "print(urllib.request.urlopen(request, timeout=5).read().decode())\n")
        answer = self.head.python(code, f"{self.dashboard}{path}", self.token, timeout=30)
        return answer.stdout if answer.returncode == 0 else None

    def wait_for_head(self, timeout: float) -> None:
        """The head's dashboard answers, and its jobs API (a dashboard agent up to run jobs)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.ray[0].poll() is not None:
                raise RuntimeError(f"ray start --head exited {self.ray[0].returncode}: {self.startup_log(0)}")
            if self._ask_head("/api/jobs/") is not None:
                return
            time.sleep(1.0)
        raise TimeoutError(f"the head did not come up in {timeout:.0f} s: {self.startup_log(0)}")

    def alive_nodes(self) -> dict[str, str]:
        """node id -> address of the nodes the head's GCS takes to be alive."""
        import json

        answer = self._ask_head("/nodes?view=summary")
        if not answer:
            return {}
        summary = json.loads(answer)["data"]["summary"]
        return {node["raylet"]["nodeId"]: node["raylet"]["nodeManagerAddress"] for node in summary
                if node["raylet"].get("state") == "ALIVE"}

    def wait_for_nodes(self, count: int, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for index, process in self.ray.items():
                if process.poll() is not None and not self.hosts[index].lost:
                    raise RuntimeError(f"ray start on host {index} exited {process.returncode}: "
                                       f"{self.startup_log(index)}")
            if len(self.alive_nodes()) >= count:
                return
            time.sleep(1.0)
        raise TimeoutError(f"{count} nodes were not alive after {timeout:.0f} s: {self.alive_nodes()}")

    def startup_log(self, index: int) -> str:
        name = "ray-head.log" if index == 0 else f"ray-worker-{index}.log"
        path = self.log(name)
        return path.read_text(errors="replace")[-4000:] if path.exists() else ""

    # ---- teardown -------------------------------------------------------------------------------

    def close(self) -> None:
        """End every process started on the hosts (workers' Ray first, then the head's), delete the
        namespaces, the links and the bridge. Safe to call more than once."""
        if self.closed:
            return
        self.closed = True
        atexit.unregister(self.close)
        try:
            for host in reversed(self.hosts):
                try:
                    host.close()
                except Exception as error:   # the others are closed all the same
                    print(f"hosts: closing host {host.index}: {error}", file=sys.stderr)
        finally:
            _run("ip", "link", "del", self.bridge, check=False)
            if self.own_logs:
                shutil.rmtree(self.logs, ignore_errors=True)

    def leftovers(self) -> list[str]:
        """This run's namespaces and links still on the machine (none after :meth:`close`)."""
        names = _run("ip", "netns", "list", check=False).stdout + _run("ip", "-o", "link", check=False).stdout
        return [line for line in names.splitlines() if self.tag in line]
