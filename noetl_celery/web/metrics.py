"""`/metrics`: Prometheus text, read from the engine database on each scrape
(engine.metrics lists the series). A collector, not process-local counters: every
`serve` replica reports the same fleet-wide figures, whatever process did the work."""

from __future__ import annotations

from collections.abc import Iterator

from fastapi import APIRouter, Request, Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from noetl_celery.engine.metrics import families
from noetl_celery.engine.service import Engine
from noetl_celery.store.schema import utcnow

router = APIRouter(tags=["metrics"])


class PrometheusText(Response):
    """Prometheus' text format: the OpenAPI document names this media type (a string),
    not JSON."""

    media_type = CONTENT_TYPE_LATEST


class EngineCollector(Collector):
    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def collect(self) -> Iterator[Metric]:
        snapshot = self.engine.store.metrics.read_snapshot()
        for family in families(snapshot, utcnow()):
            kind = CounterMetricFamily if family.kind == "counter" else GaugeMetricFamily
            metric = kind(family.name, family.help, labels=list(family.labels))
            for labels, value in family.samples:
                metric.add_metric(list(labels), value)
            yield metric


def registry_for(engine: Engine) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(EngineCollector(engine))
    return registry


@router.get(
    "/metrics",
    summary="Prometheus metrics of the engine database",
    response_class=PrometheusText,
)
def metrics(request: Request) -> PrometheusText:
    registry: CollectorRegistry = request.app.state.metrics_registry
    return PrometheusText(generate_latest(registry))
