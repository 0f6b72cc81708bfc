"""What installs: one package, `askq` (the folders worker/ and answerers/ mapped onto
`askq` and `askq.answerers`), and nothing named `worker` or `answerers` at the top of
a user's environment. Checked for the editable install these tests run on and for a
wheel built from the sdist, installed as a regular package."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

from conftest import ROOT

PROBE = """
import importlib, importlib.metadata as md, json
out = {}
for name in ("askq", "askq.answerers", "askq.answerers.slack", "worker", "answerers"):
    try:
        out[name] = importlib.import_module(name).__file__
    except ImportError:
        out[name] = None
from askq.redis._lua import load
out["lua"] = "redis.call" in load("ask").text
out["entry_points"] = sorted(
    f"{ep.name}={ep.value}" for ep in md.distribution("askq").entry_points
    if ep.group == "askq.answerers"
)
print(json.dumps(out))
"""


def probe(cwd: Path, env: dict[str, str]) -> dict[str, object]:
    """Import as a user's program would: from another folder, without PYTHONPATH."""
    result = subprocess.run(
        [sys.executable, "-c", PROBE], cwd=cwd, env=env, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    found: dict[str, object] = json.loads(result.stdout)
    return found


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(extra)
    return env


ENTRY_POINTS = [
    "auto=askq.answerers.auto:AutoAnswerer",
    "console=askq.answerers.console:ConsoleAnswerer",
    "discord=askq.answerers.discord:DiscordAnswerer",
    "email=askq.answerers.email:EmailAnswerer",
    "slack=askq.answerers.slack:SlackAnswerer",
    "teams=askq.answerers.teams:TeamsAnswerer",
    "web=askq.answerers.web:WebAnswerer",
    "webhook=askq.answerers.webhook:WebhookAnswerer",
]


def test_the_installed_package_is_askq_and_nothing_else(tmp_path: Path) -> None:
    found = probe(tmp_path, clean_env())
    assert found["askq"] and found["askq.answerers"] and found["askq.answerers.slack"]
    assert found["worker"] is None and found["answerers"] is None
    assert found["lua"] is True
    assert found["entry_points"] == ENTRY_POINTS


def test_a_wheel_built_from_the_sdist_installs_askq_and_nothing_else(tmp_path: Path) -> None:
    dist = tmp_path / "dist"
    built = subprocess.run(
        [sys.executable, "-m", "build", "--no-isolation", "--outdir", str(dist), str(ROOT)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    [wheel] = dist.glob("*.whl")  # built from the sdist, as `build` does by default
    assert list(dist.glob("*.tar.gz"))
    names = zipfile.ZipFile(wheel).namelist()
    assert {name.split("/")[0] for name in names} == {"askq", "askq-0.1.0.dist-info"}
    assert "askq/redis/lua/ask.lua" in names and "askq/py.typed" in names
    assert "askq/answerers/slack/_answerer.py" in names
    assert "askq/answerers/email/_answerer.py" in names
    # The web inbox's pages ship in the wheel: nothing loads from a CDN.
    for page in ("templates/base.html", "templates/_form.html", "static/app.css", "static/app.js"):
        assert f"askq/answerers/web/{page}" in names, page

    site = tmp_path / "site"
    installed = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(site)]
        + [str(wheel)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert installed.returncode == 0, installed.stderr
    found = probe(tmp_path, clean_env(PYTHONPATH=str(site)))  # ahead of the editable one
    assert str(found["askq"]).startswith(str(site)), found
    assert found["worker"] is None and found["answerers"] is None
    assert found["lua"] is True
    assert found["entry_points"] == ENTRY_POINTS
