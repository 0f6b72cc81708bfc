"""deploy/: the compose file, the Kubernetes manifests and the systemd units.

- Each file is checked against its published schema, vendored in deploy/schemas/ (the
  compose spec's JSON schema; Kubernetes' strict JSON schemas of the kinds used), with
  the `jsonschema` package; a misspelt key in a copy is refused, so the check bites.
- The kustomizations list every manifest of their folder, and only files that exist.
- The systemd units pass `systemd-analyze verify` (with no warning) where it runs,
  else a parse of their keys.
- The entry points run: every askq command of the compose file and of the systemd
  units' ExecStart lines starts against the test Redis (each with its example
  settings, the Slack stand-in for Slack's API, free ports), the probe its deployment
  uses passes while it runs, and it stops on SIGTERM with status 0.
"""

from __future__ import annotations

import asyncio
import copy
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import redis
import yaml
from conftest import ROOT
from referencing import Registry, Resource
from slack_standin import APP_TOKEN, BOT_TOKEN, SlackStandIn, standin

from bench._redis_server import free_port

__all__ = ["standin"]  # the fixture, used by name

DEPLOY = ROOT / "deploy"
SCHEMAS = DEPLOY / "schemas"
K8S_SCHEMA = {
    ("apps/v1", "Deployment"): "deployment-apps-v1",
    ("apps/v1", "StatefulSet"): "statefulset-apps-v1",
    ("policy/v1", "PodDisruptionBudget"): "poddisruptionbudget-policy-v1",
    ("v1", "ConfigMap"): "configmap-v1",
    ("v1", "Secret"): "secret-v1",
    ("v1", "Service"): "service-v1",
}


def compose() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
    return loaded


def compose_errors(doc: dict[str, Any]) -> list[str]:
    schema = json.loads((SCHEMAS / "compose-spec.json").read_text())
    validator = jsonschema.Draft7Validator(schema)
    return [f"{e.json_path}: {e.message}" for e in validator.iter_errors(doc)]


def manifests() -> Iterator[tuple[Path, dict[str, Any]]]:
    for path in sorted((DEPLOY / "kubernetes").rglob("*.yaml")):
        if path.name != "kustomization.yaml":
            for doc in yaml.safe_load_all(path.read_text()):
                yield path, doc


def k8s_errors(doc: dict[str, Any]) -> list[str]:
    folder = SCHEMAS / "kubernetes"
    definitions = json.loads((folder / "_definitions.json").read_text())
    registry: Registry[Any] = Registry().with_resource(
        definitions["$id"], Resource.from_contents(definitions)
    )
    name = K8S_SCHEMA[(doc["apiVersion"], doc["kind"])]
    schema = json.loads((folder / f"{name}.json").read_text())
    validator = jsonschema.Draft202012Validator(schema, registry=registry)
    return [f"{e.json_path}: {e.message}" for e in validator.iter_errors(doc)]


# --- the files against their schemas ---------------------------------------------------


def test_compose_file_matches_the_compose_spec() -> None:
    doc = compose()
    assert compose_errors(doc) == []
    askq_services = {name for name, s in doc["services"].items() if name != "redis"}
    assert askq_services == {
        "sweeper", "worker-auto", "worker-slack", "worker-web", "worker-email", "worker-webhook",
    }  # fmt: skip
    assert doc["services"]["sweeper"]["deploy"]["replicas"] == 2
    for name in askq_services:
        service = doc["services"][name]
        assert service["restart"] == "unless-stopped" and service["healthcheck"]["test"], name
        assert all(e["path"].startswith("env/") for e in service["env_file"]), name
    redis_command = " ".join(doc["services"]["redis"]["command"])
    assert "--appendfsync everysec" in redis_command
    assert "--maxmemory-policy noeviction" in redis_command
    broken = copy.deepcopy(doc)
    broken["services"]["sweeper"]["restrat"] = "always"
    assert any("restrat" in error for error in compose_errors(broken))


