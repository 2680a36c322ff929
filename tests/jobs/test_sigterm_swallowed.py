"""A SIGTERM whose exception Python swallows still ends the run as cancelled, never as ok."""

from __future__ import annotations

import gc
import os
import signal
import time

import pytest

from imgscale.jobs.runs import Terminated, recorded_run
from imgscale.storage import Ledger


class _SignalledWhileCollected:
    """Sends this process SIGTERM from ``__del__``, where an exception raised by the signal
    handler is printed as 'Exception ignored' and dropped, as in a gc callback."""

    def __del__(self) -> None:
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.2)  # the handler runs here, and its exception goes nowhere


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_a_sigterm_raised_inside_a_finalizer_still_cancels_the_run(tmp_path):
    ledger = Ledger(tmp_path / "ledger")
    with pytest.raises(Terminated), recorded_run("train", {}, ["imgscale", "train"], ledger):
        _SignalledWhileCollected()
        gc.collect()
        finished = True
    assert finished  # the block ran to its end: the signal's exception was swallowed
    (record,) = ledger.runs()
    assert record["outcome"] == "cancelled" and record["error"] == "cancelled by SIGTERM"
