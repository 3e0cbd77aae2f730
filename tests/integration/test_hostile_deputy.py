"""The confused deputy: dumpd, running as root, does for a client only what the client could
do itself (writes, reads, ownership, the environment it resolves paths in), shows a uid only
its own sessions, touches no file it did not create, and logs what clients say escaped.
"""

import os

import pytest

from conftest import wait_for
from hostile_harness import (DEADLINE_S, UID_A, UID_B, harness, job_config,  # noqa: F401
                             make_dir, tree_snapshot, values)
import rawclient as rc

pytestmark = pytest.mark.conditional  # needs root: hostile_harness skips the file otherwise


def test_uid_cannot_make_dumpd_write_into_a_root_only_directory(harness, workdir):
    h = harness()
    parent = make_dir(workdir / "parent", 0o755)
    secret = make_dir(parent / "secret", 0o700)
    b = h.benign_client(root=secret, rank=0, uid=UID_A, iterations=2)
    end = b.wait_end()
    assert end["event"] == "error", end
    assert "Permission denied" in end["message"] or "permission" in end["message"], end
    assert os.listdir(secret) == [], "dumpd created files for uid 1234 in a root-only directory"
    h.finish()


@pytest.mark.parametrize("rank_mode", [0o700, 0o755], ids=["rank_0700", "rank_0755"])
def test_uid_cannot_read_or_change_another_users_tree(harness, workdir, rank_mode):
    h = harness()
    shared = make_dir(workdir / "shared", 0o1777)
    first = h.benign_client(root=shared, rank=0, uid=UID_B, iterations=3)
    assert first.wait_end()["event"] == "done"
    assert not first.problems()
    os.chmod(shared / "rank_0", rank_mode)
    before = tree_snapshot(shared)
    meta = "rank_0/.dump_metadata"
    for f in (f"{meta}/data_dump.json", f"{meta}/manifest.jsonl"):
        assert before[f][4], f"{f} missing or empty after uid 1235's session"
    assert len([k for k in before if k.endswith(".npy")]) == 3

    second = h.benign_client(root=shared, rank=0, uid=UID_A, iterations=3)
    end = second.wait_end()
    after = tree_snapshot(shared)
    assert after == before, "uid 1234's session changed uid 1235's tree: " + str(
        sorted(set(after.items()) ^ set(before.items()))[:5])
    mine = [k for k, v in after.items() if v[1] == UID_A]
    assert mine == [], mine
    assert end["event"] == "error", f"uid 1234's session could not write, but it did not fail: {end}"
    assert "ermission denied" in end["message"], end
    h.finish()


def test_everything_dumpd_creates_for_a_uid_belongs_to_it(harness, workdir):
    h = harness()
    own = make_dir(workdir / "own", 0o755, owner=UID_A)
    b = h.benign_client(root=own, rank=0, uid=UID_A, iterations=3)
    assert b.wait_end()["event"] == "done"
    assert not b.problems()
    entries = tree_snapshot(own)
    assert len([k for k in entries if k.endswith(".npy")]) == 3
    wrong = {k: (v[1], v[2]) for k, v in entries.items() if (v[1], v[2]) != (UID_A, UID_A)}
    assert wrong == {}, wrong
    h.finish()


def test_status_shows_other_users_sessions_to_root_only(harness, workdir):
    h = harness()
    own = make_dir(workdir / "u1234", owner=UID_A)
    mine = h.benign_client(root=own, rank=0, uid=UID_A)
    assert mine.wait_started()["event"] == "flush"
    pid = mine.agent.proc.pid
    st = h.status(uid=UID_A)
    assert [(s["uid"], s["pid"]) for s in st["sessions"]] == [(UID_A, pid)], st["sessions"]
    assert st["sessions_hidden"] >= 1, st
    root_view = h.status()
    assert {s["uid"] for s in root_view["sessions"]} == {0, UID_A}, root_view["sessions"]
    assert root_view["sessions_hidden"] == 0
    assert mine.stop()["event"] == "done"
    assert not mine.problems()
    h.finish()


def test_ms_diagnostic_data_path_comes_from_the_clients_environment(harness, workdir):
    decoy = make_dir(workdir / "decoy")
    h = harness(daemon_env={"MS_DIAGNOSTIC_DATA_PATH": str(decoy)})
    diag = workdir / "diag"
    b = h.benign_client(rank=0, iterations=2, config=job_config(None),
                        env={"MS_DIAGNOSTIC_DATA_PATH": str(diag)})
    b.root = diag / "debug_dump"
    assert b.wait_end()["event"] == "done"
    assert not b.problems()
    assert len(list((diag / "debug_dump" / "rank_0" / "Net" / "0").rglob("*.npy"))) == 2
    assert list(decoy.iterdir()) == []
    h.finish()


def test_stale_temporary_files_are_removed_and_other_files_kept(harness, workdir):
    h = harness()
    root = make_dir(workdir / "tmpclean")
    it_dir = make_dir(root / "rank_0" / "Net" / "0" / "3")
    stale = it_dir / ".dumpd-tmp-1-deadbeef-0"
    stale.write_bytes(b"half-written by a dead dumpd")
    keep = it_dir / "notes.txt"
    keep.write_bytes(b"mine")
    s = h.raw_session(root, job_config(root))
    s.ring.commit_step(0, 3)
    s.ring.commit_op(0, 3, "Default/Tmp-op0", values(3))
    assert s.flush().counts.tensors_written == 1
    assert not stale.exists()
    assert keep.read_bytes() == b"mine"
    assert len(list(it_dir.glob("*.npy"))) == 1
    h.finish()


EVIL = "\x1b[31m\nFAKE LINE"


def test_control_characters_from_clients_reach_the_log_escaped(harness, workdir):
    h = harness()
    root = make_dir(workdir / "evil")
    # Unused kernel (logged at session end) and producer name (logged at session start).
    cfg = job_config(root, dump_mode=1, kernels=["Good", "evil" + EVIL])
    s = h.raw_session(root, cfg, rank=1, producer_name="prod" + EVIL)
    s.ring.commit_op(0, 0, "Default/Good-op0", values(1), op_type="Good")
    s.flush()
    s.conn.send(rc.goodbye())
    s.conn.recv_until_eof(timeout=DEADLINE_S)
    # A record whose size does not match its shape: the error quotes the op name.
    s2 = h.raw_session(root, job_config(root), rank=2)
    s2.ring.commit_op(0, 0, "Default/" + EVIL + "-op0", values(1), dtype=11)  # float64 != bytes
    end = s2.conn.recv_until_eof(timeout=DEADLINE_S)
    assert end and end[0].HasField("error"), end
    # An invalid net name: the validator's message.
    with pytest.raises(rc.SessionRefused):
        h.raw_session(root, job_config(root, net_name="n" + EVIL), rank=3)
    wait_for(lambda: b"unused kernel in job config: evil" in h.log(), DEADLINE_S,
             "the unused-kernel warning")
    h.finish()
    log = h.log()
    assert b"\x1b" not in log, "an ESC byte reached dumpd's log"
    fake = [line for line in log.split(b"\n") if line.startswith(b"FAKE")]
    assert fake == [], fake
    text = log.decode()
    assert "\\x1b[31m\\x0aFAKE" in text  # the names did reach the log, escaped
    assert "prod\\x1b" in text
