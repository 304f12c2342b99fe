"""One process-wide OpenTelemetry SDK for the telemetry tests: in-memory spans and metrics.

OpenTelemetry lets a process set its global providers once, so every test shares these; a test
calls ``collected()`` first to start from nothing.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from opentelemetry import metrics, trace
from opentelemetry.sdk.metrics import Counter, Histogram, MeterProvider
from opentelemetry.sdk.metrics.export import AggregationTemporality, InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

__all__ = ["Point", "Telemetry", "attribute", "collected"]


@dataclasses.dataclass(frozen=True)
class Point:
    """One metric data point: its instrument, labels and value (a sum, or a histogram's count and sum)."""

    name: str
    unit: str
    labels: Mapping[str, Any]
    count: int
    total: float


@dataclasses.dataclass
class Telemetry:
    exporter: InMemorySpanExporter
    reader: InMemoryMetricReader

    def reset(self) -> None:
        self.exporter.clear()
        self.reader.get_metrics_data()

    def spans(self) -> list[ReadableSpan]:
        return list(self.exporter.get_finished_spans())

    def storage_spans(self) -> list[ReadableSpan]:
        return [
            span
            for span in self.spans()
            if span.instrumentation_scope is not None
            and span.instrumentation_scope.name == "agent_framework_mongodb"
        ]

    def points(self) -> list[Point]:
        """The data points recorded since the last call (delta temporality)."""
        data = self.reader.get_metrics_data()
        found: list[Point] = []
        if data is None:
            return found
        for resource in data.resource_metrics:
            for scope in resource.scope_metrics:
                if scope.scope.name != "agent_framework_mongodb":
                    continue
                for metric in scope.metrics:
                    for point in metric.data.data_points:
                        labels = dict(point.attributes or {})
                        count = getattr(point, "count", None)
                        total = getattr(point, "sum", None)
                        if count is None:
                            value = getattr(point, "value", 0)
                            count, total = int(value), float(value)
                        unit = metric.unit or ""
                        found.append(Point(metric.name, unit, labels, int(count), float(total or 0)))
        return found


def attribute(span: ReadableSpan, key: str) -> object:
    """One attribute of ``span``; ``None`` when absent."""
    return (span.attributes or {}).get(key)


_installed: Telemetry | None = None


def collected() -> Telemetry:
    """The process's in-memory telemetry, installed on first use and emptied on every call."""
    global _installed  # noqa: PLW0603 - the providers are process-wide by OpenTelemetry's design
    if _installed is None:
        exporter = InMemorySpanExporter()
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        trace.set_tracer_provider(provider)
        reader = InMemoryMetricReader(
            preferred_temporality={
                Counter: AggregationTemporality.DELTA,
                Histogram: AggregationTemporality.DELTA,
            }
        )
        metrics.set_meter_provider(MeterProvider(metric_readers=[reader]))
        _installed = Telemetry(exporter, reader)
    _installed.reset()
    return _installed
