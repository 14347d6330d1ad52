"""Settings of the demo project (not for production: DEBUG is on and the key is public).

The database is SQLite, ``demo.sqlite3`` at the repository root; ``DEMO_DB`` names another
file. With ``DATABASE_URL`` set (e.g. ``postgres://postgres@127.0.0.1:5432/prescient_demo``)
the demo uses that database instead.
"""

import os
from pathlib import Path

import dj_database_url

BASE_DIR = Path(__file__).resolve().parent.parent

SECRET_KEY = "demo-only-not-secret"
DEBUG = True
ALLOWED_HOSTS = ["127.0.0.1", "localhost", "[::1]"]

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "ninja",  # django-ninja serves the API docs page's Swagger UI itself (no CDN)
    "prescient",
    "project.shop",
]

try:  # shell_plus and friends, when the dev extra is installed (`make demo` installs only the demo extra)
    import django_extensions  # noqa: F401
except ImportError:
    pass
else:
    INSTALLED_APPS.insert(INSTALLED_APPS.index("prescient"), "django_extensions")

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "project.urls"
WSGI_APPLICATION = "project.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
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

if os.environ.get("DATABASE_URL"):
    DATABASES = {"default": dj_database_url.parse(os.environ["DATABASE_URL"], conn_max_age=0)}
else:
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": os.environ.get("DEMO_DB") or str(BASE_DIR / "demo.sqlite3"),
            # IMMEDIATE: a transaction takes the write lock when it starts, so the ticker and
            # the admin queue for it instead of failing with "database is locked" mid-way.
            "OPTIONS": {"transaction_mode": "IMMEDIATE", "timeout": 20},
        }
    }

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"

# One-minute slots so that the demo's checks fire within two minutes (the default is 15).
PRESCIENT = {"SLOT_MINUTES": 1, "TIMEOUT_SECONDS": 10}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"short": {"format": "%(levelname)s %(name)s: %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "short"}},
    "loggers": {
        "prescient": {"handlers": ["console"], "level": os.environ.get("PRESCIENT_LOG", "INFO")},
    },
}
