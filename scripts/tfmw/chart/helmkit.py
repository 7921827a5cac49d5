"""The host tools' one toolkit for helm and Kubernetes: which binary, which version, `helm template`,
helm's errors as one line, and strict validation of rendered objects.

    find_helm() / find_helm3() / find_kubectl()  -> the binary to run ($HELM, .tools/bin/helm, PATH)
    helm_version(helm) -> "v4.1.4";  helm_major(helm) -> 4
    helm_template(helm, chart, values_files=[...], sets=[...], kube_version="1.30") -> CompletedProcess
    run_helm(kubeconfig, "upgrade", ...) -> CompletedProcess; HelmFailed (its error as one line) if it fails
    parse_manifests(text) -> [object, ...]
    validate_objects(objects, "1.35") -> Validation(problems, custom)
    is_builtin_api("apps/v1") -> True;  is_builtin_api("scheduling.x-k8s.io/v1alpha1") -> False
    KUBERNETES_VERSIONS: the versions every rendered object must be valid for

make deploy (the verbs in tfmw.deploy, render.py), make local, make lint, the benchmarks and the
tests all use these, so each of those jobs is done one way. Only the standard library is imported
at the top: scripts/tfmw/tools.py (which installs the pinned binaries) runs before the venv exists.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tfmw import REPO

TOOLS_BIN = REPO / ".tools" / "bin"  # where `make setup` (scripts/tfmw/tools.py) puts the pinned binaries
# The oldest and the newest Kubernetes the chart supports; make lint and the chart tests validate
# every rendered object for each, deploy for the newest unless --kube-version says otherwise.
KUBERNETES_VERSIONS = ("1.30", "1.35")
DEFAULT_KUBE_VERSION = KUBERNETES_VERSIONS[-1]
SUPPORTED_HELM_MAJORS = (3, 4)
HELM_TIMEOUT_SECONDS = 300


class ToolError(Exception):
    """A refusal or failure the operator can act on; str() is one line, no traceback wanted.

    exit_code: 2 bad input (env, --set, values, manifests), 3 cluster or release state,
    4 a helm/kubectl operation failed, 127 a required binary is missing.
    """

    def __init__(self, message: str, exit_code: int = 2):
        super().__init__(" ".join(message.split()))
        self.exit_code = exit_code


# ---------------------------------------------------------------- binaries


def find_tool(name: str, explicit: str | os.PathLike | None = None, pinned: Path | None = None) -> str:
    """The `name` binary to use (helm, helm3, kubectl): explicit argument, else $NAME, else the
    pinned one (.tools/bin/<name>), else PATH; a ToolError (exit 127) saying how to get one otherwise."""
    pinned = pinned or TOOLS_BIN / name
    variable = name.upper()
    fix = f"run `make setup` to install the pinned {name}, or set {variable}=/path/to/{name}"
    for origin, candidate in (("argument", explicit), (variable, os.environ.get(variable))):
        if candidate:
            path = shutil.which(str(candidate))
            if not path:
                raise ToolError(
                    f"{name} not found: {candidate} (from {origin}) is not an executable; {fix}", exit_code=127
                )
            return path
    if os.access(pinned, os.X_OK):
        return str(pinned)
    on_path = shutil.which(name)
    if on_path:
        return on_path
    raise ToolError(f"{name} not found: not at {pinned} nor on PATH; {fix}", exit_code=127)


def find_helm(helm: str | os.PathLike | None = None) -> str:
    """Helm 4 by default: argument, $HELM, .tools/bin/helm, PATH."""
    return find_tool("helm", helm)


def find_helm3(helm3: str | os.PathLike | None = None) -> str:
    """Helm 3, installed beside Helm 4 because the chart must work with both: $HELM3, .tools/bin/helm3."""
    return find_tool("helm3", helm3)


def find_kubectl(kubectl: str | os.PathLike | None = None) -> str:
    """kubectl to use: argument, else $KUBECTL, else the pinned one, else PATH."""
    return find_tool("kubectl", kubectl)


# ---------------------------------------------------------------- version


def helm_version(helm: str) -> str:
    """What `helm version` calls itself, e.g. "v4.1.4"; a ToolError when it cannot tell."""
    try:
        proc = subprocess.run(
            [helm, "version", "--template", "{{ .Version }}"], capture_output=True, text=True, timeout=30
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ToolError(
            f"helm at {helm} cannot run: {exc}; run `make setup` or set HELM/HELM3 to a helm binary", exit_code=127
        ) from None
    version = proc.stdout.strip()
    if proc.returncode != 0 or not version:
        reason = helm_error_line(proc.stderr) if proc.stderr.strip() else "no version printed"
        raise ToolError(f"cannot tell the version of helm at {helm}: {reason}")
    return version


def major_of(version: str, helm: str = "helm") -> int:
    """The supported major version in helm's version string ("v3.17.2" -> 3); a ToolError otherwise."""
    match = re.match(r"v?(\d+)\.", version.strip())
    if not match:
        raise ToolError(f"cannot tell the version of helm at {helm}: it says {version.strip()!r}")
    if int(match.group(1)) not in SUPPORTED_HELM_MAJORS:
        raise ToolError(f"helm {version.strip()} at {helm} is not supported: use Helm 3.x or 4.x")
    return int(match.group(1))


