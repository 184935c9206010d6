"""One exit-code table for every command (sweeps.cli.commands.EXIT_CODES): the command line's help, its
module and docs/commands.md say the same codes, and the API's errors are the project's types that the command
line maps to them."""

import re

import pytest
from paths import REPO

import banditsweep
from banditsweep.sweeps.cli import main as cli
from banditsweep.sweeps.cli.commands import EXIT_BAD_INPUT, EXIT_CODES
from banditsweep.workers import InputError


def test_every_exit_code_is_named_once_and_said_alike_everywhere():
    assert sorted(EXIT_CODES) == [0, 1, 2, 3, 4, 130]
    commands = (REPO / "docs" / "commands.md").read_text()
    bullet = commands.split("- **Exit codes**:", 1)[1].split("\n- **", 1)[0].split("\n## ", 1)[0]
    said = [int(code) for code in re.findall(r"(?:^|[;:] )(\d+) ", " ".join(bullet.split()))]
    assert said == sorted(EXIT_CODES), said
    doc = " ".join(cli.__doc__.split())
    assert [int(c) for c in re.findall(r"(?:: |; )(\d+) ", doc.split("Exit codes", 1)[1])] == sorted(EXIT_CODES)


@pytest.mark.parametrize("call", [
    lambda: banditsweep.status({"sweep": "x"}, quiet=True),                      # a spec without its keys
    lambda: banditsweep.run("sweeps/quickstart.yaml", max_workers=0, quiet=True),  # an option out of range
    lambda: banditsweep.plan("sweeps/quickstart.yaml", probe_seconds=-1.0, quiet=True),
    lambda: banditsweep.report("sweeps/quickstart.yaml", band="wide", quiet=True),
    lambda: banditsweep.verify("sweeps/quickstart.yaml", sample=0, quiet=True),
    lambda: banditsweep.compare("/nonexistent-results-root", "quickstart"),
    lambda: banditsweep.load("/nonexistent-results-root", "quickstart"),
], ids=["status-spec", "run-option", "plan-option", "report-choice", "verify-option", "compare-folder", "load-folder"])
def test_the_api_raises_the_projects_bad_input_error(call, monkeypatch):
    monkeypatch.chdir(REPO)
    with pytest.raises((InputError, banditsweep.sweeps.spec.errors.SpecError)) as raised:
        call()
    assert isinstance(raised.value, cli.INPUT_ERRORS)   # what the command line exits 2 for
    assert EXIT_BAD_INPUT == 2


def test_a_python_value_of_the_wrong_type_is_bad_input_and_a_type_error():
    with pytest.raises(InputError) as raised:
        banditsweep.status("sweeps/quickstart.yaml", results=5, quiet=True)
    assert isinstance(raised.value, TypeError) and "results: give a string" in str(raised.value)


@pytest.mark.parametrize("optimize", [[], ["-OO"]], ids=["plain", "docstrings-stripped"])
def test_the_top_level_help_says_what_banditsweep_is_in_whole_sentences(optimize):
    """`banditsweep --help`: the description whole (also where Python strips docstrings), then every
    exit code."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, *optimize, "-m", "banditsweep", "--help"], capture_output=True,
                          text=True, timeout=120, cwd=REPO)
    assert done.returncode == 0, done.stderr
    text = " ".join(done.stdout.split())
    assert " ".join(cli.DESCRIPTION.split()) in text
    described = text.split("...", 1)[1].split("positional arguments:", 1)[0].strip()
    assert described == cli.DESCRIPTION and described.endswith(".") and "``" not in described
    assert "Run every trial of a bandit experiment" in described and "banditsweep run SPEC" in described
    codes = text.split("exit codes: ", 1)[1]
    assert [int(c) for c in re.findall(r"(?:^|; )(\d+) ", codes)] == sorted(EXIT_CODES)
