"""The flight recorder with CUDA tensors on a real GPU (issue 22): kept iterations written
bit-identical on a trigger although the producer overwrites its device buffers every step,
a NaN found by the device statistics, and a CUDA loss reported every step without a host
synchronisation."""

import json
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import dumpd  # noqa: E402
import dumpd.torch  # noqa: E402

from conftest import dump_files, make_config  # noqa: E402  (tests/gpu/conftest.py)

pytestmark = pytest.mark.conditional  # needs a CUDA GPU: conftest.py skips every test otherwise

NOTHING = "none"  # no iteration selected: every step is only recorded


def recorder_config(tmp_path, saved_data="full", **recorder):
    section = {"steps": 3, "after_steps": 1, "max_triggers": 1, "saved_data": saved_data}
    section.update(recorder)
    path = make_config(tmp_path, iteration=NOTHING, saved_data=saved_data)
    cfg = json.loads(path.read_text())
    cfg["flight_recorder"] = section
    path.write_text(json.dumps(cfg))
    return path


def triggers(root):
    files = list(Path(root).glob("rank_*/.dump_metadata/triggers.jsonl"))
    return [json.loads(line) for line in files[0].read_text().splitlines()] if files else []


def files_by_key(root):
    return {(int(f.iteration), f.op_name, f.io, f.slot): f for f in dump_files(root)}


@pytest.mark.parametrize("staging", [0, 1 << 30])
def test_kept_cuda_iterations_are_written_bit_identical_on_an_inf(daemon, tmp_path, staging):
    config = recorder_config(tmp_path)
    x = torch.empty(4096, device="cuda", dtype=torch.float32)
    y = torch.empty_like(x)
    expected = {}
    with dumpd.Client(str(config), socket=daemon.socket, device_staging_bytes=staging) as c:
        for step in range(12):
            c.set_step(step)
            for op in range(2):
                x.copy_(torch.arange(4096, device="cuda", dtype=torch.float32) + step * 100 + op)
                torch.mul(x, 2, out=y)  # the same buffers every step: reuse right after
                if step == 7 and op == 1:
                    y[5] = float("inf")
                expected[(step, op)] = (x.cpu().numpy().copy(), y.cpu().numpy().copy())
                c.dump_op("Mul", f"Default/Mul-op{op}", inputs=[x], outputs=[y])
        c.flush()
        stats = c.stats()
    if staging:
        # Kept on the device (no device-to-host copy) until the trigger fetched steps 5-7.
        assert stats["device_records_deferred"] >= 7 * 2, stats
        assert stats["device_records_fetched"] >= 3 * 2, stats
    else:
        assert stats["device_records_deferred"] == 0, stats  # no staging: copied at once
    root = tmp_path / "dump"
    files = files_by_key(root)
    assert sorted({k[0] for k in files}) == [5, 6, 7, 8]
    for step in (5, 6, 7, 8):
        for op in range(2):
            want_x, want_y = expected[(step, op)]
            assert np.array_equal(files[(step, f"Default_Mul-op{op}", "input", 0)].load(),
                                  want_x), (step, op)
            assert np.array_equal(files[(step, f"Default_Mul-op{op}", "output", 0)].load(),
                                  want_y), (step, op)
    [t] = triggers(root)
    assert (t["kind"], t["iteration"], t["op"], t["tensor"]) == (
        "inf", 7, "Default/Mul-op1", "output 0")


def run_chain(daemon, tmp_path, device):
    """Linear -> Tanh -> Linear through dumpd.torch, recorded on `device`, a manual trigger at
    step 5. Returns (the files, the values each module gave at each step, the client's stats,
    the hook names)."""
    config = recorder_config(tmp_path)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.Tanh(),
                                torch.nn.Linear(256, 256)).to(device)
    x = torch.randn(64, 256, device=device)
    seen = {}
    at = [0]

    def keep(index):
        def hook(module, args, out):
            seen[(at[0], index)] = out.detach().cpu().numpy().copy()
        return hook
    with dumpd.Client(str(config), socket=daemon.socket, device_staging_bytes=1 << 30) as c:
        h = dumpd.torch.attach(model, c)
        for index, module in enumerate(model):
            module.register_forward_hook(keep(index))  # after dumpd's hook
        with torch.no_grad():
            for step in range(8):
                at[0] = step
                dumpd.torch.step(c, step)
                model(x)
                if step == 5:
                    c.trigger("look")
        c.flush()
        stats = c.stats()
        h.remove()
    names = [h.names[str(i)].replace("/", "_") for i in range(3)]
    seen["x"] = x.cpu().numpy()
    return files_by_key(tmp_path / "dump"), seen, stats, names


