"""How prescient words what it shows, in one place for the admin, the commands and the kinds'
descriptions: times in the site's time zone as the admin shows them, a ladder's offsets as
``10m``/``3h``/``1d``, counts with their noun in the right number, an entity as
``app.model:pk``."""

from __future__ import annotations

from datetime import datetime, timedelta

from django.utils import formats, timezone

#: The units of an offset, largest first: (suffix, seconds).
_UNITS = (("d", 86_400), ("h", 3_600), ("m", 60), ("s", 1))


def when_text(value: datetime) -> str:
    """``value`` as the admin shows a time: in the site's (current) time zone, localized."""
    # template_localtime exists in django.utils.timezone; django-stubs does not declare it.
    return str(formats.localize(timezone.template_localtime(value)))  # type: ignore[attr-defined]


def offset_text(offset: timedelta | float) -> str:
    """An offset as ``10m``, ``3h``, ``1d``, ``1h30m`` (whole seconds; ``0s`` for none)."""
    seconds = round(offset.total_seconds() if isinstance(offset, timedelta) else offset)
    if seconds == 0:
        return "0s"
    sign, seconds = ("-", -seconds) if seconds < 0 else ("", seconds)
    parts = []
    for suffix, size in _UNITS:
        count, seconds = divmod(seconds, size)
        if count:
            parts.append(f"{count}{suffix}")
    return sign + "".join(parts)


def counted(count: int, noun: str, plural: str | None = None) -> str:
    """``1 rung``, ``3 rungs``."""
    return f"{count} {noun if count == 1 else (plural or noun + 's')}"


#: What separates an entity's model label from its key: ``shop.order:4``. The ``#`` of
#: versions before 0.4 (``shop.order#4``) is still read.
ENTITY_SEPARATOR = ":"


def entity_text(entity_name: str, entity_key: object) -> str:
    """An entity as every page, command, log line and API entry writes it: ``shop.order:4``."""
    return f"{entity_name}{ENTITY_SEPARATOR}{entity_key}"


def parse_entity(text: str) -> tuple[str, str] | None:
    """``shop.order:4`` (or the older ``shop.order#4``) as ``("shop.order", "4")``, the label
    lower-cased; None when ``text`` names no model and key. A label holds neither separator, so
    the first one splits (a key may hold either: ``shop.code:a:b`` is key ``a:b``)."""
    text = text.strip()
    cut = min((i for i in (text.find(":"), text.find("#")) if i != -1), default=-1)
    if cut <= 0:
        return None
    label, key = text[:cut].strip().lower(), text[cut + 1:].strip()
    if "." not in label or not key:
        return None
    return label, key
