"""The engine: the sweep (claim → prepare → run → settle), the verbs, and the store, the one
writer of job rows. It knows no kind of job by name (see :mod:`prescient.engine.kind`)."""
