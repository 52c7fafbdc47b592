"""Counters of one judge: requests, latency, errors by kind, cache hits. Read them with ``snapshot()``."""

from __future__ import annotations

import statistics
from collections import Counter, deque
from dataclasses import dataclass, field
from typing import Any


@dataclass
class JudgeMetrics:
    """Updated from the event loop only (the local backend's thread reports back through it).

    ``requests`` counts calls to the judge model (retries included), ``errors`` failures by kind
    (``timeout``, ``connect``, ``http_500``, ``bad_response``, ``unreadable``...), ``samples_failed``
    the samples that ended with an error. Latency is kept for the last ``window`` successful requests.
    """

    window: int = 10_000
    requests: int = 0
    retries: int = 0
    cache_hits: int = 0
    shared_in_flight: int = 0
    samples_judged: int = 0
    samples_failed: int = 0
    errors: Counter[str] = field(default_factory=Counter)
    by_endpoint: Counter[str] = field(default_factory=Counter)
    latencies: deque[float] = field(init=False)

    def __post_init__(self) -> None:
        self.latencies = deque(maxlen=self.window)

    def record_request(self, endpoint: str, latency_s: float | None, error: str | None = None) -> None:
        self.requests += 1
        self.by_endpoint[endpoint] += 1
        if error is not None:
            self.errors[error] += 1
        elif latency_s is not None:
            self.latencies.append(latency_s)

    def reset(self) -> None:
        """Start counting afresh (per training step, or after a warm-up), keeping this object."""
        self.requests = self.retries = self.cache_hits = self.shared_in_flight = 0
        self.samples_judged = self.samples_failed = 0
        self.errors.clear()
        self.by_endpoint.clear()
        self.latencies.clear()

    def snapshot(self) -> dict[str, Any]:
        """A JSON-ready copy: counts, error kinds, and latency mean and percentiles in seconds."""
        lat = sorted(self.latencies)
        return {
            "requests": self.requests,
            "retries": self.retries,
            "cache_hits": self.cache_hits,
            "shared_in_flight": self.shared_in_flight,
            "samples_judged": self.samples_judged,
            "samples_failed": self.samples_failed,
            "errors": dict(self.errors),
            "by_endpoint": dict(self.by_endpoint),
            "latency_s": {
                "count": len(lat),
                "mean": statistics.fmean(lat) if lat else None,
                "p50": _percentile(lat, 0.50),
                "p90": _percentile(lat, 0.90),
                "p99": _percentile(lat, 0.99),
                "max": lat[-1] if lat else None,
            },
        }


def _percentile(ordered: list[float], q: float) -> float | None:
    if not ordered:
        return None
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]
