"""Bad input beyond the schema: sizes no node can hold, integers the store cannot hold, floats for
integers, a choice between kinds of domain, misspellings, sweeps too large to expand, spec paths
that are not files, sweep names that are the results root's own files, CLI arguments out of range,
resources the embedded Ray cannot give. Every case exits with code 2 in one line naming the key and
value, with nothing written and no Ray started; each is validation only (a second or so).

The node is fixed (2 CPUs, no GPU, 8 GiB) so that the cases do not depend on the machine."""

from __future__ import annotations

import os

import pytest
from bad_input_cases import KERNEL, RUN, Case, add, edit, refused_writing_nothing, run_case
from paths import REPO

import banditsweep.workers.execution.pool as pool
from banditsweep.sweeps.spec.model import load_sweep

NODE = {"CPU": 2.0, "GPU": 0.0, "memory": 8.0 * 2**30}

KERNEL_RANDOM = edit("{name: apg_exp3, grid: {max_iterations: [10, true]}}", "{name: random}", KERNEL)


def kernel_env(settings: str) -> str:
    return edit("{kind: adversarial_kernel, setting: 1}", "{kind: adversarial_kernel, " + settings + "}", KERNEL_RANDOM)


def _fifo(tmp_path, monkeypatch):
    os.remove(tmp_path / "bad.yaml")
    os.mkfifo(tmp_path / "bad.yaml")


def _sparse_huge(tmp_path, monkeypatch):
    with open(tmp_path / "bad.yaml", "r+b") as handle:
        handle.truncate(10 * 2**30)   # 10 GiB, sparse: nothing to read but its size


def _env(name: str, value: str):
    def setup(tmp_path, monkeypatch):
        monkeypatch.setenv(name, value.format(tmp=tmp_path))
    return setup


def _sweep_folder(tmp_path, monkeypatch):
    (tmp_path / "results" / "unit").mkdir(parents=True)


