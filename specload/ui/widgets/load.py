"""The load panel: the concurrency asked for against what is really in flight, and the ramp's progress.

The gap between target and in-flight is the first thing to look at when a server stalls, so both
numbers sit side by side. The level's progress is a ProgressBar in the level's own unit (requests or
seconds); a held or manual level has no end, so the bar is left empty rather than made indeterminate
(an indeterminate bar animates, i.e. redraws continuously, which the UI must not do).
"""

from __future__ import annotations

from textual import events
from textual.app import ComposeResult
from textual.containers import Horizontal
from textual.reactive import var
from textual.widget import Widget
from textual.widgets import ProgressBar

from specload.engine.capacity import SearchView
from specload.engine.runner import RunnerState
from specload.formatting import verdict_text
from specload.stats.live_judge import LiveView
from specload.stats.lossless import OutputsView
from specload.ui.widgets.value import ValueLabel


class LoadPanel(Widget):
    DEFAULT_CSS = """
    LoadPanel {
        height: auto;
        layout: vertical;
        padding: 0 1;
    }
    LoadPanel > Horizontal { height: auto; }
    LoadPanel #load-conc { width: 38; height: 1; }
    LoadPanel #load-level { width: 1fr; height: 1; color: $text-muted; }
    LoadPanel.-stacked #load-conc { width: 1fr; }
    /* in a narrow top panel (the wide layout's bordered column) the two lines stack */
    LoadPanel.-stacked > Horizontal { layout: vertical; }
    LoadPanel.-stacked > Horizontal.bar-row { layout: horizontal; }
    LoadPanel #load-live { width: auto; height: 1; display: none; padding-left: 1; }
    LoadPanel #load-live.-shown { display: block; }
    LoadPanel #load-outputs { width: 1fr; height: 1; display: none; }
    LoadPanel #load-outputs.-shown { display: block; }
    LoadPanel ProgressBar { width: 1fr; min-width: 10; }
    LoadPanel ProgressBar Bar { width: 1fr; }
    LoadPanel ProgressBar Bar > .bar--bar { color: $specload-throughput; }
    LoadPanel ProgressBar Bar > .bar--complete { color: $specload-good; }
    """
    BORDER_TITLE = "load"

    runner_state: var[RunnerState | None] = var(None)
    pending_target: var[int | None] = var(None)  # keyed in, not yet applied
    search: var[SearchView | None] = var(None)  # a capacity search's probe is a level too
    live: var[LiveView | None] = var(None)  # --baseline / --target-ci: the running level judged so far
    outputs: var[OutputsView | None] = var(None)  # --check-outputs with --baseline: the answers so far

    def compose(self) -> ComposeResult:
        with Horizontal():
            yield ValueLabel("target C=– · in flight –", id="load-conc")
            yield ValueLabel("level –", id="load-level")
        with Horizontal(classes="bar-row"):
            yield ProgressBar(total=1, show_eta=False, id="load-progress")
            # --baseline / --target-ci only: the running level judged so far, the bar then shorter
            yield ValueLabel("", id="load-live")
        # --check-outputs with --baseline, when the panel is too narrow for it beside the bar
        yield ValueLabel("", id="load-outputs")

    def on_resize(self, event: events.Resize) -> None:
        self.set_class(event.size.width < 70, "-stacked")
        self.watch_runner_state(self.runner_state)

    def watch_pending_target(self, _pending: int | None) -> None:
        self.watch_runner_state(self.runner_state)

    def watch_search(self, _search: SearchView | None) -> None:
        self.watch_runner_state(self.runner_state)

    def watch_live(self, _live: LiveView | None) -> None:
        self.watch_runner_state(self.runner_state)

    def watch_outputs(self, _outputs: OutputsView | None) -> None:
        self.watch_runner_state(self.runner_state)

    def watch_runner_state(self, rs: RunnerState | None) -> None:
        conc = self.query_one("#load-conc", ValueLabel)
        level = self.query_one("#load-level", ValueLabel)
        bar = self.query_one(ProgressBar)
        if rs is None:
            conc.show("target C=– · in flight –")
            level.show("level – (not started)")
            bar.update(total=1, progress=0)
            return
        target = f"{rs.target}" if self.pending_target is None else f"{rs.target}→{self.pending_target}"
        # 38 columns hold C=10000 in flight with a new target keyed in ("target C=10000→20000 · in flight 10000")
        conc.show(f"target C=[b]{target}[/] · in flight [b]{rs.in_flight}[/]")
        sv = self.search
        if rs.level_index < 0:
            where = "warm-up"
        elif rs.sourced and sv is not None and sv.current is not None:
            where = probe_text(sv)
        elif rs.sourced and rs.state == "finished":
            best = sv is not None and sv.result is not None and sv.result.best is not None
            where = "search done · b holds the best point" if best else "search done · no best point"
        elif rs.level_number == 0:
            where = f"manual level C={rs.target}"
        else:
            where = f"level {rs.level_number}/{rs.level_count} C={rs.level_concurrency}"
        if rs.held:
            where += " · held"
        if rs.level_total:
            unit = rs.level_unit
            done = f"{rs.level_done:.0f}" if unit == "requests" else f"{rs.level_done:.1f}"
            total = f"{rs.level_total:.0f}" if unit == "requests" else f"{rs.level_total:g}"
            where += f" · {done}/{total} {unit}"
            bar.update(total=rs.level_total, progress=min(rs.level_done, rs.level_total))
        elif rs.state == "finished":
            bar.update(total=1, progress=1)  # the plan is done
        else:
            bar.update(total=1, progress=0)
        level.show(where)
        lv = self.live
        text = live_text(lv) if lv is not None and lv.index == rs.level_index else ""
        answers = self.outputs.text(short=True) if self.outputs is not None else ""
        own_line = bool(answers) and self.has_class("-stacked")
        if answers and not own_line:
            text = " · ".join(t for t in (text, answers) if t)
        outputs = self.query_one("#load-outputs", ValueLabel)
        outputs.set_class(own_line, "-shown")
        outputs.show(answers if own_line else "")
        live = self.query_one("#load-live", ValueLabel)
        live.set_class(bool(text), "-shown")
        live.show(text, sized=True)  # beside the bar, as wide as it says


