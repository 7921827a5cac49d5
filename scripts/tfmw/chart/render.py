"""Layer values and render the chart exactly as helm would: a small library for host tools.

Used by `python -m tfmw.cli` (template/deploy/diff) and `make local` (scripts/tfmw/localrun/run.py).
`make lint` does not use it: it lints the chart defaults and each overlay file as they are (no
environment, no --set), with `helm template --kube-version` per version; both share
scripts/tfmw/chart/helmkit.py (the helm binary, `helm template`, strict validation of the objects).

    known_envs() -> ["dev", "local", "prod", "staging"]
    layer_values(CHART_DIR, [overlay_path("dev")], ["workers.replicas=4"]) -> effective values
    render("dev", ["workers.replicas=4"]) -> list of rendered Kubernetes objects
    render_to_file("prod") -> Path("build/prod/manifests.yaml")
    write_manifests(objects, path) -> path (what render_to_file writes, for callers that prepared)
    prepare(...) -> Rendered (all of the above plus validation, for the deploy path)
    check_values_file(path) -> ToolError unless a VALUES= (-f) file is a readable mapping of values

How the layering stays exactly Helm's (maps merge, lists replace, null deletes, Helm's YAML
dialect and `--set` syntax): the -f files and --set strings are not merged in Python at all.
Helm merges them itself, rendering a throwaway "probe" chart whose only template is
`{{ toJson .Values }}`:
  - probe without defaults   -> the user values (overlays + --set, nulls kept so they still
                                delete chart defaults); this one dict is what helm gets on
                                stdin for the real render/install, so pyhelm3's own merge
                                (which concatenates lists) is never used;
  - probe with the chart's values.yaml -> the effective values the templates see, validated
                                against values.schema.json before anything touches a cluster.
Any `--set` string helm accepts works, with helm's own type inference; helm's own errors are
reported for bad syntax. Tests check the result equals `helm template -f ... -f ... --set ...`.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import jsonschema
import yaml

from entrypoint.errors import ConfigError
from entrypoint.training import config as trainer_config
from tfmw.chart import helmkit, pss
from tfmw.chart import sets as set_items
from tfmw.chart.helmkit import REPO, ToolError, find_helm, helm_error_line
from tfmw.chart.target import DEFAULT_NAMESPACE, DEFAULT_RELEASE, Target, naming_sources, target_of
from tfmw.chart.training_schema import BUILTIN_TRAINER

CHART_DIR = REPO / "charts" / "tf-multiworker"
VALUES_DIR = REPO / "values"
BUILD_DIR = REPO / "build"
DEFAULT_KUBE_VERSION = helmkit.DEFAULT_KUBE_VERSION


# ---------------------------------------------------------------- environments


def known_envs(values_dir: Path = VALUES_DIR) -> list[str]:
    """Environment names: one per values/<env>.yaml overlay."""
    return sorted(p.stem for p in Path(values_dir).glob("*.yaml"))


def overlay_path(env: str, values_dir: Path = VALUES_DIR) -> Path:
    """values/<env>.yaml, or a ToolError listing the known environments."""
    path = Path(values_dir) / f"{env}.yaml"
    if not env or "/" in env or not path.is_file():
        known = ", ".join(known_envs(values_dir)) or "none"
        raise ToolError(
            f"unknown ENV '{env}': known environments are {known} (one per {repo_relative(values_dir)}/<env>.yaml)"
        )
    return path


def check_overlay(path: Path) -> None:
    """Refuse an overlay that gives a key twice in one mapping: helm (and YAML) keep the last
    one silently, so the first line an ops engineer reads is not what is deployed. Helm reports
    what else is wrong with the YAML itself."""
    try:
        trainer_config.parse_yaml(Path(path).read_text())
    except trainer_config.DuplicateKey as dup:
        raise ToolError(
            f"{repo_relative(path)} line {dup.line}: duplicate key {dup.key!r} (first on line {dup.first_line}); "
            "helm would keep the last one silently: keep one"
        ) from None
    except (OSError, yaml.YAMLError):
        return


def _read_yaml(path: os.PathLike | str) -> object:
    """A values file's content, or None where it cannot be read (helm names that itself)."""
    try:
        return yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return None


VALUES_FILE_FIX = (
    "VALUES=path[,path] (-f) takes YAML files of chart values, each a mapping (e.g. `workers: {replicas: 4}`)"
)