def test_kubernetes_manifests_match_their_schemas() -> None:
    seen = set()
    for path, doc in manifests():
        assert k8s_errors(doc) == [], path
        seen.add((doc["kind"], doc["metadata"]["name"]))
    deployments = {name for kind, name in seen if kind == "Deployment"}
    budgets = {name for kind, name in seen if kind == "PodDisruptionBudget"}
    assert deployments == budgets == {
        "askq-sweeper", "askq-worker-auto", "askq-worker-slack", "askq-worker-web",
        "askq-worker-email", "askq-worker-webhook",
    }  # fmt: skip
    assert ("StatefulSet", "askq-redis") in seen
    deployment = next(doc for _, doc in manifests() if doc["kind"] == "Deployment")
    broken = copy.deepcopy(deployment)
    broken["spec"]["template"]["spec"]["containers"][0]["livenessProbe"]["periodSecond"] = 3
    assert any("periodSecond" in error for error in k8s_errors(broken))


def test_every_deployment_has_probes_and_a_grace_period_for_its_channel() -> None:
    grace = {}
    for _, doc in manifests():
        if doc["kind"] != "Deployment":
            continue
        pod = doc["spec"]["template"]["spec"]
        (container,) = pod["containers"]
        for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
            assert "exec" in container[probe] or "httpGet" in container[probe], (doc, probe)
        grace[doc["metadata"]["name"]] = pod["terminationGracePeriodSeconds"]
    # above the hook bound (10 s); email's SMTP transactions longest
    assert min(grace.values()) > 10
    assert grace["askq-worker-email"] == max(grace.values())


def test_kubernetes_runs_what_compose_runs_with_the_same_probes() -> None:
    """Each Deployment's args are its compose service's command (plus the pod's name as
    the replica's), and its exec probes are the compose health check: the entry-point
    test below, run on the compose commands, covers both."""

    def ports_as_one(argv: list[str]) -> list[str]:
        return ["METRICS" if a in ("9464", "9465") else a for a in argv]

    services = compose()["services"]
    for _, doc in manifests():
        if doc["kind"] != "Deployment":
            continue
        (container,) = doc["spec"]["template"]["spec"]["containers"]
        args = list(container["args"])
        if "--consumer" in args:
            at = args.index("--consumer")
            assert args[at + 1] == "$(POD_NAME)"
            del args[at : at + 2]
        service = services[doc["metadata"]["name"].removeprefix("askq-")]
        assert ports_as_one(args) == ports_as_one(service["command"]), doc["metadata"]["name"]
        probe = container["livenessProbe"]
        if "exec" in probe:
            assert probe["exec"]["command"] == service["healthcheck"]["test"][1:]


def test_kustomizations_list_every_manifest_of_their_folder() -> None:
    for kustomization in (DEPLOY / "kubernetes").rglob("kustomization.yaml"):
        folder = kustomization.parent
        listed = yaml.safe_load(kustomization.read_text())["resources"]
        for resource in listed:
            assert (folder / resource).exists(), (kustomization, resource)
        files = {p.name for p in folder.glob("*.yaml")} - {"kustomization.yaml"}
        assert files <= set(listed), (kustomization, files - set(listed))


def test_every_variable_the_deploy_files_read_is_named_in_deploy_readme() -> None:
    """What an operator may set for a deploy file (compose's `${VAR}` interpolation, a
    unit's `$VAR`, a manifest's `$(VAR)`) is named in deploy/README.md, next to how the
    file is run; ASKQ_IMAGE was not (issue 22, item 11)."""
    readme = (DEPLOY / "README.md").read_text()
    found: dict[str, set[str]] = {}
    for path in [DEPLOY / "compose.yaml", *(DEPLOY / "systemd").glob("*.service")]:
        for name in re.findall(r"\$\{?([A-Z][A-Z0-9_]*)", path.read_text()):
            found.setdefault(name, set()).add(path.name)
    for path in (DEPLOY / "kubernetes").rglob("*.yaml"):
        for name in re.findall(r"\$\(([A-Z][A-Z0-9_]*)\)", path.read_text()):
            found.setdefault(name, set()).add(path.name)
    assert "ASKQ_IMAGE" in found  # the check sees compose's interpolation
    unnamed = {
        name: files for name, files in found.items() if not re.search(rf"\b{name}\b", readme)
    }
    assert not unnamed, f"not named in deploy/README.md: {unnamed}"


