"""Every `edge-sdk` command written in the README and docs/ names a real command, with options that
command takes and no more arguments than it has: a renamed command or option fails here, at the
doc's file and line. (Which of them also run: the README's Python blocks in test_readme_examples.py,
the fleet walk-through in tests/fleet, the guides' own tests; docs/cli.md is generated and checked
by tests/cli/test_cli_reference.py.)"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

import click
import pytest
import tomllib

from edge_sdk.cli.main import cli

from .conftest import REPO_ROOT

DOCS = [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").glob("*.md"))]
SHELL_BLOCK = re.compile(r"^```(?:bash|sh|shell|console)\n(.*?)^```", re.S | re.M)
OPTIONAL = re.compile(r"\s\[[^\]]*\]")
SEPARATORS = re.compile(r"\s(?:&&|\|\||\||;)\s")


@dataclass(frozen=True)
class DocCommand:
    where: str
    words: list[str]


def doc_commands() -> list[DocCommand]:
    found = []
    for doc in DOCS:
        text = doc.read_text(encoding="utf-8")
        for block in SHELL_BLOCK.finditer(text):
            line_no = text.count("\n", 0, block.start(1)) + 1
            pending, pending_at = "", line_no
            for line in block.group(1).splitlines():
                if not pending:
                    pending_at = line_no
                line_no += 1
                if line.endswith("\\"):
                    pending += line[:-1] + " "
                    continue
                command_line, pending = pending + line, ""
                synopsis_removed = OPTIONAL.sub("", command_line)  # `run FILE [--profile P]`: a synopsis
                for part in SEPARATORS.split(synopsis_removed.strip().removeprefix("$ ")):
                    words = shlex.split(part, comments=True)
                    while words and re.fullmatch(r"[A-Z_][A-Z0-9_]*=\S*", words[0]):
                        words = words[1:]  # VAR=value before the command
                    if words and words[-1] == "&":
                        words = words[:-1]
                    if words and Path(words[0]).name == "edge-sdk":
                        where = f"{doc.relative_to(REPO_ROOT)}:{pending_at}"
                        found.append(DocCommand(where, words[1:]))
    return found


def problems_of(words: list[str]) -> list[str]:
    command: click.Command = cli
    path = ["edge-sdk"]
    context = click.Context(cli, info_name="edge-sdk")
    options = _option_names(command)
    values = _options_with_values(command)
    positionals: list[str] = []
    rest = iter(words)
    for word in rest:
        if word == "--":
            positionals.extend(rest)
            break
        if word.startswith("-") and word != "-":
            name = word.split("=", 1)[0]
            if name not in options:
                return [f"`{' '.join(path)}` has no option {name}"]
            if name in values and "=" not in word:
                next(rest, None)
            continue
        if isinstance(command, click.Group) and not positionals:
            sub = command.get_command(context, word)
            if sub is None:
                return [f"`{' '.join(path)}` has no command {word!r}"]
            command, context = sub, click.Context(sub, info_name=word, parent=context)
            path.append(word)
            options |= _option_names(command)
            values |= _options_with_values(command)
            continue
        positionals.append(word)
    if isinstance(command, click.Group):
        return [f"`{' '.join(path)}` needs a command"]
    arguments = [p for p in command.params if isinstance(p, click.Argument)]
    if not any(a.nargs == -1 for a in arguments) and len(positionals) > sum(a.nargs for a in arguments):
        return [f"`{' '.join(path)}` takes {len(arguments)} argument(s), the doc gives {positionals}"]
    return []


def _option_names(command: click.Command) -> set[str]:
    names = {"-h", "--help"}
    for param in command.params:
        if isinstance(param, click.Option):
            names.update(param.opts + param.secondary_opts)
    return names


def _options_with_values(command: click.Command) -> set[str]:
    return {
        name for p in command.params if isinstance(p, click.Option) and not p.is_flag and not p.count for name in p.opts
    }


COMMANDS = doc_commands()


def test_the_docs_show_edge_sdk_commands() -> None:
    assert len(COMMANDS) >= 20, [c.where for c in COMMANDS]


@pytest.mark.parametrize("doc_command", COMMANDS, ids=[c.where for c in COMMANDS])
def test_every_command_in_the_docs_exists_with_the_options_it_shows(doc_command: DocCommand) -> None:
    assert not problems_of(doc_command.words), f"{doc_command.where}: {problems_of(doc_command.words)}"


def test_the_checker_catches_a_renamed_command_or_option() -> None:
    assert problems_of(["run", "pipelines/demo.yaml", "--json"]) == []
    assert problems_of(["runn", "pipelines/demo.yaml"]) != []
    assert problems_of(["run", "pipelines/demo.yaml", "--jsn"]) != []
    assert problems_of(["cache"]) != []
    assert problems_of(["--cache-dir", "x", "cache", "ls"]) == []


def test_the_readme_lists_every_extra() -> None:
    extras = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"][
        "optional-dependencies"
    ]
    readme = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    shown = {name.strip() for group in re.findall(r"`\[([a-z0-9,]+)\]`", readme) for name in group.split(",")}
    missing = [name for name in extras if name != "test" and name not in shown]
    assert not missing, f"the README's install table leaves out the extras {missing}"


def test_every_file_the_docs_link_to_exists() -> None:
    broken = []
    for doc in DOCS:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", doc.read_text(encoding="utf-8")):
            if "://" not in target and not (doc.parent / target).exists():
                broken.append(f"{doc.relative_to(REPO_ROOT)} -> {target}")
    assert not broken, broken
