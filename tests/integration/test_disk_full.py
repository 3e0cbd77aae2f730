"""A full disk and the free-space watermark, on a tiny tmpfs mounted for the test."""

import json
import os
import subprocess

import numpy as np
import pytest

from conftest import Daemon, npy_files, run_producer, write_config

pytestmark = pytest.mark.conditional  # needs root to mount its tiny tmpfs


@pytest.fixture
def tiny(workdir):
    mnt = workdir / "tiny"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=512k", "tmpfs", str(mnt)],
                       capture_output=True, text=True)
    if r.returncode != 0:
        why = (r.stderr.strip().splitlines() or [f"mount exited with {r.returncode}"])[0]
        if os.geteuid() != 0:
            why = f"mounting needs root, these tests run as uid {os.geteuid()} ({why})"
        pytest.skip(f"cannot mount the tiny tmpfs the disk-full tests need: {why}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def test_enospc_is_an_error_per_file_never_a_partial_file_or_a_crash(workdir, tiny):
    d = Daemon(workdir, settings={"min_free_bytes": 0})
    try:
        cfg = write_config(workdir, path=str(tiny / "dump"), saved_data="full")
        out = run_producer(d, cfg, "--iterations", 3, "--layers", 2, "--elements", 16384)
        assert "failed 0" not in out.stdout, out.stdout
        failed = int(out.stdout.split(" failed")[0].split()[-1])
        assert failed > 0
        files = npy_files(tiny / "dump")
        for f in files:  # whatever landed is whole
            assert np.load(f).shape == (16384,)
        assert not [p for p in tiny.rglob("*") if ".dumpd-tmp" in p.name]
        assert len(files) + failed == 3 * 10 * 3
        assert d.alive()
        st = d.status()
        assert st["totals"]["tensors_failed"] == failed
        assert 0 < st["totals"]["write_errors"] <= failed  # one per failed op
        log = d.logtext()
        assert "No space left on device" in log or "no space" in log.lower()
        warnings = [l for l in log.splitlines() if " warn: session" in l and "suppressed" not in l]
        assert len(warnings) <= 5 + 2, "per-session warnings are rate-limited"
        assert "similar warning(s) suppressed" in log or failed <= 5
        # The daemon keeps serving another job on a healthy disk.
        ok = write_config(workdir, name="ok.json", path=str(workdir / "dump"))
        run_producer(d, ok, "--iterations", 1, "--layers", 1, "--elements", 4)
        assert len(npy_files(workdir / "dump")) == 15
    finally:
        assert d.stop() == 0, d.logtext()


def test_free_space_watermark_stops_payloads_and_says_why(workdir, tiny):
    d = Daemon(workdir)  # default min_free_bytes: 1 GiB, far above the 512 KiB tmpfs
    try:
        cfg = write_config(workdir, path=str(tiny / "dump"), saved_data="full")
        out = run_producer(d, cfg, "--iterations", 2, "--layers", 1, "--elements", 8)
        assert npy_files(tiny / "dump") == []
        assert "30 dropped" in out.stdout.splitlines()[0], out.stdout
        csv = list((tiny / "dump").rglob("statistic.csv"))
        assert csv, "statistics continue when payloads stop"
        rows = sum(len(p.read_text().splitlines()) - 1 for p in csv)
        assert rows == 30
        manifest = (tiny / "dump" / "rank_0" / ".dump_metadata" / "manifest.jsonl").read_text()
        lines = [json.loads(l) for l in manifest.splitlines() if l.strip()]
        assert len(lines) == 2 and all(l["dropped"] == 15 for l in lines)
        assert any("free" in r for r in lines[0]["reasons"]), lines[0]
    finally:
        assert d.stop() == 0, d.logtext()