BIG = "9" * 5000
CASES = [
    # --- integers: int64, never floats, never booleans
    Case("horizon-float", "horizon: 10.0", RUN, "bad.yaml: horizon: must be an integer, not a float (got 10.0)",
         spec=edit("horizon: 100", "horizon: 10.0")),
    Case("set-horizon-float", "--set horizon=10.0", [*RUN, "--set", "horizon=10.0"],
         "--set: horizon: must be an integer, not a float (got 10.0)"),
    Case("log-every-float", "log_every: 5.0", RUN, "log_every: must be an integer, not a float (got 5.0)",
         spec=add("log_every: 5.0")),
    Case("seeds-float", "seeds: 2.0", RUN, "seeds: must be a count or a list of seeds (got 2.0)",
         spec=edit("seeds: 2", "seeds: 2.0")),
    Case("env-horizon-float", "environment horizon: 50.0", RUN, "environments[0].horizon: must be a positive integer (got 50.0)",
         spec=edit("function: h1}", "function: h1, horizon: 50.0}")),
    Case("arms-float", "arms: 4.0", RUN, "environments[0].arms: a float is not allowed here (got 4.0); allowed: int",
         spec=edit("function: h1}", "function: h1, arms: 4.0}")),
    Case("grid-int-float", "int-typed grid value 2.5", RUN,
         "algorithms[0].grid.max_iterations[1]: a float is not allowed here (got 2.5); allowed: int",
         spec=edit("[10, true]", "[10, 2.5]", KERNEL)),
    Case("setting-float", "setting: 1.0", RUN, "environments[0].setting: a float is not allowed here (got 1.0)",
         spec=kernel_env("setting: 1.0")),
    Case("horizon-2-63", "horizon: 2**63", RUN, "horizon: integer out of range (got 9223372036854775808); the results "
         "store holds integers from -2**63 to 2**63-1 (int64)", spec=edit("horizon: 100", "horizon: 9223372036854775808")),
    Case("log-every-2-63", "--set log_every=2**63", [*RUN, "--set", "log_every=9223372036854775808"],
         "--set: log_every: integer out of range (got 9223372036854775808)"),
    Case("checkpoint-huge", "checkpoint_every: -2**64", RUN, "checkpoint_every: integer out of range (got -18446744073709551616)",
         spec=add("checkpoint_every: -18446744073709551616")),
    Case("param-huge", "an algorithm parameter of 2**70", RUN,
         "algorithms[0].grid.max_iterations[0]: integer out of range (got 1180591620717411303424)",
         spec=edit("[10, true]", "[1180591620717411303424]", KERNEL)),
    Case("digits-5000", "an integer of 5000 digits", RUN, "bad.yaml: line 2: integer out of range (got 5000 digits)",
         spec=edit("horizon: 100", "horizon: " + BIG)),
    # --- sizes no node can hold (estimated before anything starts)
    Case("horizon-1e12", "horizon: 10**12", RUN, "horizon 1000000000000) needs an estimated",
         spec=edit("horizon: 100", "horizon: 1000000000000")),
    Case("set-horizon-1e12", "--set horizon=10**12", [*RUN, "--set", "horizon=1000000000000"],
         "but the largest node, this machine, has 8 GiB"),
    Case("dim-1e9", "synthetic dim: 10**9", RUN, "synthetic:h1,dim=1000000000 | seed 0' (horizon 100) needs an estimated",
         spec=edit("function: h1}", "function: h1, dim: 1000000000}")),
    Case("arms-1e9", "synthetic arms: 10**9", RUN, "needs an estimated", spec=edit("function: h1}", "function: h1, arms: 1000000000}")),
    Case("width-1e9", "neural width: 10**9", RUN, "neural_ucb | synthetic:h1 | seed 0' (horizon 100) needs",
         spec=edit("{name: random}", "{name: neural_ucb, params: {width: 1000000000}}")),
    Case("full-z", "neural_ucb z: full on a wide network", RUN, "neural_ucb",
         spec=edit("{name: random}", "{name: neural_ucb, params: {width: 2000, z: full}}")),
    Case("domain-grid-1e12", "a grid domain of 10**12 points", RUN, "needs an estimated",
         spec=kernel_env("domain: {grid: [1000000, 1000000]}")),
    Case("domain-uniform-1e12", "a uniform domain of 10**12 points", RUN, "needs an estimated",
         spec=kernel_env("domain: {uniform: 1000000000000, dim: 2}")),
    Case("domain-continuous", "a continuous domain of dimension 40", RUN, "needs an estimated",
         spec=kernel_env("domain: {continuous: 40}")),
    Case("kernel-exact", "exact kernel_exp3 on 10**6 points", RUN, "algorithm ",
         spec=edit("{name: random}", "{name: kernel_exp3}", kernel_env("domain: {grid: [1000, 1000]}"))),
    # --- resources the embedded Ray cannot give, found before it starts
    Case("cpus-64", "resources.cpus_per_trial: 64", RUN, "resources.cpus_per_trial: each trial asks for 64 CPU, but the "
         "embedded Ray on this machine has 2 CPU", spec=add("resources: {cpus_per_trial: 64}")),
    Case("set-cpus-64", "--set resources.cpus_per_trial=64", [*RUN, "--set", "resources.cpus_per_trial=64"],
         "resources.cpus_per_trial: each trial asks for 64 CPU"),
    Case("gpus-1", "resources.gpus_per_trial: 1 without a GPU", RUN, "resources.gpus_per_trial: each trial asks for 1 GPU, "
         "but the embedded Ray on this machine has 0 GPU", spec=add("resources: {gpus_per_trial: 1}")),
    Case("shards-cpus", "8 shards of 1 CPU on 2 CPUs", RUN, "resources.cpus_per_shard: a sharded trial",
         spec=edit("{kind: adversarial_kernel, setting: 1}", "{kind: adversarial_kernel, setting: 3, shards: 8}", KERNEL_RANDOM)),
    # --- a choice between kinds of domain: the chosen one's error
    Case("domain-uniform-0", "domain: {uniform: 0, dim: 2}", RUN,
         "environments[0].domain.uniform: Input should be greater than or equal to 1 (got 0) (the {uniform, dim} choice)",
         spec=kernel_env("domain: {uniform: 0, dim: 2}")),
    Case("domain-uniform-no-dim", "domain: {uniform: 5}", RUN,
         "environments[0].domain: missing key 'dim'; required keys: uniform, dim (the {uniform, dim} choice)",
         spec=kernel_env("domain: {uniform: 5}")),
    Case("domain-grid-zero", "domain: {grid: [0]}", RUN, "every grid axis needs at least one point",
         spec=kernel_env("domain: {grid: [0]}")),
    Case("domain-none-matches", "domain: {colour: 1}", RUN, "environments[0].domain: matches none of the choices {grid}, "
         "{uniform, dim}, {continuous} (got keys colour)", spec=kernel_env("domain: {colour: 1}")),
    Case("domain-scalar", "domain: 5", RUN, "environments[0].domain: must be one of {grid}, {uniform, dim}, {continuous} (got 5)",
         spec=kernel_env("domain: 5")),
    Case("domain-typo", "domain: {uniform: 5, dims: 2}", RUN, "environments[0].domain.dims: unknown key 'dims' (did you mean 'dim'?)",
         spec=kernel_env("domain: {uniform: 5, dims: 2}")),
    # --- misspellings: the unknown key named, with a suggestion
    Case("horizn", "horizn: 100 (misspelt)", RUN, "bad.yaml: horizn: unknown key 'horizn' (did you mean 'horizon'?); missing: horizon",
         spec=edit("horizon: 100", "horizn: 100")),
    Case("resources-typo", "resources: {cpus_per_trail: 1}", RUN,
         "resources.cpus_per_trail: unknown key 'cpus_per_trail' (did you mean 'cpus_per_trial'?)",
         spec=add("resources: {cpus_per_trail: 1}")),
    Case("algorithm-typo", "name: linucbb", RUN, "algorithms[1].name: unknown algorithm 'linucbb' (did you mean 'linucb'?)",
         spec=edit("{name: random}", "{name: linucbb}")),
    Case("kind-typo", "kind: synthetc", RUN, "environments[0].kind: unknown environment kind 'synthetc' (did you mean 'synthetic'?)",
         spec=edit("kind: synthetic", "kind: synthetc")),
    Case("param-typo", "params: {lamb: 1}", RUN, "algorithms[0].params.lamb: unknown parameter of 'linucb' (did you mean 'lam'?)",
         spec=edit("params: {lam: 1.0}", "params: {lamb: 1.0}")),
    Case("env-setting-typo", "functon: h1", RUN, "environments[0].functon: unknown key 'functon' (did you mean 'function'?)",
         spec=edit("function: h1", "functon: h1")),
    Case("set-typo", "--set horizn=5", [*RUN, "--set", "horizn=5"], "--set: horizn: cannot be overridden (did you mean 'horizon'?)"),
    # --- sweeps too large: refused from their sizes, before any trial is built
    Case("trials-1.2M", "600 000 seeds x 2 algorithms (1.2 M trials)", RUN,
         "algorithms: the sweep expands to 1200000 trials; a sweep has at most 1000000",
         spec=edit("seeds: 2", "seeds: 600000").replace("grid: {nu: [0.1, 1.0]}", "grid: {nu: [0.1]}")),
    Case("trials-when", "1.6 M trials as `when` counts them (2.4 M without)", RUN, "expands to 1600000 trials",
         spec=edit("seeds: 2", "seeds: 400000").replace("grid: {nu: [0.1, 1.0]}", "grid: {nu: [0.1]}")
         .replace("  - {kind: synthetic, function: h1}\n", "  - {kind: synthetic, function: h1}\n"
                  "  - {kind: synthetic, function: h2}\n  - {kind: synthetic, function: h3}\n")
         .replace("{name: random}", "{name: random, when: {function: [h1]}}")),
    # --- spec paths that are not regular files
    Case("fifo", "the spec is a FIFO", RUN, "bad.yaml: not a regular file: a FIFO (named pipe)", setup=_fifo),
    Case("dev-zero", "the spec is /dev/zero", ["run", "/dev/zero"], "/dev/zero: not a regular file: a device"),
    Case("sparse-10g", "a 10 GiB spec file", RUN, "larger than 1024 KiB", setup=_sparse_huge),
    # --- sweep names that are the results root's own files
    Case("name-mlflow-db", "sweep: mlflow.db", RUN, "sweep: 'mlflow.db' is the name of a results root's own file",
         spec=edit("sweep: unit", "sweep: mlflow.db")),
    Case("set-name-mlflow-db", "--set sweep=mlflow.db", [*RUN, "--set", "sweep=mlflow.db"],
         "--set: sweep: 'mlflow.db' is the name of a results root's own file"),
    Case("name-artifacts", "sweep: MLArtifacts (any case)", RUN, "'MLArtifacts' is the name of a results root's own file",
         spec=edit("sweep: unit", "sweep: MLArtifacts")),
    Case("name-wal", "sweep: mlflow.db-wal", RUN, "a sweep may not be named mlflow.db, mlflow.db-journal, mlflow.db-wal",
         spec=edit("sweep: unit", "sweep: mlflow.db-wal")),
    Case("name-dotdot", "sweep: ..", RUN, "sweep: String should match pattern", spec=edit("sweep: unit", "sweep: '..'")),
    Case("name-hidden", "sweep: .hidden", RUN, "sweep: String should match pattern", spec=edit("sweep: unit", "sweep: .hidden")),
    Case("name-empty", "sweep: ''", RUN, "sweep: String should match pattern", spec=edit("sweep: unit", "sweep: ''")),
    Case("name-separator", "sweep: a/b", RUN, "sweep: String should match pattern", spec=edit("sweep: unit", "sweep: a/b")),
    Case("store-in-sweep-folder", "--mlflow-uri inside the sweep's folder", [*RUN, "--mlflow-uri", "sqlite:///{tmp}/results/unit/m.db"],
         "sweep: the sweep's folder", setup=_sweep_folder),
    # --- arguments
    Case("address-word", "--address not-an-address", [*RUN, "--address", "not-an-address"],
         "--address 'not-an-address': not a Ray address; allowed: HOST:PORT"),
    Case("address-port", "--address host:70000", [*RUN, "--address", "host:70000"], "--address 'host:70000': not a Ray address"),
    Case("address-no-host", "--address ray://:10001", [*RUN, "--address", "ray://:10001"], "not a Ray address"),
    Case("address-scheme", "--address http://127.0.0.1:8265", [*RUN, "--address", "http://127.0.0.1:8265"], "not a Ray address"),
    Case("address-empty", "--address ''", [*RUN, "--address", ""], "--address: empty address"),
    Case("address-env", "$RAY_ADDRESS=garbage", RUN, "$RAY_ADDRESS='garbage': not a Ray address", setup=_env("RAY_ADDRESS", "garbage")),
    Case("address-refused", "--address 127.0.0.1:1 (nothing listens)", [*RUN, "--address", "127.0.0.1:1"],
         "--address 127.0.0.1:1: no Ray head answers there"),
    Case("mlflow-ipv6", "--mlflow-uri 'http://[::1'", [*RUN, "--mlflow-uri", "http://[::1"],
         "--mlflow-uri 'http://[::1': not a valid URI (Invalid IPv6 URL)"),
    Case("mlflow-garbage", "--mlflow-uri garbage", [*RUN, "--mlflow-uri", "garbage"], "--mlflow-uri 'garbage': no scheme"),
    Case("mlflow-env-garbage", "$MLFLOW_TRACKING_URI=garbage", RUN, "$MLFLOW_TRACKING_URI='garbage': no scheme",
         setup=_env("MLFLOW_TRACKING_URI", "garbage")),
    Case("mlflow-port", "--mlflow-uri http://h:99999", [*RUN, "--mlflow-uri", "http://h:99999"], "not a valid URI (Port out of range"),
    Case("mlflow-port-0", "--mlflow-uri http://h:0", [*RUN, "--mlflow-uri", "http://h:0"], "port 0; a port is 1-65535"),
    Case("mlflow-file", "--mlflow-uri file:///... (MLflow refuses file stores)", [*RUN, "--mlflow-uri", "file:///{tmp}/mlruns"],
         "this MLflow refuses file stores"),
    Case("report-garbage", "report --mlflow-uri garbage", ["report", "{spec}", "--mlflow-uri", "garbage"], "no scheme"),
    Case("ui-garbage", "ui --mlflow-uri garbage", ["ui", "{spec}", "--mlflow-uri", "garbage"], "no scheme"),
    Case("ui-port-70000", "ui --port 70000", ["ui", "{spec}", "--port", "70000"],
         "argument --port: 70000 is not allowed: give a whole number from 1 to 65535"),
    Case("ui-port-0", "ui --port 0", ["ui", "{spec}", "--port", "0"], "argument --port: 0 is not allowed"),
    Case("ui-port-word", "ui --port http", ["ui", "{spec}", "--port", "http"], "'http' is not a whole number"),
    Case("probe-negative", "plan --probe-seconds -1", ["plan", "{spec}", "--probe-seconds", "-1"],
         "argument --probe-seconds: '-1' is not allowed: give seconds above 0 and at most 3600"),
    Case("probe-nan", "plan --probe-seconds nan", ["plan", "{spec}", "--probe-seconds", "nan"],
         "argument --probe-seconds: 'nan' is not allowed"),
    Case("probe-inf", "plan --probe-seconds inf", ["plan", "{spec}", "--probe-seconds", "inf"],
         "argument --probe-seconds: 'inf' is not allowed"),
    Case("gpus-0-for-gpu-trials", "plan --gpus 0 of trials that ask for a GPU",
         ["plan", "{spec}", "--gpus", "0", "--set", "resources.gpus_per_trial=1"],
         "--gpus: 0: the spec's trials ask for 1 GPU(s) each (resources.gpus_per_trial) and cannot run without GPUs"),
    Case("gpus-negative", "plan --gpus -1", ["plan", "{spec}", "--gpus", "-1"],
         "argument --gpus: -1 is not allowed: give a whole number from 0 to"),
    Case("max-workers-huge", "--max-workers 10**30", [*RUN, "--max-workers", "1" + "0" * 30], "argument --max-workers: "),
]


