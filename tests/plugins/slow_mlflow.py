"""A test-only result sink, registered as a plugin (``BANDITSWEEP_PLUGINS=slow_mlflow``): the MLflow
mirror, slowed to ``SECONDS_PER_TRIAL`` per ended trial (the results root's ``slow_mlflow.seconds``
file, else 0.3 s), as a store that cannot keep up with a sweep is. It takes ended trials two at a
time, so a wait for it can be cut short between two of its calls."""

import time
from pathlib import Path

from banditsweep.core.engine import registry
from banditsweep.workers.mirrors.mlflow.sink import MLflowSink


class SlowMLflowSink(MLflowSink):
    ended_per_call = 2

    def __init__(self, context):
        super().__init__(context)
        setting = Path(context.results_root) / "slow_mlflow.seconds"
        self.seconds = float(setting.read_text()) if setting.exists() else 0.3

    def trials_ended(self, ended):
        time.sleep(self.seconds * len(ended))
        super().trials_ended(ended)


registry.register_sink("slow_mlflow", SlowMLflowSink)
