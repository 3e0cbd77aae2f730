"""SIGTERM with hostile clients: dumpd writes exactly what the clients were told was dumped,
survives clients dying during its drain and producers that never let go of the ring, and
exits 0 (hostile_harness.Harness.finish checks the exit code and a generous deadline).
"""

import signal

import pytest

from conftest import wait_for
from hostile_harness import (DEADLINE_S, Committer, harness, job_config,  # noqa: F401
                             make_dir, write_job)

pytestmark = pytest.mark.conditional  # needs root: hostile_harness skips the file otherwise


def tightloop(h, workdir, *extra):
    """A dumpd.Client dumping as fast as it can. Its ring is the smallest (64 KiB): the client
    then blocks for space all the time (SIGTERM finds it waiting as often as copying), and its
    backlog in the shared writer queue stays small -- a bigger one delays the benign client's
    flushes by as long as it takes to write (see test_5000_iterations_...)."""
    root = make_dir(workdir / "tight")
    cfg = write_job(workdir, "tight.json", job_config(root))
    a = h.agent("tightloop", "--socket", h.socket, "--config", cfg, "--ring-bytes", 64 << 10,
                "--elements", 64, "--announce-after", 2000, *extra)
    a.wait(lambda e: e["event"] == "running", 60, "the tight loop to run")
    return a, root


@pytest.mark.parametrize("run", range(3))
def test_sigterm_writes_exactly_the_dumps_that_returned_true(harness, workdir, run):
    h = harness()
    a, root = tightloop(h, workdir)

    def count_matches():
        done = a.wait(lambda e: e["event"] == "done", DEADLINE_S, "the tight loop's count")
        assert a.finish() == 0
        files = len(list(root.rglob("*.npy")))
        if done["true_count"] < 2000 or files != done["true_count"]:
            return [f"{files} npy files on disk, but dump() returned True {done['true_count']} "
                    f"times ({done})"]
        return []

    h.finish(stop_benign_first=False, benign_expect_error=True, then=count_matches)


@pytest.mark.parametrize("run", range(4))
def test_client_exiting_during_the_drain_leaves_a_clean_exit(harness, workdir, run):
    h = harness()
    on_error = run % 2 == 1  # half exit on DaemonError, half on a signal right after SIGTERM
    a, _ = tightloop(h, workdir, *(["--exit-on-error"] if on_error else ["--hold-after-error"]))
    if not on_error:
        orig = h.daemon.proc.send_signal

        def term_then_exit(sig):
            orig(sig)
            a.proc.send_signal(signal.SIGUSR1)  # os._exit(0) in the client, mid-drain

        h.daemon.proc.send_signal = term_then_exit

    def client_exited():
        code = a.proc.wait(timeout=DEADLINE_S)
        return [] if code == 0 else [f"the exiting client ended with {code}"]

    h.finish(stop_benign_first=False, benign_expect_error=True, then=client_exited)


def test_sigterm_with_a_producer_stuck_busy_and_one_committing_forever(harness, workdir):
    h = harness()
    stuck_root, flood_root = make_dir(workdir / "stuck"), make_dir(workdir / "flood")
    stuck = h.raw_session(stuck_root, job_config(stuck_root), rank=21)
    stuck.ring.polite = False
    stuck.ring.set("producer_busy", 1)  # and never cleared
    # 64 KiB: a small backlog in the shared writer queue (see tightloop()).
    flood = h.raw_session(flood_root, job_config(flood_root), rank=22, capacity=64 << 10)
    flood.ring.polite = False  # ignores `closing`
    com = Committer(flood.ring, timeout=0.2)
    h.cleanups.insert(0, com.stop)  # after the sessions close (cleanups run last-first)
    wait_for(lambda: com.committed > 2000, DEADLINE_S, "the flood to run")
    h.benign.wait_flushes(3)
    h.finish(stop_benign_first=False, benign_expect_error=True)
    assert not com.errors, com.errors
