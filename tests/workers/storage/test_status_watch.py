"""Watching a sweep: `banditsweep status` of a sweep that runs now (in another thread here, as in
another process or on a cluster's driver) lists its running trials with their round of T and their
last progress, from the `running.json` its driver rewrites; a file left by a driver that is gone
is called stale, one that is not what a driver writes is ignored with one line. And `status` /
`report` without the `--set` a sweep was run with show the trials the store holds and name the
overrides that planned them."""

import json
import os
import re
import shutil
import threading
import time
import types

import pytest
import yaml
from module_results import command, results_folder
from store_builders import write_spec_results

from banditsweep.sweeps.cli.main import main
from banditsweep.sweeps.spec.model import load_sweep

ENVIRONMENTS = [{"kind": "synthetic", "function": "h1", "dim": 3}]


def _status(capsys, *extra) -> tuple[int, str, str]:
    code = main(["status", "watch.yaml", *extra])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _heartbeat(path):
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


@pytest.fixture(scope="module")
def watched(tmp_path_factory, shared_ray_session):
    """A sweep of two slow trials run once for the module's tests below (in another thread), with
    `status` of it while a trial is part way (what running.json said then is kept), and after."""
    shared_ray_session.ensure()
    folder = tmp_path_factory.mktemp("watch")
    horizon = 400   # 400 rounds of 20 ms: 8 s a trial, two trials at once
    spec = {"sweep": "watch", "horizon": horizon, "seeds": 2, "log_every": 10, "environments": ENVIRONMENTS,
            "algorithms": [{"name": "slow_random", "params": {"pause": 0.02}}]}
    seen = types.SimpleNamespace(horizon=horizon, codes=[])
    with results_folder(folder, plugins=True):
        (folder / "watch.yaml").write_text(yaml.safe_dump(spec))
        # main, not module_results.command: the run's thread prints wherever the status of this one
        # is being kept at the moment, as a terminal shows them both.
        run = threading.Thread(target=lambda: seen.codes.append(
            main(["run", "watch.yaml", "--no-progress", "--sink", "none", "--max-workers", "2"])))
        run.start()
        try:
            path = folder / "results" / "watch" / "running.json"
            deadline = time.monotonic() + 180
            while time.monotonic() < deadline and run.is_alive():
                beat = _heartbeat(path)
                if beat and any(0 < trial["round"] < horizon for trial in beat["trials"]):
                    break
                time.sleep(0.1)
            else:
                pytest.fail(f"no progress in running.json: {_heartbeat(path)}")
            seen.beat = beat
            seen.during = command("status", "watch.yaml")
        finally:
            run.join(300)
        seen.after = command("status", "watch.yaml")
    return seen


def test_status_of_a_running_sweep_lists_each_running_trial_with_its_round(watched):
    code, out, err = watched.during
    horizon = watched.horizon
    assert code == 0, err
    assert f"running: {watched.beat['running']} (driver pid {os.getpid()} on host " in out
    rounds = [(int(r), int(t)) for r, t in re.findall(r"\| seed \d: round (\d+)/(\d+) on \S+, last progress \d+ s ago", out)]
    assert rounds and all(t == horizon for _, t in rounds)
    assert any(0 < r < horizon for r, _ in rounds), out
    assert re.search(r"watch: 2 trials: \d done, 0 failed, [12] running, \d pending", out), out


def test_status_after_the_run_names_the_last_run_and_how_it_ended(watched):
    assert watched.codes == [0]
    code, out, _ = watched.after
    assert code == 0
    assert "watch: 2 trials: 2 done, 0 failed, 0 pending" in out
    assert re.search(r"running: none \(the last run, driver pid \d+ on host \S+, ended \d+ s ago: FINISHED\)", out)
    assert not re.search(r"round \d+/", out) and "| running |" not in out


def _live_file(tmp_path, **changes) -> tuple[str, dict]:
    """A sweep folder whose running.json a driver (pid 4242 on host node-7) wrote just now: one trial
    of the spec at round 30 of 100."""
    spec = {"sweep": "watch", "horizon": 100, "seeds": 2, "environments": ENVIRONMENTS,
            "algorithms": [{"name": "random"}]}
    (tmp_path / "watch.yaml").write_text(yaml.safe_dump(spec))
    trial = load_sweep(tmp_path / "watch.yaml").trials[0]
    now = time.time()
    content = {"format": 1, "pid": 4242, "host": "node-7", "started_at": now - 60, "written_at": now - 1,
               "ended_at": None, "status": "RUNNING", "running": 1, "done": 0, "failed": 0, "total": 2,
               "trials": [{"trial_id": trial.trial_id, "run_name": trial.run_name, "round": 30, "horizon": 100,
                           "updated_at": now - 5, "node": "10.0.0.7", "batch": 1, "batch_size": 1}]}
    content.update(changes)
    folder = tmp_path / "results" / "watch"
    folder.mkdir(parents=True)
    return trial.run_name, content


