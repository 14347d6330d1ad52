"""The shape of the package (docs/architecture.md), checked: one writer of job rows, no kind
named outside prescient/kinds/, modules of a readable size, and the docs listing them all.
The layers and the absence of import circles are import-linter's contracts (.importlinter),
run by the test command."""

from __future__ import annotations

import ast
import re
import traceback
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from django.db import connection

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "prescient"
#: The one writer of FutureJob / JobHistory rows, and the statement builder only it calls.
STORE = PACKAGE / "engine" / "store"
WRITER = {*STORE.glob("*.py"), PACKAGE / "engine" / "bulk.py"}
MAX_LINES = 450


def modules() -> Iterator[Path]:
    for path in sorted(PACKAGE.rglob("*.py")):
        if "migrations" not in path.parts:
            yield path


def rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


# --- one writer: by reading the code ------------------------------------------------------------

WRITES = {"save", "delete", "update", "bulk_create", "bulk_update"}
#: Receivers that hold job rows (or querysets of them) by the names this code base gives them.
JOB_NAMES = re.compile(r"job|row|histor|locked|existing", re.IGNORECASE)
DML = re.compile(r"\b(INSERT\s+INTO|DELETE\s+FROM|UPDATE\s+\S+\s+SET)\b", re.IGNORECASE)
JOB_TABLES = re.compile(r"FutureJob|JobHistory|prescient_futurejob|prescient_jobhistory|db_table", re.IGNORECASE)


def _docstrings(tree: ast.AST) -> set[int]:
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                found.add(id(body[0].value))
    return found


def job_writes(source: str) -> list[str]:
    """The places in ``source`` that write job rows: ORM writes on FutureJob / JobHistory (or
    on names that hold jobs) and SQL literals with INSERT / UPDATE / DELETE on their tables."""
    tree = ast.parse(source)
    docstrings = _docstrings(tree)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in WRITES:
            receiver = ast.unparse(node.func.value)
            names_a_job_model = any(name in receiver for name in ("FutureJob", "JobHistory", "from_job"))
            holds_jobs = isinstance(node.func.value, ast.Name) and JOB_NAMES.search(receiver)
            if names_a_job_model or holds_jobs:
                found.append(f"line {node.lineno}: {ast.unparse(node)[:80]}")
        elif isinstance(node, (ast.Constant, ast.JoinedStr)) and id(node) not in docstrings:
            text = node.value if isinstance(node, ast.Constant) else ast.unparse(node)
            if isinstance(text, str) and DML.search(text) and JOB_TABLES.search(text):
                found.append(f"line {node.lineno}: SQL {text[:60]!r}")
    return found


@pytest.mark.parametrize(
    "source",
    [
        "FutureJob.objects.filter(pk=1).update(state='x')",
        "JobHistory.from_job(job, 'failed', now).save(force_insert=True)",
        "job.save()",
        "locked.save(update_fields=['state'])",
        "FutureJob.objects.bulk_create(jobs)",
        "jobs.delete()",
        "cursor.execute(f'DELETE FROM {FutureJob._meta.db_table} WHERE id = %s', [1])",
        "sql = 'UPDATE prescient_futurejob SET state = %s'",
    ],
)
def test_the_one_writer_scan__finds_each_kind_of_write(source):
    assert job_writes(source), "the scan must see this write"


def test_the_one_writer_scan__lets_other_tables_and_dicts_be():
    source = "Worker.objects.filter(pk=1).update(heartbeat_at=now)\ntoken.save()\nfields.update(extra)\n"
    assert job_writes(source) == []


def test_only_the_store_writes_job_rows():
    offenders = {}
    for path in modules():
        if path in WRITER:
            continue
        found = job_writes(path.read_text())
        if found:
            offenders[rel(path)] = found
    assert offenders == {}, "only prescient/engine/store/ may write FutureJob / JobHistory"


# --- one writer: by watching the database ----------------------------------------------------------

JOB_DML = re.compile(
    r"^\s*(WITH\b.*\b)?(INSERT\s+INTO|UPDATE|DELETE\s+FROM)\s+\"?(prescient_futurejob|prescient_jobhistory)\b",
    re.IGNORECASE | re.DOTALL,
)


class WriterWatch:
    """Every statement that writes a job table, with the innermost prescient module behind it."""

    def __init__(self) -> None:
        self.writes: list[tuple[str, str]] = []

    def __call__(self, execute, sql, params, many, context):  # type: ignore[no-untyped-def]
        if JOB_DML.search(sql):
            frames = [
                Path(f.filename) for f in traceback.extract_stack()
                if Path(f.filename).is_relative_to(PACKAGE) and Path(f.filename) != PACKAGE / "engine" / "bulk.py"
            ]
            self.writes.append((rel(frames[-1]) if frames else "(no prescient frame)", sql[:60]))
        return execute(sql, params, many, context)


