"""Progress bars (rich, on stderr) for long measurements; a `measure.run.ProgressSink`."""

from __future__ import annotations

from types import TracebackType

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn


class RichProgress:
    """Use as a context manager; silent when stderr is not a terminal (logs stay clean)."""

    def __init__(self, console: Console | None = None, enabled: bool = True) -> None:
        self.console = console or Console(stderr=True)
        self._progress = Progress(
            SpinnerColumn(),
            TextColumn("[progress.description]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=self.console,
            disable=not (enabled and self.console.is_terminal),
        )
        self._task: int | None = None

    def __enter__(self) -> "RichProgress":
        self._progress.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self._progress.stop()

    def begin(self, total: int) -> None:
        self._task = self._progress.add_task("starting", total=total)

    def step(self, label: str) -> None:
        if self._task is not None:
            self._progress.update(self._task, description=label)

    def advance(self) -> None:
        if self._task is not None:
            self._progress.advance(self._task)
