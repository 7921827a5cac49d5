"""Warm standby (entrypoint.standby): a restart in place runs the command in a process started
ahead, with its imports done. It must run exactly what a cold start runs (argv, environment,
cwd, sys.path[0], __file__), be used on restart, never for a user command without opt-in, and
never outlive supervision. Real processes; fake commands import `json` instead of TensorFlow,
one slow test imports the real TensorFlow."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import launcherkit
import pytest
from repo import REPO

from entrypoint.errors import ConfigError
from entrypoint.lifecycle import Phase
from entrypoint.settings import load_settings
from entrypoint.standby import (
    BUILTIN_PRELOAD,
    USER_PRELOAD,
    WAITING_NAME,
    FirstStandby,
    Standby,
    entry_of,
    prestart,
    standby_plan,
    training_command,
)
from entrypoint.supervisor import Supervisor, SupervisorConfig

PY = sys.executable

# Dumps what a program can see of how it was started, once per attempt; attempt 1 fails
# (exit 75, a lost peer) after `sleep` seconds, attempt 2 succeeds.
DUMP = """
import json, os, sys, time
out = os.environ["DUMP_DIR"]
n = len([f for f in os.listdir(out) if f.startswith("attempt")]) + 1
with open(os.path.join(out, f"attempt{n}.json"), "w") as f:
    json.dump({"pid": os.getpid(), "argv": sys.argv, "env": dict(os.environ), "cwd": os.getcwd(),
               "path0": sys.path[0], "file": __file__, "name": __name__,
               "spec": __spec__.name if __spec__ else None, "started": time.time(),
               "ppid": os.getppid(), "pgid": os.getpgid(0), "comm": open("/proc/self/comm").read()}, f)
print("attempt", n, flush=True)
if n == 1:
    time.sleep(float(os.environ.get("DUMP_SLEEP", "0.5")))
    sys.exit(75)
