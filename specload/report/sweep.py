"""What a sweep's runs say together: ``sweep_result`` from ``sweep.json``'s state and the runs' records.

Per configuration: its status (``ok``, ``crashed``, ``failed_to_start``; ``pending`` in a sweep not
finished), its runs (repeats, each with its attempts), the root cause of a crash, the start-up time
(launch to the first answered request: the cost of a restart), capacity under ``--slo`` (a
``--find-max`` search's best point, else the highest ramp level whose objectives were met in every
repeat), and what its server said about itself (``/get_server_info``, ``/version``, ``/props``) where
it differs from the baseline's. Per level: the comparison of ``report A B`` with the repeats as runs of
each side (``compare.compare``: run-to-run variance from the repeats), its crossovers, the lossless
verdict where the runs checked their outputs (``report/lossless.py``), and ``best_by_level``: the
configuration to deploy at each concurrency (the best of those better than the baseline with
confidence, else the baseline), summed up as a schedule, "C ≤ 4: topk=1; C ≥ 16: baseline".

The same result is printed as tables (``render``) and written as one HTML page (``write_html``).
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import TYPE_CHECKING, Any

from specload.formatting import fitted_table
from specload.record.runs import Run, RunReadError, load_run
from specload.report.compare import Side, compare, fmt_value, to_json
from specload.report.lossless import add_to_json
from specload.report.lossless import compare_sides as compare_outputs_of
from specload.secrets import redact_command
from specload.stats import intervals as iv
from specload.stats.level_metrics import DEFAULT_PRIMARY, METRICS

if TYPE_CHECKING:
    from rich.console import Console

SHOWN = ("ttft_p50", "tpot_p50")  # latency beside the headline in the table
# server-info keys that differ between any two runs whatever the configuration (its own port, a pid)
_NOISE = ("port", "host", "pid", "dist_init_addr", "time", "timestamp", "uptime", "started", "id")


class SweepReadError(Exception):
    """A folder that holds no readable sweep; one line."""


SWEEP_FILE, SWEEP_SCHEMA = "sweep.json", 1


def read_sweep(folder: str | Path) -> dict[str, Any]:
    """``DIR/sweep.json``, checked to be a sweep's (its schema, its plan and order of runs)."""
    import orjson

    path = Path(folder) / SWEEP_FILE
    try:
        doc = orjson.loads(path.read_bytes())
    except FileNotFoundError:
        raise SweepReadError(f"{folder} holds no sweep ({SWEEP_FILE} is missing)") from None
    except OSError as e:
        raise SweepReadError(f"cannot read {path}: {e.strerror or e}") from None
    except orjson.JSONDecodeError as e:
        raise SweepReadError(f"{path} is not a sweep's state: {e}") from None
    ok = (isinstance(doc, dict) and doc.get("specload_sweep") == SWEEP_SCHEMA and isinstance(doc.get("schedule"), list)
          and isinstance(doc.get("plan"), dict) and isinstance(doc["plan"].get("configs"), list))
    if not ok:
        raise SweepReadError(f"{path} is not a sweep's state (schema {SWEEP_SCHEMA})")
    return doc


def shown(doc: dict) -> dict:
    """sweep.json for a screen or a pipe: the plan's secrets masked (the file keeps them for a resume)."""
    from specload.secrets import redact_config

    out = {**doc, **{k: redact_config(doc[k]) for k in ("params", "plan") if k in doc}}
    if isinstance(doc.get("params"), dict) and doc["params"].get("configs"):  # NAME=ARGS: the arguments masked
        named = [str(c).partition("=") for c in doc["params"]["configs"]]
        out["params"]["configs"] = [f"{n}={redact_config(a)}" for n, _, a in named]
    return out


