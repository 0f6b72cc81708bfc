"""Signed single-question links (askq.SignedLinks): every rule a token must pass."""

from __future__ import annotations

import base64
import json

import pytest

from askq import AskError, ErrorCode, LinkClaims, LinkError, SignedLinks

NOW = 1_800_000_000.0
SECRET = "first-secret-0123456789"


def _links(*secrets: str) -> SignedLinks:
    return SignedLinks(list(secrets) or [SECRET])


def _mint(links: SignedLinks, **kw: object) -> str:
    args: dict[str, object] = {"ttl": 600.0, "now": NOW, **kw}
    return links.mint("req-1", "web", "bob@example.com", **args)  # type: ignore[arg-type]


def test_a_minted_token_checks_back_to_its_claims() -> None:
    links = _links()
    token = _mint(links, question_id="go", option="Yes (Recommended)")
    claims = links.check(token, group="web", now=NOW + 1)
    assert claims == LinkClaims(
        request_id="req-1",
        group="web",
        recipient="bob@example.com",
        expires_at=int(NOW + 600),
        jti=claims.jti,
        question_id="go",
        option="Yes (Recommended)",
    )
    assert len(claims.jti) >= 16
    # URL-safe as it is: nothing to quote.
    assert all(c.isalnum() or c in "-_." for c in token)


def test_every_token_has_its_own_single_use_id() -> None:
    links = _links()
    first = links.check(_mint(links), group="web", now=NOW)
    second = links.check(_mint(links), group="web", now=NOW)
    assert first.jti != second.jti


def test_claims_are_frozen() -> None:
    claims = _links().check(_mint(_links()), group="web", now=NOW)
    with pytest.raises(ValueError):
        claims.recipient = "mallory"  # type: ignore[misc]


def test_an_expired_token_is_410_and_says_so() -> None:
    links = _links()
    token = _mint(links, ttl=60.0)
    links.check(token, group="web", now=NOW + 59.5)  # still good
    with pytest.raises(LinkError) as caught:
        links.check(token, group="web", now=NOW + 60)
    assert caught.value.status == 410
    assert "expired" in caught.value.message
    assert isinstance(caught.value, AskError)


def test_ttl_rounds_up_to_a_whole_second() -> None:
    links = _links()
    claims = links.check(_mint(links, ttl=0.2), group="web", now=NOW)
    assert claims.expires_at == int(NOW) + 1


@pytest.mark.parametrize("ttl", [0.0, -1.0, float("inf"), float("nan")])
def test_a_ttl_that_is_not_a_positive_time_is_refused(ttl: float) -> None:
    with pytest.raises(AskError) as caught:
        _mint(_links(), ttl=ttl)
    assert caught.value.code is ErrorCode.INVALID_REQUEST


