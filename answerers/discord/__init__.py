"""The Discord answerer: questions as messages with buttons, selects and a modal, posted
through Discord's REST API to a channel or a DM, answered by interactions Discord POSTs
to the bot's HTTP endpoint, each verified with the application's Ed25519 key
(`askq worker discord`)."""

from ._answerer import DiscordAnswerer, DiscordOptions
from ._config import DiscordConfig, DiscordSettings
from ._endpoint import INTERACTIONS_PATH
from ._messages import Outcome, final_message, fits, question_message
from ._routes import Route, Routes, parse_routes
from ._text import escape

__all__ = [
    "INTERACTIONS_PATH",
    "DiscordAnswerer",
    "DiscordConfig",
    "DiscordOptions",
    "DiscordSettings",
    "Outcome",
    "Route",
    "Routes",
    "escape",
    "final_message",
    "fits",
    "parse_routes",
    "question_message",
]
