"""prescient's admin: one module per page, each registering its ModelAdmin when imported.

Django's admin autodiscovery imports this package, which imports the pages:

- :mod:`.jobs`: the live jobs (their actions are :mod:`.actions` and :mod:`.sleep`; the
  dashboard page is :mod:`.dashboard`, its charts :mod:`.charts`);
- :mod:`.history`: the finished jobs;
- :mod:`.workflows`: pause and release whole workflows;
- :mod:`.schedules`: recurring schedules, their next occurrences and actions;
- :mod:`.workers`: the worker registry;
- :mod:`.tokens`: API tokens.

What the pages share (badges, times, the entity cell, filters) is in :mod:`.display`.
"""

from prescient.admin import history, jobs, schedules, tokens, workers, workflows

__all__ = ["history", "jobs", "schedules", "tokens", "workers", "workflows"]
