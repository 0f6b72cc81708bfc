"""Sending mail (aiosmtplib), and what a failed send means for a retried send.

A 5xx reply (the server refused the sender, the recipient or the message) will not
change by retrying: `MailRefused`, after which the channel gives the question back.
Anything else — a 4xx, a refused login, a lost or timed-out connection — is raised as
is, and the send queue retries it with backoff.
"""

from __future__ import annotations

from email.message import EmailMessage

import aiosmtplib

from ._config import EmailConfig


class MailRefused(Exception):  # noqa: N818 - the server's answer, not our failure
    """The SMTP server refused the message for good (a 5xx reply)."""


class Mailer:
    def __init__(self, config: EmailConfig) -> None:
        self.config = config

    async def send(self, message: EmailMessage, *, sender: str, recipient: str) -> None:
        """Hand one message to the outbound server, for one recipient, with `sender` as
        the envelope sender (where bounces go)."""
        config = self.config
        try:
            await aiosmtplib.send(
                message,
                sender=sender,
                recipients=[recipient],
                hostname=config.smtp_host,
                port=config.smtp_port,
                username=config.smtp_username,
                password=config.smtp_password,
                use_tls=config.smtp_tls,
                start_tls=config.smtp_starttls,
                timeout=config.smtp_timeout,
            )
        except aiosmtplib.SMTPRecipientsRefused as exc:
            codes = [refused.code for refused in exc.recipients]
            if codes and all(500 <= code < 600 for code in codes):
                raise MailRefused(f"{recipient} refused: {exc}") from exc
            raise
        except aiosmtplib.SMTPAuthenticationError:
            raise  # our settings, not this message: retried, then given back
        except aiosmtplib.SMTPResponseException as exc:
            if 500 <= exc.code < 600:
                raise MailRefused(f"{exc.code} {exc.message}") from exc
            raise
