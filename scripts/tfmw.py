"""Host-side CLI behind `make template / deploy / diff / status / logs / undeploy`.

    python -m scripts.tfmw template --env prod                 # -> build/prod/manifests.yaml
    python -m scripts.tfmw deploy   --env dev --set "workers.replicas=4 training.runId=run-7"
    python -m scripts.tfmw diff     --env dev
    python -m scripts.tfmw status   [--release R] [--namespace N]
    python -m scripts.tfmw logs     [--no-follow]
    python -m scripts.tfmw undeploy

Everything a value can break is refused before any cluster call: the overlay is layered by helm's
rules (scripts/render.py), validated against values.schema.json, rendered through pyhelm3 over the
real helm, and the manifests validated against the Kubernetes schema of --kube-version.
Errors are one line on stderr with a non-zero exit (see render.ToolError for the codes).
"""
from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import time
from pathlib import Path

from scripts import deploy_helm, deploy_pods, render
from scripts.render import ToolError


def say(line: str) -> None:
    print(line, flush=True)


# ---------------------------------------------------------------- helm via pyhelm3

def _helm_command(helm: str, context: str | None):
    import pyhelm3
    render._quiet_pyhelm3()
    return pyhelm3.Command(executable=helm, kubecontext=context)


def _helm_failure(exc, what: str, context: str | None) -> ToolError:
    """Turn a pyhelm3 error into one operator-facing line."""
    stderr = exc.stderr.decode(errors="replace") if isinstance(exc.stderr, bytes) else str(exc.stderr)
    if deploy_helm.is_unreachable(stderr):
        target = deploy_helm.kube_target(_kubectl_or_none(), context)
        return ToolError(deploy_helm.unreachable_message(stderr, target), exit_code=3)
    return ToolError(f"{what} failed: {render.helm_error_line(stderr)}", exit_code=4)


def _kubectl_or_none() -> str | None:
    try:
        return deploy_pods.find_kubectl()
    except ToolError:
        return None


async def _release_status(cmd, release: str, namespace: str, context: str | None) -> dict | None:
    """`helm status -o json`, or None when the release is not installed."""
    import pyhelm3
    try:
        return await cmd.status(release, namespace=namespace)
    except pyhelm3.errors.ReleaseNotFoundError:
        return None
    except pyhelm3.errors.Error as exc:
        raise _helm_failure(exc, "helm status", context) from None


async def _release_objects(cmd, release: str, namespace: str, context: str | None) -> list[dict]:
    """The manifest helm recorded for the release's current revision."""
    import pyhelm3
    try:
        return [o for o in await cmd.get_resources(release, namespace=namespace) if o]
    except pyhelm3.errors.Error as exc:
        raise _helm_failure(exc, "helm get manifest", context) from None


def _not_installed(release: str, namespace: str) -> ToolError:
    return ToolError(f"release {release} is not installed in namespace {namespace} "
                     f"(deploy it with `make deploy ENV=<env> RELEASE={release} NAMESPACE={namespace}`)",
                     exit_code=3)


# ---------------------------------------------------------------- template

def _prepare(args) -> render.Rendered:
    rendered = render.prepare(args.env, args.set, release=args.release, namespace=args.namespace,
                              helm=args.helm, chart_dir=args.chart, values_dir=args.values_dir,
                              kube_version=args.kube_version)
    sets = f" + --set {' '.join(rendered.sets)}" if rendered.sets else ""
    say(f"values: {render._show(rendered.overlay)}{sets} validated against "
        f"{render._show(Path(args.chart) / 'values.schema.json')}")
    unchecked = f" (not in the Kubernetes schema, checked by the cluster: " \
                f"{', '.join(rendered.unchecked_kinds)})" if rendered.unchecked_kinds else ""
    say(f"rendered {len(rendered.objects)} objects, valid for Kubernetes {args.kube_version}{unchecked}")
    return rendered


def cmd_template(args) -> int:
    rendered = _prepare(args)
    path = Path(args.output) if args.output else render.manifests_path(args.env)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render.dump_manifests(rendered.objects))
    say(render._show(path))
    return 0


# ---------------------------------------------------------------- deploy

async def _watch_pods(kubectl: str | None, context: str | None, workers: deploy_pods.Workers,
                      started: float, interval: float) -> None:
    """Print a progress line whenever the scheduled/running/ready counts change."""
    last = None
    while kubectl:
        try:
            items = await asyncio.to_thread(deploy_pods.list_pods, kubectl, context, workers)
            line = deploy_pods.progress_line([deploy_pods.pod_state(p) for p in items],
                                             workers.replicas)
        except (subprocess.SubprocessError, OSError, ValueError):
            line = None  # transient API hiccups: helm reports real failures
        if line and line != last:
            say(f"[{int(time.monotonic() - started):>5}s] {line}")
            last = line
        await asyncio.sleep(interval)


def _upgrade_args(args, major: int) -> list[str]:
    return deploy_helm.upgrade_args(major, args.release, Path(args.chart).resolve(), args.namespace,
                                    timeout=args.timeout, wait=not args.no_wait,
                                    rollback_on_failure=not args.no_rollback)


