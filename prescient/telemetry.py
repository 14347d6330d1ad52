"""OpenTelemetry traces, when ``opentelemetry-api`` is installed: one span per run.

The sweep wraps every run of a job (in a tick, or in a worker's child process) in a span named
``prescient.run`` with the attributes below. Without ``opentelemetry-api`` this does nothing,
nor while no SDK tracer provider is configured (the API's spans would be no-ops: skipping them
saves about 20 us a run). The host configures the SDK (a ``TracerProvider`` and its exporter),
e.g. in an ``AppConfig.ready()``, which a worker's child processes run too (they call
``django.setup()``).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from types import ModuleType
from typing import TYPE_CHECKING, Any, Protocol


def _api() -> ModuleType | None:
    try:
        from opentelemetry import trace
    except ImportError:  # the optional extra `otel` is not installed
        return None
    return trace


#: ``opentelemetry.trace``, or None without ``opentelemetry-api``.
trace = _api()

if TYPE_CHECKING:
    from .models import FutureJob

#: The name of every run's span, and of the tracer that makes them.
SPAN_NAME = "prescient.run"
TRACER_NAME = "prescient"

#: The attributes of a run's span.
KIND, CHECK, JOB_ID, EVENT, OUTCOME, DURATION, ERROR = (
    "prescient.kind", "prescient.check", "prescient.job_id", "prescient.event", "prescient.outcome",
    "prescient.duration_seconds", "prescient.error",
)


class RunResult(Protocol):
    """What a run's span records of its result (a :class:`~prescient.engine.decisions.Decision`)."""

    event: str
    outcome: str
    error: str
    seconds: float


class RunSpan:
    """The span of one run; :meth:`record` sets what the run led to."""

    def __init__(self, span: Any) -> None:
        self.span = span

    def record(self, result: RunResult) -> None:
        if self.span is None:
            return
        self.span.set_attribute(EVENT, str(result.event))
        # A run that ends the job has its outcome; one that goes on has its event (reschedule, retry).
        self.span.set_attribute(OUTCOME, str(result.outcome or result.event))
        self.span.set_attribute(DURATION, float(result.seconds))
        if result.error:
            assert trace is not None
            self.span.set_attribute(ERROR, result.error)
            self.span.set_status(trace.Status(trace.StatusCode.ERROR, result.error))


@contextmanager
def run_span(job: FutureJob) -> Iterator[RunSpan]:
    """A span around one run of ``job`` (nothing without ``opentelemetry-api``)."""
    if trace is None:
        yield RunSpan(None)
        return
    provider = trace.get_tracer_provider()
    if isinstance(provider, (trace.ProxyTracerProvider, trace.NoOpTracerProvider)):
        # No SDK configured (yet): its spans would be no-ops; skip them, which costs nothing.
        yield RunSpan(None)
        return
    attributes: dict[str, str | int] = {KIND: job.kind, CHECK: job.job_exec, JOB_ID: int(job.pk)}
    tracer = provider.get_tracer(TRACER_NAME)
    with tracer.start_as_current_span(SPAN_NAME, attributes=attributes, record_exception=True) as span:
        yield RunSpan(span)