@pytest.mark.django_db(transaction=True)
def test_every_job_write_of_a_busy_day_comes_from_the_store(register, make_thing, t0):
    import prescient
    from prescient.engine import verbs
    from prescient.maintenance.rescuer import rescue
    from prescient.models import FutureJob
    from prescient.states import State
    from tests.conftest import lose_claims

    answers = iter([timedelta(hours=1), None, RuntimeError("boom")])

    def flaky(thing, job):
        answer = next(answers, None)
        if isinstance(answer, Exception):
            raise answer
        return answer

    register("arch.flaky", flaky)
    watch = WriterWatch()
    things = [make_thing(name=f"t{i}") for i in range(4)]
    with connection.execute_wrapper(watch):
        a = prescient.schedule(things[0], "arch.flaky", now=t0)
        prescient.schedule(things[1], "arch.flaky", now=t0, workflow="wf")
        verbs.schedule_many([things[2]], "arch.flaky", now=t0)
        prescient.pause(workflow="wf", now=t0)
        prescient.release(workflow="wf", now=t0)
        prescient.tick(t0)
        prescient.sleep(a, t0 + timedelta(days=1), now=t0)
        prescient.run_now(a, now=t0)
        prescient.pause(job=a, now=t0)
        prescient.release(job=a, now=t0)
        prescient.tick(t0 + timedelta(minutes=1))
        b = prescient.schedule(things[3], "arch.flaky", now=t0)
        prescient.kill(b, "enough", now=t0)
        c = prescient.schedule(things[3], "arch.flaky", now=t0)
    # A dead tick's claim, made by hand (outside the watch).
    FutureJob.objects.filter(pk=c.pk).update(state=State.RUNNING, reserved_by="tick:0:x")
    lose_claims(c.pk)
    with connection.execute_wrapper(watch):
        rescue(t0 + timedelta(hours=1))
        prescient.cancel(things[1], "arch.flaky", now=t0)
    assert len(watch.writes) > 10, watch.writes
    assert {where.rsplit("/", 1)[0] for where, _ in watch.writes} == {"prescient/engine/store"}, watch.writes


# --- one path through the store: the transition table is asked only there ----------------------

def target_calls(source: str) -> list[str]:
    """The places in ``source`` that ask the transition table directly: ``states.target(...)``,
    or ``target`` imported from ``prescient.states`` (or ``.states``)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and node.attr == "target" and ast.unparse(node.value).endswith("states"):
            found.append(f"line {node.lineno}: {ast.unparse(node)}")
        elif isinstance(node, ast.ImportFrom) and (node.module or "").endswith("states"):
            found.extend(f"line {node.lineno}: import {a.name}" for a in node.names if a.name == "target")
    return found


def test_the_target_scan__finds_each_way_of_asking_the_table():
    assert target_calls("to = states.target(job, Event.SLEEP)")
    assert target_calls("from prescient.states import State, target")
    assert target_calls("x = prescient.states.target")
    assert target_calls("to = store.preview(job, event)\nstate.target = 1") == []


def test_only_the_store_asks_the_transition_table():
    """Every change of a job's state goes through the table inside prescient/engine/store/
    (its moves, its settle); others ask it there (``store.move``, ``store.end``,
    ``store.preview`` for a dry run)."""
    offenders = {}
    for path in modules():
        if path in WRITER or path == PACKAGE / "states.py":
            continue
        found = target_calls(path.read_text())
        if found:
            offenders[rel(path)] = found
    assert offenders == {}, "only prescient/engine/store/ may call states.target()"


# --- kinds are named only in prescient/kinds/ ------------------------------------------------------

def test_no_module_outside_kinds_names_the_task_kind():
    pattern = re.compile(r"TASK_ENTITY|\"task:\"|'task:'")
    offenders = [
        rel(path) for path in modules()
        if "kinds" not in path.relative_to(PACKAGE).parts and pattern.search(path.read_text())
    ]
    assert offenders == []


# --- size and docs -----------------------------------------------------------------------------


def test_no_module_is_over_450_lines():
    long = {rel(p): n for p in modules() if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert long == {}


def test_docs_architecture_names_every_module():
    text = (ROOT / "docs" / "architecture.md").read_text()
    grouped = ("prescient/management/commands/",)
    missing = []
    for path in modules():
        name = rel(path)
        if path.name == "__init__.py" and f"{rel(path.parent)}/" in text:
            continue
        if any(name.startswith(group) and group in text for group in grouped):
            continue
        if name not in text:
            missing.append(name)
    assert missing == [], "add these to docs/architecture.md"
