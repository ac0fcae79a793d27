"""Where the command's results and errors go: text for people, JSON
(``--json``) for programs, and progress only for people watching."""

from __future__ import annotations

import json
import sys
from typing import Any

from nx_hal.cli.progress import Progress

__all__ = ["Output"]


class Output:
    """Prints results and errors in the mode the user chose."""

    def __init__(self, json_mode: bool, progress: bool = True) -> None:
        self.json = json_mode
        self.progress = Progress(progress and not json_mode)

    def emit(self, data: Any, text: str) -> None:
        """The command's result: ``data`` as JSON, or ``text``."""
        print(json.dumps(data, indent=2, default=str) if self.json else text)

    def table(self, data: Any, headers: list[str], rows: list[list[str]], text: str) -> None:
        """A result that is a table: rich's, fitted to the width, when stdout
        is a terminal; else ``text``, whose fixed columns scripts may parse
        (and JSON under --json)."""
        if self.json or not rows or not sys.stdout.isatty():
            self.emit(data, text)
            return
        from rich.console import Console
        from rich.table import Table

        table = Table(header_style="bold", show_edge=False)
        for header in headers:
            table.add_column(header, overflow="fold")  # wrapped, never cut off with an ellipsis
        for row in rows:
            table.add_row(*row)
        Console().print(table)

    def note(self, text: str) -> None:
        """A remark beside the result (stderr, so JSON on stdout stays whole)."""
        print(text, file=sys.stderr)

    def error(self, code: str, message: str, status: int, **extra: Any) -> int:
        """Reports an error (JSON on stdout under --json) and returns ``status``."""
        if self.json:
            body = {"code": code, "message": message, **{k: v for k, v in extra.items() if v is not None}}
            print(json.dumps({"error": body}, indent=2, default=str))
        else:
            print(f"error: {message}", file=sys.stderr)
        return status
