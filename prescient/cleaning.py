"""Making what a check produces storable: error texts cleaned and capped, JSON values vetted.

A check or task may raise an exception whose message holds a NUL byte or a lone surrogate, or
is megabytes long, and a task may return such strings. PostgreSQL refuses the first two in
``text`` and ``jsonb`` columns, and the third would be stored once per recent error, per job.
Error texts are therefore cleaned here before they are kept (the bad characters replaced
visibly, the middle of a long text cut out), and a task's return value that the database would
refuse is that run's failure (:func:`unstorable`).
"""

from __future__ import annotations

from typing import Any

#: Longest error text kept, in characters: the first and the last parts survive.
ERROR_LIMIT = 8192


def clean_text(text: str, limit: int = ERROR_LIMIT) -> str:
    """``text`` with NUL shown as ``\\x00`` and lone surrogates as ``\\udxxx``, cut to ``limit``
    characters (its first and last parts kept, with a note of how much was cut)."""
    if "\x00" in text:
        text = text.replace("\x00", "\\x00")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    if len(text) <= limit:
        return text
    note = "\n… [{} characters cut] …\n"
    keep = max(0, limit - len(note.format(len(text))))
    head, tail = keep * 3 // 4, keep - keep * 3 // 4
    cut = len(text) - head - tail
    return f"{text[:head]}{note.format(cut)}{text[len(text) - tail:]}"


def unstorable(value: Any, where: str = "value") -> str:
    """Why the JSON ``value`` cannot be stored (a NUL or a lone surrogate in a string or a
    key), or ``""`` when it can. ``where`` names the value in the answer."""
    stack: list[tuple[Any, str]] = [(value, where)]
    while stack:
        item, path = stack.pop()
        if isinstance(item, str):
            problem = _string_problem(item)
            if problem:
                return f"{path} contains {problem}, which the database cannot store"
        elif isinstance(item, dict):
            for key, inner in item.items():
                problem = _string_problem(str(key))
                if problem:
                    return f"a key of {path} contains {problem}, which the database cannot store"
                stack.append((inner, f"{path}[{key!r:.40}]"))
        elif isinstance(item, list | tuple):
            stack.extend((inner, f"{path}[{index}]") for index, inner in enumerate(item))
    return ""


def _string_problem(text: str) -> str:
    if "\x00" in text:
        return "a NUL character"
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return "a lone surrogate"
    return ""
