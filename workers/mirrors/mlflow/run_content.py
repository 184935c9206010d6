"""What the MLflow mirror's runs hold, the same whichever way they are written (workers.mirrors.mlflow.
writers): a trial's run (its name and identifying tags, its parameters, the stepped regret metric,
and when the trial ends its final metrics and parameters, its status and the tags of the code it
ran on), a cell's run (its tags and parameters; its values are cells'), and the parent run of a
command (its name, tags, parameters and summary). Light: values only, as MLflow keeps them; the
sink and the cells module make them MLflow entities."""

from __future__ import annotations

import json
import math
import re
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from banditsweep.workers.mirrors.sinks import SinkContext
from banditsweep.workers.storage.record import FINISHED, TrialRecord

# The stepped metric: the cumulative regret, named as the Parquet column it mirrors (`regret` there is
# the per-round increment).
REGRET_METRIC = "cum_regret"


def run_name(record: TrialRecord) -> str:
    return record.run_name or f"{record.label} | {record.environment} | seed {record.seed}"


def run_tags(record: TrialRecord, sweep: str, store: str, status: str) -> dict[str, str]:
    """The tags a trial's run is made with: what finds it again (``kind``, ``trial_id``, ``store``),
    its ``status`` and the ``group`` MLflow's Group-by aggregates the seeds of one cell by."""
    return {"kind": "trial", "trial_id": record.trial_id, "sweep": sweep, "status": status,
            "store": store, "group": record.group or f"{record.label} | {record.environment}"}


@dataclass(frozen=True)
class TrialEnd:
    """What a trial's run gets when the trial ends, beside the points of its curve not yet logged."""

    run_status: str              # MLflow's: FINISHED, or FAILED for a trial that failed
    tags: dict[str, str]         # the trial's status, the code it ran on, and a failed trial's error
    params: dict[str, Any]       # a finished trial's single values (final_params)
    metrics: dict[str, float]    # a finished trial's final values (final_metrics), logged at step 0


def trial_end(record: TrialRecord) -> TrialEnd:
    """The end of ``record``'s trial as its run holds it."""
    tags = {"status": record.status, **code_tags(record)}
    if record.status == FINISHED:
        return TrialEnd("FINISHED", tags, final_params(record), final_metrics(record))
    return TrialEnd("FAILED", {**tags, "error": (record.error or "")[:5000]}, {}, {})


def cell_tags(group: str, seeds: list[int], sweep: str, store: str) -> dict[str, str]:
    """The tags of a cell's run: what finds it again (``kind``, ``store``), its ``group`` (the name
    its seeds' trial runs share) and its seeds."""
    return {"kind": "cell", "sweep": sweep, "store": store, "group": group,
            "seeds": ",".join(map(str, seeds))[:5000]}


def cell_params(record: TrialRecord) -> dict[str, str]:
    """The parameters of a cell's run: those of its trials' runs but the seed (``record`` is one of them)."""
    return {k: param_value(v) for k, v in trial_params(record).items() if k != "seed"}


def parent_run_name(sweep: str) -> str:
    """A command's parent run is named by the sweep and the time it made the run."""
    return f"{sweep} {time.strftime('%Y-%m-%d %H:%M:%S')}"


def parent_run_tags(context: SinkContext) -> dict[str, str]:
    """The parent run's tags: what finds it again (``kind``, ``store``), the command, the results
    root, the spec (also as MLflow's source) and the code's commit where known."""
    tags = {"kind": "sweep", "sweep": context.sweep, "command": context.command,
            "store": context.store_id, "results_root": context.results_root}
    if context.spec_path:
        tags.update({"spec": context.spec_path, "mlflow.source.name": context.spec_path})
    if context.source_commit:
        tags["mlflow.source.git.commit"] = context.source_commit
    return tags


def parent_run_params(context: SinkContext, runs: str) -> dict[str, str]:
    """The parent run's parameters: the sweep-level settings and command line the run was started
    with (horizon, seeds, overrides, selection...), and ``mlflow_runs``, what this mirror writes
    (``runs``). None for a command given no settings (a catch-up: ``sync-mlflow``, a run with
    nothing left to do)."""
    if not context.settings:
        return {}
    return {k: param_value(v) for k, v in {**context.settings, "mlflow_runs": runs}.items()}


def metric_name(text: str) -> str:
    """``text`` with the characters MLflow refuses in a metric name replaced by ``_``."""
    return re.sub(r"[^/\w.\- :]", "_", text)


def regret_metric(environment: str, curve: str = REGRET_METRIC) -> str:
    """The stepped metric of one environment (``cum_regret/classification:mushroom``): MLflow charts a
    metric key across runs, so one key per environment keeps regrets of different scales apart (and
    its chart view groups the keys under ``cum_regret``)."""
    return metric_name(f"{curve}/{environment}")


def best_final_regret(records) -> dict[str, float]:
    """Per environment, the lowest mean final regret over the seeds of one (label, grid point): the
    paper's tuning rule, as the parent run's summary (``best_final_regret.<environment>``)."""
    cells: dict[tuple[str, str], list[float]] = {}
    for record in records:
        if record.status == FINISHED and record.final_regret is not None:
            cells.setdefault((record.environment, record.group or record.label), []).append(record.final_regret)
    best: dict[str, float] = {}
    for (environment, _), values in cells.items():
        key = metric_name(f"best_final_regret.{environment}")
        best[key] = min(best.get(key, math.inf), sum(values) / len(values))
    return best


def param_value(value: Any) -> str:
    """A parameter as MLflow keeps it: text (JSON for anything else), at most 6,000 characters."""
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
    return text[:6000]


def trial_params(record: TrialRecord) -> dict[str, Any]:
    return {"algorithm": record.algorithm, "label": record.label, "environment": record.environment,
            "seed": record.seed, "horizon": record.horizon,
            **{f"env.{k}": v for k, v in record.environment_config.items()}, **record.params}


def code_tags(record: TrialRecord) -> dict[str, str]:
    """The code a trial ran on and where (workers.provenance.code_identity), as tags: ``code_digest``, one
    ``code.<module>`` per module it reaches, one ``runtime.<fact>`` per library version, the CPU,
    device and threads; a trial recorded before trials carried their code says ``code_digest: unknown``."""
    tags = {"code_digest": record.code_digest or "unknown"}
    tags.update({tag_key(f"code.{module}"): digest[:5000] for module, digest in record.code.items()})
    tags.update({tag_key(f"runtime.{key}"): str(value)[:5000] for key, value in record.runtime.items()})
    if record.code_accepted:
        tags["code_accepted"] = json.dumps(record.code_accepted, sort_keys=True)[:5000]
    return tags


def tag_key(name: str) -> str:
    """A tag name MLflow takes (letters, digits, ``_-./`` and spaces; at most 250 characters)."""
    return re.sub(r"[^\w./ -]", "_", name)[:250]


def final_metrics(record: TrialRecord) -> dict[str, float]:
    """The values worth a chart or a column in the compare view."""
    values = {"final_regret": record.final_regret, "seconds_per_round": record.seconds_per_round}
    return {k: float(v) for k, v in values.items() if isinstance(v, (int, float)) and np.isfinite(v)}


def final_params(record: TrialRecord) -> dict[str, Any]:
    """Single values that are not worth a chart of their own (one bar each would bury the regret
    curve in the chart view): the trial's wall time and diagnostics, as parameters."""
    return {"wall_seconds": record.wall_seconds, **{f"diag.{k}": v for k, v in record.diagnostics.items()}}
