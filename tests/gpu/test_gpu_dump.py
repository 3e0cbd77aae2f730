"""CUDA tensors dumped through the device pipeline, on a real GPU: files bit-identical to the
tensor at hook time for every dtype, non-contiguous tensors, in-place modules, tensors freed
and reused right after the dump, and no host synchronisation on the producer's side."""

from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import dumpd  # noqa: E402
import dumpd.torch  # noqa: E402

from conftest import dump_files, make_config  # noqa: E402  (tests/gpu/conftest.py)

pytestmark = pytest.mark.conditional  # needs a CUDA GPU: conftest.py skips every test otherwise

DTYPES = [torch.bfloat16, torch.float16, torch.float32, torch.float64, torch.int8, torch.int32,
          torch.int64, torch.bool]


def host_bits(t):
    """The tensor's bytes as numpy, exactly (bf16 as its uint16 bit patterns)."""
    t = t.detach().cpu().contiguous()
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().view(np.uint16)
    return t.numpy()


def file_bits(f, dtype):
    a = f.load()
    if dtype == torch.bfloat16:  # written as float32: its top 16 bits are the bf16 bits
        return (a.view(np.uint32) >> 16).astype(np.uint16)
    return a


def random_tensor(dtype, shape, device="cuda"):
    if dtype == torch.bool:
        return torch.rand(shape, device=device) > 0.5
    if dtype.is_floating_point:
        return (torch.randn(shape, device=device) * 100).to(dtype)
    info = torch.iinfo(dtype)
    return torch.randint(max(info.min, -(2**31)), min(info.max, 2**31 - 1), shape,
                         device=device, dtype=torch.int64).to(dtype)


@pytest.mark.parametrize("staging", [0, 1 << 30])
def test_every_dtype_is_bit_identical_and_the_buffer_can_be_reused_at_once(daemon, tmp_path,
                                                                            staging):
    config = make_config(tmp_path)
    expected = {}
    with dumpd.Client(str(config), socket=daemon.socket, device_staging_bytes=staging) as c:
        stream = torch.cuda.current_stream().cuda_stream
        for i, dtype in enumerate(DTYPES):
            t = random_tensor(dtype, (257, 33))
            expected[i] = host_bits(t)  # synchronises: the test's reference, not the path
            arr = dumpd.DeviceArray(t.data_ptr(), t.shape, dumpd.torch._DEVICE_DTYPES[dtype],
                                    t.device.index)
            c.dump_op("Probe", f"Default/Probe-op{i}", outputs=[arr], stream=stream)
            # Overwrite and free at once: later work on the stream must not reach the file.
            t.fill_(0) if dtype != torch.bool else t.fill_(False)
            del t
            junk = torch.full((257 * 33 * 8,), 7, dtype=torch.uint8, device="cuda")
            del junk
        counts = c.flush()
        stats = c.stats()
    assert counts["tensors_written"] == len(DTYPES), counts
    assert stats["device_records"] == len(DTYPES)
    files = {int(f.op_name.rsplit("-op", 1)[1]): f for f in dump_files(tmp_path / "dump")}
    for i, dtype in enumerate(DTYPES):
        np.testing.assert_array_equal(file_bits(files[i], dtype), expected[i],
                                      err_msg=str(dtype))