def sweep_sides(doc: dict, folder: Path) -> tuple[list[Side], str, list[str]]:
    """The configurations with complete runs as comparison sides (repeats as runs of a side), the
    baseline first; the baseline's name, and notes on what could not be read. A baseline without a
    complete run gives way to the first configuration that has one (said in the notes)."""
    runs: dict[str, list[Run]] = {}
    notes = []
    for s in doc["schedule"]:
        if s.get("status") != "ok" or not s.get("attempts"):
            continue
        path = folder / s["attempts"][-1]["record"]
        try:
            runs.setdefault(s["config"], []).append(load_run(str(path), label=s["config"]))
        except (RunReadError, OSError) as e:
            notes.append(f"{s['config']} repeat {s['repeat'] + 1}: {e}")
    names = [c["name"] for c in doc["plan"]["configs"]]
    baseline = doc["plan"]["baseline"]
    if baseline not in runs and runs:
        first = next(n for n in names if n in runs)
        notes.append(f"the baseline {baseline} has no complete run: the others are compared with {first}")
        baseline = first
    order = [baseline, *(n for n in names if n != baseline)]
    return [Side(n, tuple(runs[n])) for n in order if n in runs], baseline, notes


def config_status(slots: list[dict]) -> str:
    st = {s["status"] for s in slots}
    if st == {"ok"}:
        return "ok"
    for s in ("crashed", "failed_to_start"):
        if s in st:
            return s
    return "pending"


def compare_sides(sides: list[Side], *, primary: str, min_effect: float,
                  metrics: tuple[str, ...] | None = None) -> dict | None:
    """``report A B``'s comparison of the sides (its JSON, the outputs' verdicts added); None for fewer
    than two."""
    if len(sides) < 2:
        return None
    cj = to_json(compare(sides, primary=primary, min_effect=min_effect, metrics=metrics))
    _add_outputs(sides, cj)
    return cj


def sweep_result(doc: dict, folder: Path, *, primary: str = DEFAULT_PRIMARY, min_effect: float = iv.DEFAULT_MIN_EFFECT,
                 loaded: tuple[list[Side], str, list[str]] | None = None, comparison: dict | None = None,
                 metrics: tuple[str, ...] | None = None) -> dict[str, Any]:
    """The sweep's result from its state and records (``loaded``: ``sweep_sides`` already read,
    ``comparison``: their ``compare_sides``; ``metrics``: only these, for a quick look while it runs)."""
    sides, baseline, notes = loaded if loaded is not None else sweep_sides(doc, folder)
    notes = list(notes)
    runs = {s.label: list(s.runs) for s in sides}
    cj = comparison if comparison is not None else compare_sides(sides, primary=primary, min_effect=min_effect,
                                                                metrics=metrics)
    if len(sides) == 1:
        notes.append("only one configuration completed a run: nothing to compare it with")
    configs = [_config(doc, c, runs.get(c["name"], []), runs.get(baseline, []), baseline)
               for c in doc["plan"]["configs"]]
    levels = cj["levels"] if cj else []
    best = best_by_level(levels, [s.label for s in sides[1:]], baseline, primary)
    out: dict[str, Any] = {
        "configs": configs,
        "baseline": baseline,
        "primary": primary,
        "min_effect": min_effect,
        "levels": levels,
        "best_by_level": best,
        "schedule_text": schedule_text(best),
        "crossovers": [x for x in (cj or {}).get("crossovers", []) if x["metric"] == primary],
        "run_to_run": (cj or {}).get("run_to_run"),
        "notes": notes + [_for_sweep(n) for n in (cj or {}).get("notes", [])],
        "flags": _unique([{**f, "level": lv["key"]} for lv in levels for f in lv.get("flags", [])]
                         + list((cj or {}).get("shape_flags", []))),
    }
    return out


def _for_sweep(note: str) -> str:
    """A comparison's note in a sweep's words (its repeats are --repeats, not more files)."""
    if note.startswith("one run per side"):
        return ("one run per configuration: run-to-run variation is not accounted for (the intervals see only "
                "the variation within each run; --repeats 2 or more includes it)")
    return note


