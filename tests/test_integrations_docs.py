"""docs/integrations.md's agent sections stay true to the code: every Python example
compiles and imports only what the installed libraries and askq have, the settings
snippet is valid JSON running the real hook command."""

from __future__ import annotations

import ast
import importlib
import json
import re
import shlex
import subprocess

from conftest import ROOT
from test_processes import ASKQ

DOC = (ROOT / "docs" / "integrations.md").read_text()
SECTIONS = ("## Claude Code", "## OpenAI Agents SDK", "## LangChain / LangGraph", "## pydantic-ai")
# Model providers the examples use; not installed by askq's extras.
PROVIDERS = {"langchain_anthropic"}


def section(title: str) -> str:
    start = DOC.index(f"\n{title}\n")
    end = DOC.find("\n## ", start + 1)
    return DOC[start : end if end != -1 else len(DOC)]


def blocks(text: str, language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", text, flags=re.S)


def test_every_python_example_compiles_and_imports_what_exists() -> None:
    examples = [code for title in SECTIONS for code in blocks(section(title), "python")]
    assert len(examples) == 5
    for code in examples:
        tree = ast.parse(code)
        compile(tree, "<docs/integrations.md>", "exec")
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module not in PROVIDERS:
                module = importlib.import_module(node.module or "")
                for alias in node.names:
                    assert hasattr(module, alias.name), f"{node.module}.{alias.name}"


def test_the_settings_snippet_runs_the_hook_command() -> None:
    settings = json.loads(blocks(section("## Claude Code"), "json")[0])
    (matcher,) = settings["hooks"]["PreToolUse"]
    assert matcher["matcher"] == "AskUserQuestion"
    (hook,) = matcher["hooks"]
    argv = shlex.split(hook["command"])
    assert argv[:2] == ["askq", "claude-code-hook"]
    help_text = subprocess.run(
        [*ASKQ, *argv[1:], "--help"], capture_output=True, text=True, timeout=30
    )
    assert help_text.returncode == 0 and "PreToolUse" in help_text.stdout
    assert float(argv[argv.index("--timeout") + 1]) < hook["timeout"]
