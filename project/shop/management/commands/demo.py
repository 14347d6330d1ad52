"""``manage.py demo``: set up the demo database, serve the admin and run a prescient tick
right after every slot boundary, so checks fire as they would under cron."""

from __future__ import annotations

import threading
from datetime import timedelta
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import connection, transaction
from django.utils import timezone

import prescient
from prescient import cron, slots
from prescient.conf import setting

from ...models import Order, Report

ADMIN_USER = "admin"
ADMIN_PASSWORD = "admin"

#: (customer, minutes since the order was placed, shipped?). Orders placed two or more
#: minutes ago are due at once, so the first tick already has work; the newest one is due
#: within two minutes.
DEMO_ORDERS = [
    ("Ada Lovelace", 30, True),
    ("Alan Turing", 20, False),
    ("Grace Hopper", 12, False),
    ("Edsger Dijkstra", 7, True),
    ("Barbara Liskov", 3, False),
    ("Ken Thompson", 0, False),
]

#: The recurring schedule of the demo: the "late orders" report, every morning in Berlin. Its
#: next occurrences are on the admin's Schedules page, whose "Run the next occurrence now"
#: action makes the next tick write the report at once.
REPORT_SCHEDULE = "shop.late-orders-daily"
REPORT_CRON = "0 8 * * *"
REPORT_TIMEZONE = "Europe/Berlin"

#: Seconds to wait past a slot boundary before ticking: the boundary has surely passed.
AFTER_BOUNDARY = 0.5


def admin_url(addrport: str) -> str:
    """The admin's URL for a runserver ``addrport`` ("8000", "127.0.0.1:8000", "[::1]:8000")."""
    host, _, port = addrport.rpartition(":")
    if host in ("", "0", "0.0.0.0", "[::]"):
        host = "127.0.0.1"
    return f"http://{host}:{port}/admin/"


class Command(BaseCommand):
    help = (
        "Run the prescient demo: migrate, create the admin user and demo orders, serve the "
        "admin and tick prescient right after every slot boundary."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--addrport",
            default="127.0.0.1:8000",
            help="Where the web server listens (default 127.0.0.1:8000).",
        )
        parser.add_argument(
            "--no-server", action="store_true", help="Only tick, every slot; no web server."
        )
        parser.add_argument(
            "--once", action="store_true", help="Set up, run one tick and exit (no web server)."
        )

    def handle(self, *args: Any, **options: Any) -> None:
        call_command("migrate", interactive=False, verbosity=max(options["verbosity"] - 1, 0))
        self.stdout.write(f"database: {connection.settings_dict['NAME']}")
        self.ensure_admin()
        self.seed()
        self.schedule_report()
        url = admin_url(options["addrport"])
        self.say(f"login: {url}  user: {ADMIN_USER}  password: {ADMIN_PASSWORD}")
        if options["once"]:
            self.tick(keep_going=False)
            return
        server_down = threading.Event()
        if not options["no_server"]:
            threading.Thread(
                target=self.serve, args=(options["addrport"], server_down), name="runserver", daemon=True
            ).start()
        # The ticker stays in the main thread: there the tick can stop an overrunning check
        # with SIGALRM, exactly as `manage.py prescient_tick` does.
        slot_minutes = int(setting("SLOT_MINUTES"))
        self.say(f"ticking right after every {slot_minutes}-minute slot boundary; Ctrl-C stops the demo")
        try:
            while True:
                self.tick(keep_going=True)
                now = timezone.now()
                wait = (slots.next_after(now, slot_minutes) - now).total_seconds() + AFTER_BOUNDARY
                if server_down.wait(wait):
                    raise CommandError("the web server stopped (see above)")
        except KeyboardInterrupt:
            self.say("demo stopped")

    def say(self, line: str) -> None:
        self.stdout.write(line)
        self.stdout.flush()

    def serve(self, addrport: str, server_down: threading.Event) -> None:
        """Run the development server (in its own thread; it returns only on failure)."""
        try:
            call_command("runserver", addrport, use_reloader=False)
        finally:
            server_down.set()

    def ensure_admin(self) -> None:
        users = get_user_model()._default_manager
        if not users.filter(username=ADMIN_USER).exists():
            users.create_superuser(  # type: ignore[attr-defined]
                ADMIN_USER, "admin@example.com", ADMIN_PASSWORD
            )
            self.stdout.write(f"created superuser {ADMIN_USER!r}")

    def seed(self) -> None:
        """Create the demo orders in an empty shop; each is scheduled its check as it is saved."""
        if Order.objects.exists():
            return
        now = timezone.now()
        with transaction.atomic():
            for customer, minutes_ago, shipped in DEMO_ORDERS:
                placed = now - timedelta(minutes=minutes_ago)
                Order.objects.create(
                    customer=customer,
                    created_at=placed,
                    status=Order.Status.SHIPPED if shipped else Order.Status.PLACED,
                    shipped_at=placed + timedelta(minutes=1) if shipped else None,
                )
        shipped = sum(1 for *_, is_shipped in DEMO_ORDERS if is_shipped)
        self.stdout.write(f"created {len(DEMO_ORDERS)} demo orders ({shipped} shipped)")

    def schedule_report(self) -> None:
        """The daily "late orders" report: a recurring schedule of the check ``shop.late_orders``
        on the report's row. Saving it again on each start only moves its next occurrence to
        the first after now (its counters stay)."""
        report, _ = Report.objects.get_or_create(name="late orders")
        schedule = prescient.recurring(
            REPORT_SCHEDULE, check="shop.late_orders", entity=report, cron=REPORT_CRON, timezone=REPORT_TIMEZONE,
        )
        when = cron.in_words(schedule.cron, schedule.every_seconds, schedule.timezone)
        self.stdout.write(f"schedule {schedule.name}: {when}, next {schedule.next_at:%Y-%m-%d %H:%M} UTC")

    def tick(self, *, keep_going: bool) -> None:
        """One tick at the real time, its summary printed; the connection is closed after it."""
        try:
            summary = prescient.tick()
        except Exception as exc:
            if not keep_going:
                raise
            # A demo keeps ticking: the next slot may well succeed (e.g. a busy database).
            self.stderr.write(f"tick failed: {type(exc).__name__}: {exc}")
        else:
            self.say(f"{timezone.localtime():%H:%M:%S} {summary.line()}")
        finally:
            connection.close()
