"""`python -m bench`: every benchmark of askq in one run, printed as one table.

    python -m bench [--quick] [-n 3000] [--only SECTION ...] [--redis-url URL]

Without --redis-url it starts its own `redis-server` on a free loopback port (no
persistence) and stops it at the end. Everything is measured side by side in the same
run (raw Redis, arq), because figures on a shared machine are noisy; read the ratios.
"""

from __future__ import annotations

from . import _suite, abort, channels, cleanup, fallthrough, pending, roundtrip, throughput
from ._common import Section

SECTIONS: _suite.Sections = {
    "roundtrip": roundtrip.run,
    "throughput": throughput.run,
    "pending": pending.run,
    "abort": abort.run,
    "fallthrough": fallthrough.run,
    "cleanup": cleanup.run,
    "channels": channels.run,
}


def main(argv: list[str] | None = None) -> list[Section]:
    return _suite.main(SECTIONS, argv)


if __name__ == "__main__":
    main()
