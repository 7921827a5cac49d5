"""SET=, SET_STRING=, SET_JSON= and SET_FILE= items (helm's --set, --set-string, --set-json, --set-file) on the host
path: checked before helm reads them, and what helm or the schema then says about them turned
into one line naming the key, why, and how to write it. The one place that translates them
(tfmw.chart.render calls it; helmkit only runs helm and keeps its error line).

    key_parts("workers.tolerations[0].key") -> ["workers", "tolerations", 0, "key"]
    check_items(sets, set_files)             -> ToolError for a training.files key with a dot, a
                                                binary SET_FILE, before helm runs
    probe_failure(reason, ...)               -> the ToolError for helm's refusal of the items
    list_index_warnings(overlay, sets, name) -> one line per item that rewrites an overlay's list item
    schema_hint(key, value, want, sets)      -> what to add to a schema refusal the items (or a
                                                values file) caused
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path

from tfmw.chart.helmkit import REPO, ToolError

SET_EXAMPLE = "key=value, e.g. workers.replicas=4"
FILE_EXAMPLE = "key=path of a readable file, e.g. training.files.main\\.py=main.py"
_UNESCAPED_DOT = re.compile(r"(?<!\\)\.")
_INDEX = re.compile(r"\[(\d+)\]")


def key_of(item: str) -> str:
    """The (first) key of a key=value item, as typed (escapes kept)."""
    return item.split("=", 1)[0]


def key_parts(key: str) -> list[str | int]:
    """A --set key as the path helm walks: names (escaped dots unescaped) and list indexes (pure)."""
    parts: list[str | int] = []
    for segment in _UNESCAPED_DOT.split(key):
        name = _INDEX.split(segment)
        parts.append(name[0].replace("\\.", "."))
        parts += [int(i) for i in name[1::2]]
    return [p for p in parts if p != ""]


def shown_path(parts: Sequence[str | int]) -> str:
    out = ""
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _short(value) -> str:
    text = json.dumps(value, sort_keys=True)
    return text if len(text) <= 100 else text[:97] + "..."


# ---------------------------------------------------------------- before helm reads them


def files_key_refusal(item: str, flag: str) -> str | None:
    """A training.files key with an unescaped dot in the file name (pure): helm would nest it."""
    key = key_of(item)
    segments = _UNESCAPED_DOT.split(key)
    if segments[:2] != ["training", "files"] or len(segments) <= 3:
        return None
    name = ".".join(segments[2:])
    escaped = "\\.".join(segments[2:])
    fixed = item.replace(key, "training.files." + escaped, 1)
    return (
        f"bad {flag} '{item}': training.files takes file names as keys, and helm reads the dot in "
        f"'{name}' as a nesting level ({'.'.join(segments[:3])} would be a map); escape it: '{fixed}'"
    )


def binary_reason(data: bytes) -> str | None:
    """Why these bytes are not text a ConfigMap's data (and helm's YAML) can hold, or None (pure)."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        return f"not UTF-8 text (byte {err.start})"
    for offset, char in enumerate(text):
        code = ord(char)
        if (code < 0x20 and char not in "\t\n\r") or 0x7F <= code <= 0x9F:
            return f"a control character (U+{code:04X}) at character {offset}"
    return None


def binary_file_refusal(item: str) -> str | None:
    """A SET_FILE whose file is binary: helm would fail on YAML of its own, naming no key."""
    key, _, path = item.partition("=")
    try:
        data = Path(path).expanduser().read_bytes()
    except OSError:
        return None  # helm names a file it cannot read
    reason = binary_reason(data)
    if reason is None:
        return None
    where = (
        "training.files holds text files (a ConfigMap's data): put a binary file in the image or on the shared storage"
        if key.startswith("training.files.")
        else f"{shown_path(key_parts(key))} takes text"
    )
    return f"bad --set-file '{item}': {path} is a binary file, {reason}; {where}"