def check_values_file(path: os.PathLike | str) -> None:
    """Refuse a VALUES= file (-f after the overlay) that cannot be read or is not a mapping of
    values, in one line naming the path and the fix: helm would fail naming no flag, or (for a
    YAML list) say only that it cannot unmarshal an array. A key given twice is refused as in an
    overlay (check_overlay). An empty file is no values, as in helm."""
    name = repo_relative(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ToolError(
            f"values file {name} does not exist (relative paths are from {Path.cwd()}): {VALUES_FILE_FIX}"
        ) from None
    except IsADirectoryError:
        raise ToolError(f"values file {name} is a directory: {VALUES_FILE_FIX}") from None
    except (OSError, UnicodeDecodeError) as err:
        why = getattr(err, "strerror", None) or "not UTF-8 text"
        raise ToolError(f"values file {name} cannot be read ({why}): {VALUES_FILE_FIX}") from None
    try:
        data = trainer_config.parse_yaml(text)
    except trainer_config.DuplicateKey as dup:
        raise ToolError(
            f"{name} line {dup.line}: duplicate key {dup.key!r} (first on line {dup.first_line}); "
            "helm would keep the last one silently: keep one"
        ) from None
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark is not None else ""
        problem = getattr(err, "problem", None) or "not YAML"
        raise ToolError(f"values file {name}{where} is not valid YAML ({problem}): fix it; {VALUES_FILE_FIX}") from None
    if data is not None and not isinstance(data, dict):
        kind = "a list" if isinstance(data, list) else f"a single {type(data).__name__} value"
        raise ToolError(f"values file {name} holds {kind}, not a mapping of chart values: {VALUES_FILE_FIX}")


def split_values_files(files: str | Iterable[str] | None) -> list[Path]:
    """VALUES= paths: each argument may hold several, comma-separated (as helm's own -f does)."""
    if files is None:
        return []
    if isinstance(files, (str, os.PathLike)):
        files = [files]
    return [Path(part.strip()) for arg in files for part in str(arg).split(",") if part.strip()]


def _in_quotes(char: str, quote: str, word: list[str]) -> str:
    """One character inside `quote`s: the closing quote ends them, any other joins the word.
    The quote still open after it ("" once closed)."""
    if char == quote:
        return ""
    word.append(char)
    return quote


def _escape_pair(backslash: str, chars: Iterator[str], arg: str) -> list[str]:
    """A backslash and the character after it, both kept as typed (helm reads the escape)."""
    escaped = next(chars, None)
    if escaped is None:
        raise ToolError(f"bad --set '{arg}': it ends in a lone backslash (expected key=value ...)")
    return [backslash, escaped]


def _split_words(arg: str) -> list[str]:
    """Split on whitespace outside quotes. Quotes group (and are removed) like a shell's, but
    every backslash is kept (outside single quotes, with the character after it, which it
    keeps from splitting or quoting): helm's --set parser reads `\\,`,
    `\\.`, `\\=` and `\\\\` itself, so they must reach it exactly as typed."""
    words: list[str] = []
    word: list[str] = []
    in_word = False
    quote = ""
    chars = iter(arg)
    for char in chars:
        if quote == "'":  # single quotes: everything literal up to the next one
            quote = _in_quotes(char, quote, word)
        elif char == "\\":
            word += _escape_pair(char, chars, arg)
            in_word = True
        elif quote:
            quote = _in_quotes(char, quote, word)
        elif char in "'\"":
            quote, in_word = char, True
        elif char.isspace():
            if in_word:
                words.append("".join(word))
            word, in_word = [], False
        else:
            word.append(char)
            in_word = True
    if quote:
        raise ToolError(f"bad --set '{arg}': no closing quotation ({quote}) (expected key=value ...)")
    if in_word:
        words.append("".join(word))
    return words


def split_sets(sets: str | Iterable[str] | None, flag: str = "--set") -> list[str]:
    """`--set` items: each argument may hold several space-separated k=v items (make SET="a=1 b=2").

    Quotes keep spaces inside a value: SET="a='x y'". Backslashes reach helm untouched, so
    helm's own escapes work as in `helm --set`: `a=x\\,y` is a literal comma,
    `podLabels.example\\.com/team=ml` a dotted key. Commas keep helm's meaning (several keys
    in one item).
    """
    if sets is None:
        return []
    if isinstance(sets, str):
        sets = [sets]
    items: list[str] = []
    for arg in sets:
        items.extend(_split_words(arg))
    for index, item in enumerate(items):
        if "=" not in item:
            raise ToolError(set_items.no_equals_refusal(items, index, flag))
    return items


# ---------------------------------------------------------------- layering via helm itself

_PROBE_CHART = "apiVersion: v2\nname: values-probe\nversion: 0.0.0\n"
_PROBE_TEMPLATE = "{{ toJson .Values }}\n"


def _probe_values(
    helm: str,
    defaults: Path | None,
    overlays: Sequence[Path],
    sets: Sequence[str],
    set_files: Sequence[str] = (),
    set_strings: Sequence[str] = (),
    set_jsons: Sequence[str] = (),
) -> dict:
    """Run helm's own merge of (defaults, -f overlays..., --set-json, --set, --set-string,
    --set-file items: helmkit.template_args says helm's order) and return the result (a
    --set-file's text is in it: what the real render gets on stdin)."""
    with tempfile.TemporaryDirectory(prefix="tfmw-values-probe-") as tmp:
        probe = Path(tmp)
        (probe / "templates").mkdir()
        (probe / "Chart.yaml").write_text(_PROBE_CHART)
        (probe / "templates" / "values.json").write_text(_PROBE_TEMPLATE)
        if defaults is not None:
            shutil.copyfile(defaults, probe / "values.yaml")
        proc = helmkit.helm_template(
            helm,
            probe,
            "probe",
            values_files=overlays,
            sets=sets,
            set_files=set_files,
            set_strings=set_strings,
            set_jsons=set_jsons,
        )
    if proc.returncode != 0:
        reason = helm_error_line(proc.stderr)
        given = bool(sets or set_strings or set_files or set_jsons)
        # what the items were layered over, for naming the key helm's words do not name
        overlay = _probe_values(helm, None, overlays, []) if given and "interface conversion" in reason else None
        if given:
            raise set_items.probe_failure(reason, overlay, sets, set_strings, set_files, set_jsons)
        raise ToolError(f"values could not be read: {reason}")
    body = "\n".join(ln for ln in proc.stdout.splitlines() if ln.strip() and not ln.startswith(("---", "# Source:")))
    return json.loads(body) if body.strip() else {}


def user_values(
    overlays: Sequence[Path],
    sets: Sequence[str] = (),
    helm: str | None = None,
    set_files: Sequence[str] = (),
    set_strings: Sequence[str] = (),
    set_jsons: Sequence[str] = (),
) -> dict:
    """Overlays and --set merged by helm's rules (nulls kept: they delete chart defaults later)."""
    return _probe_values(
        find_helm(helm),
        None,
        [Path(p) for p in overlays],
        list(sets),
        list(set_files),
        list(set_strings),
        list(set_jsons),
    )


def layer_values(
    chart_dir: Path,
    overlays: Sequence[Path],
    sets: Sequence[str] = (),
    helm: str | None = None,
    set_files: Sequence[str] = (),
    set_strings: Sequence[str] = (),
    set_jsons: Sequence[str] = (),
) -> dict:
    """The effective values the chart's templates see: what `helm -f defaults -f ... --set` gives."""
    defaults = Path(chart_dir) / "values.yaml"
    return _probe_values(
        find_helm(helm),
        defaults if defaults.is_file() else None,
        [Path(p) for p in overlays],
        list(sets),
        list(set_files),
        list(set_strings),
        list(set_jsons),
    )


# ---------------------------------------------------------------- values schema


def _error_key(error: jsonschema.ValidationError) -> str:
    """The values key an error is about (for required/additionalProperties: the child key)."""
    parts = list(error.absolute_path)
    if error.validator == "required":
        missing = error.message.split("'")[1] if "'" in error.message else None
        if missing:
            parts.append(missing)
    elif error.validator == "additionalProperties" and "'" in error.message:
        parts.append(error.message.split("'")[1])
    return helmkit.key_path(parts)


def _shown(value) -> str:
    """A value as the operator wrote it (a string bare, anything else as JSON), kept short."""
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
    return text if len(text) <= 80 else text[:77] + "..."


def _deepest(error: jsonschema.ValidationError) -> jsonschema.ValidationError:
    """For anyOf / oneOf / if-then failures: the sub-error that says most (jsonschema's best match)."""
    while error.context:
        error = jsonschema.exceptions.best_match(error.context)
    return error


def describe_schema_error(error: jsonschema.ValidationError) -> str:
    """One readable clause for a values.schema.json refusal (pure): what the value is, what is
    allowed, an example from the schema's `examples`. Never a regex."""
    error = _deepest(error)
    rule, value, schema = error.validator, error.instance, error.schema if isinstance(error.schema, dict) else {}
    allowed = schema.get("description")
    examples = schema.get("examples")
    example = f"; e.g. {' or '.join(_shown(e) for e in examples if e != '')}" if examples else ""
    if rule == "additionalProperties":
        names = sorted(schema.get("properties") or {})
        takes = f"it takes {', '.join(names)}" if names else f"expected {allowed}" if allowed else "it takes none"
        return f"not a key of this map ({takes})"
    if rule == "required":
        return "missing: it is required (a `null` deletes it); set it"
    if rule == "enum":
        return f"{_shown(value)} is not one of {', '.join(_shown(v) for v in error.validator_value)}"
    if rule == "const":
        return f"{_shown(value)} must be {_shown(error.validator_value)}"
    if rule in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
        words = {
            "minimum": "at least",
            "maximum": "at most",
            "exclusiveMinimum": "more than",
            "exclusiveMaximum": "less than",
        }
        return f"{_shown(value)} must be {words[rule]} {error.validator_value}{example}"
    if rule in ("minItems", "maxItems", "minProperties", "maxProperties"):
        return f"{_shown(value)}: {error.message}{example}"
    if allowed:  # type, pattern, lengths: what a valid value looks like
        return f"{_shown(value)} is not valid here: expected {allowed}{example}"
    if rule == "type":
        wanted = error.validator_value if isinstance(error.validator_value, str) else " or ".join(error.validator_value)
        return f"{_shown(value)} is not of type {wanted}{example}"
    return f"{_shown(value)}: {error.message}{example}"


class Refused(ToolError):
    """Values refused for more than one reason: str() is the first one's line (what deploy and
    template print), `lines` every problem found, one line each (what `tfmw check` prints)."""

    def __init__(self, summary: str, lines: Sequence[str]):
        super().__init__(summary)
        self.lines = [" ".join(line.split()) for line in lines] or [str(self)]


def _schema_errors(values: dict, chart_dir: Path) -> tuple[list[jsonschema.ValidationError], Path]:
    schema_path = Path(chart_dir) / "values.schema.json"
    if not schema_path.is_file():
        return [], schema_path
    schema = json.loads(schema_path.read_text())
    cls = jsonschema.validators.validator_for(schema)
    return sorted(cls(schema).iter_errors(values), key=lambda e: list(map(str, e.absolute_path))), schema_path


def _schema_line(
    error: jsonschema.ValidationError, schema_path: Path, origin: str, sets: Sequence[str], more: str = "", **hint
) -> str:
    deepest = _deepest(error)
    what = "unknown key" if deepest.validator == "additionalProperties" else "invalid value for"
    key = _error_key(deepest)
    schema = deepest.schema if isinstance(deepest.schema, dict) else {}
    advice = set_items.schema_hint(key, deepest.instance, schema.get("type"), sets, **hint)
    return (
        f"{what} {key}: {describe_schema_error(error)}{advice}{more}; refused by "
        f"{repo_relative(schema_path)}{' — ' + origin if origin else ''}"
    )


def validate_values(
    values: dict, chart_dir: Path = CHART_DIR, origin: str = "", sets: Sequence[str] = (), **hint
) -> None:
    """Refuse values that break the chart's values.schema.json, in one line naming the key, the
    value, what is allowed and an example (describe_schema_error); for a value `sets` (SET=
    items) gave, how to write it (tfmw.chart.sets.schema_hint; `hint`: its set_jsons and files)."""
    errors, schema_path = _schema_errors(values, chart_dir)
    if not errors:
        return
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    error = jsonschema.exceptions.best_match(errors)
    raise ToolError(_schema_line(error, schema_path, origin, sets, more, **hint))


def schema_problems(
    values: dict, chart_dir: Path = CHART_DIR, origin: str = "", sets: Sequence[str] = (), **hint
) -> list[str]:
    """Every values.schema.json refusal of `values`, one line each, worded as validate_values words one."""
    errors, schema_path = _schema_errors(values, chart_dir)
    return [_schema_line(error, schema_path, origin, sets, **hint) for error in errors]


def check_values(
    effective: dict, chart_dir: Path, origin: str, sets: Sequence[str], helm: str | None = None, **hint
) -> None:
    """The built-in trainer's config and the chart's schema, on the layered values: a Refused
    naming the first problem (the training config's before the schema's) and listing every one."""
    found: list[tuple[str, list[str]]] = []
    try:
        validate_training_config(effective, origin)
    except ToolError as err:
        found.append((str(err), [str(err)]))
    try:
        validate_values(effective, chart_dir, origin=origin, sets=sets, **hint)
    except ToolError as err:
        try:
            # Blame the chart, not the overlay, when its own defaults already break the schema.
            validate_values(
                layer_values(chart_dir, [], [], helm),
                chart_dir,
                origin=f"in the chart's own {repo_relative(Path(chart_dir) / 'values.yaml')}",
            )
            found.append((str(err), schema_problems(effective, chart_dir, origin, sets, **hint)))
        except ToolError as blame:
            found.append((str(blame), [str(blame)]))
    if found:
        raise Refused(found[0][0], [line for _, lines in found for line in lines])


# ---------------------------------------------------------------- the built-in trainer's config


def validate_training_config(values: dict, origin: str = "") -> None:
    """training.config checked by the trainer's own validator (entrypoint.training.config.check,
    pure Python, no TensorFlow), as every worker would check it at its start: refused here, in one
    line naming the key, instead of inside running pods. Only for the built-in trainer: a user's
    command reads what it likes."""
    training = values.get("training") if isinstance(values.get("training"), dict) else {}
    command = training.get("command")
    config = training.get("config")
    if [str(c) for c in command or []] != BUILTIN_TRAINER or not isinstance(config, dict):
        return
    try:
        trainer_config.check(config)
    except ConfigError as err:
        text = str(err).removeprefix("training config: ")
        raise ToolError(
            f"training.config.{text}; refused by the built-in trainer's validator{' — ' + origin if origin else ''}"
        ) from None


# ---------------------------------------------------------------- rendering (pyhelm3 over real helm)


async def _template(helm: str, chart_dir: Path, release: str, namespace: str, values: dict) -> list[dict]:
    import pyhelm3  # imported late: only rendering needs it

    # executable= only feeds pyhelm3's own check that the binary exists; the command runs it.
    client = pyhelm3.Client(helmkit.pyhelm3_command(helm), executable=helm)
    try:
        chart = await client.get_chart(Path(chart_dir).resolve())
        # One already-merged dict: pyhelm3's mergeconcat sees a single value and merges nothing.
        objects = await client.template_resources(chart, release, values, namespace=namespace)
        return [obj for obj in objects if obj]
    except pyhelm3.errors.Error as exc:
        refusal = helmkit.chart_refusal(exc.stderr)
        what = (
            f"refused the values: {refusal}"
            if refusal
            else f"could not be rendered by helm: {helm_error_line(exc.stderr)}"
        )
        raise ToolError(f"{repo_relative(chart_dir)} {what}") from None


def render_values(
    values: dict,
    chart_dir: Path = CHART_DIR,
    release: str = DEFAULT_RELEASE,
    namespace: str = DEFAULT_NAMESPACE,
    helm: str | None = None,
) -> list[dict]:
    """Render the chart with user values (as from user_values) through pyhelm3, offline."""
    if not (Path(chart_dir) / "Chart.yaml").is_file():
        raise ToolError(f"no chart at {repo_relative(chart_dir)} (Chart.yaml missing)")
    return asyncio.run(_template(find_helm(helm), Path(chart_dir), release, namespace, values))


def check_kube_version(kube_version: str | None, chart_dir: Path = CHART_DIR) -> None:
    """Refuse a --kube-version (KUBE_VERSION=) the chart's own `kubeVersion` excludes: manifests
    "valid for" a cluster that helm install refuses would say nothing."""
    chart_yaml = Path(chart_dir) / "Chart.yaml"
    if not kube_version or not chart_yaml.is_file():
        return
    try:
        constraint = str((yaml.safe_load(chart_yaml.read_text()) or {}).get("kubeVersion") or "")
    except yaml.YAMLError:
        return  # helm names what is wrong with Chart.yaml
    refusal = helmkit.kube_version_refusal(constraint, kube_version)
    if refusal:
        raise ToolError(
            f"--kube-version {kube_version}: {refusal}, so helm install refuses such a cluster; give "
            f"KUBE_VERSION= (--kube-version) the version of the cluster you deploy to, within {constraint}"
        )


def validate_manifests(objects: Sequence[dict], kube_version: str = DEFAULT_KUBE_VERSION) -> list[str]:
    """Refuse the first object that is not valid for kube_version (strict: unknown fields fail).

    Returns the kinds that have no schema there (custom resources such as a PodGroup): they are
    reported, not refused, since their CRD lives in the cluster.
    """
    checked = helmkit.validate_objects(objects, kube_version)
    if checked.problems:
        first = checked.problems[0]
        raise ToolError(
            f"rendered {first.object} is invalid for Kubernetes {kube_version} at {first.where}: {first.message[:200]}"
        )
    return checked.custom_kinds()


def dump_manifests(objects: Sequence[dict]) -> str:
    return yaml.safe_dump_all(list(objects), sort_keys=False, explicit_start=True)


# ---------------------------------------------------------------- the whole offline path


@dataclass
class Rendered:
    env: str
    overlay: Path | None  # values/<env>.yaml (None: `tfmw check` of values files alone)
    sets: list[str]
    user_values: dict  # what helm receives on stdin (overlay + --set, nulls kept)
    values: dict  # effective values the templates saw (validated against the schema)
    objects: list[dict]  # rendered Kubernetes objects (validated against kube_version)
    unchecked_kinds: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)  # one line each, for the operator
    target: Target | None = None  # the release, namespace and kube context it was rendered for
    set_strings: list[str] = field(default_factory=list)  # --set-string items (SET_STRING=)
    values_files: list[Path] = field(default_factory=list)  # -f files after the overlay (VALUES=)
    set_jsons: list[str] = field(default_factory=list)  # --set-json items (SET_JSON=)

    @property
    def sources(self) -> str:
        """The files layered, as a message names them: "values/dev.yaml + team.yaml"."""
        return values_sources(self.overlay, self.values_files)

    @property
    def layered(self) -> str:
        """The files and every item layered over them, for the operator's first line."""
        given = (
            ("--set-json", self.set_jsons),
            ("--set", self.sets),
            ("--set-string", self.set_strings),
        )
        return self.sources + "".join(f" + {flag} {' '.join(items)}" for flag, items in given if items)

    def find(self, kind: str) -> list[dict]:
        return [o for o in self.objects if o.get("kind") == kind]