def helm_major(helm: str) -> int:
    """Major version of a helm binary (v4.1.4 -> 4): the flags deploy passes depend on it."""
    return major_of(helm_version(helm), helm)


# ---------------------------------------------------------------- the chart's kubeVersion

_VERSION = re.compile(r"^v?(\d+)(?:\.(\d+))?(?:\.(\d+))?(?:[-+].*)?$")
_TERM = re.compile(r"^(>=|<=|!=|>|<|=)?\s*(\S+)$")


def version_tuple(version: str) -> tuple[int, int, int] | None:
    """(major, minor, patch) of "1.27", "v1.27.3" or "1.27.0-0" (pre-release and build dropped);
    None for anything else (pure)."""
    match = _VERSION.match(version.strip())
    return tuple(int(part or 0) for part in match.groups()) if match else None


def _meets(term: str, version: tuple[int, int, int]) -> bool | None:
    """One comparison of a semver constraint ('>=1.27.0-0'); None when it is not a plain one (~, ^, x)."""
    match = _TERM.match(term.strip())
    wanted = version_tuple(match.group(2)) if match else None
    if wanted is None:
        return None
    op = match.group(1) or "="
    return {
        ">=": version >= wanted,
        "<=": version <= wanted,
        ">": version > wanted,
        "<": version < wanted,
        "=": version == wanted,
        "!=": version != wanted,
    }[op]


def kube_version_refusal(constraint: str, version: str) -> str | None:
    """Why Kubernetes `version` is outside a chart's `kubeVersion` constraint, as the end of one
    line; None when it is inside, or when the constraint uses what this does not read (~, ^,
    wildcards: helm itself judges those at install) (pure). Pre-releases count as their release,
    as the chart's "-0" suffix means."""
    have = version_tuple(version)
    if not constraint.strip() or have is None:
        return None
    alternatives = []
    for group in constraint.split("||"):
        terms = [t for t in re.split(r"[,\s]+(?=[<>=!]|v?\d)", group.strip()) if t.strip()]
        results = [_meets(t, have) for t in terms]
        if None in results:
            return None
        alternatives.append(all(results))
    if any(alternatives):
        return None
    return f"Kubernetes {version} is outside the chart's kubeVersion {constraint!r} (Chart.yaml)"


# ---------------------------------------------------------------- helm template


