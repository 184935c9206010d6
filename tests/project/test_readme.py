"""README's commands and CI agree, they say what they do while they install, and README's first sweep
of one's own runs as written: the spec, `plan`, `run`, `status`, `report` and the Python lines."""

import re
import shlex

import pytest

from banditsweep.sweeps.cli.main import main


def _section(readme: str, title: str) -> str:
    return readme.split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]


def _blocks(text: str, language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", text, re.S)


def test_ci_runs_exactly_the_readme_test_command(repo):
    readme = (repo / "README.md").read_text()
    ci = (repo / ".ci" / "run").read_text()
    command = next(line for line in readme.splitlines() if line.startswith("python3 -m venv") and "pytest" in line)
    assert command in ci.splitlines()
    quickstart = next(line for line in readme.splitlines() if "banditsweep run sweeps/quickstart.yaml" in line)
    assert quickstart.startswith("python3 -m venv .venv") and "torch==2.13.0" in quickstart


def test_the_two_commands_say_what_they_do_before_the_quiet_install(repo):
    readme = (repo / "README.md").read_text()
    commands = [block.strip().splitlines()[-1] for block in _blocks(_section(readme, "Two commands"), "bash")]
    assert len(commands) == 2
    for command in commands:
        steps = command.split(" && ")
        said = next(index for index, step in enumerate(steps) if step.startswith("echo "))
        installed = next(index for index, step in enumerate(steps) if "pip install" in step)
        assert said < installed and "minutes" in steps[said], command
    # How long the default suite takes is said next to its command.
    assert re.search(r"default test suite takes about \d+(–\d+)? minutes on 2\s+cores", readme)


def test_the_first_sweep_comes_right_after_the_two_commands_and_every_link_resolves(repo):
    readme = (repo / "README.md").read_text()
    titles = re.findall(r"^## (.+)$", readme, re.M)
    assert titles[:2] == ["Two commands", "A first sweep of your own"], titles
    for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", readme):
        assert (repo / target).exists(), target


def test_the_first_sweep_runs_as_written(repo, shared_ray, tmp_path, monkeypatch, capsys):
    """The spec saved as README says, the four commands as written (their `.venv/bin/banditsweep`
    is this process's command line), then the Python lines; results in the test's folder."""
    tour = _section((repo / "README.md").read_text(), "A first sweep of your own")
    [spec] = _blocks(tour, "yaml")
    [commands] = _blocks(tour, "bash")
    [python] = _blocks(tour, "python")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "my_sweep.yaml").write_text(spec)
    said = {}
    for line in commands.splitlines():
        argv = shlex.split(line, comments=True)
        assert argv[0] == ".venv/bin/banditsweep", line
        assert main(argv[1:]) == 0, (line, capsys.readouterr())
        said[argv[1]] = capsys.readouterr().out
    assert list(said) == ["plan", "run", "status", "report"]
    assert "32 trials, 32,000 trial-rounds" in said["plan"] and "Ray's start and stop about 20 s" in said["plan"]
    assert "32 finished, 0 failed" in said["run"] and "| LinUCB |" in said["run"]
    assert "my_sweep: 32 trials: 32 done, 0 failed, 0 pending" in said["status"]
    assert "| LinUCB | synthetic:h1 | 8 | 0 | 0 |" in said["status"]
    report = tmp_path / "results" / "my_sweep" / "report"
    assert f"to {report}" in said["report"] and (report / "regret_synthetic_h1.png").is_file()

    names = {"__name__": "__main__"}
    exec(compile(python, "README.md", "exec"), names)   # the project's own README, not user data
    assert names["cost"].trials == 0 and names["cost"].wall_seconds == 0   # every trial done already
    result = names["result"]
    assert result.summary == f"all 32 trials of the spec are already finished in {tmp_path / 'results' / 'my_sweep'}"
    assert len(names["trials"]) == 32 and len(names["curves"]) == 32 * 1000
    assert len(names["figure"].axes) == 2
    assert result.summary in capsys.readouterr().out


def _anchors(text: str) -> set[str]:
    """The anchors GitHub gives a page's headings."""
    return {re.sub(r"[^\w\- ]", "", title.strip().lower()).replace(" ", "-")
            for title in re.findall(r"^#+ (.+)$", re.sub(r"```.*?```", "", text, flags=re.S), re.M)}


@pytest.mark.parametrize("page", ["specs", "commands", "python", "results", "statistics", "verify", "cluster",
                                  "reliability", "testing", "architecture"])
def test_every_page_readme_sends_a_newcomer_to_exists_and_links_only_what_exists(repo, page):
    """Each page README links, and every link of it to a file (and a heading of that file) that exists."""
    text = (repo / "docs" / f"{page}.md").read_text()
    assert f"](docs/{page}.md)" in (repo / "README.md").read_text()
    for target, anchor in re.findall(r"\]\(([^)#:]*?)(?:#([^)]*))?\)", text):
        path = repo / "docs" / target if target else repo / "docs" / f"{page}.md"
        assert path.exists(), (page, target)
        if anchor:
            assert anchor in _anchors(path.read_text()), (page, target, anchor)
