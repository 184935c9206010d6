"""Bad input: every case exits with code 2 before anything starts, with one line on stderr naming the
file (or argument), the key, the value and what is allowed; no traceback, a bounded message, nothing
written (no results folder, no MLflow store). The catalogue in docs/reliability.md ("Bad input") is
this list; ``PYTHONPATH=tests python tests/sweeps/spec/test_bad_input.py`` prints it as that table
(tests/ on the path, as pytest puts it there, for the helper modules this file imports)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from bad_input_cases import GOOD, KERNEL, MAX_LINE, RUN, Case, add, edit, run_case, tree
from paths import TEST_DATASETS

import banditsweep.sweeps.cli.commands.run as run_command
from banditsweep.sweeps.cli.main import main

BOMB = """\
sweep: bomb
horizon: 10
seeds: 1
environments: [{kind: synthetic, function: h1}]
a: &a ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]
b: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]
c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]
d: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c]
e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d]
f: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e]
algorithms:
  - {name: random, label: *f}
"""


def _no_database_drivers(tmp_path, monkeypatch):
    """As where no PostgreSQL or MySQL driver is installed (the test extras install psycopg2)."""
    from banditsweep.workers.mirrors.mlflow import store_checks

    drivers = {module for options in store_checks.DRIVERS.values() for _, module, _ in options}
    installed = store_checks._installed
    monkeypatch.setattr(store_checks, "_installed", lambda module: module not in drivers and installed(module))


def _file(name: str):
    def setup(tmp_path, monkeypatch):
        (tmp_path / name).write_text("not a folder\n")
    return setup


def _unwritable(tmp_path, monkeypatch):
    """A results root nobody may write to (as root, chmod alone does not stop writes: the check is
    os.access, which also sees immutable folders and read-only file systems)."""
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o555)
    real = os.access
    monkeypatch.setattr(os, "access", lambda path, mode, **kw: False if Path(path) == locked and mode & os.W_OK
                        else real(path, mode, **kw))


def _sweep_folder_is_a_file(tmp_path, monkeypatch):
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "unit").write_text("not a folder\n")


def _busy(tmp_path, monkeypatch):
    """Another `run` of the sweep holds its folder (the lock is held for the length of the test)."""
    from banditsweep.workers.storage.store import SweepStore

    lock = SweepStore.for_sweep(tmp_path / "results", "unit").exclusive()
    lock.__enter__()
    monkeypatch.setattr(sys.modules[__name__], "_held", lock, raising=False)


def _env(name: str, value: str):
    def setup(tmp_path, monkeypatch):
        monkeypatch.setenv(name, value.format(tmp=tmp_path))
    return setup


CLASSIFICATION = edit("{kind: synthetic, function: h1}", "{kind: classification, dataset: mushroom}")

CASES = [
    # --- the spec file
    Case("missing-file", "spec file does not exist", ["run", "missing.yaml"],
         "missing.yaml: cannot read the spec file (No such file or directory)"),
    Case("directory", "spec is a directory", ["run", "{tmp}"], "cannot read the spec file (Is a directory)"),
    Case("binary", "binary (non-UTF-8) spec file", RUN, "not a UTF-8 text file (byte 0xff at offset 7)",
         spec=b"sweep: \xff\xfe\x00\x01\n"),
    Case("too-large", "spec file over 1 MiB", RUN, "larger than 1024 KiB", spec="# " + "x" * (1 << 20) + "\n"),
    Case("empty", "empty spec file", RUN, "a sweep spec is a YAML mapping", spec=""),
    Case("list", "spec is a YAML list", RUN, "a sweep spec is a YAML mapping", spec="- just\n- a list\n"),
    # A path given by mistake may be any file: what it holds is not repeated in the error.
    Case("not-a-spec-text", "a file of one line of text", RUN, "bad.yaml: not a sweep spec: it holds text; a sweep spec is",
         spec="s3cret-token-value\n"),
    Case("not-a-spec-keys", "a mapping with none of a spec's keys", RUN,
         "bad.yaml: not a sweep spec: none of its 1 top-level key(s) is a spec's", spec="root:*:20228:0:99999:7:::\n"),
    Case("bad-yaml", "unclosed bracket", RUN, "not valid YAML at line 2", spec="sweep: [unclosed\nhorizon: 1\n"),
    Case("python-tag", "Python object tag (code execution)", RUN, "could not determine a constructor",
         spec="sweep: !!python/object/apply:os.system ['echo pwned']\n"),
    Case("two-documents", "two YAML documents", RUN, "expected a single document", spec=GOOD + "---\n" + GOOD),
    Case("duplicate-key", "top-level key given twice", RUN,
         "bad.yaml: horizon: key 'horizon' is given twice (lines 2 and 11)", spec=add("horizon: 5")),
    Case("duplicate-nested", "nested key given twice", RUN,
         "algorithms[0].grid.nu: key 'nu' is given twice (line 8)", spec=edit("grid: {nu: [0.1, 1.0]}", "grid: {nu: [0.1], nu: [1.0]}")),
    Case("alias-bomb", "YAML aliases expanding a label (billion laughs)", RUN,
         "expands to more than 100000 values through YAML aliases", spec=BOMB),
    Case("recursive-alias", "alias inside its own anchor", RUN, "refers to a value that contains it",
         spec=edit("seeds: 2", "seeds: &s [0, *s]")),
    Case("too-deep", "nesting 40 levels deep", RUN, "nested more than 32 levels deep",
         spec=add("when_deep: " + "[" * 40 + "]" * 40)),
    # --- values
    Case("horizon-inf", "horizon: .inf", RUN, "bad.yaml: horizon: must be a finite number (got .inf)",
         spec=edit("horizon: 100", "horizon: .inf")),
    Case("grid-nan", "grid value .nan", RUN, "algorithms[0].grid.nu[1]: must be a finite number (got .nan)",
         spec=edit("[0.1, 1.0]", "[0.1, .nan]")),
    Case("env-inf", "environment setting -.inf", RUN, "environments[0].noise: must be a finite number (got -.inf)",
         spec=edit("function: h1}", "function: h1, noise: -.inf}")),
    Case("horizon-bool", "horizon: true", RUN, "horizon: must be an integer, not a boolean (got true)",
         spec=edit("horizon: 100", "horizon: true")),
    Case("horizon-str", "horizon: \"100\" (a string)", RUN, "horizon: must be an integer, not a string (got '100')",
         spec=edit("horizon: 100", 'horizon: "100"')),
    Case("horizon-zero", "horizon: 0", RUN, "horizon: Input should be greater than or equal to 1 (got 0)",
         spec=edit("horizon: 100", "horizon: 0")),
    Case("seeds-bool", "seeds: true", RUN, "seeds: must be a count or a list of seeds (got true)",
         spec=edit("seeds: 2", "seeds: true")),
    Case("seed-bool", "a seed false", RUN, "seed [1] must be an integer >= 0", spec=edit("seeds: 2", "seeds: [0, false]")),
    Case("seeds-repeated", "seeds [1, 1]", RUN, "seeds are repeated (got 1 twice)", spec=edit("seeds: 2", "seeds: [1, 1]")),
    Case("seeds-huge", "seeds: 10000000000", RUN, "must be a positive count of seeds (got 10000000000)",
         spec=edit("seeds: 2", "seeds: 10000000000")),
    Case("log-every-bool", "log_every: true", RUN, "log_every: must be an integer, not a boolean (got true)",
         spec=add("log_every: true")),
    Case("checkpoint-bool", "checkpoint_every: false", RUN, "checkpoint_every: must be an integer, not a boolean",
         spec=add("checkpoint_every: false")),
    Case("batch-bool", "resources.batch_trials: true", RUN, "resources.batch_trials: must be an integer, not a boolean",
         spec=add("resources: {batch_trials: true}")),
    Case("cpus-bool", "resources.cpus_per_trial: true", RUN, "resources.cpus_per_trial: must be a number, not a boolean",
         spec=add("resources: {cpus_per_trial: true}")),
    Case("arms-bool", "environment setting arms: true", RUN,
         "environments[0].arms: a boolean is not allowed here (got true); allowed: int",
         spec=edit("function: h1}", "function: h1, arms: true}")),
    Case("grid-int-bool", "int-typed grid value true", RUN,
         "algorithms[0].grid.max_iterations[1]: a boolean is not allowed here (got true); allowed: int", spec=KERNEL),
    Case("name-long", "280-character sweep name", RUN, "sweep: String should have at most 100 characters",
         spec=edit("sweep: unit", "sweep: " + "s" * 280)),
    Case("name-slash", "sweep name with a slash", RUN, "sweep: String should match pattern",
         spec=edit("sweep: unit", "sweep: ../escape")),
    Case("unknown-key", "unknown top-level key", RUN, "colour: unknown key 'colour'; allowed: sweep, horizon",
         spec=add("colour: blue")),
    Case("unknown-nested", "resources: {gpus: 1}", RUN,
         "resources.gpus: unknown key 'gpus'; allowed: cpus_per_trial, gpus_per_trial, batch_trials",
         spec=add("resources: {gpus: 1}")),
    Case("unknown-entry-key", "unknown key in an algorithm entry", RUN,
         "algorithms[1].extra: unknown key 'extra'; allowed: name, grid, params, when, label",
         spec=edit("{name: random}", "{name: random, extra: 1}")),
    Case("unknown-env-key", "unknown environment setting", RUN,
         "environments[0].colour: unknown key 'colour'; allowed: kind, horizon, label, function",
         spec=edit("function: h1}", "function: h1, colour: 1}")),
    Case("missing-key", "no horizon", RUN, "missing key 'horizon'; required keys: sweep, horizon, seeds",
         spec=edit("horizon: 100\n", "")),
    Case("unknown-algorithm", "unknown algorithm", RUN, "algorithms[1].name: unknown algorithm 'ucb9000'; allowed: ",
         spec=edit("{name: random}", "{name: ucb9000}")),
    Case("long-algorithm", "10 000-character algorithm name", RUN, "unknown algorithm 'xxxxxxxx",
         spec=edit("{name: random}", "{name: " + "x" * 10000 + "}")),
    Case("unknown-kind", "unknown environment kind", RUN, "environments[0].kind: unknown environment kind 'nope'",
         spec=edit("kind: synthetic", "kind: nope")),
    Case("env-key-not-name", "environment key that is a number", RUN, "environments[0]: key 5 is not a name; keys are strings",
         spec=edit("function: h1}", "function: h1, 5: x}")),
    Case("unknown-param", "unknown algorithm parameter", RUN, "algorithms[0].params.alpha: unknown parameter of 'linucb'",
         spec=edit("params: {lam: 1.0}", "params: {lam: 1.0, alpha: 1}")),
    Case("grid-empty", "empty grid", RUN, "algorithms[0].grid: grid 'nu' is empty", spec=edit("[0.1, 1.0]", "[]")),
    # YAML reads 1e400, Infinity and nan as text; as numbers they are not finite.
    Case("param-overflow", "parameter 1e400", RUN, "algorithms[0].params.lam: Input should be a finite number (got '1e400')",
         spec=edit("params: {lam: 1.0}", "params: {lam: 1e400}")),
    Case("param-nan-text", "parameter nan (text)", RUN, "algorithms[0].params.lam: Input should be a finite number (got 'nan')",
         spec=edit("params: {lam: 1.0}", "params: {lam: nan}")),
    Case("grid-infinity-text", "grid value Infinity (text)", RUN,
         "algorithms[0].grid.nu: Input should be a finite number (got 'Infinity')", spec=edit("[0.1, 1.0]", "[0.1, Infinity]")),
    Case("env-overflow", "environment setting 1e999", RUN, "environments[0].noise: Input should be a finite number (got '1e999')",
         spec=edit("function: h1}", "function: h1, noise: 1e999}")),
    Case("grid-negative", "grid value out of range", RUN, "algorithms[0].grid.nu: Input should be greater than or equal to 0",
         spec=edit("[0.1, 1.0]", "[-1.0]")),
    Case("grid-huge", "grid of 10^12 trials", RUN, "trials; a sweep has at most 1000000",
         spec=edit("params: {lam: 1.0}", "")
         .replace("grid: {nu: [0.1, 1.0]}", "grid: {nu: &v [" + ", ".join(str(i) for i in range(1000)) + "], lam: *v}")
         .replace("seeds: 2", "seeds: 1000000")),
    Case("env-horizon", "environment horizon -5", RUN, "environments[0].horizon: must be a positive integer (got -5)",
         spec=edit("function: h1}", "function: h1, horizon: -5}")),
    Case("label-template", "label placeholder not a parameter", RUN, "algorithms[0].label: placeholder {colour}",
         spec=edit("params: {lam: 1.0}", "params: {lam: 1.0}\n    label: 'x {colour}'")),
    Case("when-unknown", "when: on a key no environment has", RUN, "algorithms[0].when.dataset: no environment has key",
         spec=edit("params: {lam: 1.0}", "params: {lam: 1.0}\n    when: {dataset: mnist}")),
    # --- --set
    Case("set-no-equals", "--set without =", [*RUN, "--set", "horizon"], "--set: 'horizon': expected key=value"),
    Case("set-not-overridable", "--set a key that cannot be overridden", [*RUN, "--set", "algorithms=[]"],
         "--set: algorithms: cannot be overridden; allowed: sweep, horizon"),
    Case("set-zero", "--set horizon=0", [*RUN, "--set", "horizon=0"],
         "--set: horizon: Input should be greater than or equal to 1 (got 0)"),
    Case("set-bool", "--set horizon=true", [*RUN, "--set", "horizon=true"],
         "--set: horizon: must be an integer, not a boolean (got true)"),
    Case("set-inf", "--set resources.cpus_per_trial=.inf", [*RUN, "--set", "resources.cpus_per_trial=.inf"],
         "--set: resources.cpus_per_trial: must be a finite number (got .inf)"),
    Case("set-twice", "--set one key twice, two values", [*RUN, "--set", "horizon=200", "--set", "horizon=300"],
         "--set: horizon: given twice with different values ('200' and '300'); give it once"),
    Case("set-bad-yaml", "--set seeds=[unclosed", [*RUN, "--set", "seeds=[0, 1"], "--set: seeds: not valid YAML"),
    # --- arguments
    Case("max-workers-0", "--max-workers 0", [*RUN, "--max-workers", "0"], "--max-workers: 0 is not allowed: give a whole number from 1 to 100000"),
    Case("max-workers-neg", "--max-workers -3", [*RUN, "--max-workers", "-3"], "--max-workers: -3 is not allowed"),
    Case("max-workers-word", "--max-workers two", [*RUN, "--max-workers", "two"], "'two' is not a whole number"),
    Case("unknown-option", "unknown option", [*RUN, "--colour", "blue"], "unrecognized arguments: --colour blue"),
    Case("unknown-command", "unknown command", ["start", "{spec}"], "invalid choice: 'start'"),
    Case("no-spec", "no spec argument", ["run"], "the following arguments are required: spec"),
    Case("unknown-sink", "--sink nope", [*RUN, "--sink", "nope"], "--sink: nope: unknown sink; allowed: "),
    Case("mlflow-scheme", "--mlflow-uri nope://x", [*RUN, "--mlflow-uri", "nope://x"],
         "--mlflow-uri 'nope://x': unknown scheme 'nope'; allowed: http(s)://HOST:PORT, sqlite:///PATH"),
    Case("mlflow-env-scheme", "$MLFLOW_TRACKING_URI=nope://x", RUN, "$MLFLOW_TRACKING_URI='nope://x': unknown scheme",
         setup=_env("MLFLOW_TRACKING_URI", "nope://x")),
    Case("mlflow-sqlite-dir", "sqlite:////nonexistent/dir/mlflow.db", [*RUN, "--mlflow-uri", "sqlite:///{tmp}/nonexistent/dir/mlflow.db"],
         "/nonexistent/dir does not exist; create it first"),
    Case("mlflow-no-host", "--mlflow-uri http://", [*RUN, "--mlflow-uri", "http://"], "no host"),
    Case("sync-mlflow-scheme", "sync-mlflow --mlflow-uri nope://x", ["sync-mlflow", "{spec}", "--mlflow-uri", "nope://x"],
         "unknown scheme 'nope'"),
    Case("results-under-file", "results root under a file", [*RUN, "--results", "{tmp}/afile/results"],
         "/afile is a file, not a directory; the results root must be a directory", setup=_file("afile")),
    Case("results-is-file", "results root is a file", ["status", "{spec}", "--results", "{tmp}/afile"],
         "afile is a file, not a directory", setup=_file("afile")),
    Case("results-env-file", "$BANDITSWEEP_RESULTS is a file", RUN, "$BANDITSWEEP_RESULTS: ",
         setup=lambda tmp_path, mp: (_file("afile")(tmp_path, mp), mp.setenv("BANDITSWEEP_RESULTS", str(tmp_path / "afile")))),
    Case("results-unwritable", "unwritable (or immutable) results root", [*RUN, "--results", "{tmp}/locked/results"],
         "locked is not writable", setup=_unwritable),
    Case("results-empty", "--results ''", [*RUN, "--results", ""], "--results: empty path"),
    Case("sweep-folder-file", "the sweep's folder is a file", RUN, "unit is a file, not a directory; a sweep's results folder",
         setup=_sweep_folder_is_a_file),
    Case("busy", "a second run of the same sweep", RUN, "another `run` of this sweep is in progress (pid ", setup=_busy),
    Case("data-dir-file", "--data-dir pointing at a file", [*RUN, "--data-dir", "{tmp}/afile"],
         "--data-dir: ", spec=CLASSIFICATION, setup=_file("afile")),
    Case("data-env-file", "$BANDITSWEEP_DATA pointing at a file", RUN, "$BANDITSWEEP_DATA: ",
         spec=CLASSIFICATION, setup=lambda tmp_path, mp: (_file("afile")(tmp_path, mp),
                                                          mp.setenv("BANDITSWEEP_DATA", str(tmp_path / "afile")))),
    Case("dataset-rows", "horizon beyond a dataset's rows", [*RUN, "--data-dir", str(TEST_DATASETS)],
         "horizon 1001 exceeds the 1000 rows of mushroom", spec=edit("horizon: 100", "horizon: 1001", CLASSIFICATION)),
    # A database URI as people write it, whose driver is not installed: named before any trial; the
    # password in the URI is not shown (test_a_password_in_the_tracking_uri_is_never_shown).
    Case("mlflow-driver", "a database tracking URI without an installed driver",
         [*RUN, "--mlflow-uri", "postgresql://lab:hunter2@127.0.0.1/mlflow"],
         "--mlflow-uri 'postgresql://lab:***@127.0.0.1/mlflow': the postgresql driver 'psycopg' (postgresql://) "
         "is not installed, nor any other; install one of 'psycopg[binary]'", setup=_no_database_drivers),
    Case("mlflow-driver-mysql", "a MySQL tracking URI without an installed driver",
         [*RUN, "--mlflow-uri", "mysql://lab:hunter2@127.0.0.1/mlflow"],
         "--mlflow-uri 'mysql://lab:***@127.0.0.1/mlflow': the mysql driver 'mysqldb' (mysql://) is not installed, "
         "nor any other; install one of mysqlclient (mysql+mysqldb://), PyMySQL (mysql+pymysql://)",
         setup=_no_database_drivers),
    # MLflow's connection pool setting, read by the sink's writer: refused before any trial (no server asked).
    Case("mlflow-pool", "$MLFLOW_HTTP_POOL_MAXSIZE not a count", [*RUN, "--mlflow-uri", "http://127.0.0.1:9"],
         "environment variable MLFLOW_HTTP_POOL_MAXSIZE='ten': MLflow's HTTP connection pool size must be a whole "
         "number of at least 1", setup=lambda tmp_path, mp: mp.setenv("MLFLOW_HTTP_POOL_MAXSIZE", "ten")),
    # Nothing has failed: there is nothing to report (exit 2, as `verify` says it; 1 means failed trials).
    Case("report-nothing-finished", "report of a sweep with no finished trial",
         ["report", "{spec}", "--results", "{tmp}/res", "--mlflow-uri", "sqlite:///{tmp}/res/m.db"],
         "is finished here; nothing to report"),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input_exits_2_with_one_bounded_line_and_writes_nothing(case, tmp_path, monkeypatch, capsys):
    before = None

    def snapshot(*a, **k):
        nonlocal before
        before = tree(tmp_path)

    code = run_case(Case(**{**case.__dict__, "setup": _then(case.setup, snapshot)}), tmp_path, monkeypatch)
    out, err = capsys.readouterr()
    lines = err.splitlines()
    assert code == 2, err
    assert len(lines) == 1, err[:2000]
    assert lines[0].startswith("error: ") and "Traceback" not in err
    assert case.fragment in lines[0]
    assert len(lines[0]) <= MAX_LINE
    assert tree(tmp_path) == before   # nothing written: no results folder, no MLflow store


def _then(first, second):
    def both(tmp_path, monkeypatch):
        if first:
            first(tmp_path, monkeypatch)
        second()
    return both


GOOD_ARGS = [
    [*RUN],
    [*RUN, "--results", "{tmp}/new/deeper/res", "--mlflow-uri", "sqlite:///{tmp}/new/deeper/res/mlflow.db"],
    [*RUN, "--mlflow-uri", "sqlite:///mlflow.db", "--set", "horizon=50", "--set", "seeds=[0, 3]"],
    [*RUN, "--mlflow-uri", "sqlite:///{tmp}/other.db", "--max-workers", "2"],
    [*RUN, "--sink", "none", "--mlflow-uri", "nope://x"],   # no MLflow, so its URI is not used
    [*RUN, "--data-dir", "{tmp}/cache-to-be"],
]


@pytest.mark.parametrize("args", GOOD_ARGS, ids=range(len(GOOD_ARGS)))
def test_good_input_passes_every_check(args, tmp_path, monkeypatch, capsys):
    reached = []
    code = run_case(Case("good", "", args, ""), tmp_path, monkeypatch, sweep=lambda *a, **k: reached.append(a) or 0)
    assert code == 0 and len(reached) == 1, capsys.readouterr().err


def test_good_classification_input_passes_every_check(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(run_command, "run_locked", lambda *a, **k: 0)
    spec = tmp_path / "cls.yaml"
    spec.write_text(CLASSIFICATION)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("BANDITSWEEP_DATA", str(tmp_path))
    assert main(["run", "cls.yaml", "--data-dir", str(TEST_DATASETS)]) == 0, capsys.readouterr().err
    assert main(["status", "cls.yaml"]) == 0


def test_set_help_lists_exactly_the_keys_it_accepts(capsys):
    from banditsweep.sweeps.spec.overrides import OVERRIDABLE

    with pytest.raises(SystemExit):
        main(["run", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    listed = text.split("override a top-level spec value: ", 1)[1].split(" (repeatable)", 1)[0]
    assert listed.split(", ") == list(OVERRIDABLE)


def test_run_leaves_the_environment_as_it_found_it(tmp_path, monkeypatch):
    """The data directory reaches the trial actors as a value, not through this process's environment."""
    monkeypatch.setattr(run_command, "run_locked", lambda *a, **k: 0)
    spec = tmp_path / "cls.yaml"
    spec.write_text(CLASSIFICATION)
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("BANDITSWEEP_DATA", raising=False)
    before = dict(os.environ)
    assert main(["run", "cls.yaml", "--data-dir", str(TEST_DATASETS)]) == 0
    assert dict(os.environ) == before


