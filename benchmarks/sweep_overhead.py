"""The framework's own overhead: how close a sweep comes to the time its trials need.

Runs the real command, ``python -m banditsweep run ...`` (embedded local Ray, MLflow on a
fresh SQLite file, Parquet results in a fresh folder), as a subprocess, and compares what it takes
with what the trials alone need. Two cases:

``sleep``
    ``--trials`` (640) trials of the plugin algorithm ``sleep`` (``benchmarks/plugins/sleep_algorithm.py``:
    exactly ``--seconds`` (0.5 s) of sleeping per trial, no CPU, T = 50, 5 streamed progress points
    per trial) on ``--actors`` (16) trial actors (``resources.cpus_per_trial`` = CPUs / actors, so
    0.125 on 2 cores, and ``--max-workers`` = actors). The minimum is trials x seconds / actors
    (20 s). Measured:

    - *span*: first trial start to last trial end, from the wall-clock times the algorithm itself
      records in its diagnostics (trials table), independent of the framework's bookkeeping.
      **Target: span <= 1.10 x minimum.**
    - *command*: wall time of the whole command, Ray's start and stop included.
      **Target: command <= 1.25 x minimum.**
    - where the rest goes: start-up (command start to first trial start), tear-down (last trial end
      to command end), each beside Ray's floor measured in the same repeat (a script that starts an
      embedded Ray as the CLI does, waits for ``--actors`` empty actors and stops it), the idle gap
      between consecutive trials on one actor, and the sink's lag (MLflow child run created after
      the trial started; run ended after the trial ended; from the run timestamps in ``mlflow.db``).

``quickstart``
    ``sweeps/quickstart.yaml`` (42 CPU trials) with ``--max-workers 1`` and with ``--max-workers 2``.
    Speedup = time with 1 worker / time with 2 workers, for the sweep (the ``N finished, M failed in
    X s`` line the CLI prints) and for the whole command. **Target: speedup >= 1.6.**
    The spec is this checkout's (``--quickstart-spec``) for every code tree: same workload. Also
    shown: start-up (command start to the first trial's start, ``finished_at - wall_seconds`` in the
    trials table), trial phase (to the last trial the sink recorded), tear-down, and the trials'
    own compute (sum of ``wall_seconds``) for scale.

``status``
    ``banditsweep status`` of a spec of ``--status-seeds`` (10^5) seeds of Random on one synthetic
    bandit, nothing run: the cost of reading, expanding and validating a spec (every command pays it
    before it starts) and of counting its trials against an empty store. Measured: wall time and the
    command's peak resident memory.

Comparing code trees side by side: ``--code LABEL=PATH`` (repeatable), PATH a checkout of the
project. Each run of a tree gets a temp dir holding only a symlink ``banditsweep -> PATH``, put first
on ``PYTHONPATH`` (the subprocess and Ray's workers inherit it; the editable install's finder comes
after ``PYTHONPATH`` on the import path). Before measuring, each tree's import is checked in the
subprocess's environment, and every sleep trial records the package path its worker imported; a
mismatch aborts. Runs are interleaved (case 1 tree A, case 1 tree B, ..., then the next case, then
the next repeat) so that load on the machine hits the trees alike; figures are medians over
``--repeats``. Without ``--code`` the installed package is measured (label ``installed``).

Run (from the repository root, with the project's venv):

    .venv/bin/python benchmarks/sweep_overhead.py                                  # installed package
    git worktree add /tmp/bs_before HEAD                                           # a "before" tree
    .venv/bin/python benchmarks/sweep_overhead.py --code before=/tmp/bs_before --code after=.
    .venv/bin/python benchmarks/sweep_overhead.py --cases sleep --trials 64 --actors 4   # quick check

Prints one line per run as it ends (to stderr), then a Markdown table: one column per tree, the
minimum or target in the second column, and whether each target is met. ``--json FILE`` saves the
per-run figures. The machine's load average is printed at the start and the end: on a shared
machine, the figures are only as quiet as it was.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shutil
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import zlib
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PLUGINS = Path(__file__).resolve().parent / "plugins"
DEFAULT_PYTHON = REPO / ".venv" / "bin" / "python"

SPAN_TARGET = 1.10
COMMAND_TARGET = 1.25
SPEEDUP_TARGET = 1.6

SUMMARY_LINE = re.compile(r"(\d+) finished, (\d+) failed in ([\d.]+) s on (\d+) (\w+) worker")


@dataclass
class Tree:
    label: str
    path: Path | None  # None: the installed package
    code_dir: Path | None = None  # temp dir holding the symlink banditsweep -> path
    package: str = ""  # real path of the banditsweep package the subprocess imports
    revision: str = ""


@dataclass
class RunResult:
    tree: str
    case: str  # sleep | quickstart_w1 | quickstart_w2
    repeat: int
    figures: dict[str, float] = field(default_factory=dict)


# -- environment of a run ------------------------------------------------------------------------


def run_env(tree: Tree) -> dict[str, str]:
    env = dict(os.environ)
    for name in ("RAY_ADDRESS", "MLFLOW_TRACKING_URI", "BANDITSWEEP_DATA"):
        env.pop(name, None)
    paths = ([str(tree.code_dir)] if tree.code_dir else []) + [str(PLUGINS)]
    if env.get("PYTHONPATH"):
        paths.append(env["PYTHONPATH"])
    env["PYTHONPATH"] = os.pathsep.join(paths)
    env["BANDITSWEEP_PLUGINS"] = "sleep_algorithm"
    env["RAY_USAGE_STATS_ENABLED"] = "0"
    env["PYTHONUNBUFFERED"] = "1"
    return env


def prepare_tree(tree: Tree, python: str, scratch: Path) -> None:
    """Make the symlink dir, check which package the subprocess imports, and warm the file cache."""
    if tree.path is not None:
        tree.code_dir = Path(tempfile.mkdtemp(prefix=f"code_{tree.label}_", dir=scratch))
        (tree.code_dir / "banditsweep").symlink_to(tree.path)
    probe = ("import os, banditsweep, banditsweep.__main__, torch, mlflow; "
             "print(os.path.dirname(os.path.realpath(banditsweep.__file__)))")
    empty = Path(tempfile.mkdtemp(prefix="probe_", dir=scratch))
    out = subprocess.run([python, "-c", probe], cwd=empty, env=run_env(tree), capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"{tree.label}: cannot import banditsweep from {tree.path or 'the install'}:\n{out.stderr}")
    tree.package = out.stdout.strip().splitlines()[-1]
    if tree.path is not None and Path(tree.package) != tree.path:
        raise SystemExit(f"{tree.label}: the subprocess imports {tree.package}, not {tree.path}")
    git = subprocess.run(["git", "-C", tree.package, "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    dirty = subprocess.run(["git", "-C", tree.package, "status", "--porcelain", "--untracked-files=no"],
                           capture_output=True, text=True)
    tree.revision = (git.stdout.strip() or "?") + (" (modified)" if dirty.stdout.strip() else "")


# -- one run -------------------------------------------------------------------------------------


def sleep_spec(trials: int, seconds: float, cpus_per_trial: float) -> str:
    return (f"sweep: sleep_overhead\nhorizon: 50\nseeds: {trials}\n"
            f"environments:\n  - {{kind: synthetic, function: h1}}\n"
            f"algorithms:\n  - {{name: sleep, params: {{seconds: {seconds}}}}}\n"
            f"resources: {{cpus_per_trial: {cpus_per_trial}}}\nlog_every: 10\n")


def run_command(tree: Tree, python: str, spec: Path, workers: int, run_dir: Path, timeout: float) -> dict:
    command = [python, "-m", "banditsweep", "run", str(spec), "--results", str(run_dir / "results"),
               "--mlflow-uri", f"sqlite:///{run_dir / 'mlflow.db'}", "--max-workers", str(workers)]
    stdout, stderr = open(run_dir / "stdout.txt", "w"), open(run_dir / "stderr.txt", "w")
    began_epoch = time.time()
    began = time.perf_counter()
    process = subprocess.Popen(command, cwd=run_dir, env=run_env(tree), stdout=stdout, stderr=stderr,
                               start_new_session=True)
    try:
        rc = process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        raise SystemExit(f"{tree.label}: `{' '.join(command)}` ran over {timeout:.0f} s; output in {run_dir}")
    wall = time.perf_counter() - began
    ended_epoch = began_epoch + wall
    stdout.close()
    stderr.close()
    text = (run_dir / "stdout.txt").read_text()
    match = SUMMARY_LINE.search(text)
    if rc != 0 or match is None:
        tail = (run_dir / "stderr.txt").read_text()[-3000:]
        raise SystemExit(f"{tree.label}: `{' '.join(command)}` exited {rc}; output in {run_dir}\n{text[-2000:]}\n{tail}")
    finished, failed, seconds, used_workers = (int(match[1]), int(match[2]), float(match[3]), int(match[4]))
    if failed:
        raise SystemExit(f"{tree.label}: {failed} trials failed; see {run_dir}")
    return {"wall": wall, "cli_seconds": seconds, "finished": finished, "workers": used_workers,
            "began_epoch": began_epoch, "ended_epoch": ended_epoch}


def status_command(tree: Tree, python: str, seeds: int, run_dir: Path, timeout: float) -> dict:
    """``banditsweep status`` of a ``seeds``-seed spec: wall seconds and peak resident MiB."""
    spec = run_dir / "status_scale.yaml"
    spec.write_text(f"sweep: status_scale\nhorizon: 100\nseeds: {seeds}\n"
                    "environments:\n  - {kind: synthetic, function: h1, dim: 3}\nalgorithms:\n  - {name: random}\n")
    command = [python, "-m", "banditsweep", "status", str(spec), "--results", str(run_dir / "results")]
    began = time.perf_counter()
    with open(run_dir / "stdout.txt", "w") as stdout, open(run_dir / "stderr.txt", "w") as stderr:
        process = subprocess.Popen(command, cwd=run_dir, env=run_env(tree), stdout=stdout, stderr=stderr,
                                   start_new_session=True)
        deadline = time.monotonic() + timeout
        while (waited := os.wait4(process.pid, os.WNOHANG))[0] == 0:
            if time.monotonic() > deadline:
                os.killpg(process.pid, signal.SIGKILL)
                raise SystemExit(f"{tree.label}: `{' '.join(command)}` ran over {timeout:.0f} s")
            time.sleep(0.05)
    wall = time.perf_counter() - began
    _, status, usage = waited
    text = (run_dir / "stdout.txt").read_text()
    if os.waitstatus_to_exitcode(status) != 0 or f"{seeds} trials: 0 done" not in text:
        raise SystemExit(f"{tree.label}: `{' '.join(command)}` exited {os.waitstatus_to_exitcode(status)}:\n"
                         f"{text[-2000:]}\n{(run_dir / 'stderr.txt').read_text()[-2000:]}")
    return {"wall": wall, "peak_mib": usage.ru_maxrss / 1024}


# Ray's own floor, measured beside each repeat: what a script that only starts an embedded Ray (as the
# CLI does: loopback, no dashboard, workers started all at once), places ``actors`` empty actors of the sleep case's size, waits
# for them and stops Ray needs. Printed marks: epoch seconds after each step.
BARE_RAY = """
import os, sys, time
import ray
print("imported", time.time(), flush=True)
actors, cpus = int(sys.argv[1]), float(sys.argv[2])
os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
os.environ.setdefault("RAY_worker_maximum_startup_concurrency", "64")   # as workers.execution.ray_connection
from ray._private import ray_constants
ray_constants.ENABLE_RAY_CLUSTER = False
ray.init(address="local", include_dashboard=False, log_to_driver=False, _node_ip_address="127.0.0.1")
print("started", time.time(), flush=True)

