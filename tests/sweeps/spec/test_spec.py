"""The sweep-spec validator: every bad spec is refused with the file, the key and what is allowed."""

import copy
from pathlib import Path

import pytest
import yaml

from banditsweep.sweeps.cli.main import main
from banditsweep.sweeps.spec.model import SpecError, load_sweep, parse_sweep
from banditsweep.sweeps.spec.overrides import parse_overrides

GOOD = {
    "sweep": "unit",
    "horizon": 100,
    "seeds": 2,
    "environments": [{"kind": "synthetic", "function": "h1"}, {"kind": "synthetic", "function": "h3", "arms": 3}],
    "algorithms": [
        {"name": "linucb", "grid": {"nu": [0.1, 1.0]}, "params": {"lam": 2.0}},
        {"name": "random"},
    ],
}


def test_good_spec_expands_to_the_cartesian_product():
    sweep = parse_sweep(copy.deepcopy(GOOD))
    # linucb: 2 envs x 2 nu x 2 seeds; random: 2 envs x 2 seeds
    assert len(sweep.trials) == 8 + 4
    linucb = [t for t in sweep.trials if t.spec.algorithm == "linucb"]
    assert {t.spec.params["nu"] for t in linucb} == {0.1, 1.0}
    assert all(t.spec.params["lam"] == 2.0 for t in linucb)
    assert {t.environment for t in sweep.trials} == {"synthetic:h1", "synthetic:h3,arms=3"}
    assert len({t.trial_id for t in sweep.trials}) == 12


def test_an_explicit_seed_list_is_the_trials_seeds():
    raw = copy.deepcopy(GOOD)
    raw["seeds"] = [3, 7]
    sweep = parse_sweep(raw)
    assert {t.spec.seed for t in sweep.trials} == {3, 7}


def test_an_environments_horizon_replaces_the_sweeps_for_its_trials_alone():
    raw = copy.deepcopy(GOOD)
    raw["environments"][0]["horizon"] = 40
    sweep = parse_sweep(raw)
    assert {t.spec.horizon for t in sweep.trials if t.environment == "synthetic:h1"} == {40}
    assert {t.spec.horizon for t in sweep.trials if t.environment != "synthetic:h1"} == {100}


def test_when_filter_pairs_algorithms_with_environments():
    raw = copy.deepcopy(GOOD)
    raw["algorithms"][0]["when"] = {"function": "h3"}
    sweep = parse_sweep(raw)
    assert {t.environment for t in sweep.trials if t.spec.algorithm == "linucb"} == {"synthetic:h3,arms=3"}


def test_overrides_replace_horizon_everywhere_and_seeds():
    raw = copy.deepcopy(GOOD)
    raw["environments"][0]["horizon"] = 40
    sweep = parse_sweep(raw, overrides=parse_overrides(["horizon=7", "seeds=1"]))
    assert {t.spec.horizon for t in sweep.trials} == {7}
    assert {t.spec.seed for t in sweep.trials} == {0}


def _mutate(path, value):
    raw = copy.deepcopy(GOOD)
    target = raw
    for key in path[:-1]:
        target = target[key]
    if value is _DELETE:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return raw


_DELETE = object()

