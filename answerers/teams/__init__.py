"""The Microsoft Teams answerer: questions as Adaptive Cards (Universal Actions), sent
proactively to a channel or a personal chat, answered by clicks arriving at the bot's
messaging endpoint (`askq worker teams`)."""

from ._answerer import TeamsAnswerer, TeamsOptions
from ._cards import Outcome, final_card, question_card
from ._config import TeamsConfig, TeamsSettings
from ._endpoint import MESSAGING_PATH
from ._routes import Route, Routes, parse_routes

__all__ = [
    "MESSAGING_PATH",
    "Outcome",
    "Route",
    "Routes",
    "TeamsAnswerer",
    "TeamsConfig",
    "TeamsOptions",
    "TeamsSettings",
    "final_card",
    "parse_routes",
    "question_card",
]
