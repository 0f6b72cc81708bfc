"""The email answerer's settings: `EmailSettings` (`ASKQ_EMAIL_*` variables), checked
at start-up into an `EmailConfig`, so a worker with a missing or malformed setting
stops with one CONFIG_ERROR before it goes live."""

from __future__ import annotations

import ssl
from dataclasses import dataclass

from pydantic import Field, SecretStr
from pydantic_settings import SettingsConfigDict

from askq import AskError, ChannelSettings, ErrorCode

from ._addresses import ReplyAddresses
from ._routes import ADDRESS, Routes, parse_routes


class EmailSettings(ChannelSettings):
    """Every `ASKQ_EMAIL_*` variable (README, "Email")."""

    model_config = SettingsConfigDict(env_prefix="ASKQ_EMAIL_", extra="ignore")

    routes: str = Field(
        default="",
        description='JSON: scope selector -> recipients, first match wins, "*" last:'
        ' {"tenant=acme": {"to": ["a@acme.example"], "allow": ["@acme.example"]},'
        ' "*": "ops@example.com"}.',
    )
    from_address: str = Field(
        default="", description="The From address of question emails, e.g. askq@example.com."
    )
    from_name: str = Field(default="askq", description="The From display name.")
    reply_domain: str = Field(
        default="",
        description="Domain of the reply addresses (answer+<request>.<mac>@DOMAIN) whose MX"
        " points at the listener; default: the From address's domain.",
    )
    secret: SecretStr | None = Field(
        default=None,
        description="Keys the reply-address MACs and the signed links; comma-separated to"
        " rotate (the first signs, all verify).",
    )
    smtp_host: str = Field(default="localhost", description="Outbound SMTP server.")
    smtp_port: int = Field(default=25, ge=1, le=65535, description="Outbound SMTP port.")
    smtp_username: str = Field(default="", description="Outbound SMTP login (none if empty).")
    smtp_password: SecretStr | None = Field(default=None, description="Outbound SMTP password.")
    smtp_tls: bool = Field(default=False, description="Implicit TLS (port 465 style).")
    smtp_starttls: bool | None = Field(
        default=None, description="STARTTLS: on, off, or (unset) when the server offers it."
    )
    smtp_timeout: float = Field(default=30.0, gt=0, description="Seconds per SMTP exchange.")
    listen: bool = Field(default=True, description="Run the SMTP listener for replies.")
    listen_host: str = Field(default="127.0.0.1", description="Where the SMTP listener binds.")
    listen_port: int = Field(default=2525, ge=0, le=65535, description="SMTP listener port.")
    max_message_bytes: int = Field(
        default=1_048_576, ge=10_000, description="Largest reply the listener accepts."
    )
    tls_cert: str = Field(default="", description="Certificate (PEM) for STARTTLS on the listener.")
    tls_key: str = Field(default="", description="Its private key (PEM).")
    require_dkim: bool = Field(
        default=False,
        description="Refuse replies at the SMTP listener without a valid DKIM signature of"
        " the From domain.",
    )
    http_host: str = Field(default="127.0.0.1", description="Where the HTTP endpoint binds.")
    http_port: int = Field(
        default=0,
        ge=0,
        le=65535,
        description="Port of the HTTP endpoint (raw-MIME webhook, answer links); 0: none"
        " unless ASKQ_EMAIL_INBOUND_SECRET or ASKQ_EMAIL_LINK_BASE_URL needs it (then any"
        " free port).",
    )
    inbound_secret: SecretStr | None = Field(
        default=None,
        description="Bearer secret of POST /email/inbound (providers' inbound webhooks);"
        " the endpoint is off without it.",
    )
    link_base_url: str = Field(
        default="",
        description="Public base URL of the answer links (…/a/<token>); no links if empty.",
    )
    link_ttl: float = Field(default=7 * 86400, gt=0, description="Seconds a link stays valid.")
    notify_elsewhere: bool = Field(
        default=False,
        description="Send a one-line note when a question is answered or cancelled elsewhere.",
    )


