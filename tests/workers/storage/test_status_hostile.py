"""`banditsweep status` on result files changed by hand so that every file still passes its own
check: a curves file of another column type named with its right SHA-256, a journal record without
a checksum (as earlier versions wrote them) that changes a final regret, a second copy of a trial's
rounds with the same regret but other rewards or arms, a 1 MB trials table of 2x10^7 rows. Each is
named (exit 4), never a traceback, and `status` stays quick."""

import dataclasses
import json
import math
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from banditsweep.sweeps.cli.main import main
from banditsweep.workers.storage.checksums import file_digest
from banditsweep.workers.storage.consistency import check
from banditsweep.workers.storage.curves import CURVE_SCHEMA
# A finished 4-trial sweep, and a copy of it for each test.
from counts_sweep import finished_sweep, status, swept  # noqa: F401  (fixtures)
from store_builders import edit_journal

TRIALS, HORIZON = 4, 10   # counts_sweep.SPEC


def rerun(capsys) -> str:
    code = main(["run", "counts.yaml", "--no-progress", "--sink", "none"])
    captured = capsys.readouterr()
    assert code == 0 and "Traceback" not in captured.err, captured.err
    return captured.out


def write_named(table: pa.Table, path: Path) -> Path:
    """``table`` as a curves file at ``path`` renamed with the SHA-256 of its bytes (as `run` names them)."""
    pq.write_table(table, path)
    named = path.with_name(f"{path.stem}-{file_digest(path)}.parquet")
    path.rename(named)
    return named


# -- 1. a curves file of another column type, under its right checksum --------------------------

@pytest.mark.parametrize("command", ["status", "run"])
def test_a_curves_file_with_a_column_of_another_type_is_quarantined_and_its_trials_run_again(swept, capsys, command,
                                                                                            shared_ray):
    (curves,) = swept.curves_dir.glob("*.parquet")
    table = pq.read_table(curves)
    text = table.set_column(table.schema.get_field_index("t"), "t", pc.cast(table["t"], pa.string()))
    curves.unlink()
    planted = write_named(text, swept.curves_dir / "c-00000000000000000001-1.parquet")
    why = "not a curves table: column t is string (the curves table's is int64)"
    moved = (f"warning: damaged result file {planted} ({why}) moved to "
             f"{swept.root}/quarantine/curves-{planted.name}")
    if command == "status":
        code, out, err = status(capsys)
        assert code == 4 and "Traceback" not in err, err
        assert moved in err.splitlines()
        assert f"{TRIALS} trials: 0 done, 0 failed, {TRIALS} pending" in out
        out = rerun(capsys)
    else:   # `run` finds it itself, before its compaction reads the curves
        code = main(["run", "counts.yaml", "--no-progress", "--sink", "none"])
        captured = capsys.readouterr()
        assert code == 0 and "Traceback" not in captured.err and moved in captured.err, captured.err
        out = captured.out
    assert f"{TRIALS} to run" in out
    assert (swept.root / "quarantine" / f"curves-{planted.name}").exists()
    code, out, err = status(capsys)
    assert code == 0 and not err, err


def test_a_curves_file_of_an_earlier_layout_is_still_read(swept, capsys):
    """Files of earlier versions lack the trial's names and seed and the extras, and may hold
    narrower types (Arrow casts them): not damage."""
    (curves,) = swept.curves_dir.glob("*.parquet")
    table = pq.read_table(curves).drop_columns(["algorithm", "label", "environment", "seed",
                                                "adversary_choice", "other_extras"])
    table = table.set_column(table.schema.get_field_index("t"), "t", pc.cast(table["t"], pa.int32()))
    curves.unlink()
    write_named(table, swept.curves_dir / "c-00000000000000000001-1.parquet")
    code, out, err = status(capsys)
    assert code == 0 and not err, err
    assert f"curves {TRIALS * HORIZON} rows: {TRIALS} of {TRIALS} finished trials have every round" in out


def test_a_curves_file_without_a_column_every_layout_has_is_quarantined(swept, capsys):
    (curves,) = swept.curves_dir.glob("*.parquet")
    table = pq.read_table(curves).drop_columns(["cum_regret"])
    curves.unlink()
    planted = write_named(table, swept.curves_dir / "c-00000000000000000001-1.parquet")
    code, _, err = status(capsys)
    assert code == 4 and "Traceback" not in err, err
    assert f"damaged result file {planted} (not a curves table: no column cum_regret) moved to" in err


# -- 2. a journal record without a checksum that changes a final regret --------------------------

def test_a_final_regret_other_than_the_curves_last_round_is_named(swept, capsys):
    curves = pq.read_table(next(swept.curves_dir.glob("*.parquet")))
    segment, trial_id = edit_journal(swept, lambda v: {**v, "final_regret": v["final_regret"] + 1.0})
    planted = json.loads(segment.read_text().splitlines()[0])["final_regret"]
    last = curves.filter(pc.and_(pc.equal(curves["trial_id"], trial_id), pc.equal(curves["t"], HORIZON)))
    (regret,) = last["cum_regret"].to_pylist()
    assert not math.isclose(planted, regret)
    code, out, err = status(capsys)
    assert code == 4 and "Traceback" not in err, err
    assert (f"inconsistent: 1 finished trial(s) have a final regret in the journal other than the cumulative "
            f"regret of their last round in the curves ({trial_id}; {trial_id}: journal {planted!r}, curves "
            f"{regret!r} at round {HORIZON}): the two are one number") in err, err
    assert f"{TRIALS} trials: {TRIALS} done" in out   # the record itself is valid: named, not moved


