"""dumpd.torch.check_replicas on real ranks: torch.distributed over gloo, world size 4, two
dumpd daemons standing for two nodes (ranks 0-1 on one, 2-3 on the other), a small DDP model
trained with SGD. One bit of one rank's parameter (or gradient) is flipped; every rank finds
the mismatch at that step or the next, names the tensor, the step and the rank; each daemon
journals it (replicas.jsonl), fires the flight recorder (triggers.jsonl, kind
replica_mismatch), and writes the parameter's value, in which exactly the flipped element
differs between the faulty rank and a healthy one. With no fault nothing is reported.
The same for a gradient digested by torch operations (the device path), for a layer norm two
tensor-parallel ranks of one node replicate (the BLOOM case), and after `dumpctl control
--replica-every` changed the period of a running job.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch", reason="torch is not installed for this interpreter")
import torch.distributed as dist  # noqa: E402

from conftest import (dump_files, make_config, start_daemon, stop_daemon,  # noqa: E402
                      wait_for)

if not dist.is_available() or not dist.is_gloo_available():
    pytest.skip("this torch has no gloo backend", allow_module_level=True)

WORKER = Path(__file__).with_name("replica_worker.py")
WORLD = 4
FLIP_INDEX = (3, 5)


@pytest.fixture(scope="module")
def daemons():
    a, b = start_daemon(), start_daemon()
    yield a, b
    stop_daemon(a)
    stop_daemon(b)


def run_ranks(tmp_path: Path, daemons, steps: int, fault_step: int, fault: str,
              world: int = WORLD, fault_rank: int = 3, during=None, **options):
    """Runs `world` ranks (the first half on daemons[0], the rest on daemons[1]); `during`,
    if given, runs while they do. Returns the dump root and each rank's printed result."""
    cfg = json.loads(make_config(tmp_path, iteration="none").read_text())
    cfg["flight_recorder"] = {"steps": 2, "after_steps": 0, "triggers": ["replica_mismatch"]}
    config = tmp_path / "job.json"
    config.write_text(json.dumps(cfg))
    env = dict(os.environ, OMP_NUM_THREADS="1")
    common = dict(init=str(tmp_path / "init"), config=str(config), steps=steps,
                  fault=fault, fault_step=fault_step, fault_rank=fault_rank, **options)
    half = (world + 1) // 2
    out = [tmp_path / f"rank{r}.out" for r in range(world)]
    err = [tmp_path / f"rank{r}.err" for r in range(world)]
    procs = []
    for rank in range(world):
        with open(out[rank], "w") as o, open(err[rank], "w") as e:
            procs.append(subprocess.Popen(
                [sys.executable, str(WORKER), str(rank), str(world), json.dumps(
                    dict(common, socket=daemons[0 if rank < half else 1].socket))],
                stdout=o, stderr=e, env=env))
    late = ""
    try:
        if during is not None:
            during()
        # A rank that fails leaves the others waiting in a collective: stop at the first.
        wait_for(lambda: all(p.poll() is not None for p in procs) or any(
            p.returncode not in (None, 0) for p in procs), 180, "the ranks to finish")
    except pytest.fail.Exception:
        late = "ranks still running after 180 s were killed\n"
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    for rank, p in enumerate(procs):
        assert p.returncode == 0, late + "\n".join(
            f"rank {r} (exit {q.returncode}):\n{err[r].read_text()[-3000:]}"
            for r, q in enumerate(procs))
    results = [json.loads(o.read_text().strip().splitlines()[-1]) for o in out]
    return tmp_path / "dump", results


def found_by(results):
    return [[{k: m[k] for k in ("step", "tensor", "ranks")} for m in r["mismatches"]]
            for r in results]


def journal(root: Path, rank: int, name: str):
    path = root / f"rank_{rank}" / ".dump_metadata" / name
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def replica_value(root: Path, rank: int, name: str = "fc1_weight") -> np.ndarray:
    files = [f for f in dump_files(root)
             if f.rank == rank and f.op_type == "Replica" and name in f.op_name]
    assert len(files) == 1, [str(f.path) for f in dump_files(root)]
    return files[0].load()


