"""One POST to a receiver, and what its failure means for a retried send.

Retries are the send queue's (`GroupHandle.send`: backoff, `ASKQ_WEBHOOK_TRIES`), not
the client's: a `429` is `RetryLater(Retry-After)`; a `5xx`, `408`, `425`, a timeout or
a lost connection is raised as is (backoff); any other status outside 2xx is
`WebhookRefused`: the receiver said no, retrying will not help. Redirects are not
followed (a signed POST is for the URL configured, nowhere else).
"""

from __future__ import annotations

import httpx

from askq import RetryLater

DEFAULT_RETRY_AFTER = 1.0
MAX_RETRY_AFTER = 300.0
TRANSIENT_STATUS = frozenset({408, 425})
DETAIL_MAX = 200
USER_AGENT = "askq-webhook/1"


class WebhookRefused(Exception):  # noqa: N818 - the receiver's answer, not our failure
    """The receiver refused the POST for good (a 4xx, or a redirect)."""

    def __init__(self, status: int, detail: str) -> None:
        super().__init__(f"HTTP {status} {detail}".rstrip())
        self.status = status


class ReceiverError(Exception):
    """The receiver failed this time (a 5xx, 408, 425): tried again later."""


def _retry_after(response: httpx.Response) -> float:
    raw = response.headers.get("Retry-After")
    try:
        seconds = float(raw) if raw is not None else DEFAULT_RETRY_AFTER
    except ValueError:
        seconds = DEFAULT_RETRY_AFTER
    return min(max(seconds, 0.0), MAX_RETRY_AFTER)


class Delivery:
    def __init__(self, timeout: float) -> None:
        self._http = httpx.AsyncClient(
            timeout=timeout, follow_redirects=False, headers={"User-Agent": USER_AGENT}
        )

    async def post(self, url: str, body: str, headers: dict[str, str]) -> None:
        response = await self._http.post(
            url,
            content=body.encode(),
            headers={**headers, "Content-Type": "application/json"},
        )
        status = response.status_code
        if 200 <= status < 300:
            return
        detail = " ".join(response.text[:DETAIL_MAX].split())
        if status == 429:
            raise RetryLater(_retry_after(response), "the receiver rate-limited askq")
        if status >= 500 or status in TRANSIENT_STATUS:
            raise ReceiverError(f"HTTP {status} {detail}".rstrip())
        raise WebhookRefused(status, detail)

    async def close(self) -> None:
        await self._http.aclose()
