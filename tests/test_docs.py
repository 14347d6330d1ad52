"""The docs, checked against the code they describe: every setting of ``prescient/conf.py`` in
the settings reference with its default, every management command and option in the command
reference, every relative link to a file (and heading) that exists, one statement of the Python
versions, and the performance tables rendered from one bench run."""

from __future__ import annotations

import ast
import re
import tomllib
from pathlib import Path

import pytest
from django.core.management import load_command_class
from django.core.management.base import BaseCommand

from prescient.conf import DEFAULTS

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
README = ROOT / "README.md"
COMMANDS_DIR = ROOT / "prescient" / "management" / "commands"

#: Files that other parts of issue #17 add (retention, metrics, the demo and its screenshot).
#: A link to one of them is accepted only while it is missing; once it exists it is checked
#: like any other. Remove a name once its file has landed.
PENDING: set[str] = set()


def markdown_files() -> list[Path]:
    return [README, *sorted(DOCS.glob("*.md"))]


def without_code(text: str) -> str:
    """The text with fenced code blocks blanked (their lines kept, so line numbers hold)."""
    out, fenced = [], False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
            out.append("")
        else:
            out.append("" if fenced else line)
    return "\n".join(out)


def table_rows(text: str) -> list[list[str]]:
    """The cells of every row of the Markdown tables in ``text`` (separator rows left out)."""
    rows = []
    for line in text.splitlines():
        if not line.startswith("|") or re.fullmatch(r"\|(\s*:?-+:?\s*\|)+", line.strip()):
            continue
        cells = re.split(r"(?<!\\)\|", line.strip())[1:-1]
        rows.append([cell.strip() for cell in cells])
    return rows


def sections(text: str, level: str = "##") -> dict[str, str]:
    """``{heading: body}`` for the headings of one level (outside code blocks)."""
    found: dict[str, str] = {}
    heading, lines = "", []
    plain = without_code(text).splitlines()
    for raw, line in zip(text.splitlines(), plain, strict=True):
        if line.startswith(level + " "):
            if heading:
                found[heading] = "\n".join(lines)
            heading, lines = line[len(level) + 1:].strip(), []
        else:
            lines.append(raw)
    if heading:
        found[heading] = "\n".join(lines)
    return found


# --- settings ------------------------------------------------------------------------------------


def documented_settings() -> dict[str, str]:
    """``{name: default as written}`` from the table of docs/settings.md."""
    documented = {}
    for cells in table_rows((DOCS / "settings.md").read_text(encoding="utf-8")):
        name = re.fullmatch(r"`([A-Z][A-Z0-9_]*)`", cells[0])
        if name and len(cells) >= 3:
            documented[name.group(1)] = cells[1].strip("`")
    return documented


def test_settings_reference__lists_every_setting_of_conf_with_its_default():
    documented = documented_settings()
    assert sorted(set(DEFAULTS) - set(documented)) == [], "settings missing from docs/settings.md"
    assert sorted(set(documented) - set(DEFAULTS)) == [], "docs/settings.md lists settings conf.py does not have"
    for name, written in documented.items():
        assert ast.literal_eval(written) == DEFAULTS[name], f"{name}: docs/settings.md says {written}"


# --- commands ------------------------------------------------------------------------------------


def command_names() -> list[str]:
    return sorted(p.stem for p in COMMANDS_DIR.glob("*.py") if not p.stem.startswith("_"))


def parser_options(command: BaseCommand, name: str) -> set[str]:
    """The long option strings and positional names a command adds to Django's own."""
    django_own = {
        s for action in BaseCommand().create_parser("manage.py", name)._actions for s in action.option_strings
    }
    found = set()
    for action in command.create_parser("manage.py", name)._actions:
        if not action.option_strings:
            found.add(action.dest)
        elif not set(action.option_strings) & django_own:
            found.add(max(action.option_strings, key=len))
    return found


def test_commands_reference__lists_every_command_and_its_options():
    assert command_names(), "no management commands found: has the package moved?"
    documented = sections((DOCS / "commands.md").read_text(encoding="utf-8"))
    missing = [name for name in command_names() if name not in documented]
    assert missing == [], "commands missing from docs/commands.md"
    stale = [name for name in documented if name not in command_names()]
    assert stale == [], "docs/commands.md has sections for commands that do not exist"
    for name in command_names():
        options = parser_options(load_command_class("prescient", name), name)
        rows = {cells[0].strip("`").split()[0] for cells in table_rows(documented[name]) if cells[0] != "option"}
        assert options - rows == set(), f"{name}: options missing from its table in docs/commands.md"
        assert rows - options == set(), f"{name}: docs/commands.md lists options it does not have"


def test_parser_options__are_the_commands_own_without_djangos():
    options = parser_options(load_command_class("prescient", "prescient_tick"), "prescient_tick")
    assert options == {"--now", "--batch-size", "--json"}


# --- links ---------------------------------------------------------------------------------------

LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[`*]", "", heading).strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    text = without_code(path.read_text(encoding="utf-8"))
    return {slug(m.group(1)) for m in re.finditer(r"^#{1,6} (.+)$", text, re.M)}


def relative_links(path: Path) -> list[tuple[str, str]]:
    """``(target, anchor)`` of every relative link in ``path``, outside code."""
    found = []
    for match in LINK.finditer(without_code(path.read_text(encoding="utf-8"))):
        target = match.group(1)
        if re.match(r"[a-z]+:", target):  # http:, https:, mailto:
            continue
        file, _, anchor = target.partition("#")
        found.append((file, anchor))
    return found


@pytest.mark.parametrize("path", markdown_files(), ids=lambda p: p.relative_to(ROOT).as_posix())
def test_links__every_relative_link_points_to_an_existing_file_and_heading(path):
    broken = []
    for file, anchor in relative_links(path):
        target = (path.parent / file).resolve() if file else path
        name = target.relative_to(ROOT).as_posix() if target.is_relative_to(ROOT) else str(target)
        if not target.exists():
            if name not in PENDING:
                broken.append(f"{file}: no such file")
            continue
        if anchor and target.suffix == ".md" and anchor not in anchors(target):
            broken.append(f"{file}#{anchor}: no such heading")
    assert broken == []


def test_links__the_checker_sees_a_broken_link_and_a_broken_anchor(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("# Title\n\nSee [gone](gone.md), [here](#title), [there](#nowhere).\n```\n[x](code.md)\n```\n")
    assert relative_links(page) == [("gone.md", ""), ("", "title"), ("", "nowhere")]
    assert anchors(page) == {"title"}


def test_slug__matches_githubs_anchors():
    assert slug("3. Write a check") == "3-write-a-check"
    assert slug("`POST tasks` — schedule a check for an entity") == "post-tasks--schedule-a-check-for-an-entity"
    assert slug("prescient_tick") == "prescient_tick"


# --- Python versions -----------------------------------------------------------------------------


def minor(version: str) -> tuple[int, int]:
    major, minor_ = version.split(".")
    return int(major), int(minor_)


def test_python_versions__readme_classifiers_requires_python_and_makefile_agree():
    readme = README.read_text(encoding="utf-8")
    stated = re.search(r"\*\*Python (3\.\d+)–(3\.\d+)\.\*\*", readme)
    assert stated, "the README states the supported Pythons as **Python 3.x–3.y.**"
    low, high = minor(stated.group(1)), minor(stated.group(2))
    supported = {(3, n) for n in range(low[1], high[1] + 1)}

    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    classifiers = {
        minor(c.rsplit(" :: ", 1)[1]) for c in project["classifiers"]
        if re.fullmatch(r"Programming Language :: Python :: 3\.\d+", c)
    }
    assert classifiers == supported
    assert project["requires-python"] == f">={stated.group(1)}"

    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    ranges = [(minor(a), minor(b)) for a, b in re.findall(r"scripts/find-python (3\.\d+) (3\.\d+)", makefile)]
    assert ranges, "the Makefile picks its Pythons with scripts/find-python"
    assert min(lo for lo, _ in ranges) == low and max(hi for _, hi in ranges) == high
    django6 = re.search(r"Django 6 needs Python (3\.\d+)", readme)
    made = re.search(r"find-python (3\.\d+) (3\.\d+)\) \|\| \{ echo \"Django 6 needs Python (3\.\d+)\+\"", makefile)
    assert django6 and made and django6.group(1) == made.group(1) == made.group(3)


# --- performance tables --------------------------------------------------------------------------


def test_performance__the_tables_are_one_full_run_rendered_by_bench_report():
    """README.md's targets and docs/performance.md's figures are what ``python -m bench.report``
    makes of docs/bench-results.json, one full ``make bench`` run: no figure edited by hand, and
    the README and the docs show the same run."""
    import json

    from bench import report

    results = json.loads(report.RESULTS.read_text(encoding="utf-8"))
    assert results["mode"] == "full"
    assert report.between(README.read_text(encoding="utf-8"), report.SUMMARY) == report.summary_table(results)
    assert report.between((DOCS / "performance.md").read_text(encoding="utf-8"), report.FULL) == (
        report.full_tables(results)
    )


def test_api__the_state_filter_lists_every_state():
    from prescient.states import State

    text = (DOCS / "api.md").read_text(encoding="utf-8")
    found = re.search(r"Query parameters, all optional: `state` \(([^)]*)\)", text)
    assert found, "docs/api.md lost the GET tasks query parameters"
    assert re.findall(r"`(\w+)`", found.group(1)) == list(State.values)


def test_seed_states__says_max_retries_n_means_n_plus_one_runs():
    """The behaviour itself: tests/runtime/test_worker_tasks.py (MAX_RETRIES 2, three attempts)."""
    text = (DOCS / "seed-states.md").read_text(encoding="utf-8")
    assert "`MAX_RETRIES = N` allows N retries after the first failed run" in text
    assert "runs N + 1 times" in text


# --- system checks ---------------------------------------------------------------------------------


def test_system_checks__the_table_is_rendered_from_the_checks_own_messages():
    """docs/system-checks.md lists every id of prescient.diagnostics, the table the checks build
    their messages from, as ``scripts/system-checks-table`` prints it: no id missing, none stale."""
    from prescient import diagnostics

    text = (DOCS / "system-checks.md").read_text(encoding="utf-8")
    found = re.search(
        r"<!-- BEGIN generated system-checks table -->\n(.*?)\n<!-- END generated system-checks table -->", text, re.S
    )
    assert found, "docs/system-checks.md lost its generated-table markers"
    assert found.group(1) == diagnostics.render_markdown(), (
        "docs/system-checks.md is out of date: paste the output of scripts/system-checks-table between the markers"
    )
    listed = re.findall(r"^\| `(prescient\.[EWI]\d{3})` \|", found.group(1), re.M)
    assert listed == [entry.id for entry in diagnostics.MESSAGES]
    assert {"prescient.E011", "prescient.E012", "prescient.I001"} <= set(listed)
