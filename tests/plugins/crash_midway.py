"""Test-only plugin (``BANDITSWEEP_PLUGINS=crash_midway``): ``<algorithm>_crash_midway`` for GA, PC,
NeuralUCB, Kernelized Exp3 and RLS-Kernelized Exp3 behaves exactly as ``<algorithm>`` but kills its
worker process at round ``CRASH_ROUND`` the first time (a marker file per algorithm under
``BANDITSWEEP_TEST_MARKERS`` remembers): a preempted node in the middle of a long trial."""

import os
from pathlib import Path

from banditsweep.core.engine import registry

CRASH_ROUND = 13
BASES = ("neural_rbmle_ga", "neural_rbmle_pc", "neural_ucb", "kernel_exp3", "rls_kernel_exp3")


def _crash_once(name: str, t: int) -> None:
    marker = Path(os.environ["BANDITSWEEP_TEST_MARKERS"]) / f"{name}.crashed"
    if t == CRASH_ROUND and not marker.exists():
        marker.touch()
        os._exit(1)


def _crashing(name: str, base: type) -> type:
    def select(self, t, contexts):
        _crash_once(name, t)
        return base.select(self, t, contexts)

    def select_batch(self, t, contexts):
        _crash_once(name, t)
        return base.select_batch(self, t, contexts)

    members = {"select": select, "__module__": __name__}   # picklable: checkpoints pickle the policy
    if "select_batch" in dir(base) and hasattr(base, "choose_arms"):   # the neural policies step as a batch
        members["select_batch"] = select_batch
    cls = type(f"{base.__name__}CrashMidway", (base,), members)
    globals()[cls.__name__] = cls
    return cls


for _name in BASES:
    registry.register_algorithm(f"{_name}_crash_midway", _crashing(f"{_name}_crash_midway",
                                                                   registry.algorithm_class(_name)))