def units(tmp_path: Path) -> dict[str, Path]:
    """The units as installed here: askq from this environment, settings from tmp."""
    askq = Path(sys.executable).parent / "askq"
    out = {}
    for unit in (DEPLOY / "systemd").glob("*.service"):
        text = unit.read_text().replace("/opt/askq/venv/bin/askq", str(askq))
        text = text.replace("/etc/askq/", f"{tmp_path}/")
        name = unit.name.replace("@.", "@slack.")
        (tmp_path / name).write_text(text)
        out[name] = tmp_path / name
    (tmp_path / "askq.env").write_text((DEPLOY / "systemd" / "askq.env.example").read_text())
    return out


def test_systemd_units_verify(tmp_path: Path) -> None:
    installed = units(tmp_path)
    assert set(installed) == {"askq-worker@slack.service", "askq-sweeper.service"}
    for path in installed.values():
        text = path.read_text()
        assert re.search(r"^Restart=always$", text, re.M)
        for hardening in ("NoNewPrivileges=yes", "ProtectSystem=strict", "DynamicUser=yes"):
            assert f"\n{hardening}\n" in text
    if shutil.which("systemd-analyze") is None:  # a parse of the keys instead
        for path in installed.values():
            for line in path.read_text().splitlines():
                if line and not line.startswith(("#", "[")):
                    assert re.fullmatch(r"[A-Z][A-Za-z]+=.*", line), (path, line)
        return
    done = subprocess.run(
        ["systemd-analyze", "verify", *map(str, installed.values())],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=60,
    )
    assert done.returncode == 0 and done.stdout + done.stderr == "", done.stderr
    bad = tmp_path / "bad.service"
    bad.write_text(installed["askq-sweeper.service"].read_text() + "Restartt=always\n")
    done = subprocess.run(
        ["systemd-analyze", "verify", str(bad)], capture_output=True, text=True, cwd=tmp_path
    )
    assert "Unknown key" in done.stderr  # the check above would see a mistake


# --- the entry points run --------------------------------------------------------------


def env_file(path: Path) -> dict[str, str]:
    pairs = (line.split("=", 1) for line in path.read_text().splitlines())
    return {k: v for k, v in (p for p in pairs if len(p) == 2) if not k.startswith("#")}


class Started:
    """One askq command as a deployment runs it, its stderr in a file."""

    def __init__(self, name: str, argv: list[str], env: dict[str, str], logs: Path) -> None:
        self.name = name
        self.log = logs / f"{name}.err"
        self.argv = argv
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "askq", *argv],
            env=env,
            cwd=ROOT,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=self.log.open("w"),
        )

    async def ready(self, timeout: float = 60) -> None:
        for _ in range(int(timeout * 20)):
            if ": ready" in self.log.read_text():
                return
            assert self.proc.poll() is None, f"{self.name} exited:\n{self.log.read_text()}"
            await asyncio.sleep(0.05)
        raise AssertionError(f"{self.name} not ready:\n{self.log.read_text()}")

    async def stop(self) -> int:
        self.proc.send_signal(signal.SIGTERM)
        return await asyncio.to_thread(self.proc.wait, 60)