def test_a_flipped_parameter_bit_is_found_on_every_rank_with_its_evidence(tmp_path, daemons):
    root, results = run_ranks(tmp_path, daemons, steps=40, fault_step=30, fault="param")
    found = found_by(results)
    for rank in range(WORLD):
        # Flipped after step 30's check: step 31's parameters differ.
        assert found[rank] == [{"step": 31, "tensor": "param:fc1.weight", "ranks": [3]}], rank
        lines = journal(root, rank, "replicas.jsonl")
        assert [(x["tensor"], x["iteration"], [d["rank"] for d in x["differing"]])
                for x in lines] == [("param:fc1.weight", 31, [3])], rank
        assert lines[0]["group_size"] == WORLD
        triggers = journal(root, rank, "triggers.jsonl")
        assert [t["kind"] for t in triggers] == ["replica_mismatch"], rank
        assert triggers[0]["replicas"]["tensor"] == "param:fc1.weight"
        assert "rank 3 of 4 differs" in triggers[0]["reason"]
    # The evidence: the parameter as rank 3 and a healthy rank hold it.
    bad, good = replica_value(root, 3), replica_value(root, 0)
    differ = np.argwhere(bad != good)
    assert differ.tolist() == [list(FLIP_INDEX)], differ
    assert np.array_equal(replica_value(root, 1), good)


def test_a_gradient_corrupted_after_the_all_reduce_is_found_that_step(tmp_path, daemons):
    # Digested by torch operations, as tensors on a device are.
    root, results = run_ranks(tmp_path, daemons, steps=30, fault_step=20, fault="grad",
                              digests="torch")
    found = found_by(results)
    for rank in range(WORLD):
        # The gradient, and the parameter the step then computed from it.
        assert found[rank] == [{"step": 20, "tensor": "grad:fc1.weight", "ranks": [3]},
                               {"step": 20, "tensor": "param:fc1.weight", "ranks": [3]}], rank
        assert len(journal(root, rank, "replicas.jsonl")) == 2


def test_without_a_fault_nothing_is_reported(tmp_path, daemons):
    root, results = run_ranks(tmp_path, daemons, steps=2000, fault_step=-1, fault="none")
    assert found_by(results) == [[]] * WORLD
    for rank in range(WORLD):
        assert journal(root, rank, "replicas.jsonl") == []
        assert journal(root, rank, "triggers.jsonl") == []


def test_a_layer_norm_two_tensor_parallel_ranks_replicate_drifts_apart(tmp_path, daemons):
    """The BLOOM case: two ranks of one node hold different shards of a linear layer and the
    same layer norm; one rank's copy of the layer norm changes."""
    root, results = run_ranks(tmp_path, (daemons[0], daemons[0]), steps=40, fault_step=30,
                              fault="param", world=2, fault_rank=1, model="tp")
    for rank in range(2):
        # Two replicas: no majority, so both ranks are named.
        assert results[rank]["mismatches"] == [
            {"step": 31, "tensor": "tp/param:ln.weight", "ranks": [0, 1], "majority": False}]
        triggers = journal(root, rank, "triggers.jsonl")
        assert [t["replicas"]["tensor"] for t in triggers] == ["tp/param:ln.weight"], rank
    bad, good = replica_value(root, 1, "ln_weight"), replica_value(root, 0, "ln_weight")
    assert np.argwhere(bad != good).tolist() == [[5]]


def test_dumpctl_control_changes_the_period_of_a_running_job(tmp_path, daemons):
    daemon = daemons[0]
    go = tmp_path / "go"

    def dumpctl(*args):
        return subprocess.run([os.environ["DUMPCTL_BIN"], "--socket", daemon.socket, *args],
                              capture_output=True, text=True, timeout=30)

    def operator():
        # Rank 0 waits before step 10 until the change is made.
        wait_for(lambda: dumpctl("control", "--rank", "0", "--job", "Net",
                                 "--replica-every", "5").returncode == 0, 60,
                 "rank 0's session to take the change")
        status = json.loads(dumpctl("status", "--json").stdout)
        assert [s["replica_every"] for s in status["sessions"] if s["rank"] == 0] == [5]
        assert "replicas checked every 5" in dumpctl("status").stdout
        go.write_text("")

    # Flipped after step 31: found at step 32 when every step is checked, at 35 when every
    # fifth is.
    root, results = run_ranks(tmp_path, (daemon, daemon), steps=40, fault_step=31,
                              fault="param", world=2, fault_rank=1, pause_step=10,
                              go_file=str(go), during=operator)
    for rank in range(2):
        assert results[rank]["every"] == 5
        assert found_by(results)[rank] == [{"step": 35, "tensor": "param:fc1.weight",
                                            "ranks": [0, 1]}]
    # The operator's change (dumpd's own lines follow it: the recorder stopping).
    line = journal(root, 0, "control.jsonl")[0]
    assert line["uid"] == os.getuid()
    assert line["new"]["replica_every"] == 5 and "replica_every" not in line["old"]
    refused = dumpctl("control", "--rank", "0", "--job", "Net", "--replica-every", "0")
    assert refused.returncode != 0 and "--replica-every" in refused.stderr


