"""The kubeconfig in use, read as kubectl reads it: a KUBECONFIG list merged (first wins),
relative paths against their own file, one-line refusals that name the file or the contexts."""

from __future__ import annotations

import os

import pytest
import yaml

from tfmw.k8s import kubeconfig


def _write(path, current, clusters, users=(), contexts=()):
    path.parent.mkdir(parents=True, exist_ok=True)
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": n, "cluster": c} for n, c in clusters],
        "users": [{"name": n, "user": u} for n, u in users],
        "contexts": [{"name": n, "context": c} for n, c in contexts],
    }
    if current:
        doc["current-context"] = current
    path.write_text(yaml.safe_dump(doc))
    return path


def test_a_kubeconfig_list_merges_as_kubectl_does(tmp_path):
    first = _write(
        tmp_path / "a" / "config",
        None,  # sets no current context: the second file's applies
        [("shared", {"server": "https://first:6443", "certificate-authority": "ca.crt"})],
        [("me", {"client-certificate": "me.crt", "client-key": "/abs/me.key"})],
        [("one", {"cluster": "shared", "user": "me"})],
    )
    second = _write(
        tmp_path / "b" / "config",
        "two",
        [("shared", {"server": "https://second:6443"}), ("other", {"server": "https://other:6443"})],
        [],
        [("two", {"cluster": "other", "user": "me"}), ("one", {"cluster": "other"})],
    )
    env = os.pathsep.join([str(first), str(tmp_path / "missing"), str(second)])
    config = kubeconfig.load(env)
    assert config.current_context == "two"
    assert kubeconfig.contexts(config) == ["one", "two"]
    one = kubeconfig.select(config, "one")  # the first file's definition wins
    assert one.cluster.server == "https://first:6443"
    assert one.cluster.certificate_auth == str(tmp_path / "a" / "ca.crt")  # beside its own file
    assert one.user.client_cert == str(tmp_path / "a" / "me.crt") and one.user.client_key == "/abs/me.key"
    assert kubeconfig.describe(kubeconfig.select(config)) == "kube context 'two', server https://other:6443"


def test_the_default_file_is_read_without_kubeconfig(tmp_path, monkeypatch):
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    _write(tmp_path / ".kube" / "config", "c", [("k", {"server": "https://k:1"})], [], [("c", {"cluster": "k"})])
    assert kubeconfig.paths() == [tmp_path / ".kube" / "config"]
    assert kubeconfig.in_use() == "~/.kube/config"
    assert kubeconfig.select(kubeconfig.load()).cluster.server == "https://k:1"


def test_no_file_is_refused_by_name(tmp_path):
    env = str(tmp_path / "gone")
    with pytest.raises(kubeconfig.KubeconfigError, match=f"^KUBECONFIG={env} does not exist"):
        kubeconfig.load(env)


@pytest.mark.parametrize("text", ["- just\n- a list\n", "clusters: [\n"])
def test_a_file_that_is_no_kubeconfig_is_refused_by_name(tmp_path, text):
    path = tmp_path / "config"
    path.write_text(text)
    with pytest.raises(kubeconfig.KubeconfigError) as err:
        kubeconfig.load(str(path))
    assert str(err.value).startswith(f"{path}: not") and "\n" not in str(err.value)


def test_an_unknown_context_names_the_known_ones_and_the_fix(tmp_path, monkeypatch):
    path = _write(tmp_path / "config", None, [("k", {"server": "https://k:1"})], [], [("a", {"cluster": "k"})])
    monkeypatch.setenv("KUBECONFIG", str(path))
    config = kubeconfig.load()
    with pytest.raises(kubeconfig.KubeconfigError) as err:
        kubeconfig.select(config, "typo")
    assert str(err.value) == (
        f"kube context 'typo' does not exist in KUBECONFIG={path} (its contexts are a); "
        "pass --kube-context / KUBE_CONTEXT= one of them, or point KUBECONFIG at the right file"
    )
    with pytest.raises(kubeconfig.KubeconfigError, match="^no current kube context is set in KUBECONFIG="):
        kubeconfig.select(config)