def check_items(sets: Sequence[str] = (), set_strings: Sequence[str] = (), set_files: Sequence[str] = ()) -> None:
    """Refuse, before helm runs, what helm would take wrongly or explain badly (ToolError, exit 2)."""
    for flag, items in (("--set", sets), ("--set-string", set_strings), ("--set-file", set_files)):
        for item in items:
            refusal = files_key_refusal(item, flag) or (binary_file_refusal(item) if flag == "--set-file" else None)
            if refusal:
                raise ToolError(refusal)


def no_equals_refusal(items: Sequence[str], index: int, flag: str) -> str:
    """The line for an item without '=' (pure): after an item with one, SET= split a value on a space."""
    item = items[index]
    if flag == "--set-file":
        return f"bad {flag} '{item}': expected {FILE_EXAMPLE}"
    if index > 0 and "=" in items[index - 1]:
        before = items[index - 1]
        key, _, value = before.partition("=")
        return (
            f"bad {flag} '{item}': not key=value; SET= splits items on spaces, so '{before} {item}' became "
            f"'{before}' and '{item}': quote a value with spaces, SET=\"{key}='{value} {item}'\""
        )
    return f"bad {flag} '{item}': expected {SET_EXAMPLE} (lists: a={{x,y}}, a[0]=x; literal comma: a=x\\,y)"


# ---------------------------------------------------------------- what helm says about them


def list_map_mismatch(overlay: dict, items: Sequence[str]) -> str | None:
    """The first item that walks a list of the overlay as a map, or a map as a list (pure): helm
    says only 'interface conversion' then."""
    for item in items:
        parts = key_parts(key_of(item))
        node = overlay
        for depth, part in enumerate(parts):
            if isinstance(node, list) and not isinstance(part, int):
                path = shown_path(parts[:depth])
                return (
                    f"bad --set '{item}': {path} is a list (the overlay gives one) and this sets a key of it "
                    f"as of a map: {path} must be a list; address an item by its index, "
                    f"{path}[0].{shown_path(parts[depth:])}={item.partition('=')[2]} (the next free index "
                    "appends one)"
                )
            if isinstance(node, dict) and isinstance(part, int):
                path = shown_path(parts[:depth])
                return (
                    f"bad --set '{item}': {path} is a map (the overlay gives one) and this indexes it as a "
                    f"list: set its keys by name, {path}.<key>=..."
                )
            if isinstance(node, dict):
                node = node.get(part)
            elif isinstance(node, list) and part < len(node):
                node = node[part]
            else:
                break
    return None


def probe_failure(
    reason: str,
    overlay: dict | None,
    sets: Sequence[str],
    set_strings: Sequence[str],
    set_files: Sequence[str],
    set_jsons: Sequence[str] = (),
) -> ToolError:
    """Helm refused the items while layering them (`reason`: its error line): one line naming
    the key and how to write it where helm's words do not."""
    given = [*sets, *set_strings]
    if "interface conversion" in reason:
        found = list_map_mismatch(overlay or {}, given)
        if found:
            return ToolError(found)
        return ToolError(
            f"bad --set {' '.join(given)!r}: one key is used as a map where the values hold a list, or as a "
            "list where they hold a map (helm: " + reason + "); lists take items by index, a[0].b=x"
        )
    if set_jsons and "--set-json" in reason:
        return ToolError(
            f"bad --set-json {' '.join(set_jsons)!r}: {reason} (expected key=JSON, e.g. "
            'SET_JSON=\'workers.nodeSelector={"gpu":"true"}\'; several: key1=JSON1,key2=JSON2)'
        )
    if set_files and ("set-file" in reason or "no such file" in reason.lower()):
        return ToolError(f"bad --set-file {' '.join(set_files)!r}: {reason} (expected {FILE_EXAMPLE})")
    if "--set" in reason or "parsing" in reason:
        flag = "--set-string" if set_strings and not sets else "--set"
        return ToolError(f"bad {flag} {' '.join(given)!r}: {reason} (expected {SET_EXAMPLE})")
    return ToolError(f"values could not be read: {reason}")