def check_chain(files, seen, names):
    assert sorted({k[0] for k in files}) == [3, 4, 5, 6]
    for step in (3, 4, 5, 6):
        for i in range(3):
            out = files[(step, names[i], "output", 0)]
            inp = files[(step, names[i], "input", 0)]
            assert np.array_equal(out.load(), seen[(step, i)]), (step, i)
            assert np.array_equal(inp.load(), seen[(step, i - 1)] if i else seen["x"]), (step, i)
            if i:  # the last module's output, repeated: one file, linked
                prev = files[(step, names[i - 1], "output", 0)]
                assert inp.path.stat().st_ino == prev.path.stat().st_ino, (step, i)


def test_a_repeated_cuda_tensor_is_kept_once_on_the_device_and_linked(daemon, tmp_path):
    files, seen, stats, names = run_chain(daemon, tmp_path, "cuda")
    check_chain(files, seen, names)
    # Kept on the device until the trigger, each repeat a reference (no second snapshot).
    assert stats["device_records_deferred"] >= 3 * 3, stats
    assert stats["device_records_fetched"] >= 3 * 3, stats
    assert stats["tensors_deduplicated"] >= 7 * 2, stats


def test_a_nan_in_a_statistics_only_recorder_is_found_by_the_device_statistics(daemon,
                                                                               tmp_path):
    config = recorder_config(tmp_path, saved_data="statistic", steps=2, after_steps=0)
    with dumpd.Client(str(config), socket=daemon.socket) as c:
        for step in range(6):
            c.set_step(step)
            a = torch.ones(1 << 16, device="cuda", dtype=torch.bfloat16)
            if step == 4:
                a[1234] = float("nan")
            c.dump_op("Div", "Default/Div-op0", outputs=[a])
        c.flush()
        stats = c.stats()
    assert stats["device_statistics"] == 6  # no tensor crossed to the host for its statistics
    [t] = triggers(tmp_path / "dump")
    assert (t["kind"], t["op"], t["iteration"]) == ("nan", "Default/Div-op0", 4)


def test_a_cuda_loss_every_step_never_synchronises_the_step(daemon, tmp_path):
    config = recorder_config(tmp_path, saved_data="statistic", steps=2, after_steps=0,
                             triggers=["loss_spike"], loss_spike={"window": 5, "factor": 3.0})
    w = torch.ones(1024, device="cuda")
    spike = 15
    with dumpd.Client(str(config), socket=daemon.socket) as c:
        # Once-only costs (pinned host memory, events) come first, untested.
        for step in range(2):
            dumpd.torch.step(c, step, loss=w.mean())
        torch.cuda.synchronize()
        # torch raises on any synchronising call it makes from here on.
        torch.cuda.set_sync_debug_mode("error")
        try:
            for step in range(2, 22):
                # The device is busy for ~100 ms with the step's work; the loss is its result.
                torch.cuda._sleep(200_000_000)
                loss = (w * (40.0 if step == spike else 1.0 + 0.01 * step)).mean()
                dumpd.torch.step(c, step, loss=loss)
                # The step mark did not wait for this step's work: the device still has it.
                # (It may wait for the loss of two steps ago, which keeps the device fed.)
                assert not torch.cuda.current_stream().query(), step
        finally:
            torch.cuda.set_sync_debug_mode("default")
        torch.cuda.synchronize()
        dumpd.torch.step(c, 22, loss=1.0)  # the last CUDA losses arrive
        c.flush()
    ts = triggers(tmp_path / "dump")
    assert [t["kind"] for t in ts] == ["loss_spike"]
    assert ts[0]["losses"][-1] == pytest.approx(40.0)