@ray.remote
class Empty:
    def ready(self):
        return True

pool = [Empty.options(num_cpus=cpus).remote() for _ in range(actors)]
ray.get([actor.ready.remote() for actor in pool])
print("actors", time.time(), flush=True)
ray.shutdown()
print("stopped", time.time(), flush=True)
"""


def bare_ray(python: str, actors: int, cpus_per_actor: float, timeout: float) -> dict:
    """Ray's floor for the sleep case: seconds from the command's start to Ray started, to the
    actors ready (the floor of start-up), and from the last mark to the process's end (with
    ``ray.shutdown``: the floor of tear-down)."""
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS",)}
    env["RAY_USAGE_STATS_ENABLED"] = "0"
    began = time.time()
    done = subprocess.run([python, "-c", BARE_RAY, str(actors), str(cpus_per_actor)], capture_output=True, text=True,
                          env=env, timeout=timeout, start_new_session=True)
    ended = time.time()
    marks = dict(line.split() for line in done.stdout.splitlines() if len(line.split()) == 2)
    if done.returncode != 0 or set(marks) != {"imported", "started", "actors", "stopped"}:
        raise SystemExit(f"bare Ray script failed (exit {done.returncode}):\n{done.stderr[-2000:]}")
    marks = {key: float(value) for key, value in marks.items()}
    return {"bare_started": marks["started"] - began, "bare_actors": marks["actors"] - began,
            "bare_teardown": ended - marks["actors"]}


def mlflow_experiment_created(db: Path, name: str) -> float:
    """Epoch seconds when the sink created the sweep's MLflow experiment (NaN if unknown)."""
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as connection:
            row = connection.execute("SELECT creation_time FROM experiments WHERE name = ?", (name,)).fetchone()
    except sqlite3.Error:
        return math.nan
    return row[0] / 1000.0 if row and row[0] else math.nan


