"""Clean stops on SIGTERM and SIGINT (Ctrl-C); `Stopped` is a `KeyboardInterrupt`, so no
``except Exception`` swallows it.

While training, `deferred_stops` only notes the first signal: the trainer checkpoints at its next
step and raises `Stopped`. Only a SIGINT `INSIST_S` or more later stops at once (a signal passed
on by several processes counts once). Elsewhere `raise_on_sigterm` makes SIGTERM raise `Stopped`.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

log = logging.getLogger(__name__)

SIGNALS = (signal.SIGTERM, signal.SIGINT)
INSIST_S = 1.0
"""Seconds after the first signal from which a SIGINT stops at once."""


class Stopped(KeyboardInterrupt):
    """Work stopped by ``signum``; at ``step`` with ``checkpoint`` written, when training."""

    def __init__(self, signum: int, step: int | None = None, checkpoint: Path | None = None):
        self.signum, self.step, self.checkpoint = signum, step, checkpoint
        where = "" if step is None else f" at step {step}" + (f", checkpoint {checkpoint} written" if checkpoint else "")
        super().__init__(f"stopped by {signal.Signals(signum).name}{where}")

    @property
    def exit_code(self) -> int:
        """The shell's status of a process ended by the signal: 128 + its number."""
        return 128 + self.signum


class StopRequest:
    """The signal received while stops are deferred (None while none is), and when."""

    signum: int | None = None
    received: float = 0.0

    @property
    def pending(self) -> bool:
        return self.signum is not None


@contextlib.contextmanager
def deferred_stops() -> Iterator[StopRequest]:
    """Note the first SIGTERM or SIGINT in the yielded `StopRequest` (main thread only; elsewhere
    it stays empty); a SIGINT `INSIST_S` or more later raises `Stopped`."""
    request = StopRequest()
    if threading.current_thread() is not threading.main_thread():
        yield request
        return

    def note(signum: int, frame) -> None:
        if request.pending:
            if signum == signal.SIGINT and time.monotonic() - request.received >= INSIST_S:
                raise Stopped(signum)
            return
        request.signum, request.received = signum, time.monotonic()
        log.warning(
            "%s received: stopping at the end of this step, with a checkpoint (a second Ctrl-C stops at once)",
            signal.Signals(signum).name,
        )

    previous = {sig: signal.signal(sig, note) for sig in SIGNALS}
    try:
        yield request
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, signal.SIG_DFL if handler is None else handler)  # None: set outside Python


def raise_on_sigterm() -> None:
    """Make SIGTERM raise `Stopped` in the main thread (as SIGINT raises `KeyboardInterrupt`)."""

    def stop(signum: int, frame) -> None:
        raise Stopped(signum)

    signal.signal(signal.SIGTERM, stop)
