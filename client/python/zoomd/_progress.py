"""A progress display for import_points: tqdm's bar when tqdm is installed
(Debian's python3-tqdm), else a plain line on stderr about once a second;
the rate at the end either way."""

from __future__ import annotations

import sys
import time
from typing import Any, Optional, TextIO


class Progress:
    def __init__(self, total: Optional[int], enabled: bool, what: str = "import",
                 stream: Optional[TextIO] = None) -> None:
        self.total = total
        self.done = 0
        self.what = what
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = enabled
        self.start = time.monotonic()
        self._last = self.start
        self._bar: Any = None
        if enabled:
            try:
                from tqdm import tqdm  # type: ignore[import]
                self._bar = tqdm(total=total, unit="pt", unit_scale=True, desc=what,
                                 file=self.stream, mininterval=0.5)
            except ImportError:
                self._bar = None

    def update(self, n: int) -> None:
        self.done += n
        if not self.enabled:
            return
        if self._bar is not None:
            self._bar.update(n)
            return
        now = time.monotonic()
        if now - self._last >= 1.0:
            self._last = now
            self.stream.write(self._line(now) + "\n")
            self.stream.flush()

    def _line(self, now: float) -> str:
        rate = self.done / max(now - self.start, 1e-9)
        of = f"/{self.total:,}" if self.total else ""
        pct = f" ({100.0 * self.done / self.total:.0f}%)" if self.total else ""
        return f"{self.what}: {self.done:,}{of} points{pct}, {rate:,.0f} points/s"

    def close(self, imported: Optional[int] = None) -> float:
        """Ends the display; returns the seconds since the start."""
        now = time.monotonic()
        secs = now - self.start
        if self.enabled:
            if self._bar is not None:
                self._bar.close()
            n = self.done if imported is None else imported
            self.stream.write(f"{self.what}: {n:,} points in {secs:.1f} s "
                              f"({n / max(secs, 1e-9):,.0f} points/s)\n")
            self.stream.flush()
        return secs
