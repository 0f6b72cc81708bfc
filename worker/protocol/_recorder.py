"""What the processes report to the metrics, as they run: `recorder`, the process's
one `Recorder`. This base records nothing (no metrics extra, or no port asked for);
`_metrics.start_metrics` swaps in the Prometheus one. Below everything that reports
(the Redis clients' full-refusal counts, the runtime, the sweeper, the sends), and
importing nothing of askq's, so any of them may report.
"""

from __future__ import annotations

import time


class Recorder:
    """What the processes report. This base records nothing (no extra installed, or no
    port asked for); `PrometheusRecorder` counts."""

    enabled = False

    def offered(self, group: str, tier: int) -> None: ...

    def decided(self, group: str, decision: str, seconds: float) -> None: ...

    def settled(self, group: str, outcome: str, seconds: float) -> None: ...

    def passed_on(self, group: str, tier: int, how: str) -> None: ...

    def reminded(self, group: str) -> None: ...

    def sent(self, group: str, channel: str, result: str) -> None: ...

    def fired(self, kind: str, lateness: float) -> None: ...

    def recovered(self, what: str, count: int) -> None: ...

    def redis_full(self, full: bool) -> None: ...

    def full_refused(self, kind: str) -> None: ...


recorder: Recorder = Recorder()


def outcome_of(state: str, code: str | None) -> str:
    """A retraction's (or settlement's) state and code as an `outcome` label."""
    if state == "ANSWERED":
        return "answered_elsewhere"
    if state == "CANCELLED":
        return "timed_out" if code == "TIMED_OUT" else "aborted"
    if state == "FAILED":
        return "no_answerer" if code == "NO_ANSWERER" else "failed"
    return "escalated"


def seconds_since(created_ms: int | None) -> float:
    return max(0.0, time.time() - created_ms / 1000) if created_ms else 0.0
