"""How ``tirl eval`` and ``tirl demo`` show a run: a rich progress bar on a terminal, plain progress lines off one,
warnings in yellow and the summary table at the end (:class:`ConsoleListener`, an
:class:`tirl.eval.runner.EvalListener`). The evaluation itself prints nothing."""

from __future__ import annotations

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from tirl.eval.metrics import BenchmarkSummary
from tirl.eval.progress import LineProgress
from tirl.eval.report import summary_table
from tirl.eval.runner import EvalListener


class ConsoleListener(EvalListener):
    """Shows one evaluation run on ``console``.

    Args:
        console: where to print.
        progress: show progress (a bar on a terminal; :class:`tirl.eval.progress.LineProgress` lines otherwise,
            where a bar would draw nothing); warnings and the table are printed either way.
    """

    def __init__(self, console: Console, progress: bool = True) -> None:
        self.console = console
        self.progress = progress
        self._bar: Progress | None = None
        self._task = None
        self._lines: LineProgress | None = None
        self._done = 0
        self._correct = 0

    def _acc(self) -> str:
        return f"acc {self._correct / self._done:.3f} ({self._done})" if self._done else "acc -"

    def started(self, label: str, model: str, total: int, resumed: int, resumed_correct: int) -> None:
        self._done, self._correct = resumed, resumed_correct
        if not self.progress:
            return
        if self.console.is_terminal:
            self._bar = Progress(
                TextColumn("[bold]{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("{task.fields[acc]}"),
                TimeElapsedColumn(),
                TimeRemainingColumn(),
                console=self.console,
                transient=False,
            )
            self._bar.start()
            self._task = self._bar.add_task(label, total=total, completed=resumed, acc=self._acc())
        else:
            self._lines = LineProgress(
                f"{label} {model}",
                total,
                resumed,
                write=lambda text: self.console.print(text, soft_wrap=True, highlight=False),
            )

    def sample_done(self, correct: bool | None) -> None:
        if correct is not None:
            self._done += 1
            self._correct += bool(correct)
        if self._bar is not None and self._task is not None:
            self._bar.update(self._task, advance=1, acc=self._acc())
        if self._lines is not None:
            self._lines.advance(self._acc())

    def warning(self, text: str) -> None:
        self.console.print(text, style="yellow", markup=False, highlight=False)

    def finished(self, summaries: list[BenchmarkSummary], title: str) -> None:
        self.close()
        self.console.print(summary_table(summaries, title=title))

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None