def test_debug_adds_the_traceback(tmp_path, monkeypatch, capsys):
    code = run_case(Case("debug", "", [*RUN, "--debug"], "", spec=edit("horizon: 100", "horizon: true")),
                    tmp_path, monkeypatch)
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" in err
    assert err.splitlines()[-1] == "error: bad.yaml: horizon: must be an integer, not a boolean (got true)"


def test_there_are_at_least_40_cases():
    assert len(CASES) >= 40 and len({c.id for c in CASES}) == len(CASES)


def catalogue() -> str:
    """The Markdown table of docs/reliability.md ("Bad input"): every case and its message."""
    import contextlib
    import io
    import re
    import tempfile

    rows = ["| # | bad input | command | message (stderr, exit code 2) |", "|---|---|---|---|"]
    for number, case in enumerate(CASES, 1):
        with tempfile.TemporaryDirectory() as folder, pytest.MonkeyPatch.context() as monkeypatch:
            tmp_path = Path(folder)
            monkeypatch.setenv("BANDITSWEEP_RESULTS", str(tmp_path / "results"))
            monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path}/mlflow.db")
            stderr = io.StringIO()
            with contextlib.redirect_stderr(stderr):
                code = run_case(case, tmp_path, monkeypatch)
            message = stderr.getvalue().strip().replace(str(tmp_path), "$TMP").replace(str(TEST_DATASETS), "tests/data")
            message = re.sub(r"pid \d+ on \S+\)", "pid N on HOST)", message)
        assert code == 2, (case.id, message)
        command = " ".join("''" if a == "" else a for a in case.args).replace("{spec}", "bad.yaml").replace("{tmp}", "$TMP")
        command = command.replace(str(TEST_DATASETS), "tests/data")
        cell = lambda text: text.replace("|", "\\|").replace("`", "'")
        rows.append(f"| {number} | {cell(case.what)} | `banditsweep {cell(command)}` | `{cell(message)}` |")
    return "\n".join(rows) + "\n"