def _reencode(payload: dict[str, object]) -> str:
    raw = json.dumps(payload, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def test_a_tampered_payload_is_403() -> None:
    links = _links()
    token = _mint(links)
    payload, signature = token.split(".")
    wire = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    wire["u"] = "mallory@example.com"  # claim to be someone else
    with pytest.raises(LinkError) as caught:
        links.check(f"{_reencode(wire)}.{signature}", group="web", now=NOW)
    assert caught.value.status == 403
    assert "signature" in caught.value.message


def test_a_tampered_signature_is_403() -> None:
    links = _links()
    token = _mint(links)
    flipped = token[:-1] + ("A" if token[-1] != "A" else "B")
    with pytest.raises(LinkError) as caught:
        links.check(flipped, group="web", now=NOW)
    assert caught.value.status == 403


def test_a_token_signed_with_an_unknown_secret_is_403() -> None:
    token = _mint(_links("some-other-deployment-secret"))
    with pytest.raises(LinkError) as caught:
        _links().check(token, group="web", now=NOW)
    assert caught.value.status == 403


def test_rotation_the_first_secret_signs_and_every_secret_verifies() -> None:
    old = _links("old-secret-0123456789")
    old_token = _mint(old)
    rotated = _links("new-secret-0123456789", "old-secret-0123456789")
    assert rotated.check(old_token, group="web", now=NOW).request_id == "req-1"
    new_token = _mint(rotated)
    # The new secret signs: the old deployment does not know it...
    with pytest.raises(LinkError):
        old.check(new_token, group="web", now=NOW)
    # ...and once the old secret is dropped, its tokens stop working.
    with pytest.raises(LinkError) as caught:
        _links("new-secret-0123456789").check(old_token, group="web", now=NOW)
    assert caught.value.status == 403


def test_a_token_for_another_group_is_403() -> None:
    links = _links()
    token = links.mint("req-1", "email", "bob@example.com", ttl=600, now=NOW)
    with pytest.raises(LinkError) as caught:
        links.check(token, group="web", now=NOW)
    assert caught.value.status == 403
    assert "another group" in caught.value.message
    assert links.check(token, group="email", now=NOW).group == "email"


@pytest.mark.parametrize(
    "token",
    [
        "",
        "no-dot-at-all",
        "a.b.c",
        ".",
        "x" * 5000 + ".y",
        "%%%.%%%",
    ],
)
def test_a_malformed_token_is_403(token: str) -> None:
    with pytest.raises(LinkError) as caught:
        _links().check(token, group="web", now=NOW)
    assert caught.value.status == 403


@pytest.mark.parametrize(
    "wire",
    [
        ["not", "an", "object"],
        {"r": "req-1", "g": "web"},  # claims missing
        {"r": "req-1", "g": "web", "u": "bob", "e": "soon", "j": "x"},  # wrong type
        {"r": "req-1", "g": "web", "u": "bob", "e": 1, "j": "x", "zz": 1},  # unknown claim
    ],
)
def test_a_validly_signed_payload_that_is_not_claims_is_403(wire: object) -> None:
    """A secret shared with something else could sign anything; check still refuses
    what is not a link's claims, with a page, not a crash."""
    links = _links()
    payload = _reencode(wire)  # type: ignore[arg-type]
    token = f"{payload}.{SignedLinks._sign(links._keys[0], payload)}"
    with pytest.raises(LinkError) as caught:
        links.check(token, group="web", now=NOW)
    assert caught.value.status == 403
    assert "malformed" in caught.value.message


@pytest.mark.parametrize("secrets", [[], [""], ["ok-secret", ""], "a-string-not-a-list"])
def test_no_secret_or_an_empty_one_is_a_config_error(secrets: list[str]) -> None:
    with pytest.raises(AskError) as caught:
        SignedLinks(secrets)
    assert caught.value.code is ErrorCode.CONFIG_ERROR


@pytest.mark.parametrize("missing", ["request_id", "group", "recipient"])
def test_a_link_names_its_request_group_and_recipient(missing: str) -> None:
    args = {"request_id": "req-1", "group": "web", "recipient": "bob", missing: ""}
    with pytest.raises(AskError) as caught:
        _links().mint(**args, ttl=60)
    assert missing in caught.value.message


def test_the_signing_key_is_derived_not_the_raw_secret() -> None:
    """A plain HMAC keyed by the raw secret (what a hand-rolled signer would do) does
    not verify: the key is for this use only."""
    import hashlib
    import hmac

    links = _links()
    payload = _mint(links).split(".")[0]
    raw = hmac.new(SECRET.encode(), payload.encode(), hashlib.sha256).digest()
    forged = f"{payload}.{base64.urlsafe_b64encode(raw).rstrip(b'=').decode()}"
    with pytest.raises(LinkError):
        links.check(forged, group="web", now=NOW)


# --- stored links (`issue` / `resolve`): short, their claims in the group's store -------


class MemoryStore:
    """The two ChannelStore calls a stored link makes, in memory; counts the reads."""

    def __init__(self, ttl: int = 86400) -> None:
        self.ttl = ttl
        self.records: dict[str, dict[str, str]] = {}
        self.reads = 0

    async def set_fields(self, name: str, values: dict[str, str]) -> None:
        self.records.setdefault(name, {}).update(values)

    async def all_fields(self, name: str) -> dict[str, str]:
        self.reads += 1
        return dict(self.records.get(name, {}))


async def _issue(links: SignedLinks, store: MemoryStore, **kw: object) -> str:
    args: dict[str, object] = {"ttl": 600.0, "now": NOW, **kw}
    return await links.issue(store, "req-1", "email", "bob@example.com", **args)  # type: ignore[arg-type]


async def test_a_stored_link_is_short_and_resolves_to_its_claims() -> None:
    links, store = _links(), MemoryStore()
    option = "Yes, delete every one of the 3 stale branches (Recommended) " * 3
    token = await _issue(links, store, question_id="go", option=option)
    assert len(token) == 32 and all(c.isalnum() or c in "-_" for c in token)
    claims = await links.resolve(token, group="email", store=store, now=NOW + 1)  # type: ignore[arg-type]
    assert claims == LinkClaims(
        request_id="req-1",
        group="email",
        recipient="bob@example.com",
        expires_at=int(NOW + 600),
        jti=claims.jti,
        question_id="go",
        option=option,
    )
    other = await _issue(links, store)
    assert (await links.resolve(other, group="email", store=store, now=NOW)).jti != claims.jti  # type: ignore[arg-type]


async def test_a_guessed_or_altered_stored_link_is_refused_without_reading_redis() -> None:
    links, store = _links(), MemoryStore()
    token = await _issue(links, store)
    guesses = [
        "A" * 32,  # a guess
        token[:16] + "B" * 16,  # a real id, a made-up tag
        token[:-1] + ("A" if token[-1] != "A" else "B"),  # one character changed
        await _issue(_links("another-secret-0123456789"), store),  # another secret
    ]
    for guess in guesses:
        with pytest.raises(LinkError) as caught:
            await links.resolve(guess, group="email", store=store, now=NOW)  # type: ignore[arg-type]
        assert (caught.value.status, caught.value.problem) == (403, "forged")
    for bad in ("short", "x" * 33, "%" * 32):
        with pytest.raises(LinkError) as caught:
            await links.resolve(bad, group="email", store=store, now=NOW)  # type: ignore[arg-type]
        assert (caught.value.status, caught.value.problem) == (403, "malformed")
    assert store.reads == 0


async def test_a_stored_link_expires_and_never_outlives_its_record() -> None:
    links, store = _links(), MemoryStore(ttl=100)
    token = await _issue(links, store, ttl=7 * 86400.0)
    claims = await links.resolve(token, group="email", store=store, now=NOW)  # type: ignore[arg-type]
    assert claims.expires_at == int(NOW + 100)  # the store keeps the record 100 s
    with pytest.raises(LinkError) as caught:
        await links.resolve(token, group="email", store=store, now=NOW + 100)  # type: ignore[arg-type]
    assert (caught.value.status, caught.value.problem) == (410, "expired")
    assert caught.value.expired_at == int(NOW + 100)
    store.records.clear()  # the record expired with the request
    with pytest.raises(LinkError) as caught:
        await links.resolve(token, group="email", store=store, now=NOW)  # type: ignore[arg-type]
    assert (caught.value.status, caught.value.problem) == (410, "gone")


async def test_a_stored_link_for_another_group_is_403_and_rotation_keeps_it() -> None:
    store = MemoryStore()
    token = await _issue(_links(SECRET), store)
    with pytest.raises(LinkError) as caught:
        await _links().resolve(token, group="web", store=store, now=NOW)  # type: ignore[arg-type]
    assert (caught.value.status, caught.value.problem) == (403, "other group")
    rotated = _links("new-secret-0123456789", SECRET)
    assert (await rotated.resolve(token, group="email", store=store, now=NOW)).recipient  # type: ignore[arg-type]


async def test_resolve_takes_a_self_contained_link_too() -> None:
    links = _links()
    token = links.mint("req-1", "web", "slack:U01", ttl=600, now=NOW)
    claims = await links.resolve(token, group="web", store=MemoryStore(), now=NOW)  # type: ignore[arg-type]
    assert claims.recipient == "slack:U01"
