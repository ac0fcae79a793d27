"""Progress on long work, on stderr, only where a person is watching: never
when stderr is not a terminal, under ``--json``, or with ``--no-progress``.
rich draws it (imported only then, so scripts pay nothing)."""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["Progress"]

# Work shorter than this shows nothing: a spinner that flashes is noise.
DELAY_S = 1.0


class Progress:
    """Spinners for single steps and bars for counted work."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled and sys.stderr.isatty()
        self._console: Any = None

    def _rich_console(self) -> Any:
        if self._console is None:
            from rich.console import Console

            self._console = Console(stderr=True)
        return self._console

    @contextmanager
    def activity(self, text: str) -> Iterator[None]:
        """A spinner with ``text`` and the time spent, shown once the work
        has taken longer than a second."""
        if not self.enabled:
            yield
            return
        lock = threading.Lock()
        state: dict[str, Any] = {"status": None, "done": False}

        def start() -> None:
            with lock:
                if not state["done"]:
                    state["status"] = self._rich_console().status(text)
                    state["status"].start()

        timer = threading.Timer(DELAY_S, start)
        timer.daemon = True
        timer.start()
        try:
            yield
        finally:
            timer.cancel()
            with lock:
                state["done"] = True
                if state["status"] is not None:
                    state["status"].stop()

    @contextmanager
    def steps(self, text: str, total: int) -> Iterator[Callable[[str], None]]:
        """A bar over ``total`` steps; the caller advances it with a short
        note (the case or iteration just done)."""
        if not self.enabled or total <= 0:
            yield lambda note: None
            return
        from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn
        from rich.progress import Progress as RichProgress

        bar = RichProgress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                           TimeElapsedColumn(), TextColumn("{task.fields[note]}"),
                           console=self._rich_console(), transient=True)
        with bar:
            task = bar.add_task(text, total=total, note="")

            def advance(note: str) -> None:
                bar.update(task, advance=1, note=note[:40])
            yield advance
