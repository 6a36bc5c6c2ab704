"""A progress bar on stderr: tqdm when it is installed, else a small one written here."""

from __future__ import annotations

import sys
import time
from typing import Any, TextIO


class Progress:
    """``total`` steps; ``describe(text)`` names the current one, ``step()`` finishes it."""

    def __init__(self, total: int, enabled: bool = True, stream: TextIO | None = None) -> None:
        self.total, self.done, self.enabled = total, 0, enabled
        self.stream = stream if stream is not None else sys.stderr
        self.text = ""
        self.start = time.perf_counter()
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self._tqdm: Any = None
        if enabled:
            try:
                from tqdm import tqdm

                self._tqdm = tqdm(total=total, file=self.stream, unit="case",
                                  dynamic_ncols=True)
            except ImportError:
                pass
        self._draw()

    def describe(self, text: str) -> None:
        self.text = text
        if self._tqdm is not None:
            self._tqdm.set_description_str(text, refresh=True)
        self._draw()

    def step(self) -> None:
        self.done += 1
        if self._tqdm is not None:
            self._tqdm.update(1)
        elif self.enabled and not self.tty:  # a log file: one line per finished step
            elapsed = time.perf_counter() - self.start
            self.stream.write(f"[{self.done}/{self.total} {elapsed:.0f}s] {self.text}\n")
            self.stream.flush()
        self._draw()

    def write(self, line: str) -> None:
        """Print a message (a warning) without garbling the bar."""
        if self._tqdm is not None:
            self._tqdm.write(line, file=self.stream)
            return
        if self.enabled and self.tty:
            self.stream.write("\r\033[K")
        self.stream.write(line + "\n")
        self._draw()

    def close(self) -> None:
        if self._tqdm is not None:
            self._tqdm.close()
        elif self.enabled and self.tty:
            self.stream.write("\n")
            self.stream.flush()
        self.enabled = False

    def _draw(self) -> None:
        if not self.enabled or not self.tty or self._tqdm is not None:
            return
        width = 24
        frac = self.done / self.total if self.total else 1.0
        filled = int(width * frac)
        elapsed = time.perf_counter() - self.start
        bar = "#" * filled + "." * (width - filled)
        line = (f"[{bar}] {self.done}/{self.total} {elapsed:5.0f}s  {self.text}")[:110]
        self.stream.write("\r\033[K" + line)
        self.stream.flush()