def _write(tmp_path, content) -> None:
    path = tmp_path / "results" / "watch" / "running.json"
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content if isinstance(content, str) else json.dumps(content))


def test_a_fresh_running_file_is_shown_and_a_stale_one_is_called_stale(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    name, content = _live_file(tmp_path)
    _write(tmp_path, content)
    code, out, err = _status(capsys)
    assert code == 0 and not err
    assert re.search(r"running: 1 \(driver pid 4242 on host node-7, updated [0-9] s ago; this run: 0 of 2 done, "
                     r"0 failed\)", out), out
    assert re.search(rf"  {re.escape(name)}: round 30/100 on 10\.0\.0\.7, last progress [5-9] s ago", out), out
    assert "watch: 2 trials: 0 done, 0 failed, 1 running, 1 pending" in out

    content["written_at"] = time.time() - 600   # a driver killed 10 minutes ago
    _write(tmp_path, content)
    code, out, err = _status(capsys)
    assert code == 0
    assert err.strip() == ("warning: running.json: the run's driver pid 4242 on host node-7 last wrote 10 min ago "
                           "(a live one writes every few seconds; over 60 s): it is probably gone (killed, or its "
                           "machine lost); its 1 trial(s) listed as running are not counted as running")
    assert "watch: 2 trials: 0 done, 0 failed, 2 pending" in out and "round 30" not in out


@pytest.mark.parametrize("damage, why", [
    (b"{\"format\": 1, \"pid\": 42", "not JSON"),
    ("[1, 2]", "expected a JSON object, got list"),
    (b"\xff\xfe\x00garbage", "not JSON"),
    ({"format": 2}, "format: expected 1, got 2"),
    ({"pid": "4242; rm -rf /"}, "pid: expected a whole number, got '4242; rm -rf /'"),
    ({"written_at": float("nan")}, "NaN is not a JSON number"),
    ({"written_at": 4e12}, "written_at lies 399"),   # some 126,000 years ahead
    ({"trials": [{"trial_id": "a", "round": 500, "horizon": 100, "updated_at": 1.0}]},
     "trials: round 500 beyond the horizon 100 (trial a)"),
    ({"trials": "everything"}, "trials: expected a list"),
    ({"trials": [[1, 2]]}, "trials: expected objects, got [1, 2]"),
    ("1" * 10, "expected a JSON object, got int"),
    ("[" * 100000, "maximum recursion depth exceeded"),
])
def test_a_malformed_running_file_is_ignored_with_one_line(tmp_path, monkeypatch, capsys, damage, why):
    monkeypatch.chdir(tmp_path)
    _, content = _live_file(tmp_path)
    if isinstance(damage, dict):
        content.update(damage)
        damage = json.dumps(content)
    _write(tmp_path, damage)
    code, out, err = _status(capsys)
    path = tmp_path / "results" / "watch" / "running.json"
    assert code == 0
    assert len(err.strip().splitlines()) == 1, err
    assert err.startswith(f"warning: {path}: ") and why in err and err.rstrip().endswith(
        "; ignored (not a run's progress file)"), err
    assert "watch: 2 trials: 0 done, 0 failed, 2 pending" in out and "running:" not in out


def test_terminal_control_characters_in_the_running_file_are_not_printed(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    _, content = _live_file(tmp_path, host="evil\x1b[2J\x1b[31mhost\nnext line")
    content["trials"][0]["run_name"] = "name\x1b]0;title\x07 | x"
    _write(tmp_path, content)
    code, out, err = _status(capsys)
    assert code == 0 and not err
    assert "\x1b" not in out and "\x07" not in out
    assert "driver pid 4242 on host evil [2J [31mhost next line," in out


def test_a_running_file_that_is_a_folder_is_ignored(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    _live_file(tmp_path)
    (tmp_path / "results" / "watch" / "running.json").mkdir()
    code, out, err = _status(capsys)
    assert code == 0
    assert err.strip().endswith("running.json: not a regular file; ignored")


NOTED = {"sweep": "watch", "horizon": 1000, "seeds": 5, "environments": ENVIRONMENTS,
         "algorithms": [{"name": "random"}, {"name": "linucb", "grid": {"nu": [0.1, 1.0]}}]}
FIRST = ("horizon=20", "seeds=2")
SECOND = ("horizon=10", "seeds=1")


@pytest.fixture
def noted(tmp_path, monkeypatch):
    """The store of NOTED run with --set horizon=20 --set seeds=2 (6 trials), the run noted as `run`
    notes it (tests/workers/execution/test_end_to_end.py checks that it does), written directly."""
    monkeypatch.chdir(tmp_path)
    write_spec_results(tmp_path, NOTED, name="watch.yaml", overrides=FIRST, note_run=True)
    return tmp_path / "results" / "watch"


def test_status_without_the_set_of_the_run_shows_its_trials_and_names_the_set(noted, capsys):
    code, out, err = _status(capsys)
    assert code == 0, err
    assert out.startswith("note: the spec's trials have no results here; showing the 6 trials of the run with "
                          "--set horizon=20 --set seeds=2 (6 finished); pass --set horizon=20 --set seeds=2 to "
                          "select it explicitly\n")
    assert "watch: 6 trials: 6 done, 0 failed, 0 pending" in out
    assert "curves 120 rows: 6 of 6 finished trials have every round" in out


def test_report_without_the_set_of_the_run_reports_its_trials_and_names_the_set(noted, capsys):
    code = main(["report", "watch.yaml"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert "showing the 6 trials of the run with --set horizon=20 --set seeds=2" in captured.out
    assert "Mean final cumulative regret (watch, 6 finished trials):" in captured.out


def test_status_with_a_set_that_planned_nothing_run_shows_the_runs_trials_and_says_what_was_asked(noted, capsys):
    code, out, _ = _status(capsys, "--set", "seeds=3")
    assert code == 0
    assert out.startswith("note: the trials planned with --set seeds=3 have no results here; showing the 6 trials "
                          "of the run with --set horizon=20 --set seeds=2")


def test_a_store_without_a_readable_run_note_is_matched_by_its_trials_records(noted, capsys):
    """A store written before runs were noted (a run record unreadable): the trial records say which
    horizon and seeds."""
    runs = noted / ".runs"
    shutil.rmtree(runs)
    runs.mkdir()
    (runs / "run-1.json").write_text("{not json")
    code, out, err = _status(capsys)
    assert code == 0
    assert err.startswith(f"warning: {runs / 'run-1.json'}: not JSON (") and len(err.splitlines()) == 1
    assert out.startswith("note: the spec's trials have no results here; showing the 6 trials of the run with "
                          "--set horizon=20 --set seeds=2 (as its trials' records say) (6 finished)")
    assert "watch: 6 trials: 6 done, 0 failed, 0 pending" in out


def test_of_two_runs_with_other_sets_the_latest_is_shown_and_the_other_named(noted, tmp_path, capsys):
    write_spec_results(tmp_path, NOTED, name="watch.yaml", overrides=SECOND, note_run=True)
    code, out, _ = _status(capsys)
    assert code == 0
    assert out.startswith("note: the spec's trials have no results here; showing the 3 trials of the run with "
                          "--set horizon=10 --set seeds=1 (3 finished); pass --set horizon=10 --set seeds=1 to select "
                          "it explicitly\nnote: the store also holds the run with --set horizon=20 --set seeds=2 "
                          "(6 finished); shown: the latest run's\n")
    assert "watch: 3 trials: 3 done, 0 failed, 0 pending" in out


def test_the_set_of_an_earlier_run_selects_it_and_the_note_points_at_the_other_runs_trials(noted, tmp_path, capsys):
    write_spec_results(tmp_path, NOTED, name="watch.yaml", overrides=SECOND, note_run=True)
    code, out, _ = _status(capsys, "--set", "horizon=20", "--set", "seeds=2")
    assert code == 0
    assert "watch: 6 trials: 6 done, 0 failed, 0 pending" in out
    assert ("note: the store also holds 3 finished trials of the run with --set horizon=10 --set seeds=1 not shown "
            "here; pass --set horizon=10 --set seeds=1 to see them") in out


@pytest.mark.parametrize("unplaced, said", [(0, "placed, still starting"), (2, "no node can place them yet")])
def test_run_says_whether_the_actors_it_waits_for_are_starting_or_have_no_node(unplaced, said, monkeypatch, capsys):
    """Actors placed and still starting (a new worker process each) are not called unplaceable."""
    from banditsweep.sweeps.cli.commands import progress as display_module
    from banditsweep.workers.execution.run_values import Progress

    monkeypatch.setattr(display_module, "WAIT_NOTICE_SECONDS", 0.0)
    display = display_module.ProgressDisplay(8, "waits", bar=False)
    display.show(Progress(total=8, waiting_actors=2, unplaced_actors=unplaced))
    time.sleep(0.01)
    display.show(Progress(total=8, waiting_actors=2, unplaced_actors=unplaced))
    display.close()
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("waiting for")]
    assert lines == [f"waiting for 2 CPU actor(s): {said}" + ("" if unplaced else " (each is a new worker process)")]
