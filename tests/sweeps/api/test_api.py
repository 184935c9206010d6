"""banditsweep from Python (sweeps.api.functions): run, plan and status with typed results, a policy class
defined in ``__main__`` (a notebook's cells, here exec'd as IPython runs a cell: its source in
linecache under the cell's file name) registered and shipped by value to the Ray workers, its code
identity digested from that source, its checkpoints resumed on a fresh worker."""

import contextlib
import json
import linecache
import os
import textwrap
import types

import pytest
import yaml

import banditsweep
from banditsweep.core.engine.trial import run_trials
from banditsweep.sweeps.cli.main import main
from banditsweep.sweeps.spec.errors import SpecError
from banditsweep.workers import InputError, code_of
from banditsweep.workers.provenance import shipped

CELL = textwrap.dedent('''
    import os
    from pathlib import Path

    import numpy as np
    from pydantic import Field

    from banditsweep.core.engine.contracts import Config, Decision, Policy


    class GreedyParams(Config):
        epsilon: float = Field(0.1, ge=0.0, le=1.0, description="exploration probability")
        crash_at: int = Field(0, ge=0, description="kill the worker at this round, once (0: never)")


    class EpsGreedy(Policy):
        """epsilon-greedy on each arm's mean reward (contexts ignored)."""

        Params = GreedyParams

        def __init__(self, params, problem, rng, device="cpu"):
            super().__init__(params, problem, rng, device)
            self.counts = np.zeros(problem.num_arms)
            self.sums = np.zeros(problem.num_arms)

        def select(self, t, contexts):
            markers = os.environ.get("BANDITSWEEP_TEST_MARKERS")   # set on the shared Ray's workers only
            if t == self.params.crash_at and markers and not (Path(markers) / "eps_greedy.crashed").exists():
                (Path(markers) / "eps_greedy.crashed").touch()
                os._exit(1)   # a preempted worker in the middle of the trial
            means = self.sums / np.maximum(self.counts, 1)
            if self.rng.random() < self.params.epsilon:
                return Decision(arm=int(self.rng.integers(self.problem.num_arms)), scores=means)
            return Decision(arm=int(np.argmax(means)), scores=means)

        def update(self, t, contexts, arm, reward):
            self.counts[arm] += 1
            self.sums[arm] += reward
''')

SPEC = {"sweep": "notebook", "horizon": 30, "seeds": 2, "checkpoint_every": 10, "log_every": 10,
        "environments": [{"kind": "synthetic", "function": "h1", "dim": 5}],
        "algorithms": [{"name": "eps_greedy", "params": {"crash_at": 15}, "label": "EpsGreedy"},
                       {"name": "linucb", "label": "LinUCB"}]}


def run_cell(source: str, name: str = "/tmp/ipykernel_0/cell_1.py", keep_source: bool = True) -> dict:
    """``source`` run as IPython runs a notebook cell: in ``__main__``'s namespace, its text kept in
    linecache under the cell's file name (without ``keep_source``: as exec of a string, no source)."""
    if keep_source:
        linecache.cache[name] = (len(source), None, source.splitlines(keepends=True), name)
    namespace = {"__name__": "__main__"}
    exec(compile(source, name if keep_source else "<string>", "exec"), namespace)
    return namespace


@contextlib.contextmanager
def _registrations_undone():
    """The registrations made inside undone afterwards (they would travel with every later run)."""
    from banditsweep.core.engine import registry
    from banditsweep.workers.provenance import code_identity

    before, algorithms = dict(shipped._SHIPPED), dict(registry._ALGORITHMS)
    sources = {module: dict(entries) for module, entries in code_identity._SHIPPED_SOURCES.items()}
    try:
        yield
    finally:
        shipped._SHIPPED.clear()
        shipped._SHIPPED.update(before)
        registry._ALGORITHMS.clear()
        registry._ALGORITHMS.update(algorithms)
        code_identity._SHIPPED_SOURCES.clear()
        code_identity._SHIPPED_SOURCES.update(sources)
        code_identity._shipped_version[0] += 1