def test_a_final_regret_is_compared_at_a_tolerance_for_the_last_bits(swept):
    records = swept.journal()
    trial_id = min(records)
    record = records[trial_id]
    near = {**records, trial_id: dataclasses.replace(record, final_regret=record.final_regret * (1 + 1e-13) + 1e-13)}
    assert not any("final regret" in problem for problem in check(swept.root, near).problems)
    far = {**records, trial_id: dataclasses.replace(record, final_regret=record.final_regret * (1 + 1e-6) + 1e-6)}
    assert any("final regret in the journal other than" in p and trial_id in p
               for p in check(swept.root, far).problems)


# -- 3. a second copy of a trial's rounds with the same regret, other values ---------------------

def _planted_copy(swept, column: str, change) -> str:
    (curves,) = swept.curves_dir.glob("*.parquet")
    table = pq.read_table(curves)
    first = table["trial_id"][0].as_py()
    again = table.filter(pc.equal(table["trial_id"], first))
    index = again.schema.get_field_index(column)
    again = again.set_column(index, again.schema.field(index), change(again[column]))
    pq.write_table(again.cast(CURVE_SCHEMA), swept.curves_dir / "c-99999999999999999999-99999.parquet")
    return first


def _value(column: str, t: int, curves) -> float:
    return curves.filter(pc.equal(curves["t"], t))[column][0].as_py()


OTHER_COPIES = {
    # column: (change of the copy, what status says of round 1 given the original value there)
    "reward": (lambda c: pc.add(c, 0.5), lambda v: f"reward {v:g} and {v + 0.5:g}"),
    "regret": (lambda c: pc.add(c, 0.25), lambda v: f"regret {v:g} and {v + 0.25:g}"),
    "arm": (lambda c: pc.add(c, 1), lambda v: f"arm {v:g} and {v + 1:g}"),
    "expected_regret": (lambda c: pa.array(np.full(len(c), 0.75)), lambda v: "expected_regret NaN and 0.75"),
    "other_extras": (lambda c: pa.array([[("planted", 1.0)]] * len(c), CURVE_SCHEMA.field("other_extras").type),
                     lambda v: "other_extras planted in some copies only"),
}


@pytest.mark.parametrize("column", list(OTHER_COPIES))
def test_a_second_copy_of_a_trials_rounds_with_the_same_regret_and_other_values_is_a_fault(swept, capsys, column):
    change, what = OTHER_COPIES[column]
    original = pq.read_table(next(swept.curves_dir.glob("*.parquet")))
    first = _planted_copy(swept, column, change)
    rows = original.filter(pc.equal(original["trial_id"], first))
    code, out, err = status(capsys)
    assert code == 4, out + err
    value = _value(column, 1, rows) if column != "other_extras" else None
    assert (f"inconsistent: 1 finished trial(s) have rounds written twice with different values ({first}; "
            f"{first}: round 1: {what(value)}): a trial's rerun gives the same values") in err, err


@pytest.mark.parametrize("change", [
    ("seconds", lambda c: pc.add(c, 1.0)),                            # wall time: never the same twice
    ("reward", lambda c: pc.multiply(c, 1 + 1e-13)),                 # the last bits
    ("adversary_choice", lambda c: pa.nulls(len(c), pa.float64())),   # a file of a layout without it
], ids=["seconds", "last bits", "column missing"])
def test_a_second_copy_that_a_rerun_could_write_is_a_note(swept, capsys, change):
    _planted_copy(swept, *change)
    code, out, err = status(capsys)
    assert code == 0 and not err, err
    assert "note: 1 finished trial(s) have rounds written twice (a run stopped between" in out


# -- 4. a trials table of far more rows than the journal's trials ------------------------------

def test_a_trials_table_of_far_more_rows_than_the_journal_is_named_without_reading_its_rows(swept, capsys,
                                                                                           monkeypatch):
    path = swept.trials_dir / "trials.parquet"
    rows, group = 20 * (1 << 20), 1 << 20
    names = pa.table({"trial_id": pa.DictionaryArray.from_arrays(pa.array(np.zeros(group, np.int32)), ["f" * 64]),
                      "status": pa.DictionaryArray.from_arrays(pa.array(np.zeros(group, np.int32)), ["finished"])})
    with pq.ParquetWriter(path, names.schema) as writer:
        for _ in range(rows // group):
            writer.write_table(names, row_group_size=group)
    assert path.stat().st_size < 1 << 20
    read_table = pq.read_table

    def refuse_the_table(source, *args, **kwargs):   # `status` may read its footer, never its rows
        assert str(source) != str(path), "the trials table's rows were read"
        return read_table(source, *args, **kwargs)

    with monkeypatch.context() as patched:
        patched.setattr(pq, "read_table", refuse_the_table)
        code, out, err = status(capsys)
    assert code == 4 and "Traceback" not in err, err
    assert err.strip() == (f"inconsistent: {path}: {rows} rows, the journal {TRIALS} trials: over 1000 rows more "
                           "than the journal has trials (its rows were not read); `run` rebuilds it from the journal")
    assert f"trials table {rows} rows" in out
    rerun(capsys)
    assert pq.read_metadata(path).num_rows == TRIALS
    assert status(capsys)[0] == 0