class InPlace(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(64, 64)
        self.act = torch.nn.ReLU(inplace=True)
        self.scale = torch.nn.Identity()

    def forward(self, x):
        y = self.act(self.lin(x))  # ReLU overwrites Linear's dumped output in place
        return self.scale(y.t())   # a non-contiguous output


def test_torch_hooks_in_place_and_non_contiguous_without_host_sync(daemon, tmp_path):
    torch.manual_seed(0)
    model = InPlace().cuda()
    x = torch.randn(32, 64, device="cuda")
    with torch.no_grad():
        lin_out = model.lin(x).clone()
        relu_out = torch.relu(lin_out)
    config = make_config(tmp_path)
    with dumpd.Client(str(config), socket=daemon.socket) as c:
        handle = dumpd.torch.attach(model, c)
        dumpd.torch.step(c, 0)
        torch.cuda.synchronize()
        # Any synchronising CUDA call torch makes from here raises.
        torch.cuda.set_sync_debug_mode("error")
        try:
            with torch.no_grad():
                out = model(x)
        finally:
            torch.cuda.set_sync_debug_mode("default")
        handle.remove()
        c.flush()
    files = {(f.op_type, f.io, f.slot): f for f in dump_files(tmp_path / "dump")}
    np.testing.assert_array_equal(files[("Linear", "output", 0)].load(), lin_out.cpu().numpy(),
                                  err_msg="Linear's output as it was before the in-place ReLU")
    np.testing.assert_array_equal(files[("ReLU", "input", 0)].load(), lin_out.cpu().numpy())
    np.testing.assert_array_equal(files[("Identity", "output", 0)].load(),
                                  relu_out.t().cpu().numpy())
    assert files[("Identity", "output", 0)].load().shape == (64, 32)
    assert torch.equal(out, relu_out.t())


def test_a_side_stream_producer_is_snapshotted_on_its_own_stream(daemon, tmp_path):
    config = make_config(tmp_path)
    side = torch.cuda.Stream()
    with dumpd.Client(str(config), socket=daemon.socket) as c:
        with torch.cuda.stream(side):
            a = torch.arange(1 << 20, device="cuda", dtype=torch.float32)
            torch.cuda._sleep(50_000_000)  # the stream is busy; a is final only after it
            a.mul_(3)
            c.dump_op("Mul", "Default/Mul-op0", outputs=[a])  # __cuda_array_interface__
            a.fill_(-1)
        counts = c.flush()
    assert counts["tensors_written"] == 1
    (f,) = dump_files(tmp_path / "dump")
    np.testing.assert_array_equal(f.load(), np.arange(1 << 20, dtype=np.float32) * 3)


def test_flush_waits_for_copies_and_many_records_stay_in_order(daemon, tmp_path):
    config = make_config(tmp_path, iteration="all")
    with dumpd.Client(str(config), socket=daemon.socket, device_staging_bytes=8 << 20) as c:
        refs = []
        # Keep the stream busy so the snapshots queue up behind it and staging fills.
        torch.cuda._sleep(200_000_000)
        for i in range(300):
            t = torch.full((65536 + i,), float(i), device="cuda")  # 300 x 256 KiB > 8 MiB
            c.dump_op("Fill", f"Default/Fill-op{i}", outputs=[dumpd.DeviceArray(
                t.data_ptr(), t.shape, "float32", 0)],
                stream=torch.cuda.current_stream().cuda_stream)
            refs.append(65536 + i)
        counts = c.flush()
        stats = c.stats()
    assert counts["tensors_written"] == 300 and counts["tensors_failed"] == 0, counts
    assert stats["device_in_flight"] == 0
    assert stats["device_staging_waits"] > 0, "8 MiB of staging must have filled"
    for f in dump_files(tmp_path / "dump"):
        i = int(f.op_name.rsplit("-op", 1)[1])
        a = f.load()
        assert a.shape == (refs[i],) and (a == i).all()


VALUE_STATS = ["max", "min", "avg", "count", "negative zero count", "positive zero count",
               "nan count", "negative inf count", "positive inf count", "zero count", "l2norm"]


def csv_rows(root):
    """statistic.csv rows keyed by op name, the Timestamp column dropped."""
    rows = {}
    for csv in Path(root).rglob("statistic.csv"):
        lines = csv.read_text().splitlines()
        ts = lines[0].split(",").index("Timestamp")
        for line in lines[1:]:
            fields = line.split(",")
            rows[(fields[1], fields[5], fields[6])] = fields[:ts] + fields[ts + 1:]
    return rows


def special_tensor(dtype, shape):
    """A random tensor with zeros, and for floating types nan/inf, sprinkled in."""
    t = random_tensor(dtype, shape)
    flat = t.view(-1)
    if dtype != torch.bool:
        flat[::17] = 0
    if dtype.is_floating_point and flat.numel() > 11:
        flat[5] = float("inf")
        flat[9] = float("-inf")
        if shape[0] == 3:
            flat[11] = float("nan")
    return t


def host_item(t):
    """The dump_op item of the same tensor in host memory (bfloat16 as its raw bits)."""
    t = t.cpu()
    if t.dtype == torch.bfloat16:
        return (t.view(torch.int16).numpy(), "bfloat16")
    return t.numpy()


@pytest.mark.parametrize("staging", [0, 1 << 30])
def test_device_statistics_read_as_the_host_statistics_of_the_same_tensors(daemon, tmp_path,
                                                                           staging):
    tensors = []
    for i, dtype in enumerate(DTYPES):
        for shape in ((1,), (257, 33), (3, 1 << 20)):
            tensors.append((f"Default/Stat-op{len(tensors)}", special_tensor(dtype, shape)))
    rows = {}
    for where in ("cuda", "cpu"):
        root = tmp_path / where
        root.mkdir()
        config = make_config(root, saved_data="statistic", statistic_category=VALUE_STATS)
        with dumpd.Client(str(config), socket=daemon.socket, device_staging_bytes=staging) as c:
            for name, t in tensors:
                x = t if where == "cuda" else host_item(t)
                c.dump_op("Stat", name, outputs=[x])
            counts = c.flush()
            stats = c.stats()
        assert counts["tensors_written"] == len(tensors), counts
        assert stats["device_statistics"] == (len(tensors) if where == "cuda" else 0)
        assert not dump_files(root / "dump"), "statistic mode writes no .npy"
        rows[where] = csv_rows(root / "dump")
    assert len(rows["cuda"]) == len(tensors)
    for key, host_row in rows["cpu"].items():
        assert rows["cuda"][key] == host_row, key


def test_overflow_mode_with_device_statistics_dumps_exactly_the_ops_with_inf_or_nan(daemon,
                                                                                     tmp_path):
    config = make_config(tmp_path, saved_data="statistic", op_debug_mode=3)
    overflowing = set()
    with dumpd.Client(str(config), socket=daemon.socket) as c:
        for i in range(40):
            x = torch.randn(4096, device="cuda", dtype=torch.float16)
            y = x * (70000.0 if i % 9 == 0 else 1.0)  # float16 overflows to inf
            if i % 13 == 0:
                y[7] = float("nan")
            if i % 9 == 0 or i % 13 == 0:
                overflowing.add(f"Default_Scale-op{i}")  # statistic.csv (ms_format 2.6)
            c.dump_op("Scale", f"Default/Scale-op{i}", inputs=[x], outputs=[y])
        c.flush()
    assert {name for name, _, _ in csv_rows(tmp_path / "dump")} == overflowing
