"""A progress bar with rate for long counted runs on a terminal (rich Progress on stderr)."""

from __future__ import annotations


class CountProgress:
    """Context manager; advance() once per unit. Transient: the summary replaces it."""

    def __init__(self, app, total: int, what: str):
        self.app, self.total, self.what = app, total, what
        self.progress = None
        self.task = None

    def __enter__(self):
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

        self.progress = Progress(
            TextColumn(self.what),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[rate]}"),
            TimeRemainingColumn(),
            console=self.app.err,
            transient=True,
        )
        self.progress.__enter__()
        self.task = self.progress.add_task(self.what, total=self.total, rate="")
        return self

    def advance(self) -> None:
        if self.progress is not None:
            task = self.progress.tasks[0]
            rate = f"{task.speed:,.0f}/s" if task.speed else ""
            self.progress.update(self.task, advance=1, rate=rate)

    def __exit__(self, *exc) -> None:
        if self.progress is not None:
            self.progress.__exit__(None, None, None)
            self.progress = None