@pytest.fixture
def fixed_node(monkeypatch):
    monkeypatch.setattr(pool, "local_node", lambda: dict(NODE))


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input_exits_2_naming_the_value_and_writes_nothing(case, tmp_path, monkeypatch, capsys, fixed_node):
    refused_writing_nothing(case, tmp_path, monkeypatch, capsys, case.setup)
    assert not (tmp_path / "results").exists() or case.setup is _sweep_folder


def test_a_sweep_of_1_2_million_trials_is_refused_in_seconds(tmp_path, monkeypatch, capsys, fixed_node):
    """Counted from the grid sizes, never listed: not one trial is built."""
    from banditsweep.sweeps.spec import model as spec_module

    def no_trial(*args, **kwargs):
        raise AssertionError("a trial was built: the sweep was expanded before it was counted")

    monkeypatch.setattr(spec_module.TrialSpec, "create", no_trial)
    case = next(c for c in CASES if c.id == "trials-1.2M")
    assert run_case(case, tmp_path, monkeypatch) == 2


def test_the_memory_estimate_names_its_parts_and_the_node(tmp_path, monkeypatch, capsys, fixed_node):
    """horizon 10^12 on the synthetic bandit: contexts (T, K, d) twice, 8 bytes each: 1.28e15 bytes."""
    case = next(c for c in CASES if c.id == "horizon-1e12")
    assert run_case(case, tmp_path, monkeypatch) == 2
    line = capsys.readouterr().err.strip()
    assert "needs an estimated 1.26 PiB of memory (results 72.8 TiB, environment 1.19 PiB," in line
    assert "the largest node, this machine, has 8 GiB" in line