def _unique(flags: list[dict]) -> list[dict]:
    """One flag per (level, detail): the repeats of a side say the same thing once."""
    seen: dict[tuple, dict] = {}
    for f in flags:
        seen.setdefault((f.get("level"), f.get("detail")), f)
    return list(seen.values())


def _add_outputs(sides: list[Side], cj: dict) -> None:
    """``--check-outputs``: each configuration's answers against the baseline's, added to the
    comparison's levels as ``report A B`` adds them (``sides[B].outputs``)."""
    for oc in compare_outputs_of(sides):
        add_to_json(cj, oc)


def _config(doc: dict, c: dict, runs: list[Run], base_runs: list[Run], baseline: str) -> dict[str, Any]:
    slots = [s for s in doc["schedule"] if s["config"] == c["name"]]
    attempts = [a for s in slots for a in s["attempts"]]
    startups = [a["startup_s"] for a in attempts if a.get("startup_s") is not None]
    crash = next((a["cause"] for a in attempts if a.get("cause") and a["status"] in ("crashed", "failed_to_start")),
                 None)
    info = server_info(runs)
    out: dict[str, Any] = {
        "name": c["name"],
        "args": redact_command(c["args"]),
        "status": config_status(slots),
        "startup_s": round(statistics.median(startups), 3) if startups else None,
        "startup_s_runs": startups,
        "crash": crash,
        "attempts_failed": sum(1 for a in attempts if a["status"] in ("crashed", "failed_to_start")),
        "runs": [{"repeat": s["repeat"] + 1, "status": s["status"],
                  "record": s["attempts"][-1]["record"] if s["attempts"] else None,
                  "startup_s": s["attempts"][-1].get("startup_s") if s["attempts"] else None,
                  "stop_s": s["attempts"][-1].get("stop_s") if s["attempts"] else None,
                  "attempts": s["attempts"]} for s in slots],
        "capacity": capacity(runs),
        "server_info": info,
    }
    if c["name"] != baseline and runs and base_runs:
        out["differs"] = settings_differ(server_info(base_runs), info, base_runs, runs)
    return out


# ------------------------------------------------------------------------------------------ best by level


def best_by_level(levels: list[dict], others: list[str], baseline: str, primary: str) -> dict[str, dict]:
    """Concurrency -> the configuration to run there: of those better than the baseline with confidence,
    the one with the best point ratio; the baseline when none is."""
    lower = METRICS[primary].lower_is_better
    out: dict[str, dict] = {}
    for lv in levels:
        if lv.get("occurrence"):
            continue
        better = []
        undecided: dict[str, list[str]] = {iv.INSUFFICIENT: [], iv.UNSOUND: []}
        for name in others:
            m = ((lv["sides"].get(name) or {}).get("metrics") or {}).get(primary)
            if not m or m.get("ratio") is None:
                continue
            if m.get("verdict") == iv.BETTER:
                better.append((m["ratio"], name, m))
            elif m.get("verdict") in undecided:
                undecided[m["verdict"]].append(name)
        if better:
            ratio, name, m = (min if lower else max)(better)
            entry = {"config": name, "ratio": ratio, "ratio_ci": [m.get("ratio_ci_low"), m.get("ratio_ci_high")],
                     "verdict": iv.BETTER, "also_better": sorted(n for _, n, _ in better if n != name)}
        else:
            entry = {"config": baseline, "ratio": 1.0, "verdict": "baseline",
                     "why": "no configuration is better with confidence", "undecided": undecided[iv.INSUFFICIENT],
                     "unsound": undecided[iv.UNSOUND]}
        out[str(lv["concurrency"])] = entry
    return out


