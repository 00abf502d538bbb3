"""The test harness's child processes: a chatty child never blocks on its output, and stopping one reaps it."""

import signal
import sys
import time

from tests.helpers.serving import LoggedProcess

# 1 MiB in 4 KiB writes: sixteen times a pipe's buffer, which blocked OpenEnv's server mid-run in CI.
CHATTY = "import sys\nfor _ in range(256): sys.stdout.write('x' * 4095 + '\\n'); sys.stdout.flush()\nprint('done')"


def test_a_child_that_writes_more_than_a_pipe_holds_finishes_and_its_output_is_kept():
    process = LoggedProcess([sys.executable, "-c", CHATTY])
    assert process.wait(30) == 0
    output = process.stop()
    assert len(output) == 256 * 4096 + len("done\n") and output.endswith("done\n")


def test_stop_kills_a_child_that_ignores_the_signal_and_returns_what_it_wrote():
    ignores_term = (
        "import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\nprint('up', flush=True)\ntime.sleep(60)"
    )
    process = LoggedProcess([sys.executable, "-c", ignores_term])
    while "up" not in process.output():
        assert process.poll() is None
        time.sleep(0.05)
    assert process.stop(grace=0.5) == "up\n"
    assert process.returncode == -signal.SIGKILL
