"""`banditsweep status` checks that the result files agree: the trials table row for row with the
journal, and every finished trial's curve with one row per round 1 … horizon. A disagreement is
named and exits 4; what a stopped run may leave (and readers handle) is a note."""

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from banditsweep.sweeps.cli.main import main
from banditsweep.workers.storage.consistency import check
from banditsweep.workers.storage.store import CURVE_SCHEMA
from counts_sweep import finished_sweep, status, swept  # noqa: F401  (fixtures)


def test_a_consistent_store_is_verified_with_its_counts(swept, capsys):
    code, out, err = status(capsys)
    assert code == 0 and not err
    assert ("verified: journal 4 trials (4 finished), trials table 4 rows, curves 40 rows: "
            "4 of 4 finished trials have every round") in out


def test_a_trials_table_short_of_the_journal_is_named_and_the_next_run_rebuilds_it(swept, capsys):
    path = swept.trials_dir / "trials.parquet"
    table = pq.read_table(path)
    dropped = table["trial_id"][0].as_py()
    pq.write_table(table.slice(1), path)
    code, out, err = status(capsys)
    assert code == 4
    assert err.strip() == (f"inconsistent: {path}: 3 rows, the journal 4 trials: 1 trial(s) of the journal "
                           f"missing ({dropped}); `run` rebuilds it from the journal")
    assert "trials table 3 rows" in out
    assert main(["run", "counts.yaml", "--no-progress", "--sink", "none"]) == 0
    assert "0 to run" in capsys.readouterr().out
    assert status(capsys)[0] == 0


def test_a_trials_table_with_another_status_or_an_unknown_trial_is_named(swept, capsys):
    path = swept.trials_dir / "trials.parquet"
    frame = pd.read_parquet(path)
    changed = frame.loc[0, "trial_id"]
    frame.loc[0, "status"] = "failed"
    frame = pd.concat([frame, frame.iloc[[1]].assign(trial_id="f" * 64)], ignore_index=True)
    pq.write_table(pa.Table.from_pandas(frame, preserve_index=False), path)
    code, _, err = status(capsys)
    assert code == 4
    assert (f"5 rows, the journal 4 trials: 1 trial(s) the journal does not hold ({'f' * 64}); "
            f"1 trial(s) with another status than the journal's ({changed})") in err


def test_missing_or_extra_rounds_of_a_finished_trial_are_named(swept, capsys):
    (curves,) = swept.curves_dir.glob("*.parquet")
    table = pq.read_table(curves)
    frame = table.to_pandas()
    short_id, long_id = sorted(frame["trial_id"].unique())[:2]
    # One trial loses its round 7; another gains a round 11 beyond its horizon of 10.
    keep = ~((frame["trial_id"] == short_id) & (frame["t"] == 7))
    extra = table.filter(pc.and_(pc.equal(table["trial_id"], long_id),
                                         pc.equal(table["t"], 10)))
    extra = extra.set_column(extra.schema.get_field_index("t"), "t", pa.array([11], pa.int64()))
    # Rewritten as a file without a checksum in its name (as earlier versions wrote them), so that
    # what is checked is the rows, not the bytes.
    pq.write_table(pa.concat_tables([table.filter(pa.array(keep.to_numpy())), extra]),
                   curves.with_name(curves.name.rsplit("-", 1)[0] + ".parquet"))
    curves.unlink()
    code, out, err = status(capsys)
    assert code == 4
    lines = err.strip().splitlines()
    assert lines == [
        "warning: 1 finished trial(s) have lost their per-round results; `run` runs them again",
        f"inconsistent: 1 finished trial(s) have curve rows for fewer rounds than their horizon ({short_id}; "
        f"{short_id}: 9 of 10 rounds); `run` runs them again",
        f"inconsistent: 1 finished trial(s) have curve rows outside rounds 1…horizon ({long_id}; "
        f"{long_id}: rounds 1…11, horizon 10)"]
    assert "curves 40 rows: 2 of 4 finished trials have every round" in out
    assert "3 done, 0 failed, 1 pending" in out   # the short one runs again


def test_what_a_stopped_run_leaves_is_a_note_not_a_fault(swept, capsys):
    """Curve rows of a trial the journal does not hold (a run stopped between its curves and its
    journal) and a round written twice: readers handle both, so `status` says so and exits 0."""
    (curves,) = swept.curves_dir.glob("*.parquet")
    table = pq.read_table(curves)
    first = table["trial_id"][0].as_py()
    again = table.filter(pc.equal(table["trial_id"], first))
    orphan = again.set_column(0, "trial_id", pa.array(["e" * 64] * again.num_rows, pa.string()))
    pq.write_table(pa.concat_tables([again, orphan]).cast(CURVE_SCHEMA), swept.curves_dir / "part-99.parquet")
    code, out, err = status(capsys)
    assert code == 0 and not err, err
    assert ("note: 1 finished trial(s) have rounds written twice (a run stopped between its curves and its "
            "journal, then ran them again); readers keep one copy") in out
    assert ("note: 10 curve rows of 1 trial(s) the journal does not hold as finished (a run stopped between "
            "writes); readers leave them out") in out


def test_a_second_copy_of_a_trials_rounds_with_other_values_is_a_fault(swept, capsys):
    """A file put in curves/ by hand holding a trial's rounds again, with other regrets: a rerun of a
    trial reproduces its regret, so the copies disagreeing means one is not the trial's; `status`
    names the trial and round and exits 4 (readers would show the planted copy)."""
    (curves,) = swept.curves_dir.glob("*.parquet")
    table = pq.read_table(curves)
    first = table["trial_id"][0].as_py()
    again = table.filter(pc.equal(table["trial_id"], first))
    planted = again.set_column(again.schema.get_field_index("cum_regret"), "cum_regret",
                               pc.multiply(again["cum_regret"], 100.0))
    pq.write_table(planted.cast(CURVE_SCHEMA), swept.curves_dir / "c-99999999999999999999-99999.parquet")
    code, out, err = status(capsys)
    assert code == 4, out
    assert (f"1 finished trial(s) have rounds written twice with different values ({first}; {first}: round 1: "
            in out + err), out + err


def test_a_trials_table_trailing_the_journal_during_a_run_is_a_note(swept, capsys):
    path = swept.trials_dir / "trials.parquet"
    pq.write_table(pq.read_table(path).slice(2), path)
    records = swept.journal()
    with swept.exclusive():   # as a run in progress holds it
        counts = check(swept.root, records)
    assert counts.ok and counts.running and counts.table_rows == 2
    assert counts.notes == [f"{path}: 2 rows, the journal 4 trials: 2 trial(s) of the journal missing "
                            f"({', '.join(sorted(set(records) - set(pq.read_table(path)['trial_id'].to_pylist())))})"
                            " (a run is in progress: the table is rebuilt as it goes and at its end)"]
    assert not check(swept.root, records).ok   # the same, with no run going on, is a fault
    assert counts.summary() == ("journal 4 trials (4 finished), trials table 2 rows, curves 40 rows: "
                                "4 of 4 finished trials have every round")