def template_args(
    chart: str | os.PathLike,
    release: str,
    namespace: str,
    values_files: Iterable[str | os.PathLike] = (),
    sets: Iterable[str] = (),
    kube_version: str | None = None,
    show_only: Iterable[str] = (),
    set_files: Iterable[str] = (),
    set_strings: Iterable[str] = (),
    set_jsons: Iterable[str] = (),
) -> list[str]:
    """`helm template` arguments: -f files (in order), --set-json items, --set items, --set-string
    items (every value text), then --set-file items (key=path: the file's text becomes the value).
    Helm layers them in that order whatever the order of the flags: MergeValues in helm's
    pkg/cli/values/options.go (v3.17.2 and v4.1.4, the pinned ones) merges every -f file, then
    applies each --set-json, --set, --set-string, --set-file (and --set-literal) item in turn."""
    args = ["template", release, str(chart), "--namespace", namespace]
    if kube_version:
        args += ["--kube-version", kube_version]
    for path in values_files:
        args += ["--values", str(path)]
    for item in set_jsons:
        args += ["--set-json", item]
    for item in sets:
        args += ["--set", item]
    for item in set_strings:
        args += ["--set-string", item]
    for item in set_files:
        args += ["--set-file", item]
    for template in show_only:
        args += ["--show-only", template]
    return args


def helm_template(
    helm: str,
    chart: str | os.PathLike,
    release: str = "tf-multiworker",
    namespace: str = "default",
    values_files: Iterable[str | os.PathLike] = (),
    sets: Iterable[str] = (),
    kube_version: str | None = None,
    show_only: Iterable[str] = (),
    set_files: Iterable[str] = (),
    set_strings: Iterable[str] = (),
    set_jsons: Iterable[str] = (),
) -> subprocess.CompletedProcess:
    """Run `helm template` offline; the caller decides what a failure means (helm_error_line,
    chart_refusal). A helm that cannot start is a ToolError (exit 127)."""
    command = [
        helm,
        *template_args(
            chart, release, namespace, values_files, sets, kube_version, show_only, set_files, set_strings, set_jsons
        ),
    ]
    try:
        return subprocess.run(command, capture_output=True, text=True, timeout=HELM_TIMEOUT_SECONDS)
    except OSError as exc:
        raise ToolError(f"helm at {helm} cannot run: {exc}", exit_code=127) from None
    except subprocess.TimeoutExpired:
        raise ToolError(f"helm template {chart} did not finish within {HELM_TIMEOUT_SECONDS}s", exit_code=4) from None


def parse_manifests(text: str) -> list[dict]:
    """The objects of a `helm template` stream (empty documents dropped); ValueError for a
    document that is not a Kubernetes object."""
    import yaml  # not at the top: see the module docstring

    objects = []
    for document in yaml.safe_load_all(text):
        if document is None:
            continue
        if not isinstance(document, dict) or "apiVersion" not in document or "kind" not in document:
            raise ValueError(f"rendered document is not a Kubernetes object: {str(document)[:120]}")
        objects.append(document)
    return objects


HELM_CANCEL_SECONDS = 120.0  # a cancelled helm operation's time to clean up (its rollback)


def pyhelm3_command(helm: str, kube_context: str | None = None, kubeconfig: Path | None = None):
    """pyhelm3's helm runner, with its per-failure warning silenced (every failure here becomes
    one ToolError line, so its log line would only say the same thing twice), and helm run
    without a shell in between: pyhelm3 starts `sh -c helm ...` and, cancelled, signals the
    shell, which dies and leaves helm running to its own --timeout. Here a cancelled run sends
    SIGTERM to helm itself, which cancels its operation as on Ctrl-C (a release being installed
    is marked failed and, with rollback on failure, rolled back), and waits for it.
    `kubeconfig`: helm's --kubeconfig (None: the kubeconfig in use, $KUBECONFIG or ~/.kube/config)."""
    import asyncio
    import logging
    import signal

    import pyhelm3

    logging.getLogger("pyhelm3").setLevel(logging.ERROR)

    class Command(pyhelm3.Command):
        async def run(self, command: list, input: bytes | None = None) -> bytes:
            argv = [self._executable, *(str(part) for part in command)]
            if self._kubeconfig:
                argv += ["--kubeconfig", str(self._kubeconfig)]
            if self._kubecontext:
                argv += ["--kube-context", self._kubecontext]
            proc = await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.PIPE if input is not None else None,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
            )
            try:
                stdout, stderr = await proc.communicate(input)
            except asyncio.CancelledError:
                try:
                    proc.send_signal(signal.SIGTERM)
                    await asyncio.wait_for(proc.communicate(), HELM_CANCEL_SECONDS)
                except ProcessLookupError:
                    pass  # it had finished
                except TimeoutError:
                    proc.kill()
                    await proc.wait()
                raise
            if proc.returncode == 0:
                return stdout
            raise helm_error_class(stderr_text(stderr))(proc.returncode, stdout, stderr)

    return Command(executable=helm, kubeconfig=kubeconfig, kubecontext=kube_context)


