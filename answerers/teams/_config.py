"""The Teams answerer's settings: its own `TeamsSettings` (`ASKQ_TEAMS_*` variables),
checked at start-up into a `TeamsConfig`, so a worker with a missing or malformed
setting stops before it goes live.

The endpoints of Microsoft's clouds (where the bot gets its token, the OpenID metadata
its inbound tokens are checked against, their issuer) are the Teams SDK's own
(`microsoft_teams.api.auth.cloud_environment`), picked by `ASKQ_TEAMS_CLOUD`; the URLs
can each be overridden (a proxy, a test's stand-in).
"""

from __future__ import annotations

from dataclasses import dataclass

from microsoft_teams.api.auth.cloud_environment import from_name
from pydantic import Field, SecretStr
from pydantic_settings import SettingsConfigDict

from askq import AskError, ChannelSettings, ErrorCode

from .._allowlist import ANYONE, Allowlist
from ._routes import GUID, Routes, parse_routes

TENANTS_VAR = "ASKQ_TEAMS_TENANTS"
TENANT_IDS = Allowlist(GUID, "Azure AD tenant ids", "an Azure AD tenant id (a GUID)")
# Where a bot sends to a conversation it has no reference for (Microsoft's global
# Bot Connector endpoint; a stored reference carries the conversation's regional one).
PUBLIC_SERVICE_URL = "https://smba.trafficmanager.net/teams/"


class TeamsSettings(ChannelSettings):
    """Every `ASKQ_TEAMS_*` variable. Routes, allowlist and tenants are plain text,
    parsed by `TeamsConfig` at start-up so an error names the variable at fault."""

    model_config = SettingsConfigDict(env_prefix="ASKQ_TEAMS_", extra="ignore")

    app_id: str = Field(
        default="", description="The bot's Microsoft App ID (its Azure bot registration's)."
    )
    app_password: SecretStr | None = Field(
        default=None, description="A client secret of the app registration: the bot's token."
    )
    tenant_id: str = Field(
        default="",
        description="The app registration's tenant (a single-tenant bot, what Azure creates"
        " now); empty: a multi-tenant registration (token from botframework.com).",
    )
    tenants: str = Field(
        default="",
        description="Tenant ids whose activities are accepted (JSON list or comma-separated;"
        ' "*": any tenant the app is installed in). Default: ASKQ_TEAMS_TENANT_ID.',
    )
    routes: str = Field(
        default="",
        description='JSON: scope selector -> conversation id or {"user": object id}, first'
        ' match wins, "*" last: {"tenant=acme": {"conversation": "19:...@thread.tacv2",'
        ' "allow": ["alice@contoso.com"]}, "*": "19:...@thread.tacv2"}.',
    )
    allowlist: str = Field(
        default="",
        description="Who may answer where a route names nobody: Azure AD object ids or UPNs"
        ' (JSON list or comma-separated); "*" lets anyone who sees the card answer.',
    )
    http_host: str = Field(default="127.0.0.1", description="Where the messaging endpoint listens.")
    http_port: int = Field(
        default=3978, ge=0, le=65535, description="Port of the messaging endpoint (/api/messages)."
    )
    cloud: str = Field(
        default="Public", description="Microsoft cloud: Public, USGov, USGovDoD or China."
    )
    service_url: str = Field(
        default="",
        description="Bot Connector URL for conversations without a stored reference (default:"
        f" {PUBLIC_SERVICE_URL}; GCC and GCC High have their own).",
    )
    login_url: str = Field(
        default="",
        description="Token authority (default: the cloud's, https://login.microsoftonline.com).",
    )
    openid_url: str = Field(
        default="",
        description="OpenID metadata of inbound tokens (default: the cloud's Bot Framework one).",
    )


@dataclass(frozen=True)
class TeamsConfig:
    app_id: str
    app_password: str
    token_tenant: str  # the authority's tenant: the app's, or botframework.com
    tenants: frozenset[str]  # lower-case tenant ids, or {"*"}
    routes: Routes
    http_host: str
    http_port: int
    service_url: str
    login_url: str
    openid_url: str
    issuer: str  # the inbound tokens' issuer (https://api.botframework.com)
    bot_scope: str  # what the bot's token is for (https://api.botframework.com/.default)

    def tenant_allowed(self, tenant: str | None) -> bool:
        return ANYONE in self.tenants or (tenant is not None and tenant.lower() in self.tenants)

    @classmethod
    def from_settings(cls, settings: TeamsSettings) -> TeamsConfig:
        app_id = settings.app_id.strip()
        if not app_id:
            raise _missing("ASKQ_TEAMS_APP_ID", "the bot's Microsoft App ID")
        if not GUID.match(app_id):
            raise _error(f"ASKQ_TEAMS_APP_ID: {app_id!r} is not a Microsoft App ID (a GUID)")
        password = settings.app_password.get_secret_value() if settings.app_password else ""
        if not password.strip():
            raise _missing(
                "ASKQ_TEAMS_APP_PASSWORD", "a client secret of the bot's app registration"
            )
        tenant_id = settings.tenant_id.strip().lower()
        if tenant_id and not GUID.match(tenant_id):
            raise _error(f"ASKQ_TEAMS_TENANT_ID: {tenant_id!r} is not a tenant id (a GUID)")
        if settings.tenants.strip():
            tenants = frozenset(
                t.lower() for t in TENANT_IDS.parse_setting(settings.tenants, TENANTS_VAR)
            )
        elif tenant_id:
            tenants = frozenset({tenant_id})
        else:
            raise _missing(
                TENANTS_VAR,
                "the tenants whose people may answer (or ASKQ_TEAMS_TENANT_ID, a"
                ' single-tenant bot\'s own; "*" for any tenant the app is installed in)',
            )
        try:
            cloud = from_name(settings.cloud.strip())
        except ValueError as exc:
            raise _error(f"ASKQ_TEAMS_CLOUD: {exc}") from None
        urls = {
            "ASKQ_TEAMS_SERVICE_URL": settings.service_url.strip() or PUBLIC_SERVICE_URL,
            "ASKQ_TEAMS_LOGIN_URL": settings.login_url.strip() or cloud.login_endpoint,
            "ASKQ_TEAMS_OPENID_URL": settings.openid_url.strip() or cloud.openid_metadata_url,
        }
        for var, url in urls.items():
            if not url.startswith(("https://", "http://")):
                raise _error(f"{var}: {url!r} is not an http(s) URL")
        if not urls["ASKQ_TEAMS_LOGIN_URL"].startswith("https://"):
            raise _error("ASKQ_TEAMS_LOGIN_URL: the token authority must be an https URL")
        return cls(
            app_id=app_id,
            app_password=password.strip(),
            token_tenant=tenant_id or cloud.login_tenant,
            tenants=tenants,
            routes=parse_routes(settings.routes, settings.allowlist),
            http_host=settings.http_host,
            http_port=settings.http_port,
            service_url=urls["ASKQ_TEAMS_SERVICE_URL"],
            login_url=urls["ASKQ_TEAMS_LOGIN_URL"].rstrip("/"),
            openid_url=urls["ASKQ_TEAMS_OPENID_URL"],
            issuer=cloud.token_issuer,
            bot_scope=cloud.bot_scope,
        )


def _error(message: str) -> AskError:
    return AskError(ErrorCode.CONFIG_ERROR, message)


def _missing(var: str, what: str) -> AskError:
    return _error(f"{var} is not set: the Teams answerer needs {what}")