async def _deploy(args, rendered: render.Rendered, helm: str) -> int:
    import pyhelm3
    cmd = _helm_command(helm, args.kube_context)
    major = deploy_helm.helm_major(helm)
    current = await _release_status(cmd, args.release, args.namespace, args.kube_context)
    if current:
        deploy_helm.refuse_pending(args.release, args.namespace, current)
    workers = deploy_pods.workers_of(rendered.objects, args.namespace)
    kubectl = _kubectl_or_none()
    target = deploy_helm.kube_target(kubectl, args.kube_context)
    action = (f"upgrading {args.release} from revision {current.get('version')}" if current
              else f"installing {args.release}")
    wait = (f"waiting up to {args.timeout} for {workers.replicas} workers to be ready"
            + (", rolling back on failure" if not args.no_rollback else "")) if not args.no_wait \
        else "not waiting"
    say(f"helm {major}: {action} in namespace {args.namespace} on {target}; {wait}")

    helm_args = _upgrade_args(args, major)
    started = time.monotonic()
    watcher = asyncio.create_task(_watch_pods(None if args.no_wait else kubectl, args.kube_context,
                                              workers, started, args.poll_seconds))
    try:
        out = await cmd.run(helm_args, json.dumps(rendered.user_values).encode())
    except pyhelm3.errors.Error as exc:
        rolled = "" if args.no_wait or args.no_rollback else " (rolled back to the previous state)"
        raise _helm_failure(exc, f"helm upgrade --install{rolled}", args.kube_context) from None
    finally:
        watcher.cancel()
    text = out.decode(errors="replace")
    try:  # helm may print registry notes before the JSON release
        release = json.loads(text[text.index("{"):])
    except ValueError:
        release = {}
    say(f"deployed: release {args.release} revision {release.get('version', '?')}, "
        f"{(release.get('info') or {}).get('status', 'deployed')}, "
        f"{int(time.monotonic() - started)}s; follow with `make status` and `make logs`")
    return 0


def cmd_deploy(args) -> int:
    rendered = _prepare(args)
    helm = render.find_helm(args.helm)
    if args.dry_run:
        return _dry_run(args, rendered, helm)
    return asyncio.run(_deploy(args, rendered, helm))


def _dry_run(args, rendered: render.Rendered, helm: str) -> int:
    """Offline: show the helm command deploy would run (helm's own --dry-run needs a cluster)."""
    import shlex
    major = deploy_helm.helm_major(helm)
    helm_args = _upgrade_args(args, major)
    context = ["--kube-context", args.kube_context] if args.kube_context else []
    say(f"dry run (no cluster contacted): helm {major} would run, with the values below on stdin:")
    say("  " + shlex.join([helm, *helm_args, *context]))
    say(json.dumps(rendered.user_values, indent=2, sort_keys=True))
    return 0


# ---------------------------------------------------------------- diff

def cmd_diff(args) -> int:
    rendered = _prepare(args)
    helm = render.find_helm(args.helm)

    async def recorded():
        cmd = _helm_command(helm, args.kube_context)
        if await _release_status(cmd, args.release, args.namespace, args.kube_context) is None:
            return None
        return await _release_objects(cmd, args.release, args.namespace, args.kube_context)

    old = asyncio.run(recorded())
    if old is None:
        say(f"release {args.release} is not installed in namespace {args.namespace}; deploy would create:")
        for obj in deploy_helm.manifest_objects(rendered.objects):
            say(f"  + {deploy_helm.object_key(obj)}")
        return 0
    text = deploy_helm.diff_manifests(old, rendered.objects)
    say(text if text else f"no changes: release {args.release} already matches ENV={args.env}")
    return 0


# ---------------------------------------------------------------- status / logs / undeploy

async def _workers_of_release(args, helm: str) -> tuple[dict, deploy_pods.Workers]:
    cmd = _helm_command(helm, args.kube_context)
    status = await _release_status(cmd, args.release, args.namespace, args.kube_context)
    if status is None:
        raise _not_installed(args.release, args.namespace)
    objects = await _release_objects(cmd, args.release, args.namespace, args.kube_context)
    return status, deploy_pods.workers_of(objects, args.namespace)


def cmd_status(args) -> int:
    helm = render.find_helm(args.helm)
    status, workers = asyncio.run(_workers_of_release(args, helm))
    kubectl = deploy_pods.find_kubectl()
    try:
        items = deploy_pods.list_pods(kubectl, args.kube_context, workers)
    except subprocess.CalledProcessError as exc:
        raise ToolError(f"kubectl get pods failed: {render.helm_error_line(exc.stderr)}", exit_code=4) from None
    reports = []
    for item in items:
        pod = deploy_pods.pod_state(item)
        log = deploy_pods.pod_log(kubectl, args.kube_context, workers.namespace, pod.name)
        reports.append(deploy_pods.WorkerReport(pod, deploy_pods.last_progress(log),
                                                deploy_pods.completion(log)))
    for line in deploy_pods.status_lines(args.release, args.namespace, int(status.get("version", 0)),
                                         (status.get("info") or {}).get("status", "?"), workers.chart,
                                         workers.replicas, reports):
        say(line)
    return 0


