"""The MLflow mirror: the only room that imports ``mlflow`` (and only inside ``sink``, ``writers``,
``bulk``, ``queries`` and ``cells``: ``options``, ``tracking_store`` and ``run_content`` stay light,
so the CLI checks what it is given before anything imports MLflow).

``sink`` (the MLflow sink: what each Sink call writes and its account of what is done), ``writers``
(the one interface runs are written through, chosen once: bulk SQL transactions through ``bulk``
where the store is MLflow's database, else MLflow's client), ``run_content`` (what a trial's run
holds: name, tags, parameters, metrics), ``queries`` (the sweep's experiment and a store's runs),
``cells`` (one run per cell), ``options`` (what the sink is given: its tracking URI and what it
writes), ``tracking_store`` (which MLflow store, its URI checked, a local store's set-up). Registered
as the sink ``mlflow`` when ``banditsweep.workers.mirrors`` is imported.
"""

from banditsweep.core.engine import registry
from banditsweep.workers.mirrors.mlflow.options import MLFLOW_SINK

registry.register_sink(MLFLOW_SINK, "banditsweep.workers.mirrors.mlflow.sink:MLflowSink")
