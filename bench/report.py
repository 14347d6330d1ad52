"""The bench's tables in the docs, from one run: ``python -m bench.report [RESULTS]``.

``make bench`` writes ``bench/results.json``; this copies it to ``docs/bench-results.json`` and
writes, from it alone, the tables between the markers of ``docs/performance.md`` (every figure)
and of ``README.md`` (the targets, met or missed). Nothing else in those files is touched: the
prose around the tables, and why a target is missed, are written by hand. ``tests/test_docs.py``
renders the tables again from ``docs/bench-results.json`` and compares, so the two files
always show one and the same run.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

from bench.run import ROOT, fmt, table, target_text

RESULTS = ROOT / "docs" / "bench-results.json"
README = ROOT / "README.md"
PERFORMANCE = ROOT / "docs" / "performance.md"
SUMMARY, FULL = "bench-summary", "bench-tables"
NAMES = {"postgresql": "PostgreSQL", "sqlite": "SQLite"}


def machine_line(results: dict[str, Any]) -> str:
    info = results["machine"]
    return (
        f"One run of `make bench` ({results['mode']} sizes, {results['sizes']['runs']} runs per figure, "
        f"{results['seconds'] / 60:.0f} minutes) on {info.get('cpu', '?')}, {info['cpus']} CPUs, "
        f"{info.get('memory_gb', '?')} GB, {info['os']}; Python {info['python']}, Django {info['django']}, "
        f"PostgreSQL {info.get('postgresql', '-')}"
        + (f" (autovacuum {info['autovacuum']})" if "autovacuum" in info else "")
        + f", SQLite {info['sqlite']}:"
    )


def full_tables(results: dict[str, Any]) -> str:
    """Every figure of the run, one table per database."""
    out = [machine_line(results)]
    for db, name in NAMES.items():
        rows = [row for row in results["figures"] if row["db"] == db]
        if rows:
            out += ["", f"**{name}**", "", table(rows, markdown=True)]
    return "\n".join(out)


def summary_table(results: dict[str, Any]) -> str:
    """The figures that have a target (PostgreSQL's, then SQLite's), with the figure they are
    compared with."""
    rows = [row for db in NAMES for row in results["figures"] if row["db"] == db and row["met"] is not None]
    met = sum(1 for row in rows if row["met"])
    lines = [
        machine_line(results).replace("One run", "The targets of one run", 1),
        "",
        "| figure (PostgreSQL) | median | ratio | target | |",
        "|---|---|---|---|---|",
    ]
    for row in rows:
        ratio = "" if row["ratio"] is None else f"{row['ratio']:.2f}x"
        label = row["label"] if row["db"] == "postgresql" else f"SQLite: {row['label']}"
        lines.append(f"| {label} | {fmt(row['median'], row['unit'])} | {ratio} | {target_text(row)} | "
                     f"{'met' if row['met'] else 'missed'} |")
    lines += ["", f"{met} of {len(rows)} targets met."]
    return "\n".join(lines)


def replace_between(text: str, marker: str, body: str) -> str:
    pattern = re.compile(rf"(<!-- {marker}:start -->\n).*?(\n<!-- {marker}:end -->)", re.S)
    if not pattern.search(text):
        raise SystemExit(f"no <!-- {marker}:start --> … <!-- {marker}:end --> markers found")
    return pattern.sub(lambda m: m.group(1) + body + m.group(2), text, count=1)


def between(text: str, marker: str) -> str:
    found = re.search(rf"<!-- {marker}:start -->\n(.*?)\n<!-- {marker}:end -->", text, re.S)
    return found.group(1) if found else ""


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    source = Path(args[0]) if args else ROOT / "bench" / "results.json"
    results = json.loads(source.read_text(encoding="utf-8"))
    if results.get("mode") != "full":
        raise SystemExit(f"{source} is a {results.get('mode')} run: the docs show a full run (make bench)")
    RESULTS.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    PERFORMANCE.write_text(replace_between(PERFORMANCE.read_text(encoding="utf-8"), FULL, full_tables(results)),
                           encoding="utf-8")
    README.write_text(replace_between(README.read_text(encoding="utf-8"), SUMMARY, summary_table(results)),
                      encoding="utf-8")
    print(f"wrote {RESULTS.relative_to(ROOT)}, the tables of README.md and docs/performance.md")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
