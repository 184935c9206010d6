"""Damage that keeps a file readable: flipped bytes in a curves file or the trials table, a journal
record of the wrong type or with a changed value, curve rows left twice after a lost journal.
Every curves part and journal segment carries the SHA-256 of its bytes in its name, every journal
record the SHA-256 of its fields and every Parquet page a CRC; `status` and `run` check them,
quarantine what fails and run its trials again; `report` never ends in a traceback."""

import json
import shutil

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

import banditsweep
from banditsweep.workers.errors import DamagedResultError
from banditsweep.workers.storage.store import SweepStore, named_digest
from flip_sweep import HORIZON, TRIALS, clean_sweep, command, swept  # noqa: F401  (fixtures)
from store_builders import edit_journal


def flip_in_column(path, column: str, count: int = 64) -> None:
    """XOR ``count`` bytes at the end of a column chunk's dictionary page (its last values, past
    the page header): the file stays readable Parquet, its values change."""
    meta = pq.ParquetFile(path).metadata
    chunk = meta.row_group(0).column(meta.schema.to_arrow_schema().get_field_index(column))
    assert chunk.has_dictionary_page and chunk.data_page_offset - chunk.dictionary_page_offset > count + 24
    first = chunk.data_page_offset - count
    data = bytearray(path.read_bytes())
    for i in range(first, first + count):
        data[i] ^= 0x5A
    path.write_bytes(bytes(data))


def assert_same_results(store: SweepStore, clean_trials: pd.DataFrame, clean_curves: pd.DataFrame) -> None:
    """Final regrets and every curve value equal to the clean run's, each (trial, round) once in a
    plain pyarrow.dataset read of curves/."""
    trials, curves = banditsweep.load(store.root.parent, store.root.name)
    key = ["trial_id", "t"]
    np.testing.assert_allclose(trials.set_index("trial_id")["final_regret"].sort_index(),
                               clean_trials.set_index("trial_id")["final_regret"].sort_index(), rtol=1e-12)
    ours, theirs = curves.sort_values(key), clean_curves.sort_values(key)
    assert ours[key].values.tolist() == theirs[key].values.tolist()
    np.testing.assert_allclose(ours["cum_regret"], theirs["cum_regret"], rtol=1e-12, atol=1e-12)
    raw = ds.dataset(store.curves_dir).to_table(columns=key).to_pandas()
    assert len(raw) == TRIALS * HORIZON and not raw.duplicated(key).any()


def test_flipped_bytes_in_a_curves_file_are_found_quarantined_and_its_trials_run_again(swept, clean_sweep, capsys):
    _, clean_trials, clean_curves = clean_sweep
    (curves,) = swept.curves_dir.glob("*.parquet")
    affected = set(pq.read_table(curves, columns=["trial_id"])["trial_id"].to_pylist())
    flip_in_column(curves, "cum_regret")

    code, out, err = command(capsys, "status")
    assert code == 4, (out, err)
    assert (f"warning: damaged result file {curves} (its bytes do not match the SHA-256 in its name) moved to "
            f"{swept.root}/quarantine/curves-{curves.name}") in err
    assert f"{TRIALS} trials: {TRIALS - len(affected)} done, 0 failed, {len(affected)} pending" in out

    code, out, err = command(capsys, "run", "--no-progress", "--sink", "none")
    assert code == 0, err
    assert f"{len(affected)} to run" in out
    assert_same_results(swept, clean_trials, clean_curves)
    assert command(capsys, "status")[0] == 0

    # The same in the merged file, found by `run` itself this time (no `status` before it).
    (curves,) = swept.curves_dir.glob("*.parquet")
    flip_in_column(curves, "cum_regret")
    code, out, err = command(capsys, "run", "--no-progress", "--sink", "none")
    assert code == 0 and f"damaged result file {curves} (its bytes do not match" in err
    assert f"{TRIALS} to run" in out
    assert_same_results(swept, clean_trials, clean_curves)


