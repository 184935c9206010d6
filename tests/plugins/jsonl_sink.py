"""A test-only result sink, registered as a plugin (``BANDITSWEEP_PLUGINS=jsonl_sink``): every event
it receives, one JSON line each, in ``<results root>/<sweep>.events.jsonl``."""

import json
import os
from pathlib import Path

from banditsweep.core.engine import registry


class JsonLinesSink:
    def __init__(self, context):
        self.path = Path(context.results_root) / f"{context.sweep}.events.jsonl"

    @staticmethod
    def prepare(context):
        """Run by the driver while Ray starts (the sink itself lives in the mirror actor)."""
        JsonLinesSink(context)._write("prepare", pid=os.getpid())

    def _write(self, event, **values):
        with open(self.path, "a") as handle:
            handle.write(json.dumps({"event": event, **values}) + "\n")

    def open(self, records, pending):
        self._write("open", known=len(records), pending=len(pending), pid=os.getpid(), niceness=os.nice(0))
        return {}

    def trials_started(self, records):
        self._write("started", trials=[r.trial_id for r in records])

    def progress(self, points):
        self._write("progress", points={k: v for k, v in points.items()})

    def trials_ended(self, ended):
        for record, curve in ended:
            self._write("ended", trial=record.trial_id, status=record.status,
                        final_regret=record.final_regret, curve=curve)

    def close(self, status, summary):
        self._write("close", status=status, summary=summary)
        return f"events in {self.path}"


registry.register_sink("jsonl", JsonLinesSink)
