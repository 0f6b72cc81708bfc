"""`python -m askq.answerers.web token [USER]`: a new sign-in token and the
`ASKQ_WEB_USERS` entry that admits it (only the hash goes into the setting)."""

from __future__ import annotations

import sys

from ._signin import hash_token, new_token


def main(argv: list[str]) -> int:
    if not argv or argv[0] != "token" or len(argv) > 2:
        print("usage: python -m askq.answerers.web token [USER]", file=sys.stderr)
        return 2
    user = argv[1] if len(argv) == 2 else "USER"
    token = new_token()
    print(f"token (give it to {user}; shown once): {token}")
    print(f"ASKQ_WEB_USERS entry: {user}={hash_token(token)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
