"""The Dockerfile as the host tools read it (the image build, and `make local`, whose pods see
the image's ENV), and the image tooling's one-line refusal with its exit code."""

from __future__ import annotations

import json
import shlex
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

EXIT_USAGE = 2  # bad input: fix the argument / environment
EXIT_NO_ENGINE = 3  # no usable container engine on this machine
EXIT_BASE = 4  # BASE=debian cannot build its base here (debootstrap, root, keyring, network)
EXIT_FAILED = 1  # an engine command failed (its own exit code when there is one)


class ImageError(Exception):
    """A refusal: one line for the user, and the exit code."""

    def __init__(self, message: str, exit_code: int = EXIT_USAGE):
        super().__init__(message)
        self.exit_code = exit_code


# ---------------------------------------------------------------- Dockerfile parsing


@dataclass
class Dockerfile:
    """The parts of a Dockerfile other tools check (last stage wins, like docker)."""

    args: dict[str, str | None] = field(default_factory=dict)  # ARG name -> default
    from_images: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    user: str | None = None
    workdir: str | None = None
    entrypoint: list[str] | None = None
    cmd: list[str] | None = None
    labels: dict[str, str] = field(default_factory=dict)
    copy_sources: list[str] = field(default_factory=list)
    run_commands: list[str] = field(default_factory=list)


def logical_lines(text: str) -> list[str]:
    """Dockerfile instructions with continuations joined and comment lines dropped."""
    lines: list[str] = []
    current = ""
    for raw in text.splitlines():
        stripped = raw.strip()
        if stripped.startswith("#") or (not stripped and not current):
            continue  # comments may sit inside a continued instruction, too
        if stripped.endswith("\\"):
            current += stripped[:-1].rstrip() + " "
            continue
        current += stripped
        if current.strip():
            lines.append(current.strip())
        current = ""
    if current.strip():
        lines.append(current.strip())
    return lines


def _key_values(text: str) -> dict[str, str]:
    """`k=v k2="v 2"` (ENV / LABEL / ARG syntax) -> dict."""
    pairs: dict[str, str] = {}
    for token in shlex.split(text):
        key, _, value = token.partition("=")
        pairs[key] = value
    return pairs


def _exec_form(text: str, instruction: str) -> list[str]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        value = None
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ImageError(f"Dockerfile: {instruction} must be a JSON array of strings (exec form), got {text}")
    return value


def _arg(parsed: Dockerfile, rest: str) -> None:
    name, sep, default = rest.partition("=")
    if sep or name not in parsed.args:  # a bare re-declaration keeps the default
        parsed.args[name] = default if sep else None


def _from(parsed: Dockerfile, rest: str) -> None:
    parsed.from_images.append(rest.split()[0])


def _env(parsed: Dockerfile, rest: str) -> None:
    name, _, legacy_value = rest.partition(" ")
    if "=" not in name:  # the legacy form `ENV <key> <value with spaces>`
        parsed.env[name] = legacy_value.strip()
    else:
        parsed.env.update(_key_values(rest))


def _label(parsed: Dockerfile, rest: str) -> None:
    parsed.labels.update(_key_values(rest))


def _user(parsed: Dockerfile, rest: str) -> None:
    parsed.user = rest


def _workdir(parsed: Dockerfile, rest: str) -> None:
    parsed.workdir = rest


def _entrypoint(parsed: Dockerfile, rest: str) -> None:
    parsed.entrypoint = _exec_form(rest, "ENTRYPOINT")


def _cmd(parsed: Dockerfile, rest: str) -> None:
    parsed.cmd = _exec_form(rest, "CMD")


def _copy(parsed: Dockerfile, rest: str) -> None:
    words = [w for w in shlex.split(rest) if not w.startswith("--")]
    parsed.copy_sources.extend(words[:-1])


def _run(parsed: Dockerfile, rest: str) -> None:
    parsed.run_commands.append(rest)


# What each instruction other tools check records; any other instruction is skipped.
_INSTRUCTIONS: dict[str, Callable[[Dockerfile, str], None]] = {
    "ARG": _arg,
    "FROM": _from,
    "ENV": _env,
    "LABEL": _label,
    "USER": _user,
    "WORKDIR": _workdir,
    "ENTRYPOINT": _entrypoint,
    "CMD": _cmd,
    "COPY": _copy,
    "ADD": _copy,
    "RUN": _run,
}


def parse_dockerfile(text: str) -> Dockerfile:
    parsed = Dockerfile()
    for line in logical_lines(text):
        instruction, _, rest = line.partition(" ")
        record = _INSTRUCTIONS.get(instruction.upper())
        if record is not None:
            record(parsed, rest.strip())
    return parsed


def read_dockerfile(path: Path) -> Dockerfile:
    try:
        return parse_dockerfile(path.read_text())
    except FileNotFoundError:
        raise ImageError(f"no Dockerfile at {path}; run from the repository root or pass --dockerfile") from None


# ---------------------------------------------------------------- build plan