def cmd_logs(args) -> int:
    helm = render.find_helm(args.helm)
    _, workers = asyncio.run(_workers_of_release(args, helm))
    kubectl = deploy_pods.find_kubectl()
    cmd = deploy_pods.kubectl_base(kubectl, args.kube_context) + \
        deploy_pods.logs_args(workers, follow=not args.no_follow, tail=args.tail)
    try:
        return subprocess.run(cmd).returncode
    except KeyboardInterrupt:
        return 130


def cmd_undeploy(args) -> int:
    helm = render.find_helm(args.helm)

    async def uninstall() -> int:
        import pyhelm3
        cmd = _helm_command(helm, args.kube_context)
        status = await _release_status(cmd, args.release, args.namespace, args.kube_context)
        if status is None:
            say(f"release {args.release} is not installed in namespace {args.namespace}: nothing to do")
            return 0
        objects = await _release_objects(cmd, args.release, args.namespace, args.kube_context)
        major = deploy_helm.helm_major(helm)
        try:
            await cmd.run(deploy_helm.uninstall_args(major, args.release, args.namespace,
                                                     timeout=args.timeout))
        except pyhelm3.errors.Error as exc:
            raise _helm_failure(exc, "helm uninstall", args.kube_context) from None
        say(f"uninstalled release {args.release} from namespace {args.namespace}")
        for line in deploy_helm.storage_after_uninstall(objects, args.namespace):
            say(line)
        return 0

    return asyncio.run(uninstall())


# ---------------------------------------------------------------- CLI

def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="python -m scripts.tfmw", description=__doc__.split("\n\n")[0])
    sub = top.add_subparsers(dest="command", required=True)

    def common(p: argparse.ArgumentParser) -> None:
        p.add_argument("--release", default=render.DEFAULT_RELEASE, help="helm release name")
        p.add_argument("--namespace", default=render.DEFAULT_NAMESPACE)
        p.add_argument("--kube-context", default=None, help="kubeconfig context (default: current)")
        p.add_argument("--helm", default=None, help="helm binary (default: $HELM, .tools/bin/helm, PATH)")

    def rendering(p: argparse.ArgumentParser) -> None:
        p.add_argument("--env", required=True, help="overlay values/<env>.yaml")
        p.add_argument("--set", action="append", default=[],
                       help="helm --set items, space separated: 'a.b=1 c={x,y}' (repeatable)")
        p.add_argument("--kube-version", default=render.DEFAULT_KUBE_VERSION,
                       help="validate manifests against this Kubernetes version (default %(default)s)")
        p.add_argument("--chart", default=str(render.CHART_DIR), help=argparse.SUPPRESS)
        p.add_argument("--values-dir", default=str(render.VALUES_DIR), help=argparse.SUPPRESS)

    p = sub.add_parser("template", help="render ENV into build/<env>/manifests.yaml")
    common(p), rendering(p)
    p.add_argument("--output", default=None, help="write here instead of build/<env>/manifests.yaml")
    p.set_defaults(func=cmd_template)

    p = sub.add_parser("deploy", help="install or upgrade the release, wait for the workers")
    common(p), rendering(p)
    p.add_argument("--timeout", default="15m", help="helm --timeout (default %(default)s)")
    p.add_argument("--no-wait", action="store_true", help="return once submitted (implies --no-rollback)")
    p.add_argument("--no-rollback", action="store_true", help="keep a failed revision for debugging")
    p.add_argument("--dry-run", action="store_true",
                   help="validate and render, print the helm command and values; no cluster call")
    p.add_argument("--poll-seconds", type=float, default=5.0, help=argparse.SUPPRESS)
    p.set_defaults(func=cmd_deploy)

    p = sub.add_parser("diff", help="rendered manifests vs. the release's recorded manifest")
    common(p), rendering(p)
    p.set_defaults(func=cmd_diff)

    p = sub.add_parser("status", help="release state and per-worker progress")
    common(p)
    p.set_defaults(func=cmd_status)

    p = sub.add_parser("logs", help="every worker's log, prefixed with its pod")
    common(p)
    p.add_argument("--no-follow", action="store_true", help="print what is there and exit")
    p.add_argument("--tail", type=int, default=-1, help="lines per pod to start with (-1: all)")
    p.set_defaults(func=cmd_logs)

    p = sub.add_parser("undeploy", help="uninstall the release (shared storage is kept)")
    common(p)
    p.add_argument("--timeout", default="5m")
    p.set_defaults(func=cmd_undeploy)
    return top


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if getattr(args, "chart", None) is None:
        args.chart = str(render.CHART_DIR)
    try:
        return args.func(args)
    except ToolError as exc:
        print(f"tfmw {args.command}: error: {exc}", file=sys.stderr, flush=True)
        return exc.exit_code
    except KeyboardInterrupt:
        print(f"tfmw {args.command}: interrupted (a helm operation may have been cut short: "
              "check `make status`)", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
