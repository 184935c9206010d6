"""Bad input that validates field by field but not as a whole: a value repeated in a list of a spec
(also once validated: ``1`` and ``1.0`` of a float parameter), two entries making the same trials,
one label naming two algorithms, two different trials shown in one report cell, an algorithm entry
(or an environment) that makes no trial, a plugin module of ``$BANDITSWEEP_PLUGINS`` that cannot be
imported. Each is refused through the CLI with exit code 2, one line naming the file (or variable)
and the key, and nothing written; what the shipped specs do stays valid."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from bad_input_cases import GOOD, KERNEL, MAX_LINE, RUN, Case, add, edit, refused_writing_nothing, run_case, tree
from paths import REPO

from banditsweep.sweeps.spec.model import load_sweep

BANDITSWEEP = Path(sys.executable).with_name("banditsweep")

SYNTHETIC_AND_KERNEL = edit("  - {kind: synthetic, function: h1}\n",
                            "  - {kind: synthetic, function: h1}\n  - {kind: adversarial_kernel, setting: 1}\n")
H1_H3 = edit("  - {kind: synthetic, function: h1}\n",
             "  - {kind: synthetic, function: h1}\n  - {kind: synthetic, function: h3, arms: 4}\n")
KERNEL_RANDOM = edit("{name: apg_exp3, grid: {max_iterations: [10, true]}}", "{name: random}", KERNEL)


def algorithms(text: str, spec: str = GOOD) -> str:
    """``spec`` with its algorithms replaced by ``text`` (YAML list items)."""
    head = spec.split("algorithms:\n", 1)[0]
    return head + "algorithms:\n" + text


def environments(text: str, spec: str = GOOD) -> str:
    """``spec`` with its environments replaced by ``text`` (YAML list items)."""
    head, rest = spec.split("environments:\n", 1)
    return head + "environments:\n" + text + "algorithms:\n" + rest.split("algorithms:\n", 1)[1]


CASES = [
    # --- 1. a value repeated in a list of the spec
    Case("grid-repeat", "grid value given twice", RUN,
         "bad.yaml: algorithms[0].grid.nu[1]: 0.1 is repeated (also at [0]); give each grid value once",
         spec=edit("[0.1, 1.0]", "[0.1, 0.1]")),
    Case("grid-repeat-int-float", "grid values 1 and 1.0 of a float parameter", RUN,
         "bad.yaml: algorithms[0].grid.nu[1]: 1.0 is the same value of nu as 1 at [0] (both 1.0 once validated)",
         spec=edit("[0.1, 1.0]", "[1, 1.0]")),
    # YAML 1.1 reads 1e-1 (no dot) as text, which the float parameter takes as 0.1.
    Case("grid-repeat-text-number", "grid values 0.1 and 1e-1 (text)", RUN,
         "algorithms[0].grid.nu[2]: '1e-1' is the same value of nu as 0.1 at [0] (both 0.1 once validated)",
         spec=edit("[0.1, 1.0]", "[0.1, 1.0, 1e-1]")),
    Case("grid-repeat-int", "integer grid value given twice", RUN,
         "bad.yaml: algorithms[0].grid.max_iterations[2]: 10 is repeated (also at [0])",
         spec=edit("[10, true]", "[10, 20, 10]", KERNEL)),
    Case("grid-repeat-text", "text grid value given twice", RUN,
         "bad.yaml: algorithms[0].grid.sampler[1]: 'practical' is repeated (also at [0])",
         spec=algorithms("  - {name: rls_kernel_exp3, grid: {sampler: [practical, practical]}}\n", KERNEL)),
    Case("entry-twice", "an algorithm entry given twice", RUN,
         "bad.yaml: algorithms[2]: makes the same trials as algorithms[1]: both make random on synthetic:h1, every seed",
         spec=add("  - {name: random}")),
    Case("entry-twice-by-default", "an entry writing a default the other leaves out", RUN,
         "bad.yaml: algorithms[2]: makes the same trials as algorithms[0]: both make linucb nu=0.1 on synthetic:h1",
         spec=add("  - {name: linucb, grid: {nu: [0.1]}, label: again}")),
    Case("entries-overlap", "two entries sharing a grid point", RUN,
         "bad.yaml: algorithms[1]: makes the same trials as algorithms[0]: both make linucb nu=1.0 on synthetic:h1",
         spec=algorithms("  - {name: linucb, grid: {nu: [0.1, 1.0]}}\n  - {name: linucb, grid: {nu: [1.0, 10.0]}}\n")),
    Case("environment-twice", "an environment entry given twice", RUN,
         "bad.yaml: environments[1]: is the same environment as environments[0] (synthetic:h1, horizon 100): both "
         "would run the very same trials; give each environment once",
         spec=environments("  - {kind: synthetic, function: h1}\n  - {kind: synthetic, function: h1}\n")),
    Case("environment-twice-by-default", "an environment writing a default the other leaves out", RUN,
         "bad.yaml: environments[1]: is the same environment as environments[0] (synthetic:h1, horizon 100) (equal "
         "once defaults are filled in)",
         spec=environments("  - {kind: synthetic, function: h1}\n  - {kind: synthetic, function: h1, dim: 20, "
                           "horizon: 100}\n")),
    Case("environment-relabelled", "an environment given twice under two labels", RUN,
         "bad.yaml: environments[1]: is the same environment as environments[0] (again, horizon 100); their labels "
         "differ, but a label does not change a trial",
         spec=environments("  - {kind: synthetic, function: h1}\n  - {kind: synthetic, function: h1, label: again}\n")),
    Case("when-repeat", "a `when` value given twice", RUN,
         "bad.yaml: algorithms[0].when.function[1]: 'h1' is given twice; give each value once",
         spec=edit("params: {lam: 1.0}", "params: {lam: 1.0}\n    when: {function: [h1, h1]}")),
    Case("sinks-repeat", "a sink given twice", RUN, "bad.yaml: sinks: sink 'mlflow' is given twice ([0] and [1])",
         spec=add("sinks: [mlflow, mlflow]")),
    # --- 2. labels: one algorithm per label, one trial per report cell and seed
    Case("label-two-algorithms", "one label on two algorithms", RUN,
         "bad.yaml: algorithms[1].label: label 'X' names two algorithms, linucb (algorithms[0]) and random "
         "(algorithms[1]): their rows and curves would merge in the report",
         spec=edit("{name: random}", "{name: random, label: X}", edit("params: {lam: 1.0}", "params: {lam: 1.0}\n    label: X"))),
    Case("label-is-another-name", "a label that is another entry's algorithm name", RUN,
         "bad.yaml: algorithms[1].label: label 'linucb' names two algorithms, linucb (algorithms[0]) and random",
         spec=edit("{name: random}", "{name: random, label: linucb}")),
    Case("label-two-algorithms-by-when", "one label on two algorithms split by `when`", RUN,
         "bad.yaml: algorithms[1].label: label 'Linear' names two algorithms, linucb (algorithms[0]) and lints",
         spec=algorithms("  - {name: linucb, label: Linear, when: {function: h1}}\n"
                         "  - {name: lints, label: Linear, when: {function: h3}}\n", H1_H3)),
    Case("label-cell-params", "two entries of one algorithm and label with other fixed params", RUN,
         "bad.yaml: algorithms[1].label: its trials and those of algorithms[0] differ (lam 10.0 vs 1.0) but are shown "
         "alike: their results would merge in one report cell (L | synthetic:h1); give the entries different labels "
         "(a {lam} placeholder in it)",
         spec=algorithms("  - {name: linucb, label: L, params: {lam: 1.0}}\n"
                         "  - {name: linucb, label: L, params: {lam: 10.0}}\n")),
    Case("cell-environment-horizon", "two environments shown alike with different horizons", RUN,
         "bad.yaml: environments[1]: is shown as 'synthetic:h1' like environments[0], but their trials differ "
         "(horizon 500 vs 100): their results would merge in one report cell (random | synthetic:h1)",
         spec=environments("  - {kind: synthetic, function: h1}\n  - {kind: synthetic, function: h1, horizon: 500}\n",
                           algorithms("  - {name: random}\n"))),
    Case("cell-environment-label", "two different environments under one label", RUN,
         "bad.yaml: environments[1]: is shown as 'E' like environments[0], but their trials differ (function 'h3' vs "
         "'h1'",
         spec=environments("  - {kind: synthetic, function: h1, label: E}\n  - {kind: synthetic, function: h3, label: E}\n",
                           algorithms("  - {name: random}\n"))),
    Case("cell-set-horizon", "environments shown alike, made equal by --set horizon", [*RUN, "--set", "horizon=50"],
         "bad.yaml: environments[1]: is shown as 'synthetic:h1' like environments[0], but their trials differ "
         "(horizon 200 vs 100 as written)",
         spec=environments("  - {kind: synthetic, function: h1, horizon: 100}\n"
                           "  - {kind: synthetic, function: h1, horizon: 200}\n", algorithms("  - {name: random}\n"))),
    # --- 3. an entry (or an environment) that makes no trial
    Case("kernel-on-synthetic", "kernel_exp3 on a synthetic environment", RUN,
         "bad.yaml: algorithms[0].name: makes no trial: kernel_exp3 runs on no environment of the spec: it runs on "
         "adversarial_kernel, kernel_lower_bound; the spec's environment kinds: synthetic; add an environment it "
         "runs on, or remove the entry",
         spec=algorithms("  - {name: kernel_exp3}\n")),
    Case("neural-on-kernel", "neural_ucb on an adversarial_kernel environment", RUN,
         "bad.yaml: algorithms[0].name: makes no trial: neural_ucb runs on no environment of the spec: it runs on "
         "classification, synthetic; the spec's environment kinds: adversarial_kernel",
         spec=algorithms("  - {name: neural_ucb}\n", KERNEL_RANDOM)),
    Case("no-entry-makes-a-trial", "two algorithms, neither on the spec's environments", RUN,
         "bad.yaml: algorithms: no algorithm entry makes a trial: algorithms[0]: apg_exp3 runs on no environment of "
         "the spec: it runs on adversarial_kernel, kernel_lower_bound; algorithms[1]: kernel_exp3 runs on",
         spec=algorithms("  - {name: apg_exp3}\n  - {name: kernel_exp3}\n")),
    Case("one-entry-makes-no-trial", "one entry of three on no environment", RUN,
         "bad.yaml: algorithms[2].name: makes no trial: kernel_exp3 runs on no environment of the spec",
         spec=add("  - {name: kernel_exp3}")),
    Case("when-unsupported", "`when` selects only environments the algorithm does not run on", RUN,
         "bad.yaml: algorithms[0].when: makes no trial: linucb's `when` filter selects only environments it does not "
         "run on (adversarial_kernel:setting=1,kernel=se); linucb runs on classification, synthetic",
         spec=edit("params: {lam: 1.0}", "params: {lam: 1.0}\n    when: {kind: adversarial_kernel}", SYNTHETIC_AND_KERNEL)),
    Case("when-matches-none", "`when` keys that no one environment has together", RUN,
         "bad.yaml: algorithms[0].when: makes no trial: linucb's `when` filter matches no environment",
         spec=edit("params: {lam: 1.0}", "params: {lam: 1.0}\n    when: {function: h1, arms: 4}", H1_H3)),
    Case("when-value-matches-none", "a `when` value no environment has", RUN,
         "bad.yaml: algorithms[0].when.function[1]: no environment has function 'h3', so it selects nothing; the "
         "environments' values: 'h1'",
         spec=edit("params: {lam: 1.0}", "params: {lam: 1.0}\n    when: {function: [h1, h3]}")),
    Case("environment-without-trials", "an environment no algorithm runs on", RUN,
         "bad.yaml: environments[1]: no algorithm runs on adversarial_kernel:setting=1,kernel=se",
         spec=algorithms("  - {name: linucb}\n", SYNTHETIC_AND_KERNEL)),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input_exits_2_naming_the_key_and_writes_nothing(case, tmp_path, monkeypatch, capsys):
    refused_writing_nothing(case, tmp_path, monkeypatch, capsys)
    assert not (tmp_path / "results").exists()


GOOD_SPECS = {
    # One algorithm under one label, split by `when` (the kernel paper's Table 3).
    "one-label-split-by-when": algorithms(
        "  - {name: random, label: Random}\n"
        "  - {name: kernel_exp3, label: Kernelized Exp3, params: {c3: 5.0}, when: {kernel: se}}\n"
        "  - {name: kernel_exp3, label: Kernelized Exp3, params: {c3: 10.0}, when: {kernel: matern52}}\n",
        environments("  - {kind: adversarial_kernel, setting: 1, kernel: se}\n"
                     "  - {kind: adversarial_kernel, setting: 1, kernel: matern52}\n", KERNEL_RANDOM)),
    # One algorithm under one label template, split by the placeholder (the sensitivity sweep).
    "one-label-split-by-placeholder": algorithms(
        "  - {name: linucb, label: 'L lam={lam}', grid: {nu: [0.1, 1.0]}, params: {lam: 1.0}}\n"
        "  - {name: linucb, label: 'L lam={lam}', grid: {nu: [0.1, 1.0]}, params: {lam: 10.0}}\n"),
    # One algorithm under one label, its grid written in two entries: other grid points, other cells.
    "one-label-split-grid": algorithms("  - {name: linucb, label: L, grid: {nu: [0.1]}}\n"
                                       "  - {name: linucb, label: L, grid: {nu: [1.0]}}\n"),
    # Random runs on both kinds; each kernel algorithm on its own.
    "mixed-kinds": algorithms("  - {name: random}\n  - {name: linucb}\n  - {name: kernel_exp3}\n", SYNTHETIC_AND_KERNEL),
    "grid-of-distinct-values": edit("[0.1, 1.0]", "[0.1, 1, 10.0, 1e-3]"),
}


@pytest.mark.parametrize("name", GOOD_SPECS)
def test_what_the_shipped_specs_do_stays_valid(name, tmp_path, monkeypatch, capsys):
    reached = []
    code = run_case(Case("good", "", RUN, "", spec=GOOD_SPECS[name]), tmp_path, monkeypatch,
                    sweep=lambda *a, **k: reached.append(a) or 0)
    assert code == 0 and len(reached) == 1, capsys.readouterr().err


def test_set_horizon_may_make_environments_of_different_horizons_alike(tmp_path):
    """The lower-bound sweep's environments differ only by their horizons (and labels): ``--set
    horizon`` (to try it in minutes) makes their trials the same, each run once."""
    spec = tmp_path / "spec.yaml"
    spec.write_text(environments("  - {kind: synthetic, function: h1, horizon: 100, label: T=100}\n"
                                 "  - {kind: synthetic, function: h1, horizon: 300, label: T=300}\n",
                                 algorithms("  - {name: random}\n")))
    assert len(load_sweep(spec).trials) == 4
    assert len(load_sweep(spec, {"horizon": 50}).trials) == 2
    shipped = load_sweep(REPO / "sweeps" / "kernel_exp3" / "lower_bound.yaml", {"horizon": 50})
    assert {trial.spec.horizon for trial in shipped.trials} == {50}


SHIPPED = sorted(str(p.relative_to(REPO)) for p in (REPO / "sweeps").rglob("*.yaml")
                 if p.parent.name != "papers")   # sweeps/papers: a paper's stated results, not specs


def test_the_shipped_specs_are_all_there():
    assert "sweeps/quickstart.yaml" in SHIPPED and len(SHIPPED) >= 30


@pytest.mark.parametrize("spec", SHIPPED)
def test_every_shipped_spec_loads(spec):
    sweep = load_sweep(REPO / spec)
    assert sweep.trials and len({trial.trial_id for trial in sweep.trials}) == len(sweep.trials)


# --- 4. $BANDITSWEEP_PLUGINS: a module that cannot be imported, in every command


PLUGIN_CASES = {
    "missing": ("no_such_module", "error: $BANDITSWEEP_PLUGINS: 'no_such_module': no module of that name can be "
                                  "imported (ModuleNotFoundError: No module named 'no_such_module')"),
    "missing-package": ("no_such_package.plugins", "error: $BANDITSWEEP_PLUGINS: 'no_such_package.plugins': no "
                                                   "module of that name can be imported"),
    "raises": ("raising_plugin", "error: $BANDITSWEEP_PLUGINS: 'raising_plugin': the plugin module failed on "
                                 "import: RuntimeError: the plugin is broken on purpose"),
    "missing-dependency": ("plugin_needing_a_dependency", "error: $BANDITSWEEP_PLUGINS: 'plugin_needing_a_dependency': "
                                                          "the plugin module failed on import: ModuleNotFoundError: "
                                                          "No module named 'no_such_dependency'"),
    "syntax-error": ("broken_syntax_plugin", "error: $BANDITSWEEP_PLUGINS: 'broken_syntax_plugin': the plugin module "
                                             "failed on import: SyntaxError: "),
    "exits": ("exiting_plugin", "error: $BANDITSWEEP_PLUGINS: 'exiting_plugin': the plugin module failed on import: "
                                "SystemExit: 3"),
    "not-a-name": ("plugins/my_plugin.py", "error: $BANDITSWEEP_PLUGINS: 'plugins/my_plugin.py': not a module name"),
}
COMMANDS = {"run": ["run", "spec.yaml", "--no-progress"], "plan": ["plan", "spec.yaml"],
            "status": ["status", "spec.yaml"], "report": ["report", "spec.yaml"],
            "sync-mlflow": ["sync-mlflow", "spec.yaml"], "ui": ["ui", "spec.yaml"], "list": ["list"]}


def _plugin_folder(tmp_path: Path) -> Path:
    folder = tmp_path / "plugin_modules"
    folder.mkdir()
    (folder / "raising_plugin.py").write_text('raise RuntimeError("the plugin is broken\\non purpose")\n')
    (folder / "plugin_needing_a_dependency.py").write_text("import no_such_dependency\n")
    (folder / "broken_syntax_plugin.py").write_text("def broken(:\n")
    (folder / "exiting_plugin.py").write_text("raise SystemExit(3)\n")
    return folder


def _refused(tmp_path: Path, args: list[str], plugins: str, message: str) -> None:
    """``banditsweep ARGS`` with ``$BANDITSWEEP_PLUGINS=plugins``: exit 2, one line starting with
    ``message``, nothing written."""
    (tmp_path / "spec.yaml").write_text(GOOD)
    folder = _plugin_folder(tmp_path)
    before = tree(tmp_path)
    env = {**os.environ, "BANDITSWEEP_PLUGINS": plugins, "PYTHONDONTWRITEBYTECODE": "1",
           "PYTHONPATH": os.pathsep.join([str(folder), os.environ.get("PYTHONPATH", "")])}
    result = subprocess.run([str(BANDITSWEEP), *args], cwd=tmp_path, env=env, capture_output=True, text=True,
                            timeout=120)
    lines = result.stderr.splitlines()
    assert result.returncode == 2, result.stderr[-2000:]
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr[-2000:]
    assert lines[0].startswith(message) and len(lines[0]) <= MAX_LINE, lines[0]
    assert result.stdout == ""
    assert tree(tmp_path) == before   # no results root, sweep folder or MLflow store


@pytest.mark.parametrize("command", COMMANDS)
def test_a_missing_plugin_module_is_bad_input_in_every_command(command, tmp_path):
    module, message = PLUGIN_CASES["missing"]
    _refused(tmp_path, COMMANDS[command], module, message)


@pytest.mark.parametrize("case", [c for c in PLUGIN_CASES if c != "missing"])
@pytest.mark.parametrize("command", ["run", "list"])
def test_a_plugin_module_that_cannot_be_imported_is_named_with_its_error(case, command, tmp_path):
    module, message = PLUGIN_CASES[case]
    # A good module before the bad one changes nothing: the bad one is named.
    _refused(tmp_path, COMMANDS[command], f"json, {module}", message)


def test_the_plugin_error_is_typed_in_the_core_layer(monkeypatch):
    """core raises its own PluginError (it imports nothing of sweeps); the CLI maps it to exit 2."""
    from banditsweep.core.engine import registry

    monkeypatch.setenv("BANDITSWEEP_PLUGINS", "no_such_module")
    with pytest.raises(registry.PluginError) as error:
        registry.algorithm_names()
    assert error.value.module == "no_such_module" and error.value.variable == "BANDITSWEEP_PLUGINS"
    assert "banditsweep.sweeps" not in Path(registry.__file__).read_text()