if __name__ == "__main__":   # PYTHONPATH=tests python tests/sweeps/spec/test_bad_input.py > table.md
    print(catalogue(), end="")


def test_a_file_that_is_not_a_spec_is_not_repeated_in_the_error(tmp_path, monkeypatch, capsys):
    """`status ~/.ssh/id_rsa` by mistake: the error says what the file is, never what it holds."""
    for content in ("s3cret-token-value\n", "s3cret-user:*:20228:0:99999:7:::\n", "- s3cret\n"):
        case = Case("secret", "a secret file given as the spec", ["status", "{spec}"], "not a sweep spec", spec=content)
        assert run_case(case, tmp_path, monkeypatch) == 2
        out, err = capsys.readouterr()
        assert "not a sweep spec" in err and "s3cret" not in out + err, err


def test_a_password_in_the_tracking_uri_is_never_shown(tmp_path, monkeypatch, capsys):
    from banditsweep.workers import redacted

    assert redacted("postgresql://lab:hunter2@db.lab:5432/mlflow") == "postgresql://lab:***@db.lab:5432/mlflow"
    assert redacted("https://user:p%40ss@mlflow.lab") == "https://user:***@mlflow.lab"
    assert redacted("http://127.0.0.1:5000") == "http://127.0.0.1:5000"
    case = next(c for c in CASES if c.id == "mlflow-driver")
    assert run_case(case, tmp_path, monkeypatch) == 2
    said = capsys.readouterr()
    assert "hunter2" not in said.out + said.err and "lab:***@" in said.err


def test_a_plain_database_uri_takes_an_installed_driver(tmp_path, monkeypatch):
    """``postgresql://`` as people write it: SQLAlchemy's default driver (psycopg) is not installed
    here, another one (a stand-in psycopg2 on the path) is: the URI names it."""
    import importlib.util

    from banditsweep.workers import resolve_tracking_uri

    if importlib.util.find_spec("psycopg") is not None:
        pytest.skip("SQLAlchemy's default PostgreSQL driver is installed here: nothing to take instead")
    (tmp_path / "psycopg2").mkdir()
    (tmp_path / "psycopg2" / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    uri = resolve_tracking_uri("postgresql://lab@127.0.0.1:5432/mlflow", tmp_path)
    assert uri == "postgresql+psycopg2://lab@127.0.0.1:5432/mlflow"
    assert resolve_tracking_uri("postgresql+psycopg2://lab@h/db", tmp_path) == "postgresql+psycopg2://lab@h/db"