def test_a_flipped_page_is_found_by_its_crc_where_the_name_has_no_checksum(swept, capsys):
    """A curves file renamed without its checksum (as files of earlier versions are named): its
    pages' CRCs still find the damage, for `status` and for readers (`load`, `report`), which say
    which file and end without a traceback."""
    (curves,) = swept.curves_dir.glob("*.parquet")
    bare = curves.with_name(curves.name.rsplit("-", 1)[0] + ".parquet")
    curves.rename(bare)
    flip_in_column(bare, "cum_regret")
    with pytest.raises(DamagedResultError, match=f"{bare}: damaged curves .*`banditsweep status` moves it aside"):
        banditsweep.load(swept.root.parent, "flip")
    code, out, err = command(capsys, "status")
    assert code == 4 and f"damaged result file {bare} (not readable Parquet: " in err and "CRC" in err, err


def test_report_on_a_damaged_curves_file_ends_without_a_traceback(swept, capsys):
    (curves,) = swept.curves_dir.glob("*.parquet")
    flip_in_column(curves, "cum_regret")
    code, out, err = command(capsys, "report")
    assert "Traceback" not in err and f"damaged result file {curves}" in err, err
    # The table comes from the journal; the figures lack every trial's curves, so it says it is incomplete.
    assert code == 4 and "incomplete: the report leaves out" in err, (out, err)
    assert "wrote " in out and not list((swept.root / "report").glob("regret_*.png"))


BAD_RECORDS = {
    "wrong type": (lambda v: {**v, "horizon": "abc"}, "horizon: must be an integer (got 'abc')"),
    "missing key": (lambda v: {k: x for k, x in v.items() if k != "seed"}, "seed: missing key"),
    "extra key": (lambda v: {**v, "colour": "blue"},
                  "colour: unknown key (got 'blue'); a record holds the fields of TrialRecord only"),
    "NaN": (lambda v: json.dumps(v).replace('"final_regret": ', '"final_regret": NaN, "x": '),
            "NaN is not a JSON number"),
    "not JSON": ("{\"trial_id\": \"cut", "not JSON (Unterminated string"),
    "a list": ("[1, 2]", "a record is a JSON object (got [1, 2])"),
    "boolean seed": (lambda v: {**v, "seed": True}, "seed: must be an integer (got True)"),
    "id not its content": (lambda v: {**v, "seed": v["seed"] + 7}, "is not the id of its content"),
    "changed value, checksum kept": (lambda v: {**v, "final_regret": v["final_regret"] + 1.0},
                                     "its content does not match its checksum"),
}


@pytest.mark.parametrize("case", list(BAD_RECORDS))
def test_a_bad_journal_record_is_named_quarantined_and_its_trial_runs_again(swept, capsys, case):
    change, message = BAD_RECORDS[case]
    segment, trial_id = edit_journal(swept, change, keep_digest=case.startswith("changed"))
    code, out, err = command(capsys, "status")
    assert code == 4 and "Traceback" not in err, (out, err)
    line = next(line for line in err.splitlines() if "damaged result file" in line)
    assert line.startswith(f"warning: damaged result file {segment} (1 unreadable record(s): line 1"), line
    assert message in line and f"moved to {swept.root}/quarantine/journal-{segment.name}" in line, line
    if case not in ("not JSON", "a list"):
        assert f"(trial {trial_id})" in line   # named
    assert f"{TRIALS} trials: {TRIALS - 1} done, 0 failed, 1 pending" in out
    journal = swept.journal()
    assert len(journal) == TRIALS - 1 and trial_id not in journal   # the other records are kept
    assert named_digest(next(swept.journal_dir.glob("*.jsonl"))) is not None


def test_a_record_of_the_wrong_type_is_rerun_by_run_and_report_works(swept, clean_sweep, capsys):
    """The reported case: ``"horizon": "abc"`` ended `status`, `run` and `report` in a traceback."""
    _, clean_trials, clean_curves = clean_sweep
    segment, trial_id = edit_journal(swept, lambda v: {**v, "horizon": "abc"})
    code, out, err = command(capsys, "report")
    # The report is written without the quarantined record's trial, and says it is incomplete.
    assert code == 4 and "Traceback" not in err and f"damaged result file {segment}" in err, (out, err)
    assert "incomplete: the report leaves out the trials of the damaged or lost result files" in err
    assert f"{TRIALS - 1} finished trials" in out
    code, out, err = command(capsys, "run", "--no-progress", "--sink", "none")
    assert code == 0 and "1 to run" in out, (out, err)
    assert_same_results(swept, clean_trials, clean_curves)
    assert command(capsys, "status")[0] == 0


