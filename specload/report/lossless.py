"""``report A B`` with both sides checked (``--check-outputs``): are B's answers A's, level by level?

``compare_outputs(a, b)`` is the one entry point (the report and the sweep call it): two runs in,
``OutputsComparison`` out: B's answers against A's per level (``stats/lossless.py`` does the
comparing), overall, and A's own answers at each level against its C=1 answers (the noise floor:
"B diverges on 3 % of prompts" reads against "A itself diverges on 2 % between C=1 and C=16").
This module also writes it: into the comparison's JSON (each level's ``sides[B].outputs`` and
``sides[A].outputs``, the latter A's self-divergence), as text tables, and as the HTML section, each
with the first divergent prompts side by side from the divergence on.
"""

from __future__ import annotations

import html as _html
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from specload.record.runs import Run
from specload.stats.level_metrics import level_keys
from specload.stats.lossless import (
    DIVERGES,
    NEAR_TIE_NATS,
    NUMERICS,
    Answer,
    OutputsLevel,
    compare_answers,
    position_summary,
    self_divergence,
    total,
)

if TYPE_CHECKING:
    from rich.console import Console



@dataclass(frozen=True)
class OutputsComparison:
    a: str  # the baseline's label
    b: str
    near_tie: float
    levels: tuple[OutputsLevel, ...]  # B against A
    noise: tuple[OutputsLevel, ...]  # A against its own C=1 (or lowest-concurrency) answers
    notes: tuple[str, ...] = ()

    @property
    def overall(self) -> OutputsLevel:
        return total(self.levels)

    @property
    def by(self) -> str:
        by = set(self.overall.by)
        return "token" if by == {"token"} else "text" if by == {"text"} else "token where both runs have logprobs, else text"


def _answers(run: Run) -> list[Answer]:
    """The run's answers with each level index replaced by the first index of its comparison key
    (``level_keys``: --repeat levels are one), so levels pair up as the figures' comparison pairs them."""
    first = {lv.index: lvs[0].index for lvs in level_keys(run.levels).values() for lv in lvs}
    return [replace(a, level_index=first[a.level_index]) if a.level_index in first else a for a in run.answers or ()]


def compare_outputs(a: Run, b: Run, *, near_tie: float = NEAR_TIE_NATS) -> OutputsComparison | None:
    """B's answers against A's (None when neither run recorded any)."""
    if a.answers is None and b.answers is None:
        return None
    notes = [f"{r.label} has no recorded outputs (run it with --check-outputs)" for r in (a, b) if r.answers is None]
    aa, bb = _answers(a), _answers(b)
    levels = compare_answers(aa, bb, near_tie=near_tie) if not notes else ()
    for who, run in (("A", a), ("B", b)):
        t = (run.description.config or {}).get("temperature")
        if run.answers is not None and t not in (0, 0.0, None):
            notes.append(f"{who} ({run.label}) sampled at temperature {t}: its answers need not repeat")
    for r in (a, b):
        partial = sum(not x.complete for x in r.answers or ())
        if partial:
            notes.append(f"{r.label}: {partial} of {len(r.answers or ())} answers have text that came without "
                         "logprobs (llama-server sends none for the draft tokens its speculation accepted): "
                         "those are compared by text")
    if any(lv.unmargined for lv in levels):
        notes.append("some divergences have no margin (a run without logprobs): they count as divergent, "
                     "since a near-tie cannot be shown")
    if sum(lv.mismatched for lv in levels):
        notes.append(f"{sum(lv.mismatched for lv in levels)} prompts had other texts in the two runs (other "
                     "--prompt-tokens, dataset or server tokenizer; with --multi-turn, an earlier turn's answer in "
                     "the history): not compared")
    return OutputsComparison(a.label, b.label, near_tie, levels, self_divergence(aa, near_tie=near_tie), tuple(notes))


def compare_sides(sides: Sequence[Any], *, near_tie: float = NEAR_TIE_NATS) -> list[OutputsComparison]:
    """Each other side's answers against the first side's (``report A B``, a sweep's configurations
    against its baseline; each a ``compare.Side``): the first run of each side that recorded answers."""

    def first(side: Any) -> Run:
        return next((r for r in side.runs if r.answers is not None), side.runs[0])

    found = [compare_outputs(first(sides[0]), first(s), near_tie=near_tie) for s in sides[1:]]
    return [oc for oc in found if oc is not None]


def _self_rate(lv: OutputsLevel | None) -> str:
    if lv is None or not lv.compared:
        return "-"
    n = lv.near_tie + lv.divergent
    return f"{100 * n / lv.compared:.1f}% ({n}/{lv.compared})"