def schedule_text(best: dict[str, dict]) -> str:
    """``C ≤ 4: spec; C = 16: grid; C ≥ 64: base``: runs of levels with the same best configuration."""
    items = sorted(((int(c), e["config"]) for c, e in best.items()), key=lambda x: x[0])
    if not items:
        return ""
    groups: list[tuple[int, int, str]] = []
    for c, name in items:
        if groups and groups[-1][2] == name:
            groups[-1] = (groups[-1][0], c, name)
        else:
            groups.append((c, c, name))
    parts = []
    for i, (lo, hi, name) in enumerate(groups):
        if len(groups) == 1:
            where = "every level"
        elif i == 0:
            where = f"C ≤ {hi}"
        elif i == len(groups) - 1:
            where = f"C ≥ {lo}"
        else:
            where = f"C = {lo}" if lo == hi else f"C = {lo}..{hi}"
        parts.append(f"{where}: {name}")
    # the baseline stays where nothing beat it with confidence: say where which ones could not be judged
    open_ = [f"C={c}: {', '.join(names)}" for c, e in sorted(best.items(), key=lambda x: int(x[0]))
             if (names := [*e.get("undecided", ()), *e.get("unsound", ())])]
    return "; ".join(parts) + (f" (not decided at {'; '.join(open_)})" if open_ else "")


# ------------------------------------------------------------------------------------------ capacity


def capacity(runs: list[Run]) -> dict[str, Any] | None:
    """Under --slo: a --find-max search's best load (the lowest over the repeats), else the highest ramp
    level met in every repeat with every level below it met; None without objectives."""
    per_run: list[dict] = []
    for run in runs:
        found = [e["value"] for e in run.timeline.events or () if e.get("kind") == "search"
                 and isinstance(e.get("value"), dict) and e["value"].get("phase") == "result"]
        if found:
            best = found[-1].get("best") or {}
            per_run.append({"value": best.get("value"), "bracket": found[-1].get("bracket"), "how": "search",
                            "limited_by": found[-1].get("limited_by")})
            continue
        goodput = [(lv.concurrency, lv.summary.goodput) for lv in run.levels
                   if lv.summary is not None and lv.summary.goodput is not None]
        if not goodput:
            continue
        met, limit = None, None
        for c, g in sorted(goodput, key=lambda x: x[0]):
            if g.verdict != "met":
                limit = c
                break
            met = c
        per_run.append({"value": met, "bracket": [met, limit], "how": "ramp", "slo": goodput[0][1].slo})
    if not per_run:
        return None
    values = [p["value"] for p in per_run]
    value = None if any(v is None for v in values) else min(values)
    return {"value": value, "how": per_run[0]["how"], "per_run": per_run}


# ------------------------------------------------------------------------------------------ provenance


def _flatten(d: Any, prefix: str, out: dict[str, Any], depth: int = 0) -> None:
    if isinstance(d, dict) and depth < 3:
        for k, v in d.items():
            _flatten(v, f"{prefix}.{k}" if prefix else str(k), out, depth + 1)
    elif isinstance(d, (str, int, float, bool)) or d is None:
        out[prefix] = d
    else:
        out[prefix] = str(d)[:200]


def _info_of(run: Run) -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for e in run.timeline.events or ():
        if e.get("kind") == "server_info" and isinstance(e.get("value"), dict):
            _flatten(e["value"], "", flat)
    return flat


def server_info(runs: list[Run]) -> dict[str, Any]:
    """What the server said about itself in the first run, flattened (``/props.total_slots``)."""
    return _info_of(runs[0]) if runs else {}


def _noisy(key: str) -> bool:
    last = key.rsplit(".", 1)[-1].lower()
    return any(last == n or last.endswith("_" + n) for n in _NOISE)


def settings_differ(base: dict[str, Any], info: dict[str, Any], base_runs: list[Run], runs: list[Run]) -> list[dict]:
    """The server's settings that differ from the baseline's: ports, pids and times left out, and so is
    any key whose value differs between the repeats of one configuration (not a setting)."""
    unstable = set()
    for group in (base_runs, runs):
        infos = [_info_of(r) for r in group]
        for k in {k for i in infos for k in i}:
            if len({repr(i.get(k)) for i in infos}) > 1:
                unstable.add(k)
    out = []
    for k in sorted(set(base) | set(info)):
        if _noisy(k) or k in unstable or base.get(k) == info.get(k):
            continue
        out.append({"key": k, "baseline": base.get(k), "value": info.get(k)})
    return out


