"""One OpenTelemetry span per run (prescient.telemetry), seen through the SDK's in-memory exporter."""

from __future__ import annotations

from datetime import timedelta

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

import prescient
from prescient import telemetry
from prescient.models import JobHistory

pytestmark = pytest.mark.django_db

_EXPORTER = InMemorySpanExporter()


@pytest.fixture
def spans():
    """The spans ended during the test. The global tracer provider can be set once per process:
    an SDK provider with the in-memory exporter, shared by every test of this module."""
    provider = trace.get_tracer_provider()
    if not getattr(provider, "_prescient_test", False):
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(_EXPORTER))
        provider._prescient_test = True
        trace.set_tracer_provider(provider)
    assert getattr(trace.get_tracer_provider(), "_prescient_test", False), "another tracer provider was set"
    _EXPORTER.clear()
    yield _EXPORTER.get_finished_spans
    _EXPORTER.clear()


def test_span__a_completed_run(make_thing, register, t0, spans):
    register("test.fine", lambda thing, job: None)
    job = prescient.schedule(make_thing(), "test.fine", now=t0)
    prescient.tick(t0)

    (span,) = spans()
    assert span.name == telemetry.SPAN_NAME == "prescient.run"
    assert span.status.status_code == StatusCode.UNSET
    attributes = dict(span.attributes)
    assert attributes.pop("prescient.duration_seconds") >= 0
    assert attributes == {
        "prescient.kind": "check", "prescient.check": "test.fine", "prescient.job_id": job.pk,
        "prescient.event": "finish", "prescient.outcome": "completed",
    }
    assert JobHistory.objects.get().outcome == "completed"


def test_span__a_failed_run_and_its_retry(make_thing, register, t0, spans):
    def boom(thing, job):
        raise RuntimeError("backend down")

    register("test.boom", boom, max_retries=1)
    job = prescient.schedule(make_thing(), "test.boom", now=t0)
    prescient.tick(t0)
    prescient.tick(t0 + timedelta(minutes=15))

    retried, failed = spans()
    for span in (retried, failed):
        assert span.status.status_code == StatusCode.ERROR
        assert span.status.description == "RuntimeError: backend down"
        assert span.attributes["prescient.job_id"] == job.pk
        assert span.attributes["prescient.error"] == "RuntimeError: backend down"
        assert [event.name for event in span.events] == []  # the check's exception is the run's, not the span's
    assert (retried.attributes["prescient.event"], retried.attributes["prescient.outcome"]) == ("retry", "retry")
    assert (failed.attributes["prescient.event"], failed.attributes["prescient.outcome"]) == ("finish", "failed")
    assert JobHistory.objects.get().outcome == "failed"


def test_span__a_check_that_is_no_longer_known(make_thing, register, t0, spans):
    register("test.gone", lambda thing, job: None)
    prescient.schedule(make_thing(), "test.gone", now=t0)
    from prescient import checks

    checks.unregister("test.gone")
    prescient.tick(t0)
    (span,) = spans()
    assert span.attributes["prescient.check"] == "test.gone"
    assert span.status.status_code == StatusCode.ERROR


def test_span__none_without_a_configured_sdk(make_thing, register, t0, spans, monkeypatch):
    monkeypatch.setattr(trace, "get_tracer_provider", trace.ProxyTracerProvider)  # the API alone
    register("test.fine", lambda thing, job: None)
    prescient.schedule(make_thing(), "test.fine", now=t0)
    assert prescient.tick(t0).counts["completed"] == 1
    assert spans() == ()
