"""What a running sweep shows: a progress bar (tqdm) with the trials done, failed and running and the
actors at work, and each message of the run once (which Ray, sinks that fail). Without a bar
(``--no-progress``) the messages alone, and a line when the run has waited a while for actors no
node can place yet. Where the output is not a terminal (a Ray job's log, tmux, nohup), no bar: one
plain line every :data:`LOG_LINE_SECONDS` seconds, whether or not a trial ended meanwhile (a round
of a big trial may take minutes), with the counts, the rate and the time left. tqdm is imported only
where a bar is drawn: a notebook's run with ``progress=False`` imports nothing of it."""

from __future__ import annotations

import sys
import time

from banditsweep.sweeps.events import say
from banditsweep.workers import Progress

# Seconds without a placed actor before `run --no-progress` says it is waiting for nodes (starting
# an actor takes a second or two; that is not worth a line).
WAIT_NOTICE_SECONDS = 5.0
# Seconds between two progress lines where the output is not a terminal.
LOG_LINE_SECONDS = 30.0


class ProgressDisplay:
    def __init__(self, total: int, name: str, bar: bool):
        # In a terminal the bar redraws in place; in a log (a Ray job's, a batch scheduler's) every
        # redraw is a line, so there it updates at most every 30 s.
        self.interactive = sys.stderr.isatty()
        self.bar = _bar(total, name) if bar and self.interactive else None
        self.log_lines = bar and not self.interactive
        self.total, self.name = total, name
        self.started = time.monotonic()
        self.last_line: float | None = None
        self.state: tuple | None = None
        self.messages: set[str] = set()
        self.waiting_since: float | None = None
        self.said_waiting = 0

    def show(self, progress: Progress) -> None:
        for message in progress.messages:
            if message not in self.messages:
                self.messages.add(message)
                if self.bar is not None:
                    self.bar.write(message)
                else:   # flushed: piped to a log, a line the run says now must not wait for a full buffer
                    say(message, flush=True)
        if self.log_lines:
            self._log_line(progress)
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

    def _log_line(self, progress: Progress) -> None:
        now = time.monotonic()
        if self.last_line is not None and now - self.last_line < LOG_LINE_SECONDS:
            return
        self.last_line = now
        elapsed = now - self.started
        ended = progress.done + progress.failed
        rate = ended / elapsed if elapsed > 0 else 0.0
        left = f", ~{_duration((self.total - ended) / rate)} left" if rate > 0 and ended < self.total else ""
        waiting = f", waiting for {progress.waiting_actors} {progress.device} actor(s)" if progress.waiting_actors else ""
        say(f"{self.name}: {ended}/{self.total} trials ({progress.done} done, {progress.failed} failed), "
              f"{progress.running} running on {progress.actors} actor(s){waiting}; {_duration(elapsed)} elapsed"
              f"{f', {rate * 60:.1f} trials/min' if rate > 0 else ''}{left}", file=sys.stderr, flush=True)

    def _say_waiting(self, progress: Progress) -> None:
        waiting = progress.waiting_actors if not progress.actors else 0
        if not waiting:
            self.waiting_since = None
            return
        if self.waiting_since is None:
            self.waiting_since = time.monotonic()
        if time.monotonic() - self.waiting_since > WAIT_NOTICE_SECONDS and self.said_waiting != waiting:
            self.said_waiting = waiting
            say(f"waiting for {waiting} {progress.device} actor(s): " + (
                "no node can place them yet" if progress.unplaced_actors else
                "placed, still starting (each is a new worker process)"), flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def _bar(total: int, name: str):
    from tqdm import tqdm

    return tqdm(total=total, unit="trial", desc=name, dynamic_ncols=True, mininterval=0.1, maxinterval=10.0)


def _duration(seconds: float) -> str:
    seconds = int(seconds)
    hours, rest = divmod(seconds, 3600)
    return f"{hours}:{rest // 60:02d}:{rest % 60:02d}" if hours else f"{rest // 60}:{rest % 60:02d}"
