"""The machine's load while a trial ran: sampled, recorded, a column of the trials table (NaN for
stores written before), and used by the plan to take measured times at a quiet core's rate."""

import dataclasses
import math

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

import banditsweep
from banditsweep.sweeps.planning.plan import MEASURED_RULE, CellCost, SweepPlan, quiet_seconds
from banditsweep.workers.provenance.load import LoadSampler, quiet_factor
from banditsweep.workers.provenance.runtime import runtime_info
from banditsweep.workers.storage.record import TrialRecord

from store_builders import RECORDS, make_store


def test_the_sampler_takes_the_start_ticks_at_most_once_a_second_and_the_end():
    clock, loads = iter([0.0, 0.3, 1.2, 1.5, 9.0]), iter([1.0, 2.0, 4.0])
    sampler = LoadSampler(clock=lambda: next(clock), load=lambda: next(loads))
    sampler.tick()    # 0.3 s after the first sample: skipped
    sampler.tick()    # 1.2 s: taken
    sampler.tick()    # 0.3 s after it: skipped
    assert sampler.mean() == pytest.approx((1.0 + 2.0 + 4.0) / 3)   # the end is always sampled
    assert LoadSampler(load=lambda: None).mean() is None


@pytest.mark.parametrize("load, cpus, factor", [
    (0.5, 2, 1.0), (2.0, 2, 1.0),        # every runnable process had a CPU
    (4.0, 2, 0.5), (10.0, 16, 1.0), (32.0, 16, 0.5), (8.0, 1, 0.125),
    (0.0, 1, 1.0), (None, 2, 1.0), (3.0, None, 1.0), (math.nan, 2, 1.0)])   # unknown: as measured
def test_the_quiet_factor_is_the_share_of_a_core_a_crowded_trial_had(load, cpus, factor):
    assert quiet_factor(load, cpus) == pytest.approx(factor)


def _finished(seconds, load, cpus=2):
    record = TrialRecord(trial_id="x", sweep="s", algorithm="a", label="A", environment="e", seed=0, horizon=10,
                         params={}, environment_config={}, status="finished", final_regret=1.0,
                         wall_seconds=seconds, load_average=load)
    return dataclasses.replace(record, runtime={} if cpus is None else {"machine_cpus": cpus})


def test_the_plan_prefers_quiet_trials_and_scales_crowded_ones():
    # Quiet trials only, or older ones without a load: their mean, as measured.
    assert quiet_seconds([_finished(10.0, 1.0), _finished(20.0, None, None)]) == (15.0, "measured (2 trials)")
    # A crowded trial beside a quiet one is set aside.
    assert quiet_seconds([_finished(10.0, 1.5), _finished(40.0, 8.0)]) == (10.0, "measured (2 trials, 1 quiet)")
    # Only crowded trials: each scaled by min(1, C / max(L, 1)): 40 s at load 8 on 2 CPUs -> 10 s,
    # 30 s at load 6 -> 10 s.
    seconds, source = quiet_seconds([_finished(40.0, 8.0), _finished(30.0, 6.0)])
    assert seconds == pytest.approx(10.0) and source == "measured (2 trials, 2 scaled for load)"
    plan = SweepPlan("s", [CellCost("A", "e", 10, 3, seconds, 0, 0.0, source)])
    assert plan.lines()[-1] == MEASURED_RULE and "min(1, C / max(L, 1))" in MEASURED_RULE


def test_a_trials_load_is_a_column_and_older_tables_read_it_as_nan(tmp_path):
    assert runtime_info("cpu", 1)["machine_cpus"] >= 1
    loaded = [dataclasses.replace(r, load_average=1.25) if r.status == "finished" else r for r in RECORDS]
    assert TrialRecord.from_json(loaded[0].to_json()).load_average == 1.25
    older = loaded[0].to_json()
    del older["load_average"]                    # a journal line of an earlier version
    assert TrialRecord.from_json(older).load_average is None
    RECORDS[:] , saved = loaded, list(RECORDS)
    try:
        store = make_store(tmp_path)
    finally:
        RECORDS[:] = saved
    path = store.trials_dir / "trials.parquet"
    trials = pd.read_parquet(path).set_index("trial_id")
    assert trials["load_average"].dtype == np.float64
    assert trials.loc["a" * 20, "load_average"] == 1.25 and pd.isna(trials.loc["d" * 20, "load_average"])
    table = pq.read_table(path)
    pq.write_table(table.drop_columns(["load_average"]).replace_schema_metadata(table.schema.metadata), path)
    trials, _ = banditsweep.load(tmp_path / "results", "s")
    assert "load_average" in trials.columns and trials["load_average"].isna().all()