"""


def supervisor(tmp_path, command, preload=("json",), **kw):
    logs = []
    (tmp_path / "dump").mkdir(exist_ok=True)
    env = dict(os.environ, DUMP_DIR=str(tmp_path / "dump"), PYTHONPATH=str(tmp_path))
    env.update(kw.pop("env", {}))
    cfg = SupervisorConfig(
        command=command,
        env=env,
        run_dir=None,
        heartbeat_file=tmp_path / "hb",
        poll_seconds=0.05,
        backoff_first_seconds=0.05,
        log=logs.append,
        standby_preload=preload,
        standby_delay_seconds=kw.pop("delay", 0.1),
        **kw,
    )
    return Supervisor(cfg), logs


def attempts(tmp_path) -> list[dict]:
    files = sorted((tmp_path / "dump").glob("attempt*.json"))
    return [json.loads(f.read_text()) for f in files]


def script_command(tmp_path) -> list[str]:
    path = tmp_path / "train.py"
    path.write_text(DUMP)
    return [PY, str(path), "--lr", "0.1", "a b"]


def module_command(tmp_path) -> list[str]:
    (tmp_path / "usermod").mkdir(exist_ok=True)
    (tmp_path / "usermod" / "__init__.py").write_text("")
    (tmp_path / "usermod" / "__main__.py").write_text(DUMP)
    return [PY, "-m", "usermod", "--steps", "3"]


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


# -- which commands, which policy ------------------------------------------------------------
@pytest.mark.parametrize(
    "command,entry",
    [
        (["python", "-m", "entrypoint.training"], ("module", "entrypoint.training", [])),
        (["/usr/bin/python3.11", "-m", "pkg.mod", "--x", "1"], ("module", "pkg.mod", ["--x", "1"])),
        (["python3", "train.py", "-v"], ("script", "train.py", ["-v"])),
        (["python", "-u", "train.py"], None),  # interpreter options: cold
        (["python", "-c", "print(1)"], None),
        (["python", "-m"], None),
        (["python"], None),
        (["/app/train.sh", "x"], None),
        (["bash", "-c", "python train.py"], None),
        (["pythonista", "train.py"], None),
    ],
)
def test_entry_of(command, entry):
    assert entry_of(command) == entry


@pytest.mark.parametrize(
    "policy,command,preload",
    [
        ("auto", ["python", "-m", "entrypoint.training", "--set", "steps=3"], BUILTIN_PRELOAD),
        ("", ["python", "-m", "entrypoint.training"], BUILTIN_PRELOAD),
        ("true", ["python", "-m", "entrypoint.training"], BUILTIN_PRELOAD),
        ("false", ["python", "-m", "entrypoint.training"], None),
        ("auto", ["python", "/app/train.py"], None),  # a user script: never without opt-in
        ("auto", ["python", "-m", "mypkg.train"], None),
        ("true", ["python", "/app/train.py"], USER_PRELOAD),
        ("true", ["python", "-m", "mypkg.train"], USER_PRELOAD),
        ("true", ["/app/train.sh"], None),  # not a Python entry: always cold
        ("true", ["python", "-u", "/app/train.py"], None),
    ],
)
def test_standby_plan(policy, command, preload):
    assert standby_plan(policy, command)[0] == preload


def test_setting_is_validated():
    env = {"TF_CONFIG": "{}", "TFMW_WARM_STANDBY": "true"}
    assert load_settings(env, need_derivation=False).warm_standby == "true"
    assert load_settings({}, need_derivation=False).warm_standby == "auto"
    with pytest.raises(ConfigError, match="TFMW_WARM_STANDBY='yes please' must be auto, true or false"):
        load_settings({"TFMW_WARM_STANDBY": "yes please"}, need_derivation=False)


@pytest.mark.parametrize(
    "argv,env",
    [
        (["run", "--", "python", "-m", "entrypoint.training"], {"TFMW_WARM_STANDBY": "false"}),  # off: cold
        (["run", "--", "python", "/app/train.py"], {}),  # a user command under auto: no standby, none first
        (["run", "--", "/app/train.sh"], {"TFMW_WARM_STANDBY": "true"}),  # not a Python entry
        (["run"], {"TFMW_WARM_STANDBY": "yes please"}),  # refused by the launcher later: nothing started
        (["tf-config"], {}),  # not `run`
        (["check-peers", "a"], {"TFMW_WARM_STANDBY": "true"}),
    ],
)
def test_no_first_standby_where_the_setting_gives_the_command_none(argv, env):
    assert prestart(argv, env).pid is None


def test_no_first_standby_once_a_stop_signal_came():
    assert prestart(["run"], {"TFMW_WARM_STANDBY": "true"}, stopping=True).pid is None


@pytest.mark.parametrize(
    "argv,command",
    [
        (["run"], ["python", "-m", "entrypoint.training"]),
        (["run", "--"], ["python", "-m", "entrypoint.training"]),
        (["run", "--", "python", "t.py", "--", "x"], ["python", "t.py", "--", "x"]),
        (["run", "python", "t.py"], ["python", "t.py"]),
        (["logs", "/x"], None),
        ([], None),
    ],
)
def test_training_command_is_the_clis(argv, command):
    assert training_command(argv) == command


# -- used on restart, exactly like a cold start ----------------------------------------------
@pytest.mark.parametrize("make_command", [script_command, module_command])
def test_restart_runs_in_the_standby_and_sees_what_a_cold_start_sees(tmp_path, make_command):
    command = make_command(tmp_path)
    sup, logs = supervisor(tmp_path, command)
    ending = sup.run()
    assert ending.phase is Phase.SUCCEEDED, logs
    first, second = attempts(tmp_path)
    used = [line for line in logs if "standby=yes" in line]
    assert len(used) == 1, logs
    # the restarted process is the standby: its PID is the one logged, and it was started
    # before the first attempt failed (so its imports were done by then)
    assert f"pid={second['pid']}" in used[0]
    assert second["pid"] != first["pid"]
    # what the program sees is what the cold start saw
    for key in ("argv", "env", "cwd", "path0", "file", "name", "spec", "ppid", "comm"):
        assert second[key] == first[key], key
    assert second["pgid"] == second["pid"] and first["pgid"] == first["pid"]  # own process group, as cold
    if make_command is script_command:
        assert first["argv"] == command[1:]
        assert first["path0"] == str(tmp_path) and first["file"] == command[1]
    else:
        assert first["argv"] == [str(tmp_path / "usermod" / "__main__.py"), "--steps", "3"]
        assert first["spec"] == "usermod.__main__" and first["path0"] == os.getcwd()


def test_the_first_attempt_runs_in_the_standby_started_with_the_launcher(tmp_path):
    """The launcher starts the first attempt's standby before its own imports, with the pod's
    environment (no TF_CONFIG yet): attempt 1 runs in it, sees the attempt's environment (what
    the launcher settled later comes with "go"; what it dropped is gone) exactly as attempt 2
    (the restart's standby) does, and it imported at the launcher's priority (nothing trained)."""
    command = script_command(tmp_path)
    (tmp_path / "first_probe.py").write_text(
        "import os, threading\nopen(os.path.join(os.environ['DUMP_DIR'], f'first-{os.getpid()}'), 'w')"
        ".write(str(os.getpriority(os.PRIO_PROCESS, threading.get_native_id())))\n"
    )
    sup, logs = supervisor(tmp_path, command, env={"SETTLED_LATER": "tf-config"})
    pod_env = {k: v for k, v in sup.cfg.env.items() if k != "SETTLED_LATER"}
    first = FirstStandby(Standby(command, dict(pod_env, DROPPED="1"), ("json", "first_probe"), nice=False))
    sup.cfg.first_standby = lambda: first.take(command, ("json", "first_probe"))
    assert sup.run().phase is Phase.SUCCEEDED, logs
    one, two = attempts(tmp_path)
    used = [line for line in logs if "standby=yes" in line]
    assert len(used) == 2 and f"pid={one['pid']}" in used[0] and "started with the launcher" in used[0], logs
    assert f"pid={two['pid']}" in used[1] and "started with the launcher" not in used[1]
    assert int((tmp_path / "dump" / f"first-{one['pid']}").read_text()) == os.getpriority(os.PRIO_PROCESS, 0)
    assert one["env"]["SETTLED_LATER"] == "tf-config" and "DROPPED" not in one["env"]
    assert one["env"] == two["env"] == dict(sup.cfg.env, TFMW_HEARTBEAT_FILE=str(tmp_path / "hb"))
    assert one["comm"] == two["comm"] != WAITING_NAME  # running the command: named as a cold start
    assert first.pid is None  # taken once: the holder is empty


def test_standby_was_started_before_the_failure(tmp_path):
    """A measurable sign it saves time: the process that ran attempt 2 existed (and had done its
    imports) while attempt 1 was still running."""
    command = script_command(tmp_path)
    sup, logs = supervisor(tmp_path, command, env={"DUMP_SLEEP": "1.5"}, preload=("json", "standby_probe"))
    (tmp_path / "standby_probe.py").write_text(
        "import os, time\nopen(os.path.join(os.environ['DUMP_DIR'], f'preloaded-{os.getpid()}'), 'w')"
        ".write(repr(time.time()))\n"
    )
    assert sup.run().phase is Phase.SUCCEEDED, logs
    first, second = attempts(tmp_path)
    preloaded = float((tmp_path / "dump" / f"preloaded-{second['pid']}").read_text())
    failed_at = first["started"] + 1.5
    assert preloaded < failed_at
    assert any("ready=yes" in line for line in logs), logs


def test_the_standby_imports_at_the_lowest_priority_and_trains_at_the_launchers(tmp_path):
    """Its imports run beside the training group on the same cores: the thread that imports runs
    at nice 19; the trainer it becomes keeps the launcher's priority (an unprivileged process
    could never raise it again)."""
    command = script_command(tmp_path)
    sup, logs = supervisor(tmp_path, command, env={"DUMP_SLEEP": "1.5"}, preload=("json", "standby_nice"))
    (tmp_path / "standby_nice.py").write_text(
        "import os, threading\nopen(os.path.join(os.environ['DUMP_DIR'], f'nice-{os.getpid()}'), 'w')"
        ".write(str(os.getpriority(os.PRIO_PROCESS, threading.get_native_id())))\n"
    )
    (tmp_path / "train.py").write_text(
        DUMP.replace('"ppid": os.getppid(),', '"ppid": os.getppid(), "nice": os.getpriority(os.PRIO_PROCESS, 0),')
    )
    assert sup.run().phase is Phase.SUCCEEDED, logs
    first, second = attempts(tmp_path)
    assert any("standby=yes" in line for line in logs), logs
    assert int((tmp_path / "dump" / f"nice-{second['pid']}").read_text()) == 19
    assert second["nice"] == first["nice"] == os.getpriority(os.PRIO_PROCESS, 0)


def test_an_early_failure_still_gets_a_standby_during_the_backoff(tmp_path):
    command = script_command(tmp_path)
    sup, logs = supervisor(tmp_path, command, env={"DUMP_SLEEP": "0"}, delay=30)
    assert sup.run().phase is Phase.SUCCEEDED, logs
    assert any("standby=yes" in line for line in logs), logs


def test_no_standby_configured_means_every_start_is_cold(tmp_path):
    command = script_command(tmp_path)
    sup, logs = supervisor(tmp_path, command, preload=None)
    assert sup.run().phase is Phase.SUCCEEDED, logs
    assert not any("standby=" in line for line in logs), logs
    assert len(attempts(tmp_path)) == 2


def run_signalling_the_standby(sup: Supervisor, sig: int, after: float = 0.0) -> tuple:
    """Run `sup` while a thread sends `sig` to its first standby, `after` seconds after it
    appears: (the Ending, that standby's pid)."""
    hit = []

    def send():
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            standby = sup._process._standby
            if standby is not None:
                time.sleep(after)
                os.kill(standby.pid, sig)
                hit.append(standby.pid)
                return
            time.sleep(0.02)

    thread = threading.Thread(target=send)
    thread.start()
    ending = sup.run()
    thread.join()
    assert hit, "no standby was started"
    return ending, hit[0]


def test_a_standby_that_died_means_a_cold_start(tmp_path):
    command = script_command(tmp_path)
    sup, logs = supervisor(tmp_path, command, env={"DUMP_SLEEP": "1.0"}, delay=0.1)
    ending, killed = run_signalling_the_standby(sup, signal.SIGKILL, after=0.2)
    assert ending.phase is Phase.SUCCEEDED, logs
    assert any("standby=no" in line and f"pid {killed}) exited with -9" in line for line in logs), logs
    assert all(a["pid"] != killed for a in attempts(tmp_path))


def test_a_stopped_standby_is_not_used(tmp_path):
    """A SIGSTOP of the trainer's whole tree (the fault harness's hang) stops the waiting
    standby too: told "go" it would only hang again, so the restart starts cold and the
    stopped standby is killed and reaped."""
    command = script_command(tmp_path)
    sup, logs = supervisor(tmp_path, command, env={"DUMP_SLEEP": "1.0"}, delay=0.1)
    ending, stopped = run_signalling_the_standby(sup, signal.SIGSTOP)
    assert ending.phase is Phase.SUCCEEDED, logs
    assert any(f"pid {stopped}) is stopped (SIGSTOP); starting cold" in line for line in logs), logs
    assert all(a["pid"] != stopped for a in attempts(tmp_path))
    assert not alive(stopped)


# -- no orphan: the standby ends with supervision ---------------------------------------------
def test_standby_is_reaped_when_supervision_ends(tmp_path):
    path = tmp_path / "ok.py"
    path.write_text("import time; time.sleep(1.0)\n")
    sup, logs = supervisor(tmp_path, [PY, str(path)], delay=0.1)
    seen = []

    def watch():
        while not seen:
            if sup._process._standby is not None:
                seen.append(sup._process._standby.pid)
            time.sleep(0.02)

    t = threading.Thread(target=watch, daemon=True)
    t.start()
    assert sup.run().phase is Phase.SUCCEEDED, logs
    assert seen, "a standby was started while the command ran"
    assert not alive(seen[0])
    with pytest.raises(ChildProcessError):
        os.waitpid(seen[0], os.WNOHANG)  # reaped, not a zombie
    assert sup._process._standby is None


def test_stop_ends_the_standby_too(tmp_path):
    path = tmp_path / "long.py"
    path.write_text("import time; time.sleep(60)\n")
    sup, logs = supervisor(tmp_path, [PY, str(path)], delay=0.1)
    result = []
    t = threading.Thread(target=lambda: result.append(sup.run()))
    t.start()
    deadline = time.monotonic() + 10
    while sup._process._standby is None and time.monotonic() < deadline:
        time.sleep(0.02)
    pid = sup._process._standby.pid
    sup.request_stop()
    t.join(timeout=10)
    assert result and result[0].phase is None
    assert not alive(pid)


def test_a_stop_while_the_first_standby_imports_ends_it_and_trains_nothing(fake_api, tmp_path):
    """SIGTERM while the launcher waits for its peers and the first attempt's standby still
    imports (a `tensorflow` that takes a minute): the launcher exits 143 at once, the standby
    is killed and reaped (not left to finish its import), and nothing ran the command."""
    (tmp_path / "tensorflow.py").write_text("import time\ntime.sleep(60)\n")
    trainer = launcherkit.command(tmp_path, "import pathlib\npathlib.Path(__file__).with_name('trained').touch()\n")
    env = launcherkit.pod_env(fake_api, tmp_path, replicas=2, TFMW_WARM_STANDBY="true", PYTHONPATH=str(tmp_path))
    del env["TFMW_LOOPBACK_PORTS"]  # the peer's DNS name never resolves: the launcher waits
    first = prestart(["run", "--", *trainer], env)
    pid = first.pid
    assert pid is not None and alive(pid)
    deadline = time.monotonic() + 10  # named as waiting from its first line on (tools tell it from a trainer)
    while Path(f"/proc/{pid}/comm").read_text().strip() != WAITING_NAME:
        assert time.monotonic() < deadline, Path(f"/proc/{pid}/comm").read_text()
        time.sleep(0.02)
    run = launcherkit.Run(env, trainer, first_standby=first).until("tfmw launcher peers:")
    assert any(f"started with the launcher (pid {pid})" in line for line in run.logs), run.logs
    assert run.stop() == 143
    assert not alive(pid)
    with pytest.raises(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)  # reaped, not a zombie
    assert not (tmp_path / "trained").exists()
    assert not any("starting training" in line for line in run.logs), run.logs


def test_closing_the_socket_ends_the_standby_quietly(tmp_path):
    """The launcher is gone (killed: its end of the socket closes): the standby exits 0, runs
    nothing, prints nothing."""
    marker = tmp_path / "ran"
    path = tmp_path / "never.py"
    path.write_text(f"open({str(marker)!r}, 'w').write('ran')\n")
    standby = Standby([PY, str(path)], dict(os.environ), ("json",), cwd=str(REPO))
    deadline = time.monotonic() + 10
    while not standby.ready and time.monotonic() < deadline:
        standby._poll_ready()
        time.sleep(0.02)
    assert standby.ready
    standby.sock.close()
    assert standby.process.wait(timeout=10) == 0
    assert standby.process.stdout.read() == b""
    assert not marker.exists()


def test_launcher_killed_leaves_no_standby(tmp_path):
    """SIGKILL to the launcher: nothing can discard the standby, yet it goes (its socket's other
    end closed with the launcher)."""
    child = tmp_path / "child.py"
    child.write_text("import time; time.sleep(60)\n")
    pidfile = tmp_path / "standby.pid"
    driver = tmp_path / "driver.py"
    driver.write_text(
        textwrap.dedent(f"""
        import os, sys, time
        from entrypoint.standby import Standby
        s = Standby([{PY!r}, {str(child)!r}], dict(os.environ), ("json",))
        open({str(pidfile)!r} + ".part", "w").write(str(s.pid))
        os.replace({str(pidfile)!r} + ".part", {str(pidfile)!r})  # whole, never seen empty
        time.sleep(60)
    """)
    )
    proc = subprocess.Popen([PY, str(driver)], cwd=str(REPO))
    deadline = time.monotonic() + 10
    while not pidfile.exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    pid = int(pidfile.read_text())
    proc.kill()
    proc.wait()
    deadline = time.monotonic() + 10
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(pid)


def test_sigterm_and_hang_kill_reach_the_warm_trainer(tmp_path):
    """The standby-turned-trainer leads its own process group, like a cold start, so the stop
    (SIGTERM forwarded to the group) reaches it and its children."""
    path = tmp_path / "t.py"
    path.write_text(
        textwrap.dedent("""
        import os, signal, subprocess, sys, time
        out = os.environ["DUMP_DIR"]
        n = len(os.listdir(out)) + 1
        open(os.path.join(out, f"attempt{n}.json"), "w").write('{"pid": %d}' % os.getpid())
        if n == 1:
            time.sleep(0.5)
            sys.exit(75)
        signal.signal(signal.SIGTERM, lambda *a: sys.exit(143))
        time.sleep(60)
    """)
    )
    sup, logs = supervisor(tmp_path, [PY, str(path)])
    result = []
    t = threading.Thread(target=lambda: result.append(sup.run()))
    t.start()
    deadline = time.monotonic() + 15
    while not any("standby=yes" in line for line in logs) and time.monotonic() < deadline:
        time.sleep(0.02)
    time.sleep(0.3)
    sup.request_stop()
    t.join(timeout=15)
    assert result and result[0].phase is None and result[0].returncode == 143, logs


# -- the real thing: TensorFlow imported ahead, no device touched ------------------------------
@pytest.mark.slow
@pytest.mark.parametrize(
    "preload,imports", [(BUILTIN_PRELOAD, "import entrypoint.training.trainer"), (USER_PRELOAD, "import tensorflow")]
)
def test_real_tensorflow_standby_touches_no_device_and_changes_nothing(tmp_path, preload, imports):
    """The preload (the built-in trainer's: TensorFlow, tf_keras, the trainer; an opted-in user
    command's: TensorFlow) creates no eager context (so no CUDA/GPU initialisation: no device
    memory held while waiting), and a program doing the same imports sees the same argv,
    environment, cwd and sys.path[0] warm as cold."""
    probe = tmp_path / "probe.py"
    probe.write_text(
        textwrap.dedent(f"""
        import json, os, sys
        {imports}  # already imported in the standby
        from tensorflow.python.eager import context
        print(json.dumps({{"pid": os.getpid(), "argv": sys.argv, "env": dict(os.environ), "cwd": os.getcwd(),
                          "path0": sys.path[0], "initialized": context.context()._initialized,
                          "preloaded": sorted(m for m in {list(preload)!r} if m in sys.modules)}}), flush=True)
    """)
    )
    env = dict(
        os.environ,
        TF_CPP_MIN_LOG_LEVEL="2",
        TF_CONFIG='{"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": 0}}',
    )
    command = [PY, str(probe), "x"]
    cold = subprocess.run(command, env=env, cwd=str(REPO), capture_output=True, text=True, timeout=120)
    assert cold.returncode == 0, cold.stderr
    standby = Standby(command, env, preload, cwd=str(REPO))
    deadline = time.monotonic() + 120
    while not standby.ready and time.monotonic() < deadline:
        standby._poll_ready()
        time.sleep(0.1)
    assert standby.ready
    rss_kb = int([line for line in open(f"/proc/{standby.pid}/status") if line.startswith("VmRSS")][0].split()[1])
    maps = open(f"/proc/{standby.pid}/maps").read()
    assert "libcuda.so" not in maps  # the driver is not even loaded
    started = time.monotonic()
    proc = standby.take()
    out, _ = proc.communicate(timeout=60)
    warm_seconds = time.monotonic() - started
    assert proc.returncode == 0, out
    cold_rec = json.loads([line for line in cold.stdout.splitlines() if line.startswith("{")][-1])
    warm_rec = json.loads([line for line in out.decode().splitlines() if line.startswith("{")][-1])
    assert warm_rec["pid"] == standby.pid
    assert warm_rec["preloaded"] == sorted(preload)
    assert warm_rec["initialized"] is False and cold_rec["initialized"] is False
    for key in ("argv", "cwd", "path0", "env"):
        assert warm_rec[key] == cold_rec[key], key
    print(f"standby RSS {rss_kb / 1024:.0f} MiB; go -> exit {warm_seconds:.2f}s")


# A preload that starts a thread at import (as `import tensorflow` does), and a command that
# takes SIGTERM the built-in trainer's way (entrypoint.training.sigterm: blocked in the main
# thread, taken by a sigwait thread).
THREAD_AT_IMPORT = """
import threading, time
threading.Thread(target=lambda: time.sleep(3600), daemon=True).start()
"""
TAKES_SIGTERM = """
import signal, sys, threading, time
signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
def wait():
    signal.sigwait({signal.SIGTERM})
    print("sigterm taken", flush=True)
    sys.stdout.flush()
    import os; os._exit(143)
threading.Thread(target=wait, daemon=True).start()
print("ready", flush=True)
time.sleep(60)
"""


def test_a_command_started_from_a_standby_takes_sigterm_as_a_cold_start_does(tmp_path):
    # Before the fix, the preload's threads left SIGTERM unblocked, one of them took it, and
    # the command's own handling never saw it (TensorFlow's handler swallowed it: a restarted
    # trainer ignored its pod's deletion).
    (tmp_path / "threads_at_import.py").write_text(THREAD_AT_IMPORT)
    script = tmp_path / "takes_sigterm.py"
    script.write_text(TAKES_SIGTERM)
    env = dict(os.environ, PYTHONPATH=str(tmp_path))
    standby = Standby([PY, str(script)], env, ("threads_at_import",))
    child = standby.take()
    assert child is not None
    assert child.stdout.readline().strip() == b"ready"
    os.killpg(child.pid, signal.SIGTERM)  # as the supervisor passes a pod's SIGTERM on
    out, _ = child.communicate(timeout=30)
    assert child.returncode == 143 and b"sigterm taken" in out, (child.returncode, out)