def values_sources(overlay: Path | None, values_files: Sequence[Path] = ()) -> str:
    """The files layered over the chart's values.yaml, in helm's order, as messages name them."""
    names = [repo_relative(p) for p in ([overlay] if overlay else []) + list(values_files)]
    return " + ".join(names) or "the chart's own values.yaml"


def prepare(
    env: str | None,
    sets: Iterable[str] | str | None = (),
    release: str | None = None,
    namespace: str | None = None,
    helm: str | None = None,
    chart_dir: Path = CHART_DIR,
    values_dir: Path = VALUES_DIR,
    kube_version: str | None = DEFAULT_KUBE_VERSION,
    set_files: Iterable[str] | str | None = (),
    values_files: Iterable[os.PathLike | str] | str = (),
    set_strings: Iterable[str] | str | None = (),
    set_jsons: Iterable[str] | str | None = (),
) -> Rendered:
    """Env overlay (+ VALUES= files, as `-f` after it, in order) + --set-json/--set/--set-string/
    --set-file -> validated values -> rendered, validated manifests. No cluster. The release and
    namespace not given come from the values' `target` block (tfmw.chart.target). `env` None:
    no overlay, the values files alone (`tfmw check` in a GitOps repository)."""
    helm = find_helm(helm)
    overlay = overlay_path(env, values_dir) if env is not None else None
    check_kube_version(kube_version, chart_dir)
    extra = split_values_files(values_files)
    if overlay is not None:
        check_overlay(overlay)
    for path in extra:
        check_values_file(path)
    overlays = ([overlay] if overlay else []) + extra
    items = split_sets(sets)
    strings = split_sets(set_strings, flag="--set-string")
    files = split_sets(set_files, flag="--set-file")
    jsons = [item for item in ([set_jsons] if isinstance(set_jsons, str) else list(set_jsons or ())) if item.strip()]
    set_items.check_items(items, strings, files)
    effective = layer_values(chart_dir, overlays, items, helm, files, strings, jsons)
    sources = values_sources(overlay, extra)
    where = f"from {sources}" + "".join(
        f" with {flag} {' '.join(given)}"
        for flag, given in (("--set-json", jsons), ("--set", items), ("--set-string", strings))
        if given
    )
    check_values(effective, chart_dir, where, [*items, *strings], helm, set_jsons=jsons, files=overlays)
    supplied = user_values(overlays, items, helm, files, strings, jsons)
    named_in = naming_sources(
        [(repo_relative(path), _read_yaml(path)) for path in overlays],
        [
            (flag, set_items.key_of(item))
            for flag, given in (("--set", items), ("--set-string", strings))
            for item in given
        ],
    )
    target = target_of(effective, repo_relative(overlay) if overlay else sources, release, namespace, named_in)
    objects = render_values(supplied, chart_dir, target.release, target.namespace, helm)
    unchecked = validate_manifests(objects, kube_version) if kube_version else []
    warnings = check_pod_security(objects, effective)
    indexed = [i for i in (*items, *strings) if "[" in set_items.key_of(i)]
    if indexed:  # what the overlays alone give: an index into one of their lists rewrites an item
        warnings += set_items.list_index_warnings(user_values(overlays, helm=helm), indexed, sources)
    return Rendered(
        env or "",
        overlay,
        items,
        supplied,
        effective,
        objects,
        unchecked,
        warnings,
        target,
        strings,
        extra,
        jsons,
    )


