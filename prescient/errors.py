"""Kept so that settings naming ``prescient.errors.<policy>`` go on working: the retry policies
live in :mod:`prescient.retries`."""

from prescient.retries import ErrorHandler, exponential_backoff, get_handler, retry_next_slot

__all__ = ["ErrorHandler", "exponential_backoff", "get_handler", "retry_next_slot"]