def mlflow_run_times(db: Path) -> dict[str, tuple[float, float]]:
    """trial id -> (child run start, end) in epoch seconds, from the MLflow SQLite store."""
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as connection:
            rows = connection.execute(
                "SELECT t.value, r.start_time, r.end_time FROM runs r JOIN tags t "
                "ON t.run_uuid = r.run_uuid AND t.key = 'trial_id' WHERE r.lifecycle_stage = 'active'").fetchall()
    except sqlite3.Error:
        return {}
    return {tid: (start / 1000.0, (end or 0) / 1000.0) for tid, start, end in rows if start}


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return math.nan
    position = q * (len(ordered) - 1)
    low, high = math.floor(position), math.ceil(position)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def epoch_seconds(column):
    """Epoch seconds from the trials table's ``finished_at``: a UTC timestamp column in this version,
    float seconds in earlier ones."""
    import pandas as pd

    if pd.api.types.is_datetime64_any_dtype(column):
        return (column - pd.Timestamp(0, tz="UTC")).dt.total_seconds()
    return column.astype(float)


def sleep_figures(tree: Tree, run_dir: Path, cmd: dict, trials: int, seconds: float, actors: int) -> dict:
    import pandas as pd

    table = pd.read_parquet(run_dir / "results" / "sleep_overhead" / "trials")
    if len(table) != trials or (table["status"] != "finished").any():
        raise SystemExit(f"{tree.label}: expected {trials} finished trials in {run_dir}, found {len(table)}")
    diag = pd.DataFrame([json.loads(text) for text in table["diagnostics"]])
    diag["trial_id"] = table["trial_id"].to_numpy()
    diag["finished_at"] = epoch_seconds(table["finished_at"]).to_numpy()
    wrong = set(diag["package"]) - {zlib.crc32(tree.package.encode())}   # the plugin records the path's CRC-32
    if wrong:
        raise SystemExit(f"{tree.label}: Ray workers imported {sorted(wrong)}, not {tree.package}")
    first, last = diag["clock_start"].min(), diag["clock_end"].max()
    minimum = trials * seconds / actors
    gaps = []
    for _, group in diag.sort_values("clock_start").groupby("pid"):
        gaps += (group["clock_start"].to_numpy()[1:] - group["clock_end"].to_numpy()[:-1]).tolist()
    first_per_actor = sorted(diag.groupby("pid")["clock_start"].min())
    runs = mlflow_run_times(run_dir / "mlflow.db")
    start_lag = [runs[t][0] - s for t, s in zip(diag["trial_id"], diag["clock_start"]) if t in runs]
    end_lag = [runs[t][1] - e for t, e in zip(diag["trial_id"], diag["clock_end"]) if t in runs and runs[t][1]]
    last_run_end = max((end for _, end in runs.values()), default=math.nan)
    return {
        "minimum": minimum,
        "span": last - first,
        "span_ratio": (last - first) / minimum,
        "command": cmd["wall"],
        "command_ratio": cmd["wall"] / minimum,
        "cli_seconds": cmd["cli_seconds"],
        "workers": cmd["workers"],
        "actors_seen": len(first_per_actor),
        "trial_seconds_median": float((diag["clock_end"] - diag["clock_start"]).median()),
        "startup": first - cmd["began_epoch"],
        "experiment_created": mlflow_experiment_created(run_dir / "mlflow.db", "sleep_overhead") - cmd["began_epoch"],
        "all_actors_started": first_per_actor[-1] - first,
        "teardown": cmd["ended_epoch"] - last,
        "gap_median": quantile(gaps, 0.5),
        "gap_p90": quantile(gaps, 0.9),
        "busy_fraction": float((diag["clock_end"] - diag["clock_start"]).sum()) / (len(first_per_actor) * (last - first)),
        "run_created_lag_median": quantile(start_lag, 0.5),
        "run_created_lag_max": max(start_lag, default=math.nan),
        "run_ended_lag_median": quantile(end_lag, 0.5),
        "run_ended_lag_max": max(end_lag, default=math.nan),
        "journal_lag_median": float((diag["finished_at"] - diag["clock_end"]).median()),
        "sink_done_after_last_trial": last_run_end - last,
    }