# ------------------------------------------------------------------------------------------ the table


def _metric(lv: dict, side: str, metric: str) -> dict | None:
    return ((lv["sides"].get(side) or {}).get("metrics") or {}).get(metric)


def _est(metric: str, m: dict | None) -> str:
    if not m or m.get("value") is None:
        return "-"
    lo, hi = m.get("ci_low"), m.get("ci_high")
    ci = f" [{fmt_value(metric, lo)}, {fmt_value(metric, hi)}]" if lo is not None and hi is not None else ""
    return fmt_value(metric, m["value"]) + ci


def _ratio(m: dict | None) -> str:
    if not m or m.get("ratio") is None:
        return ""
    lo, hi = m.get("ratio_ci_low"), m.get("ratio_ci_high")
    return f"×{m['ratio']:.2f}" + (f" [{lo:.2f}, {hi:.2f}]" if lo is not None and hi is not None else "")


_MARK = {iv.BETTER: "▲ better", iv.WORSE: "▼ worse", iv.NO_DIFFERENCE: "= no difference", iv.INSUFFICIENT: "? insufficient",
         iv.UNSOUND: "⚠ unsound"}


def render(result: dict, console: Console, *, title: str = "") -> None:
    """The sweep on a terminal: the configurations (status, start-up, why one crashed), per level and
    configuration the headline with its interval, ratio and verdict beside the latency figures, then
    the schedule, the crossovers, capacity and the settings that differ."""
    from rich.markup import escape
    from rich.table import Table
    from rich.text import Text

    primary, base = result["primary"], result["baseline"]
    p = METRICS[primary]
    console.print(f"[bold]specload sweep[/] {escape(title)}  baseline [bold]{escape(base)}[/] · headline "
                  f"{p.label} · 95% intervals · verdicts count a difference beyond ±{result['min_effect'] * 100:g}%")
    ct = Table(header_style="bold", show_edge=False, pad_edge=False)
    for col in ("configuration", "status", "runs", "start-up s", "arguments", "why it failed"):
        ct.add_column(col, justify="right" if col in ("runs", "start-up s") else "left",
                      overflow="fold", max_width=70 if col == "why it failed" else None)
    for c in result["configs"]:
        ok = sum(1 for r in c["runs"] if r["status"] == "ok")
        why = describe(c["crash"]) if c.get("crash") else ""
        if why and c["status"] == "ok":
            why = f"(ok on retry) {why}"
        ct.add_row(Text(c["name"]), Text(c["status"]), f"{ok}/{len(c['runs'])}",
                   f"{c['startup_s']:.1f}" if c.get("startup_s") is not None else "-", Text(c["args"] or "''"),
                   Text(why))
    console.print(ct)
    levels = result["levels"]
    if levels:
        outputs = any((s.get("outputs") or {}).get("verdict") for lv in levels for s in lv["sides"].values())
        headers = ["level", "configuration", p.label, f"×{base}", "verdict",
                   *(f"{METRICS[x].label} {METRICS[x].unit}" for x in SHOWN), *(["outputs"] if outputs else [])]
        rows = []
        for lv in levels:
            for i, name in enumerate(lv["sides"]):
                m = _metric(lv, name, primary)
                verdict = "baseline" if name == base else _MARK.get(str((m or {}).get("verdict")), "")
                row = [lv["key"] if i == 0 else "", name, _est(primary, m), _ratio(m), verdict,
                       *(_est(x, _metric(lv, name, x)) for x in SHOWN)]
                if outputs:
                    row.append(((lv["sides"][name].get("outputs") or {}).get("verdict")) or "")
                rows.append(row)
        console.print(fitted_table(headers, rows, console.width, left=("configuration", "verdict", "outputs"),
                                   importance=tuple(headers), keys=("level", "configuration")))
    if result.get("schedule_text"):
        console.print(f"[bold]best by level[/]: {escape(result['schedule_text'])}", highlight=False)
    for x in result.get("crossovers", []):
        decided = "" if x.get("decided") else " (point estimates only: not decided on both sides)"
        console.print(f"crossover: {escape(x['side'])} is {x['below']} up to C={x['between'][0]} and {x['above']} "
                      f"from C={x['between'][1]} (crosses near C≈{x['at']:.0f}){decided}", highlight=False)
    for c in result["configs"]:
        cap = c.get("capacity")
        if cap:
            bracket = cap["per_run"][0].get("bracket") or []
            limit = f" (the limit lies below C={bracket[1]})" if len(bracket) > 1 and bracket[1] else ""
            v = f"C={cap['value']}" if cap["value"] is not None else "none met"
            console.print(f"capacity ({cap['how']}): {escape(c['name'])} {v}{limit}", highlight=False)
    for c in result["configs"]:
        if c.get("differs"):
            diffs = ", ".join(f"{d['key']} {d['baseline']!r} → {d['value']!r}" for d in c["differs"][:8])
            more = f" (+{len(c['differs']) - 8} more)" if len(c["differs"]) > 8 else ""
            console.print(f"server settings of {escape(c['name'])} vs {escape(base)}: {escape(diffs)}{more}",
                          highlight=False)
    rr = result.get("run_to_run") or {}
    if rr.get("accounted"):
        sd = (rr.get("between_run_sd_pct") or {}).get(primary)
        console.print(f"run-to-run variation estimated from the repeats (between-run sd of {p.label}: "
                      f"{sd if sd is not None else 0:.1f}%)", highlight=False)
    for n in result.get("notes", []):
        console.print(f"[yellow]{escape(n)}[/]")
    for f in result.get("flags", [])[:10]:
        where = f"{f['level']}: " if f.get("level") else ""
        console.print(f"[yellow]⚠ {escape(where + str(f.get('detail')))}[/]")


