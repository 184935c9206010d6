"""``banditsweep list [NAME]``: the parameters of every algorithm and environment kind as a spec
writes them, with their descriptions, allowed values and defaults; never a Python type's name."""

import os
import subprocess
import sys

import pytest

from banditsweep.core.engine import registry
from banditsweep.sweeps.cli.main import main


def _block(out: str, name: str) -> list[str]:
    """The lines of one algorithm's or environment's entry: its header and its indented parameters."""
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"{name} ["))
    end = next((i for i in range(start + 1, len(lines)) if not lines[i].startswith("  ")), len(lines))
    return lines[start:end]


def _listing() -> str:
    """``banditsweep list`` in a process of its own: the built-in kinds only (tests before this one
    may have registered plugins in this process)."""
    env = {k: v for k, v in os.environ.items() if k != "BANDITSWEEP_PLUGINS"}
    done = subprocess.run([sys.executable, "-m", "banditsweep", "list"], capture_output=True, text=True,
                          timeout=300, env=env)
    assert done.returncode == 0, done.stderr
    return done.stdout


def _built_in(cls) -> bool:
    return cls.__module__.startswith("banditsweep.")


def test_list_shows_parameters_with_descriptions_choices_and_defaults():
    out = _listing()
    assert "banditsweep.core." not in out and "Optional" not in out and "typing" not in out
    assert "required)" in out and "=required" not in out and "'paper'" not in out
    assert max(len(line) for line in out.splitlines()) <= 100

    # Each kind under its name, the interactions and its one-line summary.
    ga = _block(out, "neural_rbmle_ga")
    assert ga[0].startswith("neural_rbmle_ga [contextual]: NeuralRBMLE-GA (NeuralRBMLE paper, Algorithm 1)")
    text = "\n".join(ga)
    # A number with its bound, the default as YAML writes it, the Field's description below it.
    assert "    lr: a number > 0 (default: 0.001)\n        step size eta\n" in text
    assert "    width: an integer >= 2 (default: 100)\n        hidden width m\n" in text
    # A Literal's choices, the default one of them.
    assert "    likelihood: gaussian | bernoulli | mixture (default: gaussian)" in text
    assert "    init: paper | default (default: paper)" in text
    # The same field with another default on another algorithm.
    assert "    init: paper | default (default: default)" in "\n".join(_block(out, "neural_ucb"))
    assert "    p: a number > 0 and <= 1 (default: 0.8)" in "\n".join(_block(out, "bootstrapped_nn"))
    assert _block(out, "random")[-1] == "    (no parameters)"

    kernel = "\n".join(_block(out, "adversarial_kernel"))
    assert kernel.startswith("adversarial_kernel [adversarial_domain]: Adaptive adversary of the kernel paper")
    assert "    setting: 1 | 2 | 3 | 4 (default: none)\n        the paper's domain 1-4 (SPEC 2.2)" in kernel
    # A union of nested settings: the mappings a spec writes.
    assert "    domain: {grid: [integer, ...]} | {uniform: integer, dim: integer} | {continuous: integer}" in kernel
    assert "    nu: a number > 0 (default: none)" in kernel
    assert "    norm_bound: a number > 0 (default: 2.0)\n        B, the RKHS-norm bound" in kernel
    classification = "\n".join(_block(out, "classification"))
    assert "    dataset: adult | covertype | magictelescope | mushroom | shuttle | mnist (required)" in classification
    assert "    scaling: rownorm | standard (default: rownorm)\n        rownorm: each row scaled to unit norm" in classification
    # Every parameter of every registered kind has a description.
    for cls in filter(_built_in, map(registry.algorithm_class, registry.algorithm_names())):
        for field, info in cls.Params.model_fields.items():
            assert info.description, (cls, field)
    for cls in filter(_built_in, map(registry.environment_class, registry.environment_names())):
        for field, info in cls.Config.model_fields.items():
            assert info.description, (cls, field)

    assert "Result sinks (default: mlflow): mlflow" in out
    assert "Sharded trials (shards: N or shard_points: P" in out and "rls_kernel_exp3 on adversarial_kernel" in out


def test_list_name_shows_one_algorithm_or_environment(capsys):
    assert main(["list", "linucb"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines() == [
        "linucb [contextual]: LinUCB (Li et al. 2010): ridge estimate plus nu sqrt(x^T V^-1 x).",
        "    nu: a number >= 0 (default: 1.0)", "        exploration scale",
        "    lam: a number > 0 (default: 1.0)", "        ridge regulariser lambda (V_0 = lambda I)"]
    assert main(["list", "synthetic"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("synthetic [contextual]: Synthetic contextual bandit of the NeuralUCB paper")
    assert "    function: h1 | h2 | h3 (default: h1)" in out and "neural_ucb" not in out


@pytest.mark.parametrize("name", ["neural_rbmle_gaa", "nosuch"])
def test_list_of_an_unknown_name_exits_2_naming_the_known_ones(name):
    done = subprocess.run([sys.executable, "-m", "banditsweep", "list", name],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and done.stdout == ""
    (line,) = done.stderr.splitlines()
    assert line.startswith(f"error: banditsweep list: unknown algorithm or environment kind '{name}'")
    assert "algorithms: apg_exp3, bootstrapped_nn," in line and "environment kinds: adversarial_kernel," in line
    assert ("(did you mean 'neural_rbmle_ga'?)" in line) == (name == "neural_rbmle_gaa")
