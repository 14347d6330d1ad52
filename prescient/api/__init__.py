"""prescient's JSON API: create and steer jobs over HTTP.

Mount it in the host's URLconf with ``path("prescient/", include("prescient.urls"))``.

- :mod:`~prescient.api.views`: the endpoints (a django-ninja ``NinjaAPI``, which also serves the
  OpenAPI document built from the same code).
- :mod:`~prescient.api.commands`: the commands to one job (pause, release, run now, sleep,
  kill), registered on the same API.
- :mod:`~prescient.api.schedules`: recurring schedules (create, list, get, pause, resume,
  delete), registered on the same API.
- :mod:`~prescient.api.health`: the health per check (``GET health/checks``), on the same API.
- :mod:`~prescient.api.schemas`: request and response payloads.
- :mod:`~prescient.api.auth`: API tokens and Django sessions, Django permissions, token scopes.
- :mod:`~prescient.api.tokens`: issuing, checking and revoking API tokens.
- :mod:`~prescient.api.errors`: the one error shape of every 4xx (and 503) answer.

Every change to a job goes through the verbs of :mod:`prescient.engine.verbs`.
"""

from . import commands as commands  # registers the commands' endpoints on views.api
from . import expectations as expectations  # and the expectations' list
from . import health as health  # and the health per check
from . import schedules as schedules  # and the schedules' endpoints
