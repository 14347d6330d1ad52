"""Settings for the benchmarks (``python -m bench``): prescient and the ``bench`` app only.

``BENCH_DATABASE_URL`` is the scratch database (default
``postgres://postgres@127.0.0.1:5432/prescient_bench``, created and dropped by the bench);
``BENCH_SQLITE=<path>`` selects a SQLite file instead. Durability settings are PostgreSQL's
defaults: nothing here turns ``synchronous_commit`` or ``fsync`` off.
"""

import os

import dj_database_url

SECRET_KEY = "bench-only-not-secret"
DEBUG = False  # DEBUG would keep every query in memory
USE_TZ = True
TIME_ZONE = "UTC"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "prescient",
    "bench",
]

# The admin and the API, for the pages the scale section times (bench/scale.py).
ROOT_URLCONF = "bench.urls"
MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
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
ALLOWED_HOSTS = ["testserver"]

DEFAULT_URL = "postgres://postgres@127.0.0.1:5432/prescient_bench"

if os.environ.get("BENCH_SQLITE"):
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": os.environ["BENCH_SQLITE"],
            # As docs/operations.md advises: writers queue (IMMEDIATE), and readers never wait for
            # them (WAL). synchronous stays SQLite's default (FULL): durable, like PostgreSQL here.
            "OPTIONS": {"transaction_mode": "IMMEDIATE", "timeout": 20, "init_command": "PRAGMA journal_mode=WAL"},
        }
    }
else:
    DATABASES = {"default": dj_database_url.parse(os.environ.get("BENCH_DATABASE_URL", DEFAULT_URL), conn_max_age=None)}

PRESCIENT = {"SLOT_MINUTES": 15, "TIMEOUT_SECONDS": 60, "BATCH_SIZE": 100}
# The processes the bench starts (workers, agents) keep all history: a worker's upkeep prunes at
# its first pass, which would take the prune section's expired rows before it times them.
if os.environ.get("BENCH_KEEP_HISTORY") == "1":
    PRESCIENT["HISTORY_RETENTION_DAYS"] = None

# BENCH_CONN_MAX_AGE ("0", "none", seconds) sets Django's CONN_MAX_AGE for a process the bench
# starts (django-tasks-db's worker closes its connection after each task unless it is None).
if os.environ.get("BENCH_CONN_MAX_AGE") and "default" in DATABASES and not os.environ.get("BENCH_SQLITE"):
    age = os.environ["BENCH_CONN_MAX_AGE"]
    DATABASES["default"]["CONN_MAX_AGE"] = None if age == "none" else int(age)

# BENCH_STATEMENTS_DIR=<dir>: every statement this process sends is counted into a file of its
# own in <dir> (bench/counting.py), for the load section's real workers (bench/load.py).
BENCH_STATEMENTS_DIR = os.environ.get("BENCH_STATEMENTS_DIR", "")

# prescient as the django.tasks backend (Django 6.0+; on Django 5.2 there is no django.tasks,
# and naming the backend would make prescient import its task kind at start-up), and the
# comparison with Django's reference database backend (bench/peers.py) when the optional
# `bench` extra (django-tasks-db) is installed too.
try:
    import django.tasks  # noqa: F401
except ImportError:
    pass
else:
    TASKS = {"default": {"BACKEND": "prescient.tasks.PrescientBackend", "QUEUES": ["default"]}}
    try:
        import django_tasks_db  # noqa: F401
    except ImportError:
        pass
    else:
        INSTALLED_APPS.append("django_tasks_db")
        TASKS["dtdb"] = {"BACKEND": "django_tasks_db.DatabaseBackend", "QUEUES": ["default"]}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "loggers": {"prescient": {"handlers": ["console"], "level": "WARNING"}},
}

# BENCH_PREPARE=1: Django's psycopg 3 server-side binding with psycopg's automatic prepared
# statements (a statement sent more than 5 times on a connection is prepared); off by default,
# as in Django (see docs/performance.md, "Prepared statements").
if os.environ.get("BENCH_PREPARE") == "1" and not os.environ.get("BENCH_SQLITE"):
    DATABASES["default"].setdefault("OPTIONS", {}).update(server_side_binding=True, prepare_threshold=5)