@dataclass(frozen=True)
class EmailConfig:
    routes: Routes
    from_address: str
    from_name: str
    secrets: tuple[str, ...]
    addresses: ReplyAddresses
    smtp_host: str
    smtp_port: int
    smtp_username: str | None
    smtp_password: str | None
    smtp_tls: bool
    smtp_starttls: bool | None
    smtp_timeout: float
    listen: bool
    listen_host: str
    listen_port: int
    max_message_bytes: int
    tls_context: ssl.SSLContext | None
    require_dkim: bool
    http_host: str
    http_port: int
    inbound_secret: str | None
    link_base_url: str | None
    link_ttl: float
    notify_elsewhere: bool

    @property
    def domain(self) -> str:
        return self.addresses.domain

    @property
    def wants_http(self) -> bool:
        return bool(self.inbound_secret or self.link_base_url or self.http_port)

    @classmethod
    def from_settings(cls, settings: EmailSettings) -> EmailConfig:
        if not ADDRESS.match(settings.from_address):
            raise _error(
                "ASKQ_EMAIL_FROM_ADDRESS",
                f"{settings.from_address!r} is not an address (e.g. askq@example.com)",
            )
        raw_secret = settings.secret.get_secret_value() if settings.secret else ""
        secrets = tuple(s.strip() for s in raw_secret.split(",") if s.strip())
        if not secrets or any(len(s) < 16 for s in secrets):
            raise _error(
                "ASKQ_EMAIL_SECRET",
                "set a secret of at least 16 characters (it keys the reply addresses)",
            )
        domain = (settings.reply_domain or settings.from_address.rpartition("@")[2]).lower()
        if not ADDRESS.match(f"x@{domain}"):
            raise _error("ASKQ_EMAIL_REPLY_DOMAIN", f"{domain!r} is not a domain")
        base = settings.link_base_url.strip().rstrip("/")
        if base and not base.startswith(("https://", "http://")):
            raise _error("ASKQ_EMAIL_LINK_BASE_URL", f"{base!r} is not an http(s) URL")
        inbound = settings.inbound_secret.get_secret_value() if settings.inbound_secret else ""
        if inbound and len(inbound) < 16:
            raise _error("ASKQ_EMAIL_INBOUND_SECRET", "use at least 16 characters")
        return cls(
            routes=parse_routes(settings.routes),
            from_address=settings.from_address,
            from_name=settings.from_name,
            secrets=secrets,
            addresses=ReplyAddresses(secrets, domain),
            smtp_host=settings.smtp_host,
            smtp_port=settings.smtp_port,
            smtp_username=settings.smtp_username or None,
            smtp_password=settings.smtp_password.get_secret_value()
            if settings.smtp_password
            else None,
            smtp_tls=settings.smtp_tls,
            smtp_starttls=settings.smtp_starttls,
            smtp_timeout=settings.smtp_timeout,
            listen=settings.listen,
            listen_host=settings.listen_host,
            listen_port=settings.listen_port,
            max_message_bytes=settings.max_message_bytes,
            tls_context=_tls_context(settings.tls_cert, settings.tls_key),
            require_dkim=settings.require_dkim,
            http_host=settings.http_host,
            http_port=settings.http_port,
            inbound_secret=inbound or None,
            link_base_url=base or None,
            link_ttl=settings.link_ttl,
            notify_elsewhere=settings.notify_elsewhere,
        )


def _tls_context(cert: str, key: str) -> ssl.SSLContext | None:
    if not cert and not key:
        return None
    if not cert or not key:
        raise _error("ASKQ_EMAIL_TLS_CERT", "STARTTLS needs both ASKQ_EMAIL_TLS_CERT and _KEY")
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    try:
        context.load_cert_chain(cert, key)
    except (OSError, ssl.SSLError) as exc:
        raise _error("ASKQ_EMAIL_TLS_CERT", f"cannot load {cert} / {key}: {exc}") from None
    return context


def _error(var: str, what: str) -> AskError:
    return AskError(ErrorCode.CONFIG_ERROR, f"{var}: {what}")
