"""Settings for prescient's test suite.

``DATABASE_URL`` selects the database (e.g. ``postgres://postgres@127.0.0.1:5432/prescient``);
without it, SQLite. The SQLite test database is a file so that tests with real processes can
share it.
"""

import json
import os
from pathlib import Path

import dj_database_url

BASE_DIR = Path(__file__).resolve().parent.parent
SECRET_KEY = "tests-only-not-secret"
DEBUG = False
USE_TZ = True
TIME_ZONE = "UTC"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
ALLOWED_HOSTS = ["*"]

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "ninja",  # django-ninja serves the API docs page's Swagger UI itself (no CDN)
    "prescient",
    "tests.testapp",
]

try:  # Django 6: prescient as the django.tasks backend (tests/test_tasks*.py)
    import django.tasks  # noqa: F401
except ImportError:
    pass
else:
    INSTALLED_APPS.append("tests.tasksapp")
    TASKS = {
        "default": {
            "BACKEND": "prescient.tasks.PrescientBackend",
            "QUEUES": ["default", "a", "b"],
            "OPTIONS": {"MAX_RETRIES": 2},
        }
    }

# Checks with limits (tests/faults/test_limits.py) only where asked: elsewhere none is declared.
if os.environ.get("PRESCIENT_TEST_LIMITS") == "1":
    INSTALLED_APPS.append("tests.limitsapp")

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]

ROOT_URLCONF = "tests.urls"
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]
STATIC_URL = "/static/"

_sqlite_file = os.environ.get("PRESCIENT_SQLITE", str(BASE_DIR / ".tmp" / "test.sqlite3"))
if os.environ.get("DATABASE_URL"):
    DATABASES = {"default": dj_database_url.parse(os.environ["DATABASE_URL"], conn_max_age=0)}
else:
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": _sqlite_file,
            "OPTIONS": {"transaction_mode": "IMMEDIATE", "timeout": 20},
            "TEST": {"NAME": _sqlite_file},
        }
    }

# PRESCIENT_TEST_REPLICA_URL (tests/test_replica.py, in its own processes): a "replica" alias on
# a real streaming replica, and READ_DATABASE naming it (reads off the primary, prescient/reads.py).
if os.environ.get("PRESCIENT_TEST_REPLICA_URL"):
    DATABASES["replica"] = dj_database_url.parse(os.environ["PRESCIENT_TEST_REPLICA_URL"], conn_max_age=0)

# History is kept forever here: a long test session would otherwise have the upkeep pruner (due
# every ten minutes in a process) delete rows a test made at its own explicit times. The
# pruner's tests set the retention they test.
# The suite's workers run one job at a time per child (WORKER_LANES 1: a child's main thread runs
# them, as before lanes existed) unless a test asks for lanes (--lanes): tests/faults/test_lanes.py,
# and the poison and timeout tests, which run with both.
PRESCIENT: dict[str, object] = {
    "SLOT_MINUTES": 15, "TIMEOUT_SECONDS": 2, "HISTORY_RETENTION_DAYS": None, "WORKER_LANES": 1,
}
# Child processes started by tests may tune settings further (JSON object).
PRESCIENT.update(json.loads(os.environ.get("PRESCIENT_TEST_SETTINGS", "{}")))
if "replica" in DATABASES:
    PRESCIENT["READ_DATABASE"] = "replica"

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "loggers": {"prescient": {"handlers": ["console"], "level": os.environ.get("PRESCIENT_LOG", "WARNING")}},
}