def _find(levels: Sequence[OutputsLevel], concurrency: int, occurrence: int) -> OutputsLevel | None:
    return next((lv for lv in levels if lv.concurrency == concurrency and lv.occurrence == occurrence), None)


# ------------------------------------------------------------------------------------------ json


def add_to_json(doc: dict, oc: OutputsComparison) -> dict:
    """The comparison's JSON (``compare.to_json``) with the outputs in it: each level's
    ``sides[B].outputs`` ({compared, identical, near_tie, divergent, verdict, ...}) and
    ``sides[A].outputs`` (A against its own reference level), and a top-level ``outputs``."""
    for lv in doc.get("levels", []):
        c, occ = lv.get("concurrency"), lv.get("occurrence", 0)
        sides = lv.get("sides", {})
        mine = _find(oc.levels, c, occ)
        if mine is not None and oc.b in sides:
            sides[oc.b]["outputs"] = mine.as_dict()
        noise = _find(oc.noise, c, occ)
        if oc.a in sides:
            if noise is not None:
                sides[oc.a]["outputs"] = noise.as_dict()
            elif oc.noise and c == oc.noise[0].reference and occ == 0:
                sides[oc.a]["outputs"] = {"reference": True}
    overall = oc.overall
    doc.setdefault("outputs", {})[oc.b] = {
        "baseline": oc.a,
        "side": oc.b,
        "near_tie_nats": oc.near_tie,
        "compared_by": oc.by,
        "interval": "Wilson score, 95%",
        "overall": overall.as_dict() | {"verdict": overall.verdict},
        "noise_floor": [lv.as_dict() | {"concurrency": lv.concurrency} for lv in oc.noise],
        "notes": list(oc.notes),
    }
    return doc


# ------------------------------------------------------------------------------------------ text

VERDICT_STYLE = {"lossless": "bold green", NUMERICS: "yellow", DIVERGES: "bold red"}


def render(oc: OutputsComparison, console: Console) -> None:
    from rich.markup import escape
    from rich.table import Table

    out = console
    out.print(f"[bold]Is it lossless?[/] answers of [bold]{escape(oc.b)}[/] against [bold]{escape(oc.a)}[/] "
              f"for the same prompts · compared by {oc.by} · near-tie: a margin under {oc.near_tie:g} nats in "
              "either run · 95% Wilson intervals")
    for n in oc.notes:
        out.print(f"[yellow]{escape(n)}[/]")
    if not oc.levels:
        return
    ref = oc.noise[0].reference if oc.noise else None
    t = Table(header_style="bold", show_edge=False, pad_edge=False)
    for col in ("level", "compared", "identical", "near-tie", "divergent", "first divergence p50 [min-max]",
                f"{oc.a} itself diverges vs C={ref}" if ref is not None else f"{oc.a} itself diverges", "verdict"):
        t.add_column(col, justify="left" if col in ("verdict",) else "right")
    def row(name: str, lv: OutputsLevel, floor: str) -> None:
        sh = lv.share
        ident = "-" if sh is None else f"{lv.identical} ({100 * sh[0]:.1f}% [{100 * sh[1]:.1f}, {100 * sh[2]:.1f}])"
        pos = position_summary(lv.positions) if lv.positions else None
        where = "-" if pos is None else f"{pos['p50']} [{pos['min']}-{pos['max']}]"
        v = lv.verdict or "-"
        t.add_row(name, str(lv.compared), ident, str(lv.near_tie), str(lv.divergent), where, floor,
                  f"[{VERDICT_STYLE.get(v, 'dim')}]{v}[/]")

    for lv in oc.levels:
        own = "(reference)" if lv.concurrency == ref and lv.occurrence == 0 else _self_rate(
            _find(oc.noise, lv.concurrency, lv.occurrence))
        row(lv.key, lv, own)
    row("all", oc.overall, _self_rate(total(oc.noise)) if oc.noise else "-")
    out.print(t)
    examples = [x for lv in oc.levels for x in lv.examples]
    if not examples:
        return
    ex = Table(title="divergent prompts, from the divergence on", header_style="bold", show_edge=False,
               pad_edge=False)
    ex.add_column("where", no_wrap=True)
    ex.add_column(oc.a)
    ex.add_column(oc.b)
    for x in examples[:6]:
        unit = "token" if x.by == "token" else "char"
        why = ("near-tie" if x.near_tie else "NOT a near-tie") if x.margins_known else "no margins"
        margins = f"{_num(x.margin_a)} / {_num(x.margin_b)}" if x.margins_known else ""
        ex.add_row(escape(f"C={x.concurrency} {x.prompt}\n{unit} {x.position}: {why}\n{margins}"),
                   escape(f"…{x.before[-24:]!r}\n→ {x.a[:120]!r}"), escape(f"…{x.before[-24:]!r}\n→ {x.b[:120]!r}"))
    out.print(ex)


