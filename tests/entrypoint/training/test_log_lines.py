"""The SIGTERM handler's and the trainer's `tfmw` lines keep their wire text (docs/contracts.md)
now that entrypoint.loglines builds them."""

from __future__ import annotations

from entrypoint import loglines
from entrypoint.training.sigterm import SigtermFlag


def test_sigterm_lines_keep_their_wire_text_and_parse(capsys):
    SigtermFlag(exit_now=lambda code: None).handle()
    training = SigtermFlag(exit_now=lambda code: None)
    training.training_started()
    training.handle()
    training.handle()  # a second SIGTERM says nothing new
    out = capsys.readouterr().out.splitlines()
    assert out == [
        "tfmw sigterm: stopping before training started (nothing to checkpoint)",
        "tfmw sigterm: will checkpoint and stop at the next checkpoint boundary",
    ]
    assert [loglines.parse(raw).kind for raw in out] == [loglines.SIGTERM] * 2


def test_the_start_lines_data_value_stays_bare_and_parses_whole():
    # The trainer's `data=` (entrypoint.training.data's describe) holds '=' signs; the multiworker
    # test and readers of the start line expect it unquoted.
    text = loglines.line(loglines.START, model="mlp", data="npz(files=2/4,shard_by=file)", resume_step=0)
    assert text == "tfmw start model=mlp data=npz(files=2/4,shard_by=file) resume_step=0"
    assert loglines.parse(text).fields == {"model": "mlp", "data": "npz(files=2/4,shard_by=file)", "resume_step": "0"}
