"""`GET /metrics` (Prometheus text format, prometheus-client) for the whole deployment.

What the service can see itself is read at scrape time: the queue's depth and the ledger's jobs by
state. What happens in the workers (scoring durations, GitHub errors, rate-limit waits, outages,
interrupted scores) is counted in the ledger's shared counters (`Ledger.bump`), so one scrape of
`evalbot serve` covers every box, on SQLite or Redis alike. Counters are stored as
`name|label=value,...`; this module is the one place that writes and reads those names.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector

from evalbot.bot.jobs.ledger import STATES, Ledger

log = logging.getLogger("evalbot.metrics")

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
DURATION_BUCKETS = (60.0, 300.0, 600.0, 1200.0, 1800.0, 3600.0, 7200.0, 14400.0, float("inf"))
COUNTERS = {  # ledger counter name -> (metric name, help)
    "github_errors": ("evalbot_github_errors", "GitHub calls that failed, by kind (rate_limited, server_error, network, refused)"),
    "github_rate_limit_waits": ("evalbot_github_rate_limit_waits", "times a worker waited for a GitHub rate limit"),
    "github_rate_limit_wait_seconds": ("evalbot_github_rate_limit_wait_seconds", "seconds workers waited for GitHub rate limits"),
    "forge_outage_requeues": ("evalbot_forge_outage_requeues", "jobs put back because GitHub was unreachable when they started"),
    "scorings_interrupted": ("evalbot_scorings_interrupted", "scorings interrupted by a worker stopping (SIGTERM), put back"),
}


def _clean(value: str) -> str:
    return "".join(c if c.isalnum() or c in "._-+:" else "_" for c in str(value))[:80]


def counter_key(name: str, **labels: str) -> str:
    return name + "|" + ",".join(f"{k}={_clean(v)}" for k, v in sorted(labels.items()))


def _parse(key: str) -> tuple[str, dict[str, str]]:
    name, _, rest = key.partition("|")
    labels = dict(part.split("=", 1) for part in rest.split(",") if "=" in part)
    return name, labels


def record_duration(ledger: Ledger, seconds: float, *, profile: str, status: str) -> None:
    """One finished scoring into the shared histogram `evalbot_scoring_duration_seconds`."""
    labels = {"profile": profile, "status": status}
    try:
        for bound in DURATION_BUCKETS:
            if seconds <= bound:
                ledger.bump(counter_key("scoring_duration_bucket", le=repr(bound), **labels))
        ledger.bump(counter_key("scoring_duration_sum", **labels), seconds)
        ledger.bump(counter_key("scoring_duration_count", **labels))
    except Exception as exc:  # noqa: BLE001 - metrics never cost a verdict
        log.warning("could not count a scoring duration: %s", exc)


def forge_observer(ledger: Ledger) -> Callable[[str, float], None]:
    """The GitHub adapter's observer: every failed call, and every wait for a rate limit."""

    def observe(kind: str, wait: float) -> None:
        try:
            ledger.bump(counter_key("github_errors", kind=kind))
            if kind == "rate_limited" and wait:
                ledger.bump(counter_key("github_rate_limit_waits"))
                ledger.bump(counter_key("github_rate_limit_wait_seconds"), wait)
        except Exception as exc:  # noqa: BLE001
            log.debug("could not count a GitHub error: %s", exc)

    return observe


class _Deployment(Collector):
    """Read at every scrape: the queue, the ledger's jobs and the shared counters."""

    def __init__(self, ledger: Ledger, pending: Callable[[], int] | None):
        self.ledger, self.pending = ledger, pending

    def collect(self):
        up = GaugeMetricFamily("evalbot_ledger_up", "1 when the ledger answered this scrape")
        try:
            records, counters = self.ledger.records(), self.ledger.counters()
        except Exception as exc:  # noqa: BLE001 - a scrape shows the ledger down instead of failing
            log.warning("metrics: the ledger did not answer: %s", exc)
            up.add_metric([], 0)
            yield up
            return
        up.add_metric([], 1)
        yield up
        jobs = GaugeMetricFamily("evalbot_jobs", "score jobs in the ledger, by state", labels=["state"])
        for state in STATES:
            jobs.add_metric([state], sum(1 for r in records if r.state == state))
        yield jobs
        if self.pending is not None:
            depth = GaugeMetricFamily("evalbot_queue_depth", "messages waiting in the queue (jobs and chores)")
            try:
                depth.add_metric([], self.pending())
                yield depth
            except Exception as exc:  # noqa: BLE001
                log.warning("metrics: the queue did not answer: %s", exc)
        yield from self._counters(counters)
        yield from self._histogram(counters)

    @staticmethod
    def _counters(counters: dict[str, float]):
        families: dict[str, CounterMetricFamily] = {}
        for key, value in sorted(counters.items()):
            name, labels = _parse(key)
            if name not in COUNTERS:
                continue
            metric, text = COUNTERS[name]
            family = families.setdefault(name, CounterMetricFamily(metric, text, labels=sorted(labels)))
            family.add_metric([labels[k] for k in sorted(labels)], value)
        for name, (metric, text) in COUNTERS.items():
            yield families.get(name) or CounterMetricFamily(metric, text)

    @staticmethod
    def _histogram(counters: dict[str, float]):
        series: dict[tuple[str, str], dict] = {}
        for key, value in counters.items():
            name, labels = _parse(key)
            if not name.startswith("scoring_duration_"):
                continue
            entry = series.setdefault((labels.get("profile", ""), labels.get("status", "")), {"buckets": {}, "sum": 0.0})
            if name == "scoring_duration_bucket":
                entry["buckets"][float(labels["le"])] = value
            elif name == "scoring_duration_sum":
                entry["sum"] = value
        family = HistogramMetricFamily("evalbot_scoring_duration_seconds", "how long scorings took, by profile and verdict",
                                       labels=["profile", "status"])
        for (profile, status), entry in sorted(series.items()):
            buckets = [(_bound(b), entry["buckets"].get(b, 0.0)) for b in DURATION_BUCKETS]
            family.add_metric([profile, status], buckets, entry["sum"])
        yield family


def _bound(value: float) -> str:
    return "+Inf" if value == float("inf") else repr(value)


class ServiceMetrics:
    """The service's registry: the deployment's state plus what this process counts itself."""

    def __init__(self, ledger: Ledger, pending: Callable[[], int] | None = None):
        self.registry = CollectorRegistry()
        self.deliveries = Counter("evalbot_webhook_deliveries", "webhook deliveries answered, by event and answer",
                                  ["event", "status"], registry=self.registry)
        self.connections_closed = Counter("evalbot_http_connections_closed", "connections the service closed itself, by why",
                                          ["reason"], registry=self.registry)
        self.registry.register(_Deployment(ledger, pending))

    def render(self) -> bytes:
        return generate_latest(self.registry)