def rss_anon(pid: int) -> int:
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("RssAnon:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no RssAnon")


def test_forged_reports_reach_only_their_own_session_and_hold_no_memory(tmp_path, daemons):
    import threading

    import dumpd

    daemon = daemons[0]
    (tmp_path / "benign").mkdir()
    (tmp_path / "hostile").mkdir()
    cfg = json.loads(make_config(tmp_path / "benign", iteration="none").read_text())
    cfg["flight_recorder"] = {"steps": 2, "after_steps": 0}  # every trigger kind
    benign_config = tmp_path / "benign" / "job.json"
    benign_config.write_text(json.dumps(cfg))
    benign = dumpd.Client(str(benign_config), socket=daemon.socket, rank=0)
    benign.set_step(0)
    benign.dump("Add", "a", "output", 0, np.ones(4, np.float32))
    benign.flush()
    hostile = dumpd.Client(str(make_config(tmp_path / "hostile")), socket=daemon.socket, rank=1)
    base = rss_anon(daemon.proc.pid)
    peak = [base]
    done = threading.Event()

    def sample():
        while not done.is_set():
            peak[0] = max(peak[0], rss_anon(daemon.proc.pid))
            done.wait(0.01)

    sampler = threading.Thread(target=sample)
    sampler.start()
    digests = list(range(4096))
    ranks = list(range(0, 4096, 2))  # half of a group of 4096 differs
    name = "param:" + "w" * 4000
    for i in range(3000):
        hostile.report_replica_mismatch(i, name, ranks, digests)
    hostile.flush()
    done.set()
    sampler.join()
    hostile.close()
    benign.set_step(1)
    benign.close()
    growth = peak[0] - base
    assert growth < 48 << 20, f"dumpd's RssAnon grew by {growth >> 20} MiB"
    # The benign job's recorder did not fire; the hostile job's reports stayed its own.
    assert journal(tmp_path / "benign" / "dump", 0, "triggers.jsonl") == []
    assert journal(tmp_path / "benign" / "dump", 0, "replicas.jsonl") == []
    # Its journal stops at the job's journal_bytes (16 MiB): 3000 lines of 6.7 KB do not fit.
    path = tmp_path / "hostile" / "dump" / "rank_1" / ".dump_metadata" / "replicas.jsonl"
    assert path.stat().st_size <= 16 << 20
    lines = journal(tmp_path / "hostile" / "dump", 1, "replicas.jsonl")
    assert 0 < len(lines) < 3000
    assert all(len(x["differing"]) == 64 and x["differing_count"] == 2048 for x in lines)


@pytest.fixture
def one_rank(tmp_path):
    """This process as a group of one (gloo), for what is decided before any exchange."""
    dist.init_process_group("gloo", init_method="file://" + str(tmp_path / "store"), rank=0,
                            world_size=1)
    yield
    dist.destroy_process_group()


def test_what_cannot_be_replicas_is_refused_by_name(one_rank, tmp_path):
    import torch
    from torch import nn

    import dumpd.torch

    model = nn.Sequential(nn.Linear(4, 4), nn.LayerNorm(4))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(ValueError, match="no trainable parameter named 1.wieght"):
        dumpd.torch.check_replicas(model, opt, None, names=["1.weight", "1.wieght"])
    with pytest.raises(ValueError, match='digests must be "auto" or "torch"'):
        dumpd.torch.check_replicas(model, opt, None, digests="cuda")
    with pytest.raises(ValueError, match="every must be at least 1"):
        dumpd.torch.check_replicas(model, opt, None, every=0)

    class FullyShardedDataParallel(nn.Module):  # named as torch's, whose import may fail
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

    with pytest.raises(ValueError, match=r"shards the model's parameters \(FSDP\)"):
        dumpd.torch.check_replicas(FullyShardedDataParallel(model), opt, None)
    assert opt.step.__func__ is torch.optim.SGD.step  # nothing wrapped by a refused check


@pytest.mark.conditional  # DTensor: torch 2.4 and later
def test_a_distributed_tensor_parameter_is_refused(one_rank):
    import torch
    from torch import nn

    import dumpd.torch

    tensor_api = pytest.importorskip("torch.distributed.tensor",
                                     reason="this torch has no DTensor (torch 2.4 and later)")
    mesh = tensor_api.init_device_mesh("cpu", (1,))
    model = nn.Linear(4, 4)
    model.weight = nn.Parameter(tensor_api.distribute_tensor(model.weight.detach(), mesh,
                                                              [tensor_api.Shard(0)]))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(ValueError, match="parameter weight is a DTensor"):
        dumpd.torch.check_replicas(model, opt, None)
