"""The Dockerfile as the host tools read it (the image build, and `make local`, whose pods see
the image's ENV), and the image tooling's one-line refusal with its exit code."""

from __future__ import annotations

import json
import shlex
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


def parse_dockerfile(text: str) -> Dockerfile:
    parsed = Dockerfile()
    for line in logical_lines(text):
        instruction, _, rest = line.partition(" ")
        instruction, rest = instruction.upper(), rest.strip()
        if instruction == "ARG":
            name, sep, default = rest.partition("=")
            if sep or name not in parsed.args:  # a bare re-declaration keeps the default
                parsed.args[name] = default if sep else None
        elif instruction == "FROM":
            parsed.from_images.append(rest.split()[0])
        elif instruction == "ENV":
            name, _, legacy_value = rest.partition(" ")
            if "=" not in name:  # the legacy form `ENV <key> <value with spaces>`
                parsed.env[name] = legacy_value.strip()
            else:
                parsed.env.update(_key_values(rest))
        elif instruction == "LABEL":
            parsed.labels.update(_key_values(rest))
        elif instruction == "USER":
            parsed.user = rest
        elif instruction == "WORKDIR":
            parsed.workdir = rest
        elif instruction == "ENTRYPOINT":
            parsed.entrypoint = _exec_form(rest, "ENTRYPOINT")
        elif instruction == "CMD":
            parsed.cmd = _exec_form(rest, "CMD")
        elif instruction in ("COPY", "ADD"):
            words = [w for w in shlex.split(rest) if not w.startswith("--")]
            parsed.copy_sources.extend(words[:-1])
        elif instruction == "RUN":
            parsed.run_commands.append(rest)
    return parsed


def read_dockerfile(path: Path) -> Dockerfile:
    try:
        return parse_dockerfile(path.read_text())
    except FileNotFoundError:
        raise ImageError(f"no Dockerfile at {path}; run from the repository root or pass --dockerfile") from None


# ---------------------------------------------------------------- build plan
