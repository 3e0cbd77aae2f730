"""Hostile repeat references and forged device statistics, sent as an ordinary uid.

A "same tensor" record is 16 bytes; the daemon turns it into a hard link, or, past
max_links_per_file or where the file system refuses a link, into a new first file that is
charged to the job's quota and the free-space floor like any payload. These scenarios run the
real dumpd with the hostile harness (hostile_harness.py: a benign client beside, a status
probe, SIGTERM at the end) and raw clients (rawclient.py agents) running as uid 1234.
"""

import os
import subprocess
from collections import defaultdict

import numpy as np
import pytest

from conftest import wait_for

# The harness, its fixture and helpers (importing the module skips this one too when the
# hostile tests cannot run: they need root).
from hostile_harness import (DEADLINE_S, UID_A, harness, job_config, make_dir,  # noqa: F401
                             write_job)

pytestmark = pytest.mark.conditional  # needs root: hostile_harness skips the file otherwise

MiB = 1 << 20
FIRST_BYTES = 4 * MiB  # the flagged tensor: 1 Mi float32


def inodes(root):
    """{inode: [paths]} and {inode: size} of the .npy files beneath root."""
    names, sizes = defaultdict(list), {}
    for dirpath, _, files in os.walk(root):
        for f in files:
            if f.endswith(".npy"):
                st = os.lstat(os.path.join(dirpath, f))
                names[st.st_ino].append(os.path.join(dirpath, f))
                sizes[st.st_ino] = st.st_size
    return names, sizes


def start_agent(h, command, root, rank, *extra, config=None):
    cfg = write_job(h.workdir, f"{command}-{rank}.json", config or job_config(root))
    return h.agent(command, "--socket", h.socket, "--config", cfg, "--root", root,
                   "--rank", rank, *extra, uid=UID_A)


def outcome(agent, timeout=120):
    return agent.wait(lambda e: e["event"] in ("flushed", "refused"), timeout,
                      "the agent's flush")


def test_references_to_one_tensor_end_at_the_quota(harness, workdir):
    quota = 9 * MiB  # the first file and one new first file fit, a third does not
    h = harness(settings={"job_quota_bytes": quota, "max_links_per_file": 1000})
    root = make_dir(workdir / "repeats", owner=UID_A)
    a = start_agent(h, "repeats", root, 3, "--elements", FIRST_BYTES // 4, "--count", 3000,
                    "--ring-bytes", 8 * MiB)
    ev = outcome(a)
    assert ev["event"] == "flushed", ev
    # Repeats 1-1000 link to the first file, 1001 writes a new first file, 1002-2001 link to
    # it, 2002 would write a third one past the quota: it and every later payload drop.
    assert (ev["written"], ev["dropped"], ev["linked"], ev["failed"]) == (2002, 999, 2001, 0), ev
    names, sizes = inodes(root)
    assert len(sizes) == 2, {i: len(n) for i, n in names.items()}
    on_disk = sum(sizes.values())
    assert on_disk <= quota + FIRST_BYTES + 4096, on_disk
    assert max(os.lstat(n[0]).st_nlink for n in names.values()) <= 1001
    for paths in names.values():
        np.testing.assert_array_equal(np.load(paths[-1]), np.arange(MiB, dtype=np.float32))
        assert all(os.lstat(p).st_uid == UID_A for p in paths)
    # Status figures are refreshed once a second.
    wait_for(lambda: "quota" in h.session_of_rank(3)["stop_reason"], DEADLINE_S,
             "the stop reason")
    a.finish()
    h.finish()


@pytest.fixture
def small_tmpfs(workdir):
    mnt = workdir / "small"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=24m", "tmpfs", str(mnt)],
                       capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip("cannot mount the small tmpfs this test needs: " +
                    (r.stderr.strip().splitlines() or [f"mount exited {r.returncode}"])[0])
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


@pytest.mark.conditional  # mounts a small tmpfs
def test_new_first_files_stop_at_the_free_space_floor(harness, small_tmpfs):
    floor = 12 * MiB
    # One link per file: every other repeat is a new first file of 1 MiB.
    h = harness(settings={"min_free_bytes": floor, "max_links_per_file": 1})
    root = make_dir(small_tmpfs / "dump", owner=UID_A)
    a = start_agent(h, "repeats", root, 4, "--elements", MiB // 4, "--count", 200,
                    "--ring-bytes", 4 * MiB)
    ev = outcome(a)
    assert ev["event"] == "flushed", ev
    assert ev["dropped"] > 0 and ev["written"] + ev["dropped"] == 201, ev
    vfs = os.statvfs(small_tmpfs)
    free = vfs.f_bavail * vfs.f_frsize
    # Each file is checked against the floor before it is written; what it takes beyond its
    # bytes is page rounding (4 KiB a file) and the small metadata files.
    assert free >= floor - 256 * 1024, f"{free} bytes free, floor {floor}"
    _, sizes = inodes(root)
    assert len(sizes) >= 2, "no new first file was written before the floor"
    wait_for(lambda: "min_free_bytes" in h.session_of_rank(4)["stop_reason"], DEADLINE_S,
             "the stop reason")
    a.finish()
    h.finish()


@pytest.mark.parametrize("forge", ["wrap", "over", "flags"])
def test_forged_device_statistics_end_only_their_session(harness, workdir, forge):
    h = harness()
    root = make_dir(workdir / f"stats-{forge}", owner=UID_A)
    config = job_config(root, saved_data="statistic", op_debug_mode=3)
    a = start_agent(h, "stats", root, 5, "--forge", forge, config=config)
    ev = outcome(a, DEADLINE_S)
    assert ev["event"] == "refused", ev
    log = h.log().decode(errors="replace")
    assert "device statistics" in ev["message"] + log and "are corrupt" in ev["message"] + log
    assert not list(root.rglob("statistic.csv")), "a corrupt record was written"
    # The same record, well formed, is written by a new session of the same uid.
    ok_root = make_dir(workdir / f"stats-ok-{forge}", owner=UID_A)
    ok = start_agent(h, "stats", ok_root, 6, "--forge", "none",
                     config=job_config(ok_root, saved_data="statistic"))
    ev = outcome(ok, DEADLINE_S)
    assert ev["event"] == "flushed" and ev["written"] == 1, ev
    a.finish()
    ok.finish()
    h.finish()


def test_a_repeat_with_a_reserved_field_set_ends_only_its_session(harness, workdir):
    h = harness()
    root = make_dir(workdir / "same-reserved", owner=UID_A)
    a = start_agent(h, "repeats", root, 8, "--elements", 16, "--count", 3,
                    "--forge", "same-reserved")
    ev = outcome(a, DEADLINE_S)
    assert ev["event"] == "refused", ev
    assert "non-zero reserved field" in ev["message"] + h.log().decode(errors="replace")
    a.finish()
    h.finish()
