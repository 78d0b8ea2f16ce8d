"""BENCHMARKS.md from the suite's results (and, with ``--compare``, an earlier run's)."""

from __future__ import annotations

from typing import Any

from .common import fmt, ratio_text

HOW_TO_READ = (
    "Every figure is the median over repeats, with its spread (min–max over the repeats; "
    "n = repeats) and a ratio against a baseline measured in the same run: the median of "
    "the ratios of adjacent pairs where Orchestra and the baseline alternate (the pairs "
    "share the machine's drift; the ratio's own min–max follows it), else the ratio of the "
    "medians. A figure measured once has no spread. The machine is a shared VM: the load "
    "average says how busy it was. The raw samples are in `{json}`; "
    "`python tools/benchmarks.py --compare {json}` puts them beside a new run's."
)


def _met(met: bool | None) -> str:
    return "—" if met is None else ("met" if met else "**not met**")


def _value(r: dict[str, Any], median: Any, unit: str, text: str | None) -> str:
    if text is not None:
        return text
    return "—" if median is None else f"{fmt(median)} {unit}"


def _spread(s: dict[str, Any]) -> str:
    if s.get("text") is not None or not s["n"] or s["n"] < 2:
        return "—"
    return f"{fmt(s['min'])}–{fmt(s['max'])}"


def _ratio(r: dict[str, Any]) -> str:
    text = ratio_text(r["ratio"])
    if r.get("ratio_min") is not None and r["ratio_min"] != r["ratio_max"]:
        text += f" ({fmt(r['ratio_min'])}–{fmt(r['ratio_max'])})"
    return text


def _previous(r: dict[str, Any], old: dict[str, Any] | None) -> str:
    if old is None or old.get("median") is None or r.get("median") is None:
        return "—"
    change = (r["median"] / old["median"] - 1) * 100 if old["median"] else 0.0
    return f"{fmt(old['median'])} ({change:+.0f} %)"


def _table(sec: dict[str, Any], previous: dict[tuple[str, str], Any] | None) -> list[str]:
    head = "| figure | median | spread | n | baseline | baseline median | ratio |"
    rule = "|---|---:|---:|---:|---|---:|---:|"
    if previous is not None:
        head += " previous run |"
        rule += "---:|"
    lines = [head, rule]
    for r in sec["rows"]:
        b = r["baseline_summary"]
        cells = [
            r["name"],
            _value(r, r["median"], r["unit"], r.get("text")),
            _spread(r),
            str(r["n"]),
            r["baseline"] or "—",
            _value(r, b["median"], r["unit"], r.get("baseline_text")) if r["baseline"] else "—",
            _ratio(r),
        ]
        if previous is not None:
            cells.append(_previous(r, previous.get((sec["id"], r["name"]))))
        lines.append("| " + " | ".join(c.replace("|", "/") for c in cells) + " |")
    return lines


def markdown(
    results: dict[str, Any], json_name: str, previous: dict[str, Any] | None = None
) -> str:
    """The whole document."""
    m = results["machine"]
    old_rows = None
    if previous is not None:
        old_rows = {
            (s["id"], r["name"]): r for s in previous.get("sections", []) for r in s.get("rows", [])
        }
    commit = m["commit"][:12] + (" + uncommitted changes" if m["uncommitted_changes"] else "")
    subject = m["commit_subject"]
    subject = subject if len(subject) <= 80 else subject[:79].rstrip() + "…"
    versions = ", ".join(f"{k} {v}" for k, v in m["versions"].items())
    mode = (
        "**quick (smoke) mode: reduced sizes, not for comparison**"
        if results["quick"]
        else ("full")
    )
    total = results.get("total_s")
    kept = _updated(results)
    out = [
        "# Benchmarks",
        "",
        f"`{results['command']}` — {mode}; {'this run' if kept else 'the whole suite'} took "
        f"{_duration(total) if total is not None else '(running)'}.",
        *kept,
        "",
        "| | |",
        "|---|---|",
        f"| date | {m['date']} |",
        f"| commit | `{commit}` ({subject}) |",
        f"| CPU | {m['cpu']}, {m['cores']} cores |",
        f"| load average (1, 5, 15 min) | {_load(m.get('load_average'))} at the start, "
        f"{_load(results.get('load_average_at_end'))} at the end |",
        f"| RAM | {m['ram_gb']} GB |",
        f"| Python | {m['python']} |",
        f"| OS | {m['os']} |",
        f"| versions | {versions} |",
        "",
        HOW_TO_READ.format(json=json_name),
        "",
        "## Targets",
        "",
        "| target | measured | |",
        "|---|---|---|",
    ]
    for sec in results["sections"]:
        for t in sec["targets"]:
            out.append(f"| {t['text']} | {t['value']} | {_met(t['met'])} |")
        if sec["error"] and sec.get("expected_targets"):
            for text in sec["expected_targets"]:
                out.append(f"| {text} | not measured (section failed) | — |")
    for i, sec in enumerate(results["sections"], 1):
        out += ["", f"## {i}. {sec['title']}", ""]
        seconds = sec.get("seconds")
        if sec["error"]:
            first = sec["error"].strip().splitlines()[0] if sec["error"].strip() else "?"
            out.append(f"**Not measured**: the section failed: `{first}`.")
            continue
        out.append(
            sec["method"] + (f" (The section took {_duration(seconds)}.)" if seconds else "")
        )
        out += _measured(sec.get("measured"), m)
        out.append("")
        out += _table(sec, old_rows)
        for t in sec["targets"]:
            out += ["", f"target: {t['text']} — {_met(t['met'])} ({t['value']})"]
        for note in sec["notes"]:
            out += ["", note]
    return "\n".join(out) + "\n"


def _updated(results: dict[str, Any]) -> list[str]:
    """A line saying which sections this run measured, if it kept others (``--update``)."""
    m = results["machine"]
    earlier = [s["title"] for s in results["sections"] if _measured(s.get("measured"), m)]
    if not earlier:
        return []
    return [
        "",
        "This run measured only the sections not listed here; kept from earlier runs "
        f"(each says when it was measured): {', '.join(earlier)}. The table below "
        "describes this run.",
    ]


def _measured(stamp: dict[str, Any] | None, header: dict[str, Any]) -> list[str]:
    """A line naming the run that measured a section, if not the one in the header
    (a report updated with ``--update``)."""
    if stamp is None or (stamp["commit"], stamp["date"]) == (header["commit"], header["date"]):
        return []
    dirty = " + uncommitted changes" if stamp.get("uncommitted_changes") else ""
    return [
        "",
        f"Measured separately: {stamp['date']}, commit `{stamp['commit'][:12]}`{dirty}, "
        f"load average {_load(stamp.get('load_average'))} at the start, by "
        f"`{stamp['command']}`.",
    ]


def _load(values: list[float] | None) -> str:
    return "—" if not values else ", ".join(f"{v:.2f}" for v in values)


def _duration(seconds: float) -> str:
    minutes, rest = divmod(round(seconds), 60)
    return f"{minutes} min {rest} s" if minutes else f"{seconds:.1f} s"
