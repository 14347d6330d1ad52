"""``manage.py demo``: set up the demo database, then run the web server and a real
``prescient_worker`` side by side, while new orders keep arriving (one a minute); one Ctrl-C
stops them all. See docs/demo.md."""

from __future__ import annotations

import argparse
import signal
import time
from datetime import timedelta
from types import FrameType
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import connection, transaction
from django.utils import timezone

import prescient
from prescient import cron

from ...models import Order, Report, fulfil
from ...processes import Children, port_problem, split_addrport

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

#: The customers of the orders that keep arriving, in turn.
NEW_CUSTOMERS = [
    "Margaret Hamilton", "Donald Knuth", "Frances Allen", "John Backus", "Radia Perlman",
    "Dennis Ritchie", "Katherine Johnson", "Niklaus Wirth", "Adele Goldberg", "Tony Hoare",
]

#: Minutes after it was placed that each new order is shipped, in turn (None: never by the
#: demo; ship it from the admin, or watch its reminders end ``max_checks``).
SHIP_AFTER: list[int | None] = [2, 4, None]

#: The recurring schedule of the demo: the "late orders" report, every morning in Berlin. Its
#: next occurrences are on the admin's Schedules page, whose "Run the next occurrence now"
#: action makes the next tick write the report at once.
REPORT_SCHEDULE = "shop.late-orders-daily"
REPORT_CRON = "0 8 * * *"
REPORT_TIMEZONE = "Europe/Berlin"

#: Child processes of the demo's worker (one per check running at once).
WORKER_CONCURRENCY = 2


def admin_url(addrport: str) -> str:
    """The admin's URL for a runserver ``addrport`` ("8000", "127.0.0.1:8000", "[::1]:8000")."""
    host, _, port = addrport.rpartition(":")
    if host in ("", "0", "0.0.0.0", "[::]"):
        host = "127.0.0.1"
    return f"http://{host}:{port}/admin/"


class Stop(KeyboardInterrupt):
    """SIGINT (Ctrl-C), SIGTERM or SIGHUP: stop the demo."""


def _stop(signum: int, frame: FrameType | None) -> None:
    raise Stop(signal.Signals(signum).name)


class Command(BaseCommand):
    help = (
        "Run the prescient demo: migrate, create the admin user and demo orders, then serve the "
        "admin and run a prescient_worker while new orders keep arriving. Ctrl-C stops it all."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--addrport",
            default="127.0.0.1:8000",
            help="Where the web server listens (default 127.0.0.1:8000; `make demo PORT=8001`).",
        )
        parser.add_argument(
            "--no-server", action="store_true", help="Only the worker (and the new orders); no web server."
        )
        parser.add_argument(
            "--once", action="store_true", help="Set up, run one tick and exit (no web server, no worker)."
        )
        parser.add_argument("--quiet", action="store_true", help="No new orders: only the six seeded ones.")
        # Seconds between new orders (60): the tests place them faster.
        parser.add_argument("--order-every", type=float, default=60.0, help=argparse.SUPPRESS)

    def handle(self, *args: Any, **options: Any) -> None:
        serve = not options["once"] and not options["no_server"]
        if serve:
            try:
                problem = port_problem(options["addrport"])
            except ValueError:
                raise CommandError(f"--addrport {options['addrport']!r}: give a port, e.g. 127.0.0.1:8001") from None
            if problem is not None:
                raise CommandError(self.port_hint(problem, options["addrport"]))
        call_command("migrate", interactive=False, verbosity=max(options["verbosity"] - 1, 0))
        self.stdout.write(f"database: {connection.settings_dict['NAME']}")
        self.ensure_admin()
        self.seed()
        self.schedule_report()
        url = admin_url(options["addrport"])
        self.say(f"login: {url}  user: {ADMIN_USER}  password: {ADMIN_PASSWORD}")
        if options["once"]:
            self.tick()
            return
        connection.close()  # the children open their own
        self.run(options, serve, url)

    def port_hint(self, problem: str, addrport: str) -> str:
        host, port = split_addrport(addrport)
        other = f"{host or '127.0.0.1'}:{port + 1}"
        return (
            f"{problem}.\nChoose another port: `make demo PORT={port + 1}`, or "
            f"`python manage.py demo --addrport {other}`."
        )

    def run(self, options: dict[str, Any], serve: bool, url: str) -> None:
        """Start the children, place an order every ``--order-every`` seconds until Ctrl-C
        (or a child ends), then stop them all."""
        settings = [f"--settings={options['settings']}"] if options.get("settings") else []
        children = Children(self.say)
        # SIGINT too: a shell starts a background job with SIGINT ignored, and Python then
        # leaves it ignored; the demo is stopped by it all the same.
        previous = {sig: signal.signal(sig, _stop) for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
        try:
            if serve:
                server = children.start("web server", "runserver", options["addrport"], "--noreload",
                                        "--skip-checks", *settings)
                self.say(f"web server: pid {server.pid}, {url}")
            worker = children.start("worker", "prescient_worker", f"--concurrency={WORKER_CONCURRENCY}", *settings)
            self.say(f"prescient_worker: pid {worker.pid}, {WORKER_CONCURRENCY} child processes")
            self.say("new orders: " + ("none (--quiet)" if options["quiet"] else "one a minute (--quiet: none)"))
            self.say("Ctrl-C stops the demo")
            self.trickle(children, None if options["quiet"] else options["order_every"])
        except KeyboardInterrupt:  # Ctrl-C, SIGTERM, SIGHUP (Stop)
            self.say("stopping the web server and the worker…")
            children.stop()
            self.say("demo stopped")
        except BaseException:
            children.stop()
            raise
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    def trickle(self, children: Children, every: float | None) -> None:
        """Place a new order now and every ``every`` seconds (None: never) while the children
        run; raises CommandError when one of them ends."""
        placed = 0
        due = time.monotonic()
        while True:
            ended = children.ended()
            if ended is not None:
                name, status = ended
                children.stop()
                raise CommandError(f"the {name} stopped (exit status {status}, see above)")
            if every is not None and time.monotonic() >= due:
                self.place_order(placed)
                placed += 1
                due += every
            time.sleep(0.2)

    def place_order(self, index: int) -> None:
        """A new order, its reminder (by the post_save signal) and its fulfilment jobs."""
        customer = NEW_CUSTOMERS[index % len(NEW_CUSTOMERS)]
        minutes = SHIP_AFTER[index % len(SHIP_AFTER)]
        try:
            with transaction.atomic():
                order = Order.objects.create(customer=customer)
                fulfil(order, None if minutes is None else timedelta(minutes=minutes))
        except Exception as exc:  # a demo keeps going: the next order may well succeed
            self.stderr.write(f"could not place an order: {type(exc).__name__}: {exc}")
            return
        finally:
            connection.close()
        plan = f"shipped in {minutes} minutes" if minutes is not None else "packed, left for you to ship"
        self.say(f"{timezone.localtime():%H:%M:%S} new {order}: {plan}")

    def say(self, line: str) -> None:
        self.stdout.write(line)
        self.stdout.flush()

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

    def tick(self) -> None:
        """One tick at the real time (``--once``), its summary printed."""
        summary = prescient.tick()
        self.say(f"{timezone.localtime():%H:%M:%S} {summary.line()}")
