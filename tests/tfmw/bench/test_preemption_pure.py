"""scripts/tfmw/bench/preemption.py: what counts as an exact stop and resume, and the published step."""

from __future__ import annotations

from tfmw.bench.preemption import Round, published_step


def make_round(**changes) -> Round:
    fields = dict(
        path="today",
        signalled_after=120,
        seconds_to_exit=2.0,
        seconds_to_stopped=1.5,
        codes=[143, 143],
        stop_steps=[150, 150],
        checkpoint_step=150,
        resume_steps=[150, 150],
        first_logged=[160, 160],
        done_steps=[400, 400],
        same_digest=True,
        restart_codes=[0, 0],
    )
    fields.update(changes)
    return Round(**fields)


def test_exact_needs_one_stop_step_published_and_resumed_by_both():
    assert make_round().exact(log_every=10)
    assert not make_round(stop_steps=[150, 100]).exact(10)  # workers stopped apart
    assert not make_round(checkpoint_step=100).exact(10)  # the chief published an older one
    assert not make_round(resume_steps=[150, 100]).exact(10)  # a worker resumed elsewhere
    assert not make_round(first_logged=[160, 0]).exact(10)  # a worker started over
    assert not make_round(stop_steps=[None, None]).exact(10)  # nobody said `tfmw stopped`


def testpublished_step_reads_the_chiefs_state_file(tmp_path):
    assert published_step(tmp_path) is None
    (tmp_path / "checkpoint").write_text('model_checkpoint_path: "ckpt-135"\nall_model_checkpoint_paths: "ckpt-100"\n')
    assert published_step(tmp_path) == 135
