"""A results folder is data that may be hostile (an archive from someone else, a shared disk): what
was planted in it by hand must never make a command remove, truncate or write a file outside it,
run for ever, end in a traceback, or take the record of truth with it. Each case plants one thing in
a copy of a finished sweep and drives `status` / `run` through the CLI."""

import hashlib
import json
import os
import shutil
import signal

import pytest

from flip_sweep import TRIALS, clean_sweep, command, swept  # noqa: F401  (fixtures)


@pytest.fixture(autouse=True)
def no_hang():
    """A case that blocks (a FIFO read) fails here instead of hanging the suite."""
    def hung(signum, frame):
        raise TimeoutError("the command blocked for 120 s")
    previous = signal.signal(signal.SIGALRM, hung)
    signal.alarm(120)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, previous)


def _victim(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    return victim


@pytest.mark.parametrize("name", ["../../../victim.txt", "{victim}"])
def test_a_planted_compaction_list_removes_nothing_outside_its_folder(swept, tmp_path, capsys, name):
    victim = _victim(tmp_path)
    (swept.journal_dir / ".s5.jsonl").write_text("")
    (swept.journal_dir / ".s5.jsonl.replaces").write_text(name.format(victim=victim))
    code, out, err = command(capsys, "status")
    assert code == 4 and "Traceback" not in err, err
    assert "a compaction's list of files to remove that cannot be trusted" in err and "nothing it names was removed" in err
    assert victim.read_text() == "precious"
    assert f"{TRIALS} trials: {TRIALS} done" in out
    code, out, err = command(capsys, "run", "--no-progress", "--sink", "none")
    assert code == 0 and victim.read_text() == "precious", err


def test_a_planted_compaction_list_naming_the_journal_keeps_the_journal(swept, capsys):
    """The list names the real journal segment beside an empty merged file: removing the segment
    would lose the record of truth."""
    (segment,) = swept.journal_dir.glob("s*.jsonl")
    merged = f".s{'0' * 20}-1-{hashlib.sha256(b'').hexdigest()}.jsonl"   # empty, and named by its checksum
    (swept.journal_dir / merged).write_text("")
    (swept.journal_dir / f"{merged}.replaces").write_text(segment.name)
    code, out, err = command(capsys, "status")
    assert code == 4 and "lacks trials of" in err, err
    assert segment.exists() and len(swept.journal()) == TRIALS
    assert command(capsys, "run", "--no-progress", "--sink", "none")[0] == 0
    assert len(swept.journal()) == TRIALS


def test_a_lock_file_linked_elsewhere_is_refused_and_not_truncated(swept, tmp_path, capsys):
    victim = _victim(tmp_path)
    lock = swept.root / ".run.lock"
    lock.unlink()
    lock.symlink_to(victim)
    code, out, err = command(capsys, "run", "--no-progress", "--sink", "none")
    assert code == 2 and f"{lock} is a link to {victim}" in err, err
    assert victim.read_text() == "precious"


@pytest.mark.parametrize("folder", ["quarantine", "trials", ".journal"])
def test_a_folder_of_the_sweep_linked_elsewhere_is_refused(swept, tmp_path, capsys, folder):
    outside = tmp_path / "outside"
    outside.mkdir()
    link = swept.root / folder
    if link.exists():
        for entry in link.iterdir():
            entry.rename(outside / entry.name)
        link.rmdir()
    link.symlink_to(outside)
    (swept.root / ".journal").mkdir(exist_ok=True)
    before = sorted(os.listdir(outside))
    for name in ("status", "run"):
        code, out, err = command(capsys, name, *(["--no-progress", "--sink", "none"] if name == "run" else []))
        assert code == 2 and f"{link} is a link to {outside}: a sweep's files are written only inside its folder" in err
    assert sorted(os.listdir(outside)) == before


@pytest.mark.parametrize("entry, make, kind", [
    ("README.txt", os.mkdir, "a folder"),
    (".run.lock", os.mkfifo, "a FIFO (named pipe)"),
    (".runs", lambda path: open(path, "w").close(), "a regular file"),
])
def test_an_entry_of_the_wrong_kind_is_named(swept, capsys, entry, make, kind):
    path = swept.root / entry
    if path.is_dir():
        shutil.rmtree(path)
    elif os.path.lexists(path):
        path.unlink()
    make(path)
    for name in ("status", "run"):
        code, out, err = command(capsys, name, *(["--no-progress", "--sink", "none"] if name == "run" else []))
        assert code == 2 and f"{path} is {kind}; the sweep writes a" in err and "Traceback" not in err, err


def _plant_segment(swept, text: str, name: str = "s99.jsonl"):
    path = swept.journal_dir / name
    path.write_text(text)
    return path


def _record(swept, **changes) -> str:
    (segment,) = swept.journal_dir.glob("s*.jsonl")
    values = json.loads(segment.read_text().splitlines()[0])
    values.pop("sha256")
    values.update(changes)
    return json.dumps(values)


@pytest.mark.parametrize("case, text, message", [
    ("deep JSON", lambda s: "[" * 100_000 + "]" * 100_000, "JSON nested too deeply to be a record"),
    ("deep settings", lambda s: _record(s, params={"x": json.loads("[" * 500 + "]" * 500)}),
     "params: nests lists and objects more than 32 deep"),
    ("a year beyond dates", lambda s: _record(s, finished_at=1e300), "finished_at: must be seconds since 1970"),
])
def test_a_planted_journal_record_is_quarantined_not_a_traceback(swept, capsys, case, text, message):
    path = _plant_segment(swept, text(swept))
    for name in ("status", "run"):
        code, out, err = command(capsys, name, *(["--no-progress", "--sink", "none"] if name == "run" else []))
        assert "Traceback" not in err, err
        if name == "status":
            assert code == 4 and f"damaged result file {path}" in err and message in err, err
        else:
            assert code == 0, err
    assert len(swept.journal()) == TRIALS


def test_a_journal_segment_that_never_ends_is_read_no_further_than_a_line(swept, capsys):
    """A sparse file of 20 GB (no byte on disk) and a FIFO where a segment goes."""
    sparse = swept.journal_dir / "s98.jsonl"
    with open(sparse, "wb") as handle:
        handle.truncate(20 << 30)
    os.mkfifo(swept.journal_dir / "s99.jsonl")
    code, out, err = command(capsys, "status")
    assert code == 4, err
    assert f"damaged result file {sparse} (1 unreadable record(s): line 1: longer than 1,048,576 bytes)" in err
    assert "s99.jsonl (not readable: a FIFO (named pipe), not a file)" in err
    assert f"{TRIALS} trials: {TRIALS} done" in out


def test_a_fifo_where_a_curves_file_goes_is_quarantined(swept, capsys):
    fifo = swept.curves_dir / f"c-1-{'b' * 64}.parquet"
    os.mkfifo(fifo)
    code, out, err = command(capsys, "status")
    assert code == 4 and f"damaged result file {fifo}" in err, err


def test_a_file_name_cannot_forge_output_lines_and_quarantine_keeps_every_file(swept, capsys):
    forged = swept.journal_dir / "s9\nerror: FAKE \x1b[31mRED\x1b[0m.jsonl"
    forged.write_text("garbage\n")
    code, out, err = command(capsys, "status")
    assert code == 4 and "\x1b" not in err and "\nerror: FAKE" not in err, err
    assert "s9\\nerror: FAKE \\x1b[31mRED" in err
    for text in ("first\n", "second\n"):
        _plant_segment(swept, text)
        assert command(capsys, "status")[0] == 4
    kept = sorted(path.read_text() for path in (swept.root / "quarantine").glob("journal-s99.jsonl*"))
    assert kept == ["first\n", "second\n"]


def test_planted_run_notes_of_huge_sweeps_are_not_expanded(swept, capsys, monkeypatch):
    """Two 78-byte notes of runs with 333,333 seeds: `status` built 1.3 M trials for them (a minute,
    1.3 GB). A noted run far larger than the store and the spec is not considered."""
    import banditsweep.sweeps.spec.model as spec_module

    built = []
    expand = spec_module._expand_algorithm

    def counted(*args, **kwargs):
        for trial in expand(*args, **kwargs):
            built.append(1)
            yield trial

    monkeypatch.setattr(spec_module, "_expand_algorithm", counted)
    runs = swept.root / ".runs"
    for day, seeds in ((2, 333_333), (3, 333_332)):
        (runs / f"run-2099010{day}T000000-1.json").write_text(json.dumps(
            {"overrides": [f"seeds={seeds}"], "started_at": 4e9 + day, "trials": 0, "pid": 1, "host": "h"}))
    code, out, err = command(capsys, "status")
    assert code == 0 and f"{TRIALS} trials: {TRIALS} done" in out, err
    assert len(built) < 1000, len(built)


def test_a_fifo_named_as_a_curves_file_of_an_earlier_version_is_quarantined(swept, capsys):
    """Without a checksum in its name the file is opened by Parquet's reader, which a FIFO blocks."""
    fifo = swept.curves_dir / "part-1.parquet"
    os.mkfifo(fifo)
    code, out, err = command(capsys, "status")
    assert code == 4 and f"damaged result file {fifo} (not readable: a FIFO (named pipe), not a file)" in err, err


def test_status_leaves_a_running_runs_compaction_alone(swept, tmp_path, capsys):
    """A run's own compaction may be between writing its list and removing the parts: `status`
    beside a run (which holds the folder's lock) does not finish or judge it."""
    (swept.journal_dir / ".s5.jsonl").write_text("")
    manifest = swept.journal_dir / ".s5.jsonl.replaces"
    manifest.write_text("../../../victim.txt")
    with swept.exclusive():
        code, out, err = command(capsys, "status")
    assert "compaction's list" not in err and manifest.exists(), err
    code, out, err = command(capsys, "status")
    assert code == 4 and "compaction's list" in err and not manifest.exists()