def check_pod_security(objects: Sequence[dict], values: dict) -> list[str]:
    """Refuse (exit 2) a rendered pod that violates Pod Security Standards "restricted"
    (scripts/tfmw/chart/pss.py), unless the values opt in with security.allowUnsafe=true: then the
    violations come back as one warning line."""
    violations = pss.all_violations(pss.pod_templates(objects))
    warnings = []
    ipc_lock = [v for v in violations if "containers[worker].securityContext.capabilities.add ['IPC_LOCK']" in v]
    if ipc_lock and (((values.get("workers") or {}).get("nccl") or {}).get("ipcLock")) is True:
        # its own explicit opt-in (InfiniBand), said once, not a reason to refuse
        violations = [v for v in violations if v not in ipc_lock]
        warnings.append(
            "WARNING: workers.nccl.ipcLock=true adds the IPC_LOCK capability to the workers: a namespace that "
            "enforces Pod Security restricted or baseline refuses them (label it "
            "pod-security.kubernetes.io/enforce=privileged)"
        )
    if not violations:
        return warnings
    listed = "; ".join(violations[:6]) + (f"; and {len(violations) - 6} more" if len(violations) > 6 else "")
    if ((values.get("security") or {}).get("allowUnsafe")) is True:
        return [
            *warnings,
            f"WARNING: security.allowUnsafe=true: {len(violations)} violation(s) of Pod Security "
            f"Standards restricted rendered on purpose (a namespace enforcing it refuses these pods): {listed}",
        ]
    raise ToolError(
        f"rendered pods violate Pod Security Standards restricted: {listed}; restore the "
        "chart's securityContext defaults, or set security.allowUnsafe=true to run them "
        "on purpose (docs/security.md)"
    )