BAD = [
    (("colour",), "blue", "colour", "unknown key 'colour'"),
    (("sweep",), "has space", "sweep", "pattern"),
    (("horizon",), 0, "horizon", "greater than or equal to 1"),
    (("horizon",), "long", "horizon", "integer"),
    (("seeds",), 0, "seeds", "positive count"),
    (("seeds",), [], "seeds", "empty"),
    (("seeds",), [1, 1], "seeds", "repeated"),
    (("seeds",), [-1], "seeds", ">= 0"),
    (("environments",), [], "environments", "at least 1"),
    (("environments", 0, "kind"), "nope", "environments[0].kind", "allowed: "),
    (("environments", 0, "kind"), _DELETE, "environments[0]", "missing key 'kind'"),
    (("environments", 0, "function"), "h9", "environments[0].function", "'h1', 'h2' or 'h3'"),
    (("environments", 0, "arms"), 1, "environments[0].arms", "greater than or equal to 2"),
    (("environments", 0, "colour"), 1, "environments[0].colour", "allowed: kind, horizon, label"),
    (("environments", 0, "horizon"), -5, "environments[0].horizon", "positive integer"),
    (("algorithms", 0, "name"), "ucb9000", "algorithms[0].name", "allowed: "),
    (("algorithms", 0, "grid", "nu"), [], "algorithms[0].grid", "empty"),
    (("algorithms", 0, "grid", "nu"), ["high"], "algorithms[0].grid.nu", "valid number"),
    (("algorithms", 0, "grid", "nu"), [-1.0], "algorithms[0].grid.nu", "greater than or equal to 0"),
    (("algorithms", 0, "params", "alpha"), 1, "algorithms[0].params.alpha", "allowed: nu, lam"),
    (("algorithms", 0, "params", "nu"), 1, "algorithms[0].grid", "both grid and params"),
    (("algorithms", 0, "when"), {"dataset": "mnist"}, "algorithms[0].when.dataset", "no environment has key"),
    (("algorithms", 0, "extra"), 1, "algorithms[0].extra", "unknown key 'extra'"),
    (("resources",), {"gpus": 1}, "resources.gpus", "unknown key 'gpus'"),
    (("resources",), {"cpus_per_trial": 0}, "resources.cpus_per_trial", "greater than 0"),
    (("log_every",), 0, "log_every", "greater than or equal to 1"),
]


@pytest.mark.parametrize("path,value,location,message", BAD, ids=[b[2] + ":" + b[3] for b in BAD])
def test_bad_specs_name_the_key_and_what_is_allowed(path, value, location, message):
    with pytest.raises(SpecError) as info:
        parse_sweep(_mutate(path, value), "bad.yaml")
    assert info.value.location == location
    assert message in info.value.message
    assert str(info.value).startswith("bad.yaml: ")


