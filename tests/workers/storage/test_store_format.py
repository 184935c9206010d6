"""A results folder says its store format; a reader older than the store refuses it whole, with a
clear message, instead of setting its newer records aside as damage. Records written before trials
carried their code are read as "code unknown", and said so once."""

import json
import shutil
from pathlib import Path

from paths import REPO

from banditsweep.sweeps.cli.main import main

SHIPPED = REPO / "docs" / "results" / "kernel_exact_vs_rls"
SPEC = REPO / "sweeps" / "kernel_exp3" / "exact_vs_rls.yaml"


def _shipped(tmp_path: Path) -> Path:
    results = tmp_path / "results"
    shutil.copytree(SHIPPED, results / "kernel_exact_vs_rls")
    return results


def test_records_without_their_code_are_code_unknown(tmp_path, capsys):
    # Figure 2's folder: 36 trials recorded before trials carried their code.
    results = tmp_path / "results"
    shutil.copytree(REPO / "docs" / "results" / "neural_fig2_likelihoods_cpu", results / "neural_fig2_likelihoods_cpu")
    spec = REPO / "sweeps" / "neural_rbmle" / "fig2_likelihoods_cpu.yaml"
    assert main(["status", str(spec), "--results", str(results)]) == 0
    out = capsys.readouterr().out
    assert out.count("recorded before trials carried their code (code unknown)") == 1, out
    assert "36 finished trial(s) were recorded before" in out


def test_a_newer_store_is_refused_whole(tmp_path, capsys):
    results = _shipped(tmp_path)
    folder = results / "kernel_exact_vs_rls"
    (folder / ".format.json").write_text(json.dumps({"store_format": 99, "written_by": "banditsweep 9.0"}))
    before = sorted(p.relative_to(folder) for p in folder.rglob("*"))
    for command in ("status", "report", "run", "verify"):
        assert main([command, str(SPEC), "--results", str(results)]) == 2, command
        err = capsys.readouterr().err
        assert "store format 99 (banditsweep 9.0); this banditsweep reads formats up to 1" in err, err
        assert len(err.strip().splitlines()) == 1
    assert sorted(p.relative_to(folder) for p in folder.rglob("*")) == before   # nothing moved or written
    assert not (folder / "quarantine").exists()


def test_a_store_format_file_that_is_not_one_is_refused(tmp_path, capsys):
    results = _shipped(tmp_path)
    (results / "kernel_exact_vs_rls" / ".format.json").write_text("{not json")
    assert main(["status", str(SPEC), "--results", str(results)]) == 2
    assert "not a store-format file banditsweep writes" in capsys.readouterr().err
