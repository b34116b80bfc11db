"""What a run shows of its progress while it trains. On a terminal, a bar (tqdm). Anywhere else (a pipe, nohup, a
SLURM log) a line on stdout at every 5% of the run, at most one per ``LINE_GAP_S`` seconds, and one at the end: episode,
the seed-mean error, episodes per second of this process and the time left at that rate, as CleanRL's periodic
throughput lines. ``trainer.progress``: auto (bar on a terminal, else lines) | bar | lines | false (true: bar)."""

from __future__ import annotations

import math
import sys
import time
from typing import Callable, TextIO

import numpy as np

LINE_GAP_S = 5.0  # a fast run (a bandit at a thousand steps a second) prints no faster than this
LINES_PER_RUN = 20  # a line every 5% of the run


class Progress:
    """Counts finished episodes (``advance``) from ``start`` to ``total``; shows them as ``mode`` says."""

    def __init__(self, label: str, total: int, start: int, mode: str | bool, stream: TextIO | None = None,
                 clock: Callable[[], float] = time.monotonic):
        if mode == "auto":
            mode = "bar" if sys.stderr.isatty() else "lines"
        self.mode = {True: "bar", False: None}.get(mode, mode)
        # lines go with the run's log lines (stdout), a bar where tqdm draws it (stderr)
        stream = stream or (sys.stderr if self.mode == "bar" else sys.stdout)
        self.label, self.total, self.start, self.done, self.shown = label, total, start, start, start
        self.stream, self.clock = stream, clock
        self.began = self.last_line = clock()
        self.every = max(1, math.ceil(total / LINES_PER_RUN))
        self.errors = None  # the last logged per-seed errors
        self.bar = None
        if self.mode == "bar":
            from tqdm import tqdm

            self.bar = tqdm(total=total, initial=start, desc=label, dynamic_ncols=True, file=stream)

    def advance(self, errors=None) -> None:
        """One more episode; ``errors``: its per-seed errors, when it logged them (their finite mean is shown)."""
        self.done += 1
        if errors is not None:
            self.errors = errors
        if self.bar is not None:
            if errors is not None and (error := self.error()) is not None:
                self.bar.set_postfix(error=f"{error:.4f}", refresh=False)
            self.bar.update(1)
        elif self.mode == "lines" and self.done % self.every == 0 and self.clock() - self.last_line >= LINE_GAP_S:
            self.line()

    def error(self) -> float | None:
        """The seed mean of the last logged errors, over the seeds that have not diverged."""
        if self.errors is None:
            return None
        errors = np.asarray(self.errors, dtype=float)
        finite = errors[np.isfinite(errors)]
        return float(finite.mean()) if finite.size else None

    def line(self) -> None:
        now = self.clock()
        self.last_line, self.shown = now, self.done
        rate = (self.done - self.start) / max(now - self.began, 1e-9)
        left = (self.total - self.done) / rate if rate > 0 else math.inf
        error = f", error {mean:.3g}" if (mean := self.error()) is not None else ""
        eta = time.strftime("%H:%M:%S", time.gmtime(left)) if math.isfinite(left) and left < 86400 * 99 else "?"
        print(f"{self.label}: episode {self.done:,}/{self.total:,} ({100 * self.done / self.total:.0f}%){error}, "
              f"{rate:.3g} episodes/s, {eta} left", file=self.stream, flush=True)

    def close(self) -> None:
        """The bar closed, or a last line for the episodes since the last one."""
        if self.bar is not None:
            self.bar.close()
        elif self.mode == "lines" and self.done > self.shown:
            self.line()