@pytest.fixture
def registered():
    """The test's registrations undone afterwards (they would travel with every later run)."""
    with _registrations_undone():
        yield


def test_a_class_without_source_is_recorded_unknown(registered):
    cell = run_cell(CELL, keep_source=False)
    banditsweep.register_algorithm("eps_greedy", cell["EpsGreedy"])
    sweep = banditsweep.plan(SPEC, only={"algorithm": "eps_greedy", "seed": 0}, probe_seconds=0.2, quiet=True)
    assert sweep.trials == 1 and list(sweep.cells["algorithm"]) == ["EpsGreedy"]
    from banditsweep.sweeps.spec.model import parse_sweep

    [trial] = parse_sweep(SPEC).trials[:1]
    parts = code_of(trial.spec).parts
    assert parts["__main__:EpsGreedy"].startswith("unknown: no source")
    assert "__main__.py" not in parts


def test_a_shipped_class_is_found_by_a_checkpoint_where_its_module_lacks_it(registered):
    """A worker's ``__main__`` is Ray's: a checkpoint names the class by module and name, and the
    registered class is what it finds (here, pytest's ``__main__`` lacks it likewise)."""
    import numpy as np

    from banditsweep.core.engine.contracts import Problem
    from banditsweep.core.engine.state_codec import decode_state, encode_state

    cell = run_cell(CELL)
    banditsweep.register_algorithm("eps_greedy", cell["EpsGreedy"])
    params = cell.pop("GreedyParams")   # as on a worker: cloudpickle keeps only the globals the methods use
    policy = cell["EpsGreedy"](params(), Problem(3, 2, 10), np.random.default_rng(0))
    policy.update(1, None, 2, 0.5)
    restored = decode_state(encode_state(policy))
    assert type(restored) is cell["EpsGreedy"] and list(restored.sums) == [0.0, 0.0, 0.5]
    assert type(restored.params) is params   # found as the class's Params


def test_the_commands_errors_are_raised_with_their_messages(tmp_path, capsys, monkeypatch, registered):
    monkeypatch.chdir(tmp_path)
    bad = {**SPEC, "algorithms": [{"name": "linucb", "grid": {"nu": [0.1, 0.1]}}]}
    (tmp_path / "bad.yaml").write_text(yaml.safe_dump(bad))
    assert main(["plan", "bad.yaml"]) == 2
    said = capsys.readouterr().err.strip()
    with pytest.raises(SpecError) as raised:
        banditsweep.plan("bad.yaml")
    assert said == f"error: {raised.value}" and "bad.yaml" in said
    with pytest.raises(SpecError, match=r"^<spec>: "):   # the same, given as data
        banditsweep.plan(bad)
    with pytest.raises(SpecError, match=r"^<spec>: "):   # ... and as YAML text
        banditsweep.status(yaml.safe_dump(bad))
    with pytest.raises(InputError, match="max_workers: 0 is not allowed: give a whole number from 1 to"):
        banditsweep.run(SPEC, max_workers=0)
    with pytest.raises(InputError, match="exclude each other"):
        banditsweep.run(SPEC, keep_changed=True, rerun_changed=True)
    with pytest.raises(SpecError, match="--set: horizonn: cannot be overridden"):
        banditsweep.plan(SPEC, overrides={"horizonn": 5})
    with pytest.raises(ValueError, match="banditsweep's own algorithm"):
        banditsweep.register_algorithm("linucb", run_cell(CELL)["EpsGreedy"])
    with pytest.raises(TypeError, match="not a subclass"):
        banditsweep.register_algorithm("mine", dict)
    assert not os.path.exists(tmp_path / "results" / "notebook")   # nothing written