def helm_error_class(stderr: str):
    """The pyhelm3 error a failed helm command raises, by what helm said (pyhelm3's own rules)."""
    from pyhelm3 import errors

    text = stderr.lower()
    rules = (
        ("context canceled", errors.CommandCancelledError),
        ("etcdserver", errors.ConnectionError),  # before the others: it comes with "not found"
        ("release: not found", errors.ReleaseNotFoundError),
        ("failed to render chart", errors.FailedToRenderChartError),
        ("execution error", errors.FailedToRenderChartError),
        ("rendered manifests contain a resource that already exists", errors.ResourceAlreadyExistsError),
        ("is invalid", errors.InvalidResourceError),
    )
    for needle, cls in rules:
        if needle in text:
            return cls
    if re.search(r'chart "[^"]+" (version "[^"]+" )?not found', text):
        return errors.ChartNotFoundError
    if re.search(r"(read: operation timed out|connect: network is unreachable)", text):
        return errors.ConnectionError
    return errors.Error


# ---------------------------------------------------------------- helm's errors


def stderr_text(stderr: str | bytes | None) -> str:
    return stderr.decode(errors="replace") if isinstance(stderr, bytes) else str(stderr or "")


def helm_error_line(stderr: str | bytes | None) -> str:
    """The useful part of helm's stderr, as one line (helm prefixes its error with 'Error: ')."""
    lines = [ln.strip() for ln in stderr_text(stderr).splitlines() if ln.strip()]
    errors = [ln for ln in lines if ln.lower().startswith("error:")]
    chosen = errors[-1] if errors else (lines[-1] if lines else "no output")
    chosen = chosen[len("error:") :].strip() if chosen.lower().startswith("error:") else chosen
    return " ".join(chosen.split())


def chart_refusal(stderr: str | bytes | None) -> str | None:
    """The chart's own refusal (its validateValues `fail`) as one line, every problem kept: the
    first is on helm's 'Error:' line, each further one on a line of its own. None when helm
    failed for another reason."""
    lines = [ln.strip() for ln in stderr_text(stderr).splitlines() if ln.strip()]
    starts = [i for i, ln in enumerate(lines) if ln.lower().startswith("error:")]
    if not starts or "execution error at" not in lines[starts[-1]]:
        return None
    problems = [ln for ln in lines[starts[-1] :] if not ln.startswith("Use --debug")]
    # The chart's own words: helm's "execution error at (<template>:1:4): " only says where.
    first = re.sub(r"^execution error at \([^)]*\): ", "", helm_error_line(problems[0]))
    return "; ".join(" ".join(p.split()) for p in [first, *problems[1:]])


# ---------------------------------------------------------------- helm against a cluster


class HelmFailed(ToolError):
    """A helm command against a cluster exited non-zero; `why` is its error as one line
    (helm_error_line), for each caller to say what it was doing."""

    def __init__(self, argv: Sequence[str], returncode: int, why: str):
        super().__init__(f"helm {argv[0] if argv else ''} exited {returncode}: {why}", exit_code=4)
        self.argv, self.returncode, self.why = list(argv), returncode, why


