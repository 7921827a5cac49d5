"""tests/support/gomodules.py: the version a wrapper module pins (pure: a go.mod's text)."""

from __future__ import annotations

import pytest
from gomodules import GOMOD, pinned_version
from repo import REPO


@pytest.mark.parametrize(
    "go_mod",
    [
        "module x\n\ngo 1.26.0\n\nrequire github.com/kubeflow/training-operator v1.9.0\n",
        "module x\n\nrequire (\n\tgithub.com/a/b v0.1.0\n"
        "\tgithub.com/kubeflow/training-operator v1.9.0 // indirect\n)\n",
    ],
    ids=["one-line", "block"],
)
def test_the_pinned_version_is_read_from_either_require_form(tmp_path, go_mod):
    (tmp_path / "go.mod").write_text(go_mod)
    assert pinned_version(tmp_path, "github.com/kubeflow/training-operator") == "v1.9.0"


def test_a_module_the_wrapper_does_not_require_is_an_error_not_a_guess(tmp_path):
    (tmp_path / "go.mod").write_text("module x\n\nrequire github.com/kubeflow/training-operator-fork v1.0.0\n")
    with pytest.raises(AssertionError, match="requires no github.com/kubeflow/training-operator"):
        pinned_version(tmp_path, "github.com/kubeflow/training-operator")


def test_the_migrating_docs_name_the_training_operator_version_the_import_tests_read():
    version = pinned_version(GOMOD / "training-operator", "github.com/kubeflow/training-operator")
    assert f"training-operator {version}" in (REPO / "docs" / "migrating.md").read_text()
