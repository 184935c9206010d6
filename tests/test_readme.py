"""README's commands and CI agree."""


def test_ci_runs_exactly_the_readme_test_command(repo):
    readme = (repo / "README.md").read_text()
    ci = (repo / ".ci" / "run").read_text()
    command = next(line for line in readme.splitlines() if line.startswith("python3 -m venv") and "pytest" in line)
    assert command in ci.splitlines()
    quickstart = next(line for line in readme.splitlines() if "banditsweep run sweeps/quickstart.yaml" in line)
    assert quickstart.startswith("python3 -m venv .venv") and "torch==2.13.0" in quickstart
