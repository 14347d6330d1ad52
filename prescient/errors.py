"""Kept so that settings naming ``prescient.errors.<policy>`` go on working: the retry policies
live in :mod:`prescient.retries`. ``prescient.errors.error_rate(...)`` is Metafora's default
error handler, for ``@prescient.check(..., error_handler=...)``."""

from prescient.retries import ErrorHandler, error_rate, exponential_backoff, get_handler, retry_next_slot

__all__ = ["ErrorHandler", "error_rate", "exponential_backoff", "get_handler", "retry_next_slot"]
