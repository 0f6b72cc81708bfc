"""docs/integrations.md's MCP sections stay true to the code: the client configurations
launch `askq mcp` with settings that exist, the Python example compiles and imports
what exists, and every `ASKQ_MCP_*` setting named is one McpSettings reads."""

from __future__ import annotations

import ast
import importlib
import json
import re

import pytest
from conftest import ROOT

pytest.importorskip("mcp")

from askq import Settings  # noqa: E402
from askq.integrations.mcp import McpSettings  # noqa: E402

DOC = (ROOT / "docs" / "integrations.md").read_text()


def section(title: str) -> str:
    start = DOC.index(f"\n{title}\n")
    end = DOC.find("\n## ", start + 1)
    return DOC[start : end if end != -1 else len(DOC)]


def blocks(text: str, language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", text, flags=re.S)


def test_the_client_configurations_launch_askq_mcp_with_real_settings() -> None:
    stdio, http = (json.loads(b) for b in blocks(section("## MCP server"), "json"))
    entry = stdio["mcpServers"]["askq"]
    assert [entry["command"], *entry["args"]] == ["askq", "mcp"]
    core = {f"ASKQ_{name.upper()}" for name in Settings.model_fields}
    ours = {f"ASKQ_MCP_{name.upper()}" for name in McpSettings.model_fields}
    assert set(entry["env"]) <= core | ours
    remote = http["mcpServers"]["askq"]
    assert remote["url"].endswith("/mcp") and set(remote["headers"]) <= {
        "Askq-Agent",
        "Askq-Owner",
        "Askq-Turn",
    }


def test_every_setting_named_exists() -> None:
    named = set(re.findall(r"ASKQ_MCP_([A-Z_]+)", section("## MCP server")))
    table = re.findall(r"^\| `([A-Z_ /`]+)` \|", section("## MCP server"), flags=re.M)
    for row in table:
        named.update(part.strip(" `") for part in row.split("/"))
    fields = {name.upper() for name in McpSettings.model_fields}
    assert named and named <= fields, named - fields


def test_the_bridge_example_compiles_and_imports_what_exists() -> None:
    (code,) = blocks(section("## MCP elicitation bridge"), "python")
    tree = ast.parse(code)
    compile(tree, "<docs/integrations.md>", "exec")
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            module = importlib.import_module(node.module or "")
            for alias in node.names:
                assert hasattr(module, alias.name), f"{node.module}.{alias.name}"
