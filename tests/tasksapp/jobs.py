"""A task defined outside tasks.py, which nothing imports at start-up: the worker imports this
module on demand when it first meets one of its jobs (tests/kinds/test_task_discovery.py)."""

from django.tasks import task


@task
def shout(word):
    return word.upper()
