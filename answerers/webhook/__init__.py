"""The signed-webhook answerer: each question POSTed as JSON to a receiver (a pager, a
ticket system, n8n, an in-house bot), signed per Standard Webhooks, answered by a POST
back to the group's callback with the question's single-use token
(`askq worker webhook`)."""

from ._answerer import WebhookAnswerer, WebhookOptions
from ._config import WebhookConfig, WebhookSettings
from ._endpoint import ANSWER_PATH
from ._events import ASKED, ESCALATED, REMINDER, SETTLED, VERSION, Outcome

__all__ = [
    "ANSWER_PATH",
    "ASKED",
    "ESCALATED",
    "REMINDER",
    "SETTLED",
    "VERSION",
    "Outcome",
    "WebhookAnswerer",
    "WebhookConfig",
    "WebhookOptions",
    "WebhookSettings",
]