def quickstart_figures(run_dir: Path, cmd: dict) -> dict:
    """The sweep's and the command's time, and the trial phase: from the first trial's start
    (``finished_at - wall_seconds``) to the last trial recorded by the sink."""
    import pandas as pd

    (sweep_dir,) = [p for p in (run_dir / "results").iterdir() if p.is_dir()]
    table = pd.read_parquet(sweep_dir / "trials")
    finished_at = epoch_seconds(table["finished_at"])
    first_start = float((finished_at - table["wall_seconds"]).min())
    last_recorded = float(finished_at.max())
    return {"cli_seconds": cmd["cli_seconds"], "command": cmd["wall"], "workers": cmd["workers"],
            "startup": first_start - cmd["began_epoch"], "trial_phase": last_recorded - first_start,
            "teardown": cmd["ended_epoch"] - last_recorded, "trial_compute": float(table["wall_seconds"].sum()),
            "trials": len(table)}


# -- the table -----------------------------------------------------------------------------------


def median_of(results: list[RunResult], tree: str, case: str, key: str) -> float:
    values = [r.figures[key] for r in results if r.tree == tree and r.case == case and key in r.figures]
    return statistics.median(values) if values else math.nan


def fmt(value: float, digits: int = 2) -> str:
    return "–" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.{digits}f}"