def describe(cause: dict[str, Any]) -> str:
    """The root cause in one line: the signature and its ranks, where, the server's exit."""
    parts = []
    if cause.get("exception_type"):
        ranks = f" on {', '.join(cause['ranks'])}" if cause.get("ranks") else ""
        frame = f" at {cause['innermost_frame']}" if cause.get("innermost_frame") else ""
        parts.append(f"{cause['exception_type']}: {cause.get('error', '')}{frame}{ranks}")
    elif cause.get("message"):
        parts.append(str(cause["message"]))
    said = " ".join(parts)
    if cause.get("at_concurrency"):
        parts.append(f"during C={cause['at_concurrency']}")
    elif cause.get("kind") == "failed_to_start" and "before it was ready" not in said:
        parts.append("before it was ready")
    elif cause.get("kind") == "crashed" and cause.get("phase") == "ready":
        parts.append("during the warm-up")
    if cause.get("exit") and cause["exit"] not in said:  # the session's message may say it already
        parts.append(f"server {cause['exit']}")
    return "; ".join(parts)[:400]



# ------------------------------------------------------------------------------------------ report DIR


def report_folder(folder: str, *, as_json: bool, html: str | None, primary: str, min_effect: float,
                  console: Console) -> None:
    """``specload report DIR``: the sweep's result computed again from its records, printed (or its
    sweep.json with it, ``--json``), and with ``--html`` one page of it all."""
    import sys

    import orjson

    doc = read_sweep(folder)
    loaded = sweep_sides(doc, Path(folder))
    comparison = compare_sides(loaded[0], primary=primary, min_effect=min_effect)
    result = sweep_result(doc, Path(folder), primary=primary, min_effect=min_effect, loaded=loaded,
                          comparison=comparison)
    if html is not None:
        write_page(html, result, loaded[0], comparison, title=f"specload sweep {folder}")
    if as_json:
        sys.stdout.write(orjson.dumps(shown({**doc, **result}), option=orjson.OPT_INDENT_2).decode() + "\n")
    else:
        render(result, console, title=folder)


