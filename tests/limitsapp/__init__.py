"""Checks with limits and rates, for the processes of tests/faults/test_limits.py: installed only
where ``PRESCIENT_TEST_LIMITS=1`` (tests/settings.py), so that every other test sees no limit
declared and the claim it always had."""