# ---------------------------------------------------------------- what they do to an overlay's lists


def list_index_warnings(overlay: dict, items: Sequence[str], overlay_name: str) -> list[str]:
    """One line per item that indexes into a list the overlay gives (pure): helm merges it into
    that item in place, keeping the item's other fields, which reads like an added one."""
    warnings = []
    for item in items:
        parts = key_parts(key_of(item))
        node = overlay
        for depth, part in enumerate(parts):
            if isinstance(part, int) and isinstance(node, list):
                if part < len(node):
                    path = shown_path(parts[:depth])
                    rest = shown_path(parts[depth + 1 :])
                    warnings.append(
                        f"WARNING: SET {item} rewrites item {part} of {path} that {overlay_name} gives "
                        f"({_short(node[part])}) in place, keeping its other fields: to add an item use "
                        f"index {len(node)} ({path}[{len(node)}]{'.' + rest if rest else ''}=...); to replace "
                        f"the item, edit it in {overlay_name}"
                    )
                break
            if isinstance(node, dict) and not isinstance(part, int):
                node = node.get(part)
            else:
                break
    return warnings


# ---------------------------------------------------------------- what the schema says about them


def giving_file(key: str, files: Sequence[Path]) -> Path | None:
    """The last of `files` (the overlay and VALUES= files, in helm's order) that gives `key`: the
    one whose value helm kept (None: none does, or one cannot be read: helm has said so)."""
    import yaml

    given = None
    for path in files:
        try:
            node = yaml.safe_load(Path(path).read_text())
        except (OSError, yaml.YAMLError):
            continue
        for part in key_parts(key):
            if isinstance(part, int) and isinstance(node, list) and part < len(node):
                node = node[part]
            elif isinstance(part, str) and isinstance(node, dict) and part in node:
                node = node[part]
            else:
                break
        else:
            given = Path(path)
    return given


def _named(path: Path) -> str:
    """A file as messages name it: relative to the repo when inside it."""
    try:
        return str(path.resolve().relative_to(REPO))
    except ValueError:
        return str(path)


def schema_hint(
    key: str, value, expected, sets: Sequence[str], set_jsons: Sequence[str] = (), files: Sequence[Path] = ()
) -> str:
    """What to add to a values.schema.json refusal of `key` (pure but for reading `files`): a number
    or true/false where text is needed (helm types SET= values, YAML types a file's bare 5 or
    true), a map where a list is needed; "" otherwise."""
    wanted = [expected] if isinstance(expected, str) else list(expected or [])

    def sets_key(items: Sequence[str]) -> list[str]:
        return [
            i for i in items if key == key_of(i) or key.startswith(key_of(i) + "[") or key.startswith(key_of(i) + ".")
        ]

    mine = sets_key(sets)
    given = [i for i in sets if key_of(i).startswith(key + ".")]
    if "string" in wanted and isinstance(value, (bool, int, float)):
        kind = "a boolean" if isinstance(value, bool) else "a number"
        if mine:
            return (
                f"; SET= reads {_short(value)} as {kind}: pass it as text with SET_STRING='{mine[0]}' "
                f'(--set-string), or in an overlay quoted ("{_short(value)}")'
            )
        if sets_key(set_jsons):
            return f'; SET_JSON= gives {kind}: write it as a JSON string ("{_short(value)}")'
        source = giving_file(key, files)
        where = f"{_named(source)} gives" if source else "the overlay gives"
        return (
            f'; {where} {kind}: quote it there ("{_short(value)}"), or pass it as text with '
            f"SET_STRING='{key}={_short(value)}' (--set-string)"
        )
    if "array" in wanted and isinstance(value, dict):
        example = f" ({key}[0].{given[0][len(key) + 1 :]})" if given else ""
        return f"; {key} must be a list: give its items by index{example}"
    return ""
