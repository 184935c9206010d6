"""What a running sweep shows: a progress bar (tqdm) with the trials done, failed and running and the
actors at work, and each message of the run once (which Ray, sinks that fail). Without a bar
(``--no-progress``) the messages alone, and a line when the run has waited a while for actors no
node can place yet."""

from __future__ import annotations

import sys
import time

from tqdm import tqdm

from banditsweep.workers.jobs import Progress

# Seconds without a placed actor before `run --no-progress` says it is waiting for nodes (starting
# an actor takes a second or two; that is not worth a line).
WAIT_NOTICE_SECONDS = 5.0


class ProgressDisplay:
    def __init__(self, total: int, name: str, bar: bool):
        # In a terminal the bar redraws in place; in a log (a Ray job's, a batch scheduler's) every
        # redraw is a line, so there it updates at most every 30 s.
        self.interactive = sys.stderr.isatty()
        self.bar = (tqdm(total=total, unit="trial", desc=name, dynamic_ncols=True,
                         mininterval=0.1 if self.interactive else 30.0,
                         maxinterval=10.0 if self.interactive else 300.0) if bar else None)
        self.state: tuple | None = None
        self.messages: set[str] = set()
        self.waiting_since: float | None = None
        self.said_waiting = 0

    def show(self, progress: Progress) -> None:
        for message in progress.messages:
            if message not in self.messages:
                self.messages.add(message)
                (self.bar.write if self.bar is not None else print)(message)
        if self.bar is None:
            self._say_waiting(progress)
            return
        state = (progress.done, progress.failed, progress.running, progress.actors, progress.waiting_actors)
        if state == self.state:
            return
        self.state = state
        self.bar.n = progress.done + progress.failed
        postfix = {"done": progress.done, "failed": progress.failed, "running": progress.running,
                   "actors": progress.actors}
        if progress.waiting_actors:
            postfix["waiting for"] = f"{progress.waiting_actors} {progress.device} actor(s)"
        self.bar.set_postfix(postfix, refresh=False)
        if self.interactive:
            self.bar.refresh()
        else:
            self.bar.update(0)   # drawn only when mininterval has passed

    def _say_waiting(self, progress: Progress) -> None:
        waiting = progress.waiting_actors if not progress.actors else 0
        if not waiting:
            self.waiting_since = None
            return
        if self.waiting_since is None:
            self.waiting_since = time.monotonic()
        if time.monotonic() - self.waiting_since > WAIT_NOTICE_SECONDS and self.said_waiting != waiting:
            self.said_waiting = waiting
            print(f"waiting for {waiting} {progress.device} actor(s): no node can place them yet", flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