def verdict(value: float, ok: bool) -> str:
    return f"{fmt(value)} {'✓' if ok else '✗'}" if not math.isnan(value) else "–"


def table(results: list[RunResult], trees: list[Tree], cases: list[str], args) -> str:
    labels = [t.label for t in trees]
    rows: list[tuple[str, str, list[str]]] = []

    def row(name: str, reference: str, values: list[str]) -> None:
        rows.append((name, reference, values))

    if "sleep" in cases:
        m = lambda key: [median_of(results, t, "sleep", key) for t in labels]  # noqa: E731
        minimum = args.trials * args.seconds / args.actors
        head = f"sleep: {args.trials} trials x {args.seconds:g} s on {args.actors} actors"
        row(f"{head}: actors used (CLI / seen)", str(args.actors),
            [f"{fmt(w, 0)} / {fmt(s, 0)}" for w, s in zip(m("workers"), m("actors_seen"))])
        row("sleep: span, first trial start → last trial end (s)", f"min {minimum:.1f}", [fmt(v, 1) for v in m("span")])
        row("sleep: span / minimum", f"≤ {SPAN_TARGET:.2f}", [verdict(v, v <= SPAN_TARGET) for v in m("span_ratio")])
        row("sleep: whole command (s)", f"min {minimum:.1f}", [fmt(v, 1) for v in m("command")])
        row("sleep: whole command / minimum", f"≤ {COMMAND_TARGET:.2f}",
            [verdict(v, v <= COMMAND_TARGET) for v in m("command_ratio")])
        row("sleep: CLI `in X s` (s)", "", [fmt(v, 1) for v in m("cli_seconds")])
        row("sleep: start-up, command start → first trial start (s)", "", [fmt(v, 1) for v in m("startup")])
        row("sleep: of which command start → MLflow experiment created (Ray, sink actor, new MLflow store) (s)", "",
            [fmt(v, 1) for v in m("experiment_created")])
        row("sleep: first trial start → last actor's first trial start (s)", "",
            [fmt(v, 1) for v in m("all_actors_started")])
        row("sleep: tear-down, last trial end → command end (s)", "", [fmt(v, 1) for v in m("teardown")])
        floor = {key: median_of(results, "bare", "bare_ray", key) for key in ("bare_started", "bare_actors",
                                                                            "bare_teardown")}
        if not math.isnan(floor["bare_actors"]):
            row(f"sleep: bare Ray, command start → Ray started / {args.actors} empty actors ready (s)", "",
                [f"{fmt(floor['bare_started'], 1)} / {fmt(floor['bare_actors'], 1)}"] * len(labels))
            row("sleep: start-up / bare Ray's (Ray started and actors ready)", "",
                [fmt(v / floor["bare_actors"]) for v in m("startup")])
            row("sleep: bare Ray, `ray.shutdown` and the process's exit (s)", "",
                [fmt(floor["bare_teardown"], 1)] * len(labels))
            row("sleep: tear-down / bare Ray's", "", [fmt(v / floor["bare_teardown"]) for v in m("teardown")])
        row("sleep: trial duration, median (s)", f"{args.seconds:g}", [fmt(v, 3) for v in m("trial_seconds_median")])
        row("sleep: actors busy (share of actor-time in the span)", "1.00", [fmt(v) for v in m("busy_fraction")])
        row("sleep: idle gap between trials on an actor, median / p90 (s)", "",
            [f"{fmt(a, 3)} / {fmt(b, 3)}" for a, b in zip(m("gap_median"), m("gap_p90"))])
        row("sleep: sink lag, MLflow run created after trial start, median / max (s)", "",
            [f"{fmt(a)} / {fmt(b)}" for a, b in zip(m("run_created_lag_median"), m("run_created_lag_max"))])
        row("sleep: sink lag, MLflow run ended after trial end, median / max (s)", "",
            [f"{fmt(a)} / {fmt(b)}" for a, b in zip(m("run_ended_lag_median"), m("run_ended_lag_max"))])
        row("sleep: sink lag, journal written after trial end, median (s)", "",
            [fmt(v) for v in m("journal_lag_median")])
    if "quickstart" in cases:
        q = lambda case, key: [median_of(results, t, case, key) for t in labels]  # noqa: E731
        for workers in (1, 2):
            case = f"quickstart_w{workers}"
            head = f"quickstart, --max-workers {workers}"
            row(f"{head}: CLI `in X s` (s)", "", [fmt(v, 1) for v in q(case, "cli_seconds")])
            row(f"{head}: whole command (s)", "", [fmt(v, 1) for v in q(case, "command")])
            row(f"{head}: start-up / trial phase / tear-down (s)", "",
                [f"{fmt(a, 1)} / {fmt(b, 1)} / {fmt(c, 1)}"
                 for a, b, c in zip(q(case, "startup"), q(case, "trial_phase"), q(case, "teardown"))])
        row("quickstart: the trials' own compute, sum of wall_seconds (s)", "",
            [fmt(v, 1) for v in q("quickstart_w1", "trial_compute")])
        for key, name, target in (("cli_seconds", "CLI `in X s`", True), ("command", "whole command", True),
                                  ("trial_phase", "trial phase only", False)):
            speedups = [a / b if b else math.nan for a, b in zip(q("quickstart_w1", key), q("quickstart_w2", key))]
            row(f"quickstart: speedup 2 vs 1 worker, {name}", f"≥ {SPEEDUP_TARGET:.1f}" if target else "",
                [verdict(v, v >= SPEEDUP_TARGET) if target else fmt(v) for v in speedups])
    if "status" in cases:
        row(f"status of {args.status_seeds:,} seeds: wall (s)", "",
            [fmt(median_of(results, t, "status", "wall"), 1) for t in labels])
        row(f"status of {args.status_seeds:,} seeds: peak memory (MiB)", "",
            [fmt(median_of(results, t, "status", "peak_mib"), 0) for t in labels])
        if len(labels) > 1:
            first = median_of(results, labels[0], "status", "wall")
            row(f"status: wall of {labels[0]} / wall", "",
                [fmt(first / median_of(results, t, "status", "wall")) for t in labels])
    header = "| figure | min / target | " + " | ".join(f"{t.label} ({t.revision})" for t in trees) + " |"
    lines = [header, "|" + "---|" * (2 + len(trees))]
    lines += [f"| {name} | {reference} | " + " | ".join(values) + " |" for name, reference, values in rows]
    return "\n".join(lines)