def render(
    env: str,
    sets: Iterable[str] | str | None = (),
    release: str | None = None,
    namespace: str | None = None,
    helm: str | None = None,
    **kwargs,
) -> list[dict]:
    """Rendered objects for an environment (values validated; manifests validated for 1.35)."""
    return prepare(env, sets, release, namespace, helm, **kwargs).objects


def manifests_path(env: str, build_dir: Path = BUILD_DIR) -> Path:
    return Path(build_dir) / env / "manifests.yaml"


def render_to_file(
    env: str,
    sets: Iterable[str] | str | None = (),
    release: str | None = None,
    namespace: str | None = None,
    helm: str | None = None,
    path: Path | None = None,
    **kwargs,
) -> Path:
    """Write the rendered manifests to build/<env>/manifests.yaml (or path) and return the path."""
    objects = render(env, sets, release, namespace, helm, **kwargs)
    return write_manifests(objects, Path(path) if path else manifests_path(env))


def write_manifests(objects: Sequence[dict], path: Path) -> Path:
    """Write the objects as one multi-document YAML file (parents created) and return the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(dump_manifests(objects))
    return path


def repo_relative(path: os.PathLike | str) -> str:
    """A path relative to the repo when inside it (messages stay short and copy-pasteable)."""
    try:
        return str(Path(path).resolve().relative_to(REPO))
    except ValueError:
        return str(path)