def test_a_trials_table_with_a_flipped_page_or_a_changed_value_is_named_and_rebuilt(swept, clean_sweep, capsys):
    _, clean_trials, _ = clean_sweep
    path = swept.trials_dir / "trials.parquet"
    flip_in_column(path, "final_regret", count=8)
    code, out, err = command(capsys, "status")
    assert code == 4 and len(err.strip().splitlines()) == 1, err
    assert f"inconsistent: {path} is not readable (OSError: " in err and "CRC" in err, err
    trials, _ = banditsweep.load(swept.root.parent, "flip")   # rebuilt from the journal meanwhile
    np.testing.assert_array_equal(trials.set_index("trial_id")["final_regret"].sort_index(),
                                  clean_trials.set_index("trial_id")["final_regret"].sort_index())
    assert command(capsys, "run", "--no-progress", "--sink", "none")[0] == 0
    assert command(capsys, "status")[0] == 0

    # A value changed by a rewrite (valid CRCs): the table is a view of the journal, so it is named.
    table = pq.read_table(path)
    changed = table["trial_id"][1].as_py()
    regret = table["final_regret"].to_numpy().copy()
    regret[1] += 0.5
    pq.write_table(table.set_column(table.schema.get_field_index("final_regret"), "final_regret",
                                    pa.array(regret)), path)
    code, out, err = command(capsys, "status")
    assert code == 4
    assert (f"inconsistent: {path}: {TRIALS} rows, the journal {TRIALS} trials: 1 trial(s) with other values "
            f"than the journal's ({changed}; {changed}: final_regret); `run` rebuilds it from the journal") in err
    assert command(capsys, "run", "--no-progress", "--sink", "none")[0] == 0
    assert command(capsys, "status")[0] == 0


def test_trials_run_again_after_a_lost_journal_leave_one_copy_of_their_curves(swept, clean_sweep, capsys):
    _, clean_trials, clean_curves = clean_sweep
    shutil.rmtree(swept.journal_dir)
    code, out, err = command(capsys, "run", "--no-progress", "--sink", "none")
    assert code == 0 and f"{TRIALS} to run" in out, (out, err)
    raw = ds.dataset(swept.curves_dir).to_table().to_pandas()
    assert len(raw) == TRIALS * HORIZON and not raw.duplicated(["trial_id", "t"]).any()
    assert (raw.groupby("trial_id").size() == HORIZON).all() and raw["trial_id"].nunique() == TRIALS
    assert_same_results(swept, clean_trials, clean_curves)
    code, out, err = command(capsys, "status")
    assert code == 0 and "note:" not in out, (out, err)


def test_a_store_written_before_checksums_is_read_and_gets_them_at_the_next_run(swept, clean_sweep, capsys):
    """Curves and trials table without page CRCs, files named without a checksum, journal records
    without one: read and verified as before (nothing to check them against), and the next `run`
    rewrites the curves and the journal with checksums."""
    _, clean_trials, clean_curves = clean_sweep
    for path in swept.curves_dir.glob("*.parquet"):
        pq.write_table(pq.read_table(path), path.with_name(path.name.rsplit("-", 1)[0] + ".parquet"))
        path.unlink()
    for path in swept.journal_dir.glob("*.jsonl"):
        records = [json.loads(line) for line in path.read_text().splitlines()]
        for record in records:
            del record["sha256"]
        path.with_name(path.name.rsplit("-", 1)[0] + ".jsonl").write_text(
            "".join(json.dumps(r, sort_keys=True) + "\n" for r in records))
        path.unlink()
    table = swept.trials_dir / "trials.parquet"
    pq.write_table(pq.read_table(table), table)
    assert all(named_digest(p) is None for p in [*swept.curves_dir.iterdir(), *swept.journal_dir.iterdir()])

    code, out, err = command(capsys, "status")
    assert code == 0 and not err, err
    assert_same_results(swept, clean_trials, clean_curves)
    code, out, err = command(capsys, "run", "--no-progress", "--sink", "none")
    assert code == 0 and "0 to run" in out, err
    assert all(named_digest(p) is not None for p in [*swept.curves_dir.iterdir(), *swept.journal_dir.iterdir()])
    assert all("sha256" in json.loads(line) for p in swept.journal_dir.iterdir() for line in p.read_text().splitlines())
    assert_same_results(swept, clean_trials, clean_curves)
    assert command(capsys, "status")[0] == 0
