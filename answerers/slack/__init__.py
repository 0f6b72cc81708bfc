"""The Slack answerer: questions as Block Kit messages, answered by clicks arriving over
Socket Mode or the signed HTTP interactivity endpoint (`askq worker slack`)."""

from ._answerer import SlackAnswerer, SlackOptions
from ._blocks import Outcome, final_message, question_message
from ._config import SlackConfig, SlackSettings
from ._http import INTERACTIVITY_PATH
from ._routes import Route, Routes, parse_routes

__all__ = [
    "INTERACTIVITY_PATH",
    "Outcome",
    "Route",
    "Routes",
    "SlackAnswerer",
    "SlackConfig",
    "SlackOptions",
    "SlackSettings",
    "final_message",
    "parse_routes",
    "question_message",
]