def run_helm(
    kubeconfig: str | os.PathLike,
    *args: str,
    helm: str | os.PathLike | None = None,
    env: dict[str, str] | None = None,
    timeout: float = HELM_TIMEOUT_SECONDS,
    check: bool = True,
) -> subprocess.CompletedProcess:
    """`helm <args>` against the cluster of `kubeconfig` (KUBECONFIG added to `env`, by default
    this process's environment). With `check`, HelmFailed when it exits non-zero. A ToolError
    (exit 127) when there is no helm; subprocess.TimeoutExpired after `timeout` seconds."""
    environment = dict(os.environ if env is None else env, KUBECONFIG=str(kubeconfig))
    proc = subprocess.run([find_helm(helm), *args], capture_output=True, text=True, env=environment, timeout=timeout)
    if check and proc.returncode != 0:
        raise HelmFailed(args, proc.returncode, helm_error_line(proc.stderr))
    return proc


# ---------------------------------------------------------------- Kubernetes API and schemas


def is_builtin_api(api_version: str) -> bool:
    """Kubernetes' own API groups: core (v1), dotless (apps, batch, policy...) and *.k8s.io (but
    not *.x-k8s.io, the SIGs' out-of-tree CRDs). Any other group is a custom resource."""
    group = (api_version or "").rpartition("/")[0]
    return "." not in group or (group.endswith(".k8s.io") and not group.endswith(".x-k8s.io"))


def key_path(parts: Iterable) -> str:
    """A path into an object or values as written in messages: spec.ports[0].name."""
    out = ""
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(top level)"


def object_label(obj: dict) -> str:
    return f"{obj.get('kind', '?')}/{(obj.get('metadata') or {}).get('name', '?')}"


@dataclass(frozen=True)
class Problem:
    """One object that is not valid for a Kubernetes version."""

    object: str  # Kind/name
    where: str  # key path in the object
    message: str

    def __str__(self) -> str:
        return f"{self.object}: {self.where}: {self.message}"


@dataclass
class Validation:
    problems: list[Problem] = field(default_factory=list)
    custom: list[dict] = field(default_factory=list)  # custom resources: their CRD is in the cluster

    def custom_kinds(self) -> list[str]:
        """ "apiVersion Kind" of each custom resource kind, once each."""
        return sorted({f"{o.get('apiVersion')} {o.get('kind')}" for o in self.custom})


def validate_objects(objects: Sequence[dict], kube_version: str) -> Validation:
    """Check every built-in object against the Kubernetes schema of kube_version, strictly (an
    unknown field is a problem, as is a built-in API the version does not serve). Custom
    resources are set apart, not checked: kubernetes-validate drops the group's domain, so a
    scheduling.x-k8s.io PodGroup would be checked against an unrelated scheduling.k8s.io schema.
    A version kubernetes-validate does not know is a ToolError."""
    import kubernetes_validate
    from kubernetes_validate.utils import VersionNotSupportedError

    _parse_schemas_once()
    result = Validation()
    for obj in objects:
        api_version = str(obj.get("apiVersion", ""))
        if not is_builtin_api(api_version):
            result.custom.append(obj)
            continue
        try:
            kubernetes_validate.validate(obj, kube_version, strict=True)
        except VersionNotSupportedError:
            raise ToolError(
                f"--kube-version {kube_version} is not known to kubernetes-validate "
                f"(latest {kubernetes_validate.latest_version()})"
            ) from None
        except kubernetes_validate.SchemaNotFoundError:
            result.problems.append(
                Problem(
                    object_label(obj),
                    "apiVersion",
                    f"{api_version} {obj.get('kind')} is not served by Kubernetes {kube_version}",
                )
            )
        except kubernetes_validate.ValidationError as exc:
            result.problems.append(Problem(object_label(obj), key_path(exc.absolute_path), exc.message))
    return result


def _parse_schemas_once() -> None:
    """kubernetes-validate re-reads and re-parses its 1.5 MB definitions file for every object;
    parsing each schema file once per process makes validation 5-10x faster. The parsed schemas
    are only read by jsonschema, never modified, so sharing them is safe."""
    from kubernetes_validate import utils

    if not hasattr(utils.schema_contents, "cache_info"):
        utils.schema_contents = functools.lru_cache(maxsize=None)(utils.schema_contents)