async def probe(command: list[str], env: dict[str, str]) -> tuple[int, str]:
    if command[:1] == ["askq"]:
        command = [sys.executable, "-m", "askq", *command[1:]]
    elif command[:1] == ["python"]:
        command = [sys.executable, *command[1:]]
    proc = await asyncio.create_subprocess_exec(
        *command, env=env, cwd=ROOT, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    out, _ = await proc.communicate()
    assert proc.returncode is not None
    return proc.returncode, out.decode()


@pytest.fixture
def test_redis(real_url: str) -> Iterator[tuple[str, str]]:
    prefix = f"d{uuid.uuid4().hex[:10]}"
    yield real_url, prefix
    client = redis.Redis.from_url(real_url)
    try:
        keys = list(client.scan_iter(match="{" + prefix + "}:*", count=1000))
        if keys:
            client.delete(*keys)
    finally:
        client.close()


async def test_compose_and_systemd_commands_start_and_pass_their_probes(
    test_redis: tuple[str, str], standin: SlackStandIn, tmp_path: Path
) -> None:
    url, prefix = test_redis
    web_port, smtp_port = free_port(), free_port()
    base = {k: v for k, v in os.environ.items() if not k.startswith("ASKQ_")}
    base.update(ASKQ_REDIS_URL=url, ASKQ_PREFIX=prefix, PYTHONPATH=str(ROOT))
    # What differs from the example settings here: this Redis, loopback, free ports and
    # the Slack stand-in instead of slack.com.
    local = {
        "ASKQ_WEB_HOST": "127.0.0.1",
        "ASKQ_WEB_PORT": str(web_port),
        "ASKQ_EMAIL_LISTEN_HOST": "127.0.0.1",
        "ASKQ_EMAIL_LISTEN_PORT": str(smtp_port),
        "ASKQ_EMAIL_SMTP_HOST": "127.0.0.1",
        "ASKQ_EMAIL_SMTP_PORT": str(free_port()),
        "ASKQ_WEBHOOK_HTTP_HOST": "127.0.0.1",
        "ASKQ_WEBHOOK_HTTP_PORT": str(free_port()),
        "ASKQ_SLACK_API_URL": standin.api_url,
        "ASKQ_SLACK_BOT_TOKEN": BOT_TOKEN,
        "ASKQ_SLACK_APP_TOKEN": APP_TOKEN,
    }

    def env_for(files: list[Path]) -> dict[str, str]:
        env = dict(base)
        for path in files:
            env.update({k: v for k, v in env_file(path).items() if k != "ASKQ_REDIS_URL"})
        env.update(local)
        env["ASKQ_PREFIX"] = prefix
        return env

    def local_args(argv: list[str]) -> list[str]:
        out = []
        for arg in argv:
            if arg == "/etc/askq/rules.toml":
                arg = str(DEPLOY / "config" / "rules.toml")
            elif arg in ("9464", "9465"):
                arg = "0"  # --metrics-port: any free port
            out.append(arg)
        return out

    started: list[tuple[Started, list[str], dict[str, str]]] = []
    for name, service in compose()["services"].items():
        if name == "redis":
            continue
        files = [DEPLOY / (e["path"] + ".example") for e in service["env_file"]]
        env = env_for(files)
        test = [a.replace(":8080/", f":{web_port}/") for a in service["healthcheck"]["test"][1:]]
        run = Started(f"compose-{name}", local_args(service["command"]), env, tmp_path)
        started.append((run, test, env))

    host = socket.gethostname()
    for unit in (DEPLOY / "systemd").glob("*.service"):
        (line,) = re.findall(r"^ExecStart=(.*)$", unit.read_text(), re.M)
        kind = "slack"  # the template's instance, with its example settings
        files = [DEPLOY / "systemd" / "askq.env.example"]
        if "@" in unit.name:
            files.append(DEPLOY / "systemd" / f"{kind}.env.example")
        env = env_for(files)
        line = line.replace("%i", kind).replace("%H", host)
        line = line.replace("$ASKQ_WORKER_ARGS", env.get("ASKQ_WORKER_ARGS", ""))
        argv = line.split()
        assert argv[0] == "/opt/askq/venv/bin/askq", line
        consumer = argv[argv.index("--consumer") + 1] if "--consumer" in argv else None
        test = ["askq", "health", "sweeper"]
        if argv[1] == "worker":
            test = ["askq", "health", "worker", "--group", kind, "--consumer", str(consumer)]
        started.append(
            (Started(f"systemd-{unit.stem}", local_args(argv[1:]), env, tmp_path), test, env)
        )

    try:
        for run, _, _ in started:
            await run.ready()
        for run, test, env in started:
            code, out = await probe(test, env)
            assert code == 0, f"{run.name}: probe {test} failed ({code}): {out}"
    finally:
        codes = {run.name: await run.stop() for run, _, _ in started}
    assert set(codes.values()) == {0}, {
        n: (c, (tmp_path / f"{n}.err").read_text()[-2000:]) for n, c in codes.items() if c
    }
    assert len(started) == 8