def test_the_python_page_runs_as_written(shared_ray, registered, repo, tmp_path, monkeypatch):
    monkeypatch.chdir(repo)   # its spec path is the repository's
    page = (repo / "docs" / "python.md").read_text()
    blocks = [block.split("```", 1)[0] for block in page.split("```python\n")[1:]]
    assert len(blocks) == 2
    names = {"__name__": "__main__"}
    for number, block in enumerate(blocks):   # as a notebook's cells: each one's source kept
        name = f"/tmp/ipykernel_0/readme_{number}.py"
        linecache.cache[name] = (len(block), None, block.splitlines(keepends=True), name)
        exec(compile(block, name, "exec"), names)
    result = names["result"]
    assert (result.total, result.finished, result.failed) == (9, 9, 0)
    ucb = result.trials[result.trials["algorithm"] == "ucb1"]
    assert len(ucb) == 6 and not json.loads(ucb["code"].iloc[0])["__main__.py"].startswith("unknown")
    assert set(result.statistics.cells["algorithm"]) == {"ucb1", "linucb"}
    assert len(names["figure"].axes) == 1
    cost = names["cost"]
    assert cost.trials == 2 * 7 * 2 and list(cost.cells.columns[:4]) == ["algorithm", "environment", "horizon", "trials"]
    assert set(cost.cells["horizon"]) == {200} and cost.wall_seconds > 0
    where = names["where"]
    assert (where.done, where.total, where.consistent) == (6, 6, True)


MINE = {"sweep": "mine", "horizon": 30, "seeds": 2, "environments": [{"kind": "synthetic", "function": "h1"}],
        "algorithms": [{"name": "eps_greedy"}]}


def test_plan_probes_a_notebook_policy(registered):
    """A policy of the user's own is timed like banditsweep's own: a probe of its rounds here."""
    banditsweep.register_algorithm("eps_greedy", run_cell(CELL)["EpsGreedy"])
    cost = banditsweep.plan(MINE, probe_seconds=0.2, quiet=True)
    [source] = cost.cells["source"]
    assert source == "probe (30 of 30 rounds)"
    assert cost.lines[-1].endswith("Ray's start and stop about 20 s") and cost.wall_seconds >= 20


def test_a_notebook_policy_is_said_not_estimated_by_run_and_found_done(shared_ray, registered, tmp_path):
    """`run` does not time a policy of the user's own before it starts and says so (it used to say
    "about 0 s"); a second run says every trial is already finished, and where."""
    banditsweep.register_algorithm("eps_greedy", run_cell(CELL)["EpsGreedy"])
    spec = MINE
    result = banditsweep.run(spec, sinks="none", progress=False, quiet=True)
    [estimate] = [text for _, text in result.output.lines if text.startswith("estimate:")]
    assert estimate == ("estimate: none: 1 cell(s) not estimated: not probed (not one of banditsweep's algorithms: "
                        "`plan` probes it); Ray's start and stop alone take about 20 s")
    folder = tmp_path / "results" / "mine"
    assert result.summary.startswith("2 trials finished, 0 failed in ") and result.summary.endswith(f"results in {folder}")

    again = banditsweep.run(spec, sinks="none", progress=False, quiet=True)
    assert (again.ran, again.finished, again.total) == (0, 0, 2)
    assert again.summary == str(again) == f"all 2 trials of the spec are already finished in {folder}"
    assert f"nothing to run: all 2 trials of the spec are already finished in {folder}" in [
        text for _, text in again.output.lines]


# ---- a notebook's policy run once on the workers, and what its run holds ----------------------------
# The tests below share one run (the fixture is first asked for here, after the tests above, so that
# they see no registration of it).

@pytest.fixture(scope="module")
def notebook_run(shared_ray_session, tmp_path_factory):
    """SPEC run once for the tests below on the shared Ray, the cell's policy registered as a notebook
    registers it (until the module's tests are done): the trial with ``crash_at: 15`` loses its worker
    at round 15, once, and resumes from its checkpoint of round 10. The cell's namespace, the run's
    result, and the folder its results root (``results/``) is in."""
    shared_ray_session.ensure()
    folder = tmp_path_factory.mktemp("notebook")
    with _registrations_undone():
        with pytest.MonkeyPatch.context() as monkeypatch:
            monkeypatch.setenv("BANDITSWEEP_RESULTS", str(folder / "results"))
            monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{folder}/mlflow.db")
            cell = run_cell(CELL)
            banditsweep.register_algorithm("eps_greedy", cell["EpsGreedy"])
            result = banditsweep.run(SPEC, sinks="none", progress=False)
        yield types.SimpleNamespace(cell=cell, result=result, folder=folder)