def test_spec_must_be_a_mapping_and_valid_yaml(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text("- just\n- a list\n")
    with pytest.raises(SpecError, match="YAML mapping"):
        load_sweep(path)
    path.write_text("sweep: [unclosed\n")
    with pytest.raises(SpecError, match="not valid YAML"):
        load_sweep(path)
    with pytest.raises(SpecError, match="cannot read"):
        load_sweep(tmp_path / "missing.yaml")


def test_yaml_is_loaded_safely(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text("sweep: !!python/object/apply:os.system ['echo pwned']\n")
    with pytest.raises(SpecError, match="not valid YAML"):
        load_sweep(path)


def test_bad_override_is_refused():
    with pytest.raises(SpecError, match="cannot be overridden"):
        parse_sweep(copy.deepcopy(GOOD), overrides={"algorithms": []})
    with pytest.raises(SpecError, match="key=value"):
        parse_overrides(["horizon"])


def test_cli_bad_spec_exits_2_and_writes_nothing(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    raw = _mutate(("algorithms", 0, "name"), "ucb9000")
    Path("bad.yaml").write_text(yaml.safe_dump(raw))
    assert main(["run", "bad.yaml"]) == 2
    err = capsys.readouterr().err
    assert "bad.yaml: algorithms[0].name: unknown algorithm 'ucb9000'; allowed:" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.yaml"]


def test_shipped_specs_are_valid(repo):
    specs = sorted(p for p in (repo / "sweeps").rglob("*.yaml") if p.parent.name != "papers")   # papers: data
    assert repo / "sweeps" / "quickstart.yaml" in specs
    for path in specs:
        assert load_sweep(path).trials, path


def test_label_templates_split_rows_by_a_parameter():
    raw = copy.deepcopy(GOOD)
    raw["algorithms"][0]["label"] = "LinUCB (nu={nu})"
    sweep = parse_sweep(raw)
    assert {t.label for t in sweep.trials if t.spec.algorithm == "linucb"} == {"LinUCB (nu=0.1)", "LinUCB (nu=1.0)"}
    for bad in ("x {nu.__class__}", "x {colour}", "x {nu:>10}", "x {"):
        raw["algorithms"][0]["label"] = bad
        with pytest.raises(SpecError) as info:
            parse_sweep(raw, "bad.yaml")
        assert info.value.location == "algorithms[0].label"


def test_a_second_concurrent_run_of_a_sweep_is_refused(tmp_path, monkeypatch, capsys):
    from banditsweep.workers.storage.store import SweepStore

    monkeypatch.chdir(tmp_path)
    Path("s.yaml").write_text(yaml.safe_dump(GOOD))
    with SweepStore.for_sweep("results", "unit").exclusive():
        assert main(["run", "s.yaml", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "another `run` of this sweep is in progress (pid " in err
    assert not (tmp_path / "results" / "unit" / "trials").exists()


def test_anchors_and_merge_keys_still_work(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text("sweep: merged\nhorizon: 10\nseeds: &n 2\n"
                    "environments:\n  - &h1 {kind: synthetic, function: h1}\n  - {<<: *h1, arms: 3}\n"
                    "algorithms:\n  - {name: random}\n  - {name: linucb, grid: {nu: [1.0]}, params: {lam: *n}}\n")
    sweep = load_sweep(path)
    assert len(sweep.trials) == 2 * 2 * 2
    assert {t.environment for t in sweep.trials} == {"synthetic:h1", "synthetic:h1,arms=3"}


def test_every_message_is_one_bounded_line():
    from banditsweep.sweeps.spec.errors import MAX_MESSAGE

    error = SpecError("bad.yaml", "label", "x" * 10_000 + "\nsecond line")
    assert len(str(error)) <= MAX_MESSAGE and "\n" not in str(error)
    raw = copy.deepcopy(GOOD)
    raw["algorithms"][0]["label"] = ["lol"] * 100_000
    with pytest.raises(SpecError) as info:
        parse_sweep(raw, "bad.yaml")
    assert info.value.location == "algorithms[0].label" and len(str(info.value)) <= MAX_MESSAGE


@pytest.mark.parametrize("value", [True, False])
def test_booleans_are_not_numbers(value):
    for key in ("horizon", "seeds", "log_every", "checkpoint_every"):
        with pytest.raises(SpecError, match="boolean|count or a list"):
            parse_sweep({**copy.deepcopy(GOOD), key: value}, "bad.yaml")
    for key in ("cpus_per_trial", "gpus_per_trial", "batch_trials"):
        with pytest.raises(SpecError, match="boolean") as info:
            parse_sweep({**copy.deepcopy(GOOD), "resources": {key: value}}, "bad.yaml")
        assert info.value.location == f"resources.{key}"


def test_the_parent_runs_settings_give_a_long_run_of_seeds_by_its_ends():
    """MLflow keeps 6,000 characters of a parameter: 50,000 consecutive seeds are `0..49999`, a
    short or scattered list is written out."""
    import argparse
    import json

    from banditsweep.sweeps.cli.commands.run import sweep_settings

    args = argparse.Namespace(overrides=[])
    many = sweep_settings(args, parse_sweep({**copy.deepcopy(GOOD), "seeds": 50_000}))
    assert many["seeds"] == "0..49999" and many["trials"] == str(6 * 50_000)
    assert json.loads(sweep_settings(args, parse_sweep(copy.deepcopy(GOOD)))["seeds"]) == [0, 1]
    scattered = list(range(0, 40, 3))
    assert json.loads(sweep_settings(args, parse_sweep({**copy.deepcopy(GOOD), "seeds": scattered}))["seeds"]) == scattered
