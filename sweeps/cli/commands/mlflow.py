"""``banditsweep sync-mlflow SPEC`` (bring MLflow up to date with the Parquet results) and
``banditsweep ui SPEC`` (the MLflow UI of the sweep's store, on loopback)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request

from banditsweep.sweeps.events import say
from banditsweep.sweeps.cli.options import SweepRequest
from banditsweep.sweeps.cli.commands import EXIT_FAILED_TRIALS
from banditsweep.sweeps.cli.commands.arguments import results_root, sink_options, tracking_uri
from banditsweep.sweeps.cli.commands.shared import store_of
from banditsweep.sweeps.spec.model import Sweep
from banditsweep.workers import experiment_of
from banditsweep.workers import catch_up
from banditsweep.workers import MLFLOW_SINK, SinkContext
from banditsweep.workers import check_tracking_server, redacted


def sync(args: SweepRequest, sweep: Sweep) -> int:
    """Rebuild the MLflow runs the Parquet results have and MLflow lacks (idempotent)."""
    uri = tracking_uri(args)
    check_tracking_server(uri)
    store = store_of(args, sweep)
    with store.exclusive():
        caught = catch_up(store, [MLFLOW_SINK], SinkContext(sweep.name, str(results_root(args)), command="sync-mlflow",
                                                            sink_options=sink_options(args, sweep)))
    if not caught.sinks:
        say(f"error: {caught.warnings[0]}", file=sys.stderr)
        return EXIT_FAILED_TRIALS
    for warning in caught.warnings:
        say(f"warning: {warning}", file=sys.stderr)
    say(f"{sweep.name}: {caught.trials} trials in the Parquet results; {caught.rebuilt_runs} MLflow runs "
          f"rebuilt, {caught.deleted_runs} stale runs deleted" + "".join(f"; {note}" for note in caught.notes))
    return 0


def ui(args: SweepRequest, sweep: Sweep) -> int:
    """Start ``mlflow ui`` on loopback for the sweep's tracking store, and say where to look once it
    answers (MLflow's server takes seconds to a minute to start: an address printed earlier would
    not open)."""
    uri = tracking_uri(args)
    if uri.startswith(("http://", "https://")):
        say(f"{sweep.name}: the tracking server at {redacted(uri)} serves the UI itself: open {redacted(uri)}")
        return 0
    url = f"http://127.0.0.1:{args.port}"
    say(f"{sweep.name}: starting the MLflow UI of {redacted(uri)} on {url} (MLflow's server takes a while to "
        "start; its address follows once it answers)", flush=True)
    experiment, note = experiment_of(uri, sweep.name)
    if note:
        say(f"warning: {note}", file=sys.stderr)
    where = f"{url}/#/experiments/{experiment}/runs" if experiment else url
    # One worker process: a UI for one user needs no more, and uvicorn's supervisor of several kills a
    # worker that is slow to answer its health check, over and over on a loaded machine (the UI never up).
    server = subprocess.Popen([sys.executable, "-m", "mlflow", "ui", "--backend-store-uri", uri,
                               "--host", "127.0.0.1", "--port", str(args.port), "--workers", "1"],
                              start_new_session=True)
    try:
        if not _wait_until_it_answers(server, url):
            say(f"error: the MLflow UI ended before it answered on {url} (exit code {server.returncode}; is the "
                "port taken? --port chooses another)", file=sys.stderr)
            return server.returncode or 1
        say(f"{sweep.name}: MLflow UI of {redacted(uri)} at {where} (the \"Model training\" view shows the "
            "regret curves; runs with the same `group` tag are the seeds of one cell). Ctrl-C stops it.", flush=True)
        return server.wait()
    except KeyboardInterrupt:   # Ctrl-C or SIGTERM: the way to stop the UI
        say(f"{sweep.name}: MLflow UI stopped", file=sys.stderr)
        return 0
    finally:
        _end_group(server)


# How often `ui` asks whether the server answers, and how often it says that it is still starting.
POLL_SECONDS = 0.5
STILL_STARTING_SECONDS = 30.0


def _wait_until_it_answers(server: subprocess.Popen, url: str) -> bool:
    """True once the server answers its health check; False if it ends first."""
    direct = urllib.request.build_opener(urllib.request.ProxyHandler({}))   # loopback: never through a proxy
    started = said = time.monotonic()
    while server.poll() is None:
        try:
            direct.open(f"{url}/health", timeout=2).close()
            return True
        except urllib.error.HTTPError:   # an answer all the same
            return True
        except OSError:   # not listening yet (refused), or not answering yet (timeout)
            pass
        if time.monotonic() - said >= STILL_STARTING_SECONDS:
            said = time.monotonic()
            say(f"still starting ({said - started:.0f} s)", flush=True)
        time.sleep(POLL_SECONDS)
    return False


def _end_group(server: subprocess.Popen, grace: float = 15.0) -> None:
    """End the UI server and the workers it started (its own process group, nothing else): SIGTERM,
    then SIGKILL if it is still there after ``grace`` seconds (a server still importing MLflow on a
    loaded machine does not answer SIGTERM for a long while)."""
    if server.poll() is not None:
        return
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 30.0)):
        try:
            os.killpg(server.pid, sig)
        except ProcessLookupError:
            return
        try:
            server.wait(timeout=wait)
        except subprocess.TimeoutExpired:
            continue
        try:   # the server is gone: a worker it left behind in its group goes too
            os.killpg(server.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        return