def live_text(lv: LiveView) -> str:
    """``×1.49 [1.03,2.16] ▲ better``: the running level against the baseline's level so far (the ratio
    with its sequential interval, the verdict); ``±4.1%`` without a baseline (--target-ci)."""
    parts = []
    hw = lv.estimate.half_width_pct
    if hw is not None and lv.estimate.estimable and lv.baseline is None:  # with a baseline: in the table
        parts.append(f"±{hw:.1f}%")
    if lv.baseline is not None and lv.baseline.value is not None and lv.ratio is not None:
        r = lv.ratio
        ci = f" [{r.ci_low:.2f},{r.ci_high:.2f}]" if r.ci_low == r.ci_low else ""
        verdict = verdict_text(lv.decision.verdict if lv.decision is not None else None, "–")
        parts.append(f"×{r.ratio:.2f}{ci} {verdict}")
    return " ".join(parts)


def _load(axis: str, v: float | None) -> str:
    if v is None:
        return "–"
    return f"C={v:g}" if axis == "concurrency" else f"{v:g}/s"


def probe_text(sv: SearchView) -> str:
    """``probe 5 bisect C=12 · [8..16]``: the probe running and the bracket the search narrows."""
    p = sv.current
    assert p is not None
    lo, hi = sv.bracket
    text = f"probe {p.number} {p.phase} {_load(sv.axis, p.value)}"
    if lo is not None or hi is not None:
        text += f" · [{_load(sv.axis, lo).removeprefix('C=')}..{_load(sv.axis, hi).removeprefix('C=')}]"
    return text