# -- main ----------------------------------------------------------------------------------------


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--code", action="append", default=[], metavar="LABEL=PATH",
                        help="a checkout of the project to measure (repeatable); default: the installed package")
    parser.add_argument("--python", default=str(DEFAULT_PYTHON if DEFAULT_PYTHON.exists() else sys.executable),
                        help="interpreter with the project's dependencies (default: %(default)s)")
    parser.add_argument("--cases", default="sleep,quickstart", help="comma-separated: sleep, quickstart, status")
    parser.add_argument("--status-seeds", type=int, default=100_000, help="status case: seeds of the spec (default 10^5)")
    parser.add_argument("--repeats", type=int, default=1, help="runs of each case per tree; medians reported")
    parser.add_argument("--trials", type=int, default=640, help="sleep case: trials (default 640)")
    parser.add_argument("--actors", type=int, default=16, help="sleep case: trial actors (default 16)")
    parser.add_argument("--seconds", type=float, default=0.5, help="sleep case: seconds per trial (default 0.5)")
    parser.add_argument("--cpus", type=float, default=None,
                        help="CPUs the embedded Ray will detect (default: this process's CPU affinity); "
                             "only used to set cpus_per_trial = CPUs / actors")
    parser.add_argument("--quickstart-spec", default=str(REPO / "sweeps" / "quickstart.yaml"),
                        help="spec of the quickstart case, the same for every tree (default: %(default)s)")
    parser.add_argument("--timeout", type=float, default=1800, help="seconds allowed per command")
    parser.add_argument("--scratch", default=None, help="where the temp dirs go (default: the system temp dir)")
    parser.add_argument("--keep", action="store_true", help="keep each run's folder (results, mlflow.db, output)")
    parser.add_argument("--json", default=None, help="also write every run's figures to this JSON file")
    args = parser.parse_args(argv)
    args.cases = [c.strip() for c in args.cases.split(",") if c.strip()]
    unknown = set(args.cases) - {"sleep", "quickstart", "status"}
    if unknown:
        parser.error(f"unknown case(s) {sorted(unknown)}; known: sleep, quickstart, status")
    return args


