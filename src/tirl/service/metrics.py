"""Prometheus metrics of one code-execution server (served as text on ``GET /metrics``).

Each app gets its own :class:`prometheus_client.CollectorRegistry`, so several servers can live in one
process (tests, the load script) without sharing counters. Names (all prefixed ``tirl_service_``):

=================================  =========  ===========================================================
``queue_depth``                    gauge      executions waiting for a free execution slot
``in_flight``                      gauge      executions running in the executor now
``calls_total{status,source}``     counter    answers given, by result status and by how they were made
                                              (``executed``, ``joined`` a run in flight, ``cached``,
                                              ``conflict``: id reused for another request)
``executions_total{status}``       counter    executions actually started in the executor, by status
``call_latency_seconds``           histogram  arrival of an item to its answer (queueing + execution)
``execution_seconds``              histogram  time inside the executor
``batch_size``                     histogram  items per ``/v1/execute/batch`` or ``/stream`` request
``rejected_total{code}``           counter    requests refused with an HTTP error (413, 422, ...)
``cache_entries``                  gauge      finished results held in the idempotency cache
=================================  =========  ===========================================================

This module only defines and updates metrics; it does not decide what to count (the service does).
"""

from __future__ import annotations

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
    generate_latest,
)

# The ``*_created`` timestamp series double the size of /metrics and nobody graphs them (process-wide switch).
disable_created_metrics()

LATENCY_BUCKETS_S = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)

PROMETHEUS_CONTENT_TYPE = CONTENT_TYPE_LATEST


class ServiceMetrics:
    """The metric objects of one server, registered in a private registry.

    Args:
        namespace: prefix of every metric name.
    """

    def __init__(self, namespace: str = "tirl_service") -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.queue_depth = Gauge("queue_depth", "Executions waiting for a free slot.", namespace=namespace, registry=r)
        self.in_flight = Gauge("in_flight", "Executions running now.", namespace=namespace, registry=r)
        self.calls = Counter(
            "calls",
            "Answers given, by result status and source.",
            ["status", "source"],
            namespace=namespace,
            registry=r,
        )
        self.executions = Counter(
            "executions", "Executions started in the executor, by status.", ["status"], namespace=namespace, registry=r
        )
        self.call_latency = Histogram(
            "call_latency_seconds",
            "Seconds from arrival of an item to its answer.",
            namespace=namespace,
            buckets=LATENCY_BUCKETS_S,
            registry=r,
        )
        self.execution_latency = Histogram(
            "execution_seconds",
            "Seconds inside the executor.",
            namespace=namespace,
            buckets=LATENCY_BUCKETS_S,
            registry=r,
        )
        self.batch_size = Histogram(
            "batch_size", "Items per batch request.", namespace=namespace, buckets=BATCH_BUCKETS, registry=r
        )
        self.rejected = Counter(
            "rejected",
            "Requests refused with an HTTP error, by status code.",
            ["code"],
            namespace=namespace,
            registry=r,
        )
        self.cache_entries = Gauge(
            "cache_entries", "Finished results held in the idempotency cache.", namespace=namespace, registry=r
        )

    def render(self) -> bytes:
        """The Prometheus text exposition of every metric."""
        return generate_latest(self.registry)
