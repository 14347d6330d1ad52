"""Not in any installed app: prescient must never import this module from a job row.
Importing it leaves a mark that tests/kinds/test_task_discovery.py looks for."""

import os

from django.tasks import task

os.environ["PRESCIENT_SNEAKY_IMPORTED"] = "1"


@task
def sneaky():
    return "should never run"