def write_page(path: str, result: dict, sides: list[Side], comparison: dict | None, *, title: str) -> None:
    """One HTML page: the sweep's summary (configurations, why one failed, best by level, capacity,
    settings), then the comparison's tables, charts and every run's timeline."""
    from specload.report.figures import ReportPage, page_from_runs
    from specload.report.outputs import OutputError, check_outputs
    from specload.report.outputs import write_page as write

    try:
        check_outputs(path, None)
        if sides:
            page = page_from_runs(sides, comparison, title=title)
        else:
            page = ReportPage(runs=[], series=[], title=title)
        page.summary_html = summary_html(result)
        write(path, page)
    except OutputError as e:
        raise SweepReadError(str(e)) from None


def summary_html(result: dict) -> str:
    """The sweep's own section of the page: the configurations and why any failed (with its log),
    the best configuration per level, crossovers, capacity and the server settings that differ."""
    import html as _html

    e = lambda v: _html.escape(str(v), quote=True)  # noqa: E731
    rows = []
    for c in result["configs"]:
        ok = sum(1 for r in c["runs"] if r["status"] == "ok")
        why = describe(c["crash"]) if c.get("crash") else ""
        excerpt = ""
        if c.get("crash") and (c["crash"].get("excerpt") or c["crash"].get("log_tail")):
            text = c["crash"].get("excerpt") or "\n".join(c["crash"].get("log_tail") or [])
            excerpt = f"<details><summary>log</summary><pre>{e(text)}</pre></details>"
        start = f"{c['startup_s']:.1f}" if c.get("startup_s") is not None else "–"
        rows.append(f"<tr><td>{e(c['name'])}</td><td>{e(c['status'])}</td><td>{ok}/{len(c['runs'])}</td>"
                    f"<td>{start}</td><td><code>{e(c['args'])}</code></td><td>{e(why)}{excerpt}</td></tr>")
    lines = []
    if result.get("schedule_text"):
        lines.append(f"<p><b>Best by level</b>: {e(result['schedule_text'])}</p>")
    for x in result.get("crossovers", []):
        lines.append(f"<p>Crossover: {e(x['side'])} is {e(x['below'])} up to C={x['between'][0]} and "
                     f"{e(x['above'])} from C={x['between'][1]} (near C≈{x['at']:.0f}).</p>")
    for c in result["configs"]:
        if c.get("capacity"):
            v = c["capacity"]["value"]
            lines.append(f"<p>Capacity ({e(c['capacity']['how'])}) of {e(c['name'])}: "
                         f"{'C=' + str(v) if v is not None else 'no level met the objectives'}</p>")
        if c.get("differs"):
            diffs = ", ".join(f"{d['key']} {d['baseline']!r} → {d['value']!r}" for d in c["differs"])
            lines.append(f"<p>Server settings of {e(c['name'])} that differ from {e(result['baseline'])}: "
                         f"{e(diffs)}</p>")
    notes = "".join(f'<p class="note">{e(n)}</p>' for n in result.get("notes", []))
    return (f"<h2>Configurations</h2><p class=\"sub\">Baseline <b>{e(result['baseline'])}</b>; start-up: from "
            "the launch to the first request answered.</p><div class=\"table-wrap\"><table><thead><tr>"
            "<th>configuration</th><th>status</th><th>runs ok</th><th>start-up s</th><th>arguments</th>"
            f"<th>why it failed</th></tr></thead><tbody>{''.join(rows)}</tbody></table></div>"
            f"{''.join(lines)}{notes}")
