"""Ctrl-C during a computation on the cluster: the command's one line, no asyncio tracebacks."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from tests.conftest import sigint_as_from_a_shell

SCRIPT = textwrap.dedent(
    """
    import os, signal, time
    import dask
    from imgscale.jobs.cluster import connect
    from imgscale.pipeline.compute import compute

    def interrupt_then_sleep(i):
        if i == 0:  # the threaded cluster runs tasks in this process: Ctrl-C mid-gather
            os.kill(os.getpid(), signal.SIGINT)
        time.sleep(5)

    try:
        with connect(None, data_bytes=1, quiet=True):
            compute(*[dask.delayed(interrupt_then_sleep)(i) for i in range(4)])
    except KeyboardInterrupt:
        print("interrupted", flush=True)
    """
)


def test_gathers_cancelled_by_ctrl_c_print_no_traceback():
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT],
        capture_output=True,
        text=True,
        timeout=300,
        preexec_fn=sigint_as_from_a_shell,
    )
    assert done.stdout.strip() == "interrupted", done.stderr
    assert "AllExit" not in done.stderr and "never retrieved" not in done.stderr, done.stderr
