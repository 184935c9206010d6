"""README.md's commands, found as a reader finds them: the quick-start line (`banditsweep run
sweeps/quickstart.yaml` after the install) and its last step, the command that runs the sweep once
banditsweep is installed. For the tests that run README's commands in a venv of their own."""

from paths import REPO

QUICKSTART = "banditsweep run sweeps/quickstart.yaml"


def quickstart_line(readme: str | None = None) -> str:
    """README's whole quick-start command line: make ./.venv, install, run the quick-start sweep."""
    text = (REPO / "README.md").read_text() if readme is None else readme
    return next(line for line in text.splitlines() if QUICKSTART in line)


def quickstart_step(readme: str | None = None) -> str:
    """The quick-start line's last step, the sweep itself (``.venv/bin/banditsweep run ...``)."""
    step = quickstart_line(readme).split(" && ")[-1]
    assert QUICKSTART in step and step.startswith(".venv/bin/"), step
    return step
