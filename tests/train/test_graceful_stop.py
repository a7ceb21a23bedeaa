"""Graceful stop: the first SIGINT/SIGTERM ends the run after the current step with a checkpoint
there; the second stops at once; handlers are put back afterwards."""

from __future__ import annotations

import os
import signal

import pytest

from assay.settings.loader import load_train_config
from assay.train.graceful import GracefulStop
from assay.train.loop import Trainer


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_the_first_signal_asks_the_second_interrupts_and_handlers_come_back(sig, code):
    before = signal.getsignal(sig)
    with GracefulStop() as stop:
        assert not stop()
        os.kill(os.getpid(), sig)
        assert stop() and stop.exit_code == code and stop.name == signal.Signals(sig).name
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), sig)
    assert signal.getsignal(sig) is before


def _trainer(config):
    return Trainer(load_train_config(config), progress=False)


def test_a_stop_saves_the_step_it_stopped_at(tmp_path, tiny_lora_config):
    config = tiny_lora_config()
    trainer = _trainer(config)
    asked = iter([False, False, True])  # asked after steps 1, 2 and 3
    summary = trainer.train(stop_requested=lambda: next(asked))
    assert summary["stopped"] and summary["steps"] == 3 and summary["steps_this_run"] == 3
    assert summary["eval_loss"] is None  # a stopped run ends without the final evaluation
    run = tmp_path / "run"
    assert (run / "latest").read_text().strip() == "step-000003"  # save_every 100: the stop's
    assert sorted(p.name for p in run.glob("step-*")) == ["step-000003"]
    resumed = _trainer(config)
    resumed.resume(run)
    rest = resumed.train(stop_requested=lambda: False)
    assert rest["steps"] == 6 and rest["steps_this_run"] == 3 and not rest["stopped"]


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_stop_inside_a_deferred_block_is_raised_when_the_block_ends(sig):
    """Issue 52 (the third adversary's lost signals): torch's C code imports numpy and clears
    any exception raised inside that import, a stop included, so the run went on with numpy
    half imported. Inside ``deferred`` the signal waits for the block, then raises; the
    control, the same signal outside it, raises at once."""
    from assay.train.graceful import Stopped, stop_at_once

    before, finished = signal.getsignal(sig), []
    with pytest.raises(Stopped) as stopped, stop_at_once() as at_once:
        with at_once.deferred():
            os.kill(os.getpid(), sig)
            finished.append("the block ran to its end")
        finished.append("after the block")
    assert finished == ["the block ran to its end"] and stopped.value.signum == sig
    with pytest.raises(Stopped), stop_at_once():
        os.kill(os.getpid(), sig)
        finished.append("never")
    assert "never" not in finished
    assert signal.getsignal(sig) is before
