"""prescient's benchmarks: ``python -m bench`` (``make bench``, ``make bench-quick``).

Also a small Django app (label ``bench``) with the entity model and the do-nothing checks the
benchmarks schedule; it is installed only by ``bench/settings.py``.
"""