def loadavg() -> str:
    try:
        return Path("/proc/loadavg").read_text().strip()
    except OSError:
        return "unknown"


def main(argv=None) -> int:
    args = parse_args(argv)
    trees = []
    for item in args.code:
        label, sep, path = item.partition("=")
        if not sep or not label or not path:
            raise SystemExit(f"--code {item!r}: expected LABEL=PATH")
        path = Path(path).expanduser().resolve()
        # Any release's checkout: the package's root module and its project file naming it (module
        # paths inside the package move between releases).
        project = path / "pyproject.toml"
        if not (path / "__init__.py").exists() or not project.exists() or 'name = "banditsweep"' not in project.read_text():
            raise SystemExit(f"--code {item!r}: {path} is not a checkout of banditsweep")
        trees.append(Tree(label, path))
    if len({t.label for t in trees}) != len(trees):
        raise SystemExit("--code labels must differ")
    trees = trees or [Tree("installed", None)]
    scratch = Path(tempfile.mkdtemp(prefix="bs_overhead_", dir=args.scratch))
    cpus = args.cpus or len(os.sched_getaffinity(0))
    cpus_per_trial = min(1.0, math.floor(cpus / args.actors * 10_000) / 10_000)
    quickstart = Path(args.quickstart_spec).resolve()

    print(f"load average at start: {loadavg()}", flush=True)
    for tree in trees:
        prepare_tree(tree, args.python, scratch)
        print(f"tree {tree.label}: banditsweep from {tree.package} at {tree.revision}", file=sys.stderr, flush=True)

    plan = []  # (case, workers) in the order they run within a repeat
    if "sleep" in args.cases:
        plan.append(("sleep", args.actors))
    if "quickstart" in args.cases:
        plan += [("quickstart_w1", 1), ("quickstart_w2", 2)]
    if "status" in args.cases:
        plan.append(("status", 0))
    results: list[RunResult] = []
    started = time.time()
    for repeat in range(args.repeats):
        if "sleep" in args.cases:
            figures = bare_ray(args.python, args.actors, cpus_per_trial, args.timeout)
            results.append(RunResult("bare", "bare_ray", repeat, figures))
            shown = ", ".join(f"{k}={v:.3g}" for k, v in figures.items())
            print(f"[{time.time() - started:6.0f} s] bare Ray #{repeat + 1}: {shown}", file=sys.stderr, flush=True)
        for case, workers in plan:
            for tree in trees:
                run_dir = Path(tempfile.mkdtemp(prefix=f"{case}_{tree.label}_{repeat}_", dir=scratch))
                if case == "status":
                    figures = status_command(tree, args.python, args.status_seeds, run_dir, args.timeout)
                    results.append(RunResult(tree.label, case, repeat, figures))
                    print(f"[{time.time() - started:6.0f} s] {tree.label} status #{repeat + 1}: "
                          f"{figures['wall']:.1f} s, {figures['peak_mib']:.0f} MiB", file=sys.stderr, flush=True)
                    shutil.rmtree(run_dir, ignore_errors=True)
                    continue
                if case == "sleep":
                    spec = run_dir / "sleep_overhead.yaml"
                    spec.write_text(sleep_spec(args.trials, args.seconds, cpus_per_trial))
                else:
                    spec = quickstart
                cmd = run_command(tree, args.python, spec, workers, run_dir, args.timeout)
                if case == "sleep":
                    figures = sleep_figures(tree, run_dir, cmd, args.trials, args.seconds, args.actors)
                else:
                    figures = quickstart_figures(run_dir, cmd)
                results.append(RunResult(tree.label, case, repeat, figures))
                shown = ", ".join(f"{k}={v:.3g}" for k, v in figures.items())
                print(f"[{time.time() - started:6.0f} s] {tree.label} {case} #{repeat + 1}: {shown}",
                      file=sys.stderr, flush=True)
                if not args.keep:
                    shutil.rmtree(run_dir, ignore_errors=True)
    if args.json:
        Path(args.json).write_text(json.dumps([r.__dict__ for r in results], indent=1))
    print(f"\nSweep overhead ({args.repeats} run(s) per case and tree, medians; speedups are ratios of medians; "
          f"cpus_per_trial {cpus_per_trial:g} on {cpus:g} CPUs)\n")
    print(table(results, trees, args.cases, args))
    print(f"\nload average at end: {loadavg()}")
    if not args.keep:
        shutil.rmtree(scratch, ignore_errors=True)
    else:
        print(f"run folders kept under {scratch}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