SHIPPED = sorted(str(p.relative_to(REPO)) for p in (REPO / "sweeps").rglob("*.yaml") if p.parent.name != "papers")


@pytest.mark.parametrize("spec", SHIPPED)
def test_every_shipped_spec_validates_and_fits_a_16_gib_node(spec, monkeypatch):
    """The estimate is conservative but refuses none of the shipped sweeps on a 16 GiB machine (the
    largest, table3_timing's full Z on Covertype, needs about 11 GiB)."""
    import banditsweep.sweeps.cli.main as cli
    from banditsweep.sweeps.cli.commands import run as run_command
    from banditsweep.sweeps.cli.commands.shared import jobs_of

    monkeypatch.setattr(pool, "local_node", lambda: {"CPU": 16.0, "GPU": 8.0, "memory": 16.0 * 2**30})
    sweep = load_sweep(REPO / spec)
    args = cli.build_parser().parse_args(["run", str(REPO / spec)])
    pool.check_fits(jobs_of(sweep), run_command.run_options(args, sweep, [], None), args.spec)


GOOD_ARGS = [
    [*RUN, "--address", "local"],
    [*RUN, "--mlflow-uri", "http://127.0.0.1:5000", "--sink", "none"],
    [*RUN, "--set", "horizon=1000", "--set", "log_every=9223372036854775807"],
    [*RUN, "--set", "resources.cpus_per_trial=2"],
    [*RUN, "--set", "sweep=mlflow.db.old"],
]


@pytest.mark.parametrize("args", GOOD_ARGS, ids=range(len(GOOD_ARGS)))
def test_good_input_at_the_bounds_passes(args, tmp_path, monkeypatch, capsys, fixed_node):
    reached = []
    code = run_case(Case("good", "", args, ""), tmp_path, monkeypatch, sweep=lambda *a, **k: reached.append(a) or 0)
    assert code == 0 and len(reached) == 1, capsys.readouterr().err


def test_a_file_store_is_allowed_where_mlflow_allows_it(tmp_path, monkeypatch, capsys, fixed_node):
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    reached = []
    code = run_case(Case("good", "", [*RUN, "--mlflow-uri", "file:///{tmp}/mlruns"], ""), tmp_path, monkeypatch,
                    sweep=lambda *a, **k: reached.append(a) or 0)
    assert code == 0 and len(reached) == 1, capsys.readouterr().err


def test_there_are_at_least_60_cases():
    assert len(CASES) >= 60 and len({c.id for c in CASES}) == len(CASES)