def _num(v: float | None) -> str:
    return "?" if v is None else f"{v:.3f}"


# ------------------------------------------------------------------------------------------ html


def html_section(doc: dict | None) -> str:
    """The HTML report's section from the comparison JSON's ``outputs`` and levels ('' without)."""
    sides = (doc or {}).get("outputs")
    if not isinstance(sides, dict):
        return ""
    return "".join(_html_side(doc or {}, o) for o in sides.values() if isinstance(o, dict))


def _html_side(doc: dict, o: dict) -> str:
    e = lambda v: _html.escape(str(v))  # noqa: E731
    a, b = o.get("baseline"), o.get("side")
    rows, examples = [], []

    def row(key: object, mine: dict, noise: dict | None) -> str:
        sh = mine.get("identical_share")
        ident = f"{mine['identical']}" + (f" ({100 * sh[0]:.1f}% [{100 * sh[1]:.1f}, {100 * sh[2]:.1f}])" if sh else "")
        fd = mine.get("first_divergence")
        where = f"{fd['p50']} [{fd['min']}–{fd['max']}]" if fd else "–"
        if noise and noise.get("reference"):
            floor = "reference"
        elif noise and noise.get("compared"):
            k = noise["near_tie"] + noise["divergent"]
            floor = f"{100 * k / noise['compared']:.1f}% ({k}/{noise['compared']})"
        else:
            floor = "–"
        v = mine.get("verdict") or "–"
        return (f"<tr><td>{e(key)}</td><td>{mine['compared']}</td><td>{e(ident)}</td>"
                f"<td>{mine['near_tie']}</td><td>{mine['divergent']}</td><td>{e(where)}</td><td>{e(floor)}</td>"
                f'<td><span class="verdict {e(v)}">{e(v)}</span></td></tr>')

    for lv in doc.get("levels", []):
        sides = lv.get("sides", {})
        mine, noise = sides.get(b, {}).get("outputs"), sides.get(a, {}).get("outputs")
        if not mine:
            continue
        rows.append(row(lv.get("key"), mine, noise))
        for x in mine.get("examples", []):
            why = "near-tie" if x.get("near_tie") else "not a near-tie"
            examples.append(
                f"<tr><td>C={e(x.get('concurrency'))} {e(x.get('prompt'))}<br>{e(x.get('by'))} {e(x.get('position'))}: "
                f"{e(why)}<br>margins {e(_num(x.get('margin_a')))} / {e(_num(x.get('margin_b')))}</td>"
                f"<td><div class=\"answer\">…{e(x.get('before', '')[-24:])}<mark>{e(x.get('a', ''))}</mark></div></td>"
                f"<td><div class=\"answer\">…{e(x.get('before', '')[-24:])}<mark>{e(x.get('b', ''))}</mark></div></td></tr>")
    overall = o.get("overall", {})
    if rows and overall.get("compared") is not None:
        floor = [f for f in o.get("noise_floor", []) if isinstance(f, dict)]
        pooled = {k: sum(f.get(k, 0) for f in floor) for k in ("compared", "near_tie", "divergent")}
        rows.append(row("all", overall, pooled))
    notes = "".join(f'<p class="note">{e(n)}</p>' for n in o.get("notes", []))
    ex = (f'<h3>Divergent prompts, from the divergence on</h3><div class="table-wrap"><table class="levels answers">'
          f'<thead><tr><th class="text">where</th><th class="text">{e(a)}</th><th class="text">{e(b)}</th></tr></thead>'
          f"<tbody>{''.join(examples)}</tbody></table></div>") if examples else ""
    return (
        f'<h2>Is it lossless? {e(b)}</h2><p class="sub">The answers of <b>{e(b)}</b> against <b>{e(a)}</b> for the same '
        f"prompts, compared by {e(o.get('compared_by'))}; a divergence is a near-tie when either run's margin "
        f"there is under {e(o.get('near_tie_nats'))} nats. Overall: <b>{e(overall.get('verdict') or '–')}</b>, "
        f"{e(overall.get('identical', 0))}/{e(overall.get('compared', 0))} identical. 95% Wilson intervals.</p>"
        f"{notes}<div class=\"table-wrap\"><table class=\"levels\"><thead><tr><th>C</th><th>compared</th>"
        f"<th>identical</th><th>near-tie</th><th>divergent</th><th>first divergence p50 [min–max]</th>"
        f"<th>{e(a)} itself diverges vs its reference level</th><th>verdict</th></tr></thead><tbody>{''.join(rows)}</tbody>"
        f"</table></div>{ex}"
    )
