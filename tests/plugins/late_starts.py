"""A test-only fault, loaded as a plugin (``BANDITSWEEP_PLUGINS=late_starts``): in sweeps whose name
begins with ``late_starts``, every trial's start reaches the mirror a second after the trial's end,
as it does when Ray delivers the trial actor's call after the driver's (the two are different
callers: their calls keep no order between them). The actor's own start is held back (it may come
before or after the end, or not at all when the actor is ended first) and handed on a second after
the end, the mirror closing only once those starts are in. Every other sweep is left alone."""

import dataclasses
import threading

from banditsweep.workers.mirrors import sinks
from banditsweep.workers.storage.record import PENDING

DELAY = 1.0   # seconds: twice the mirror's interval, so the start lands in a later delivery

real_started, real_ended, real_begin_close = sinks.Mirror.started, sinks.Mirror.ended, sinks.Mirror.begin_close


def _timers(mirror) -> list:
    return mirror.__dict__.setdefault("_late_starts", [])


def started(self, records):
    own = [record for record in records if not record.sweep.startswith("late_starts")]
    if own:
        real_started(self, own)


def ended(self, ended_trials):
    real_ended(self, ended_trials)
    late = [dataclasses.replace(record, status=PENDING, final_regret=None, wall_seconds=None, seconds_per_round=None,
                                diagnostics={}, finished_at=None)
            for record, _ in ended_trials if record.sweep.startswith("late_starts")]
    if late:
        timer = threading.Timer(DELAY, real_started, (self, late))
        _timers(self).append(timer)
        timer.start()


def begin_close(self, *arguments, **keywords):
    for timer in list(_timers(self)):
        timer.join()
    return real_begin_close(self, *arguments, **keywords)


sinks.Mirror.started, sinks.Mirror.ended, sinks.Mirror.begin_close = started, ended, begin_close