def _trials(result):
    """The run's trials by id, and those of the notebook's policy."""
    trials = result.trials.set_index("trial_id")
    return trials, trials[trials["label"] == "EpsGreedy"]


def test_a_notebook_policy_runs_on_the_workers(notebook_run):
    result, folder = notebook_run.result, notebook_run.folder
    assert notebook_run.cell["EpsGreedy"].__module__ == "__main__"
    assert isinstance(result, banditsweep.sweeps.api.functions.RunResult)
    assert (result.total, result.ran, result.finished, result.failed, result.exit_code) == (4, 4, 4, 0, 0)
    assert result.folder == folder / "results" / "notebook" and result.ok
    trials, _ = _trials(result)
    assert set(trials["label"]) == {"EpsGreedy", "LinUCB"} and (trials["status"] == "finished").all()
    curves = result.curves
    assert len(curves) == 4 * 30 and set(curves["trial_id"]) == set(trials.index)


def test_a_notebook_policys_numbers_are_its_own(notebook_run):
    """Each trial's final regret is the same trial run here, in core, also the one whose worker died at
    round 15 and that resumed from its checkpoint of round 10."""
    result = notebook_run.result
    trials, _ = _trials(result)
    for planned in result._planned.trials:
        [direct] = run_trials([planned.spec])
        assert trials.loc[planned.trial_id, "final_regret"] == direct.final_regret


def test_a_notebook_policys_trial_resumes_from_its_checkpoint_on_a_fresh_worker(notebook_run):
    trials, custom = _trials(notebook_run.result)
    assert sorted(custom["attempts"]) == [1, 2] and "diag_checkpoint_rejected" not in trials
    assert sorted(custom["diag_resumed_from_round"].fillna(0)) == [0.0, 11.0]


def test_a_notebook_policys_code_is_digested_from_the_cells_source(notebook_run):
    """The same on the worker as here."""
    result = notebook_run.result
    _, custom = _trials(result)
    spec = next(t.spec for t in result._planned.trials if t.spec.algorithm == "eps_greedy")
    recorded = json.loads(custom["code"].iloc[0])
    assert recorded == code_of(spec).parts and not recorded["__main__.py"].startswith("unknown")
    assert custom["code_digest"].iloc[0] == code_of(spec).digest


def test_a_notebook_policys_run_has_its_statistics(notebook_run):
    stats = notebook_run.result.statistics
    assert set(stats.cells["algorithm"]) == {"EpsGreedy", "LinUCB"} and (stats.cells["n"] == 2).all()
    assert len(stats.pairs) == 1


def test_a_notebook_policys_run_plots_its_curves(notebook_run):
    figure = notebook_run.result.plot()
    [axes] = figure.axes
    assert axes.get_title() == "synthetic h1 (dim = 5)" and len(axes.get_lines()) == 2


def test_an_edited_cell_makes_its_policys_finished_trials_other_code(notebook_run, registered, monkeypatch):
    """The cell edited and run again: the policy's finished trials are computed by other code now."""
    monkeypatch.setenv("BANDITSWEEP_RESULTS", str(notebook_run.folder / "results"))
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{notebook_run.folder}/mlflow.db")
    assert banditsweep.status(SPEC, quiet=True).count("other_code") == 0
    edited = run_cell(CELL.replace("self.sums[arm] += reward", "self.sums[arm] += 2 * reward / 2"),
                      "/tmp/ipykernel_0/cell_2.py")
    banditsweep.register_algorithm("eps_greedy", edited["EpsGreedy"])
    state = banditsweep.status(SPEC, quiet=True)
    assert (state.done, state.count("other_code"), state.consistent, state.exit_code) == (2, 2, True, 0)
    assert state.cells.set_index("algorithm").loc["EpsGreedy", "other_code"] == 2
