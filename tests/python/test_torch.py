"""dumpd.torch: a real PyTorch training loop dumped through a real daemon.

The tests capture every tensor the model produces with their own hooks (registered after
dumpd's, so they see the same tensors) and compare the dumped files value for value.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any, Dict, List, Tuple

import numpy as np
import pytest
import torch
from torch import nn

import dumpd
import dumpd.torch
from conftest import (Daemon, dump_files, index_files, make_config, sanitize, start_daemon,
                      stop_daemon)

torch.set_num_threads(1)


class SmallNet(nn.Module):
    """features: Conv2d, in-place ReLU, MaxPool2d; classifier: Linear, ReLU, Linear."""

    def __init__(self, inplace: bool = True) -> None:
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(inplace=inplace),
                                      nn.MaxPool2d(2))
        self.classifier = nn.Sequential(nn.Linear(4 * 4 * 4, 8), nn.ReLU(), nn.Linear(8, 3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(torch.flatten(self.features(x), 1))


EXPECTED_NAMES = {
    "features.0": "Default/features-Sequential/0-Conv2d/Conv2d-op2",
    "features.1": "Default/features-Sequential/1-ReLU/ReLU-op3",
    "features.2": "Default/features-Sequential/2-MaxPool2d/MaxPool2d-op4",
    "classifier.0": "Default/classifier-Sequential/0-Linear/Linear-op6",
    "classifier.1": "Default/classifier-Sequential/1-ReLU/ReLU-op7",
    "classifier.2": "Default/classifier-Sequential/2-Linear/Linear-op8",
}


def _flat(value: Any) -> List[Any]:
    if isinstance(value, (tuple, list)):
        return [x for v in value for x in _flat(v)]
    return [value]


def _clone(value: Any) -> List[Any]:
    return [v.detach().clone() if isinstance(v, torch.Tensor) else None for v in _flat(value)]


class Recorder:
    """Our own hooks: (iteration, module path, io) -> list of tensor clones by slot."""

    def __init__(self, model: nn.Module, client: dumpd.Client, backward: bool = False) -> None:
        self.client = client
        self.forward: Dict[Tuple[int, str, str], List[Any]] = {}
        self.backward: Dict[Tuple[int, str, str], List[Any]] = {}
        self.calls: Dict[str, int] = defaultdict(int)
        self.hooks = []
        for path, module in model.named_modules():
            if next(module.children(), None) is not None:
                continue
            self.hooks.append(module.register_forward_pre_hook(self._pre(path)))
            self.hooks.append(module.register_forward_hook(self._post(path)))
            if backward:
                self.hooks.append(module.register_full_backward_hook(self._grad(path)))

    def _iteration(self) -> int:
        return self.client.stats()["iteration"]

    def _pre(self, path: str):
        def hook(module, args):
            self.forward[(self._iteration(), path, "input")] = _clone(args)
        return hook

    def _post(self, path: str):
        def hook(module, args, output):
            self.calls[path] += 1
            self.forward[(self._iteration(), path, "output")] = _clone(output)
        return hook

    def _grad(self, path: str):
        def hook(module, grad_input, grad_output):
            it = self._iteration()
            self.backward[(it, path, "input")] = _clone(grad_output)
            self.backward[(it, path, "output")] = _clone(grad_input)
        return hook

    def remove(self) -> None:
        for h in self.hooks:
            h.remove()


def _train(model: nn.Module, client: dumpd.Client, steps: int, seed: int = 0) -> None:
    torch.manual_seed(seed)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(2, 3, 8, 8)
    y = torch.tensor([0, 2])
    for _ in dumpd.torch.steps(client, range(steps)):
        optimizer.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()


def _assert_files_match(files, recorded, names, iterations) -> int:
    """Every recorded tensor of the given iterations has a file with equal values, and
    every file is one of them. Returns the number of tensors compared."""
    expected = {}
    for (it, path, io), tensors in recorded.items():
        if it not in iterations:
            continue
        for slot, t in enumerate(tensors):
            if t is not None:
                expected[(it, sanitize(names[path]), io, slot)] = t
    assert set(files) == set(expected)
    for key, t in expected.items():
        loaded = files[key].load()
        assert loaded.shape == tuple(t.shape), key
        np.testing.assert_array_equal(loaded, t.numpy(), err_msg=str(key))
    return len(expected)


def test_op_names_are_mindspore_style_and_stable() -> None:
    names = {path: name for path, (_, name) in dumpd.torch.op_names(SmallNet()).items()}
    assert names == EXPECTED_NAMES
    assert dumpd.torch.op_names(SmallNet()) == dumpd.torch.op_names(SmallNet())
    assert dumpd.torch.op_names(nn.Linear(2, 2)) == {"": ("Linear", "Default/Linear-op0")}


def test_training_loop_files_equal_the_model_tensors(daemon: Daemon, tmp_path: Path) -> None:
    config = make_config(tmp_path, iteration="1|3")
    model = SmallNet()
    with dumpd.Client(config, socket=daemon.socket) as client:
        handle = dumpd.torch.attach(model, client)
        assert handle.names == EXPECTED_NAMES
        recorder = Recorder(model, client)
        _train(model, client, steps=5)
        counts = client.flush()
        handle.remove()
    assert counts["tensors_failed"] == 0 and counts["tensors_dropped"] == 0
    assert all(n == 5 for n in recorder.calls.values())
    files = index_files(dump_files(tmp_path / "dump"))
    assert {k[0] for k in files} == {1, 3}
    compared = _assert_files_match(files, recorder.forward, EXPECTED_NAMES, {1, 3})
    assert compared == 2 * 6 * 2  # 2 iterations x 6 leaf modules x (1 input + 1 output)
    some = files[(1, sanitize(EXPECTED_NAMES["features.0"]), "output", 0)]
    assert (some.op_type, some.dtype, some.net) == ("Conv2d", "float32", "Net")


def test_in_place_module_inputs_are_dumped_before_they_change(daemon: Daemon,
                                                              tmp_path: Path) -> None:
    config = make_config(tmp_path, dump_mode=1, kernels=["relu"])
    model = SmallNet(inplace=True)
    with dumpd.Client(config, socket=daemon.socket) as client:
        dumpd.torch.attach(model, client)
        client.set_step(0)
        model(torch.randn(2, 3, 8, 8))
        client.flush()
    files = index_files(dump_files(tmp_path / "dump"))
    relu = sanitize(EXPECTED_NAMES["features.1"])
    before = files[(0, relu, "input", 0)].load()
    after = files[(0, relu, "output", 0)].load()
    assert (before < 0).any(), "the conv output should have negative values"
    np.testing.assert_array_equal(after, np.maximum(before, 0))


@pytest.mark.parametrize("kernels, expected", [
    (["conv"], {"features.0"}),
    (["name-regex(Default/classifier.+)"], {"classifier.0", "classifier.1", "classifier.2"}),
    (["Linear"], {"classifier.0", "classifier.2"}),
    (["Default/features-Sequential/2-MaxPool2d/MaxPool2d-op4"], {"features.2"}),
])
def test_kernel_filters_select_modules(daemon: Daemon, tmp_path: Path, kernels,
                                       expected) -> None:
    config = make_config(tmp_path, dump_mode=1, kernels=kernels, iteration="0")
    model = SmallNet()
    with dumpd.Client(config, socket=daemon.socket) as client:
        dumpd.torch.attach(model, client)
        recorder = Recorder(model, client)
        _train(model, client, steps=2)
        client.flush()
    files = index_files(dump_files(tmp_path / "dump"))
    names = {p: n for p, n in EXPECTED_NAMES.items() if p in expected}
    recorded = {k: v for k, v in recorder.forward.items() if k[1] in expected}
    _assert_files_match(files, recorded, names, {0})


def test_unselected_steps_touch_no_tensor(daemon: Daemon, tmp_path: Path) -> None:
    config = make_config(tmp_path, iteration="100")
    model = SmallNet()
    with dumpd.Client(config, socket=daemon.socket) as client:
        dumpd.torch.attach(model, client, backward=False)
        _train(model, client, steps=3)
        stats = client.stats()
    # The hooks asked the filter and returned: nothing reached the client's dump path.
    assert stats["tensors_committed"] == 0 and stats["tensors_filtered"] == 0
    assert dump_files(tmp_path / "dump") == []


def test_backward_dumps_gradients(daemon: Daemon, tmp_path: Path) -> None:
    config = make_config(tmp_path, iteration="1")
    model = SmallNet(inplace=False)
    with dumpd.Client(config, socket=daemon.socket) as client:
        handle = dumpd.torch.attach(model, client, backward=True)
        assert handle.gradient_names["features.0"] == \
            "Gradients/Default/features-Sequential/0-Conv2d/gradConv2d/Conv2dGrad-op2"
        recorder = Recorder(model, client, backward=True)
        _train(model, client, steps=2)
        client.flush()
    files = index_files(dump_files(tmp_path / "dump"))
    forward = {k: v for k, v in files.items() if not k[1].startswith("Gradients")}
    grads = {k: v for k, v in files.items() if k[1].startswith("Gradients")}
    _assert_files_match(forward, recorder.forward, EXPECTED_NAMES, {1})
    n = _assert_files_match(grads, recorder.backward, handle.gradient_names, {1})
    assert n >= 6
    conv_grad = grads[(1, sanitize(handle.gradient_names["features.0"]), "input", 0)]
    assert conv_grad.op_type == "Conv2dGrad"
    # The input image needs no gradient: the conv's grad_input is None, so no output file.
    assert (1, conv_grad.op_name, "output", 0) not in grads


def test_remove_stops_dumping(daemon: Daemon, tmp_path: Path) -> None:
    config = make_config(tmp_path)
    model = SmallNet()
    with dumpd.Client(config, socket=daemon.socket) as client:
        with dumpd.torch.attach(model, client):
            client.set_step(0)
            model(torch.randn(1, 3, 8, 8))
        client.set_step(1)
        model(torch.randn(1, 3, 8, 8))
        client.flush()
    assert {int(f.iteration) for f in dump_files(tmp_path / "dump")} == {0}


def test_a_model_dropped_without_remove_releases_its_client(daemon: Daemon,
                                                             tmp_path: Path) -> None:
    """The hooks are the only owners of what attach() sets up: dropping the model and the
    handle (without remove()) frees the session and its client, with backward gradient
    points too. Under torch 2 the compiled dump points' table refers to them weakly."""
    import gc
    import weakref

    model = SmallNet(inplace=False)  # full backward hooks (torch 1.13) refuse in-place ops
    client = dumpd.Client(make_config(tmp_path), socket=daemon.socket)
    handle = dumpd.torch.attach(model, client, backward=True)
    client.set_step(0)
    model(torch.randn(1, 3, 8, 8, requires_grad=True)).sum().backward()
    client.flush()
    client.close()
    freed = weakref.ref(client)
    del model, handle, client
    gc.collect()
    assert freed() is None, [type(r).__name__ for r in gc.get_referrers(freed())]
    assert len(dump_files(tmp_path / "dump")) > 0


class Split(nn.Module):
    """Returns a non-contiguous view, a non-tensor, and a nested tuple with a None."""

    def forward(self, x: torch.Tensor):
        return x[:, :2], 7, (x * 2, None)


def test_tuple_outputs_become_slots_and_non_tensors_are_skipped(daemon: Daemon,
                                                                tmp_path: Path) -> None:
    config = make_config(tmp_path)
    model = nn.Sequential(nn.Embedding(10, 4), Split())
    ids = torch.tensor([[1, 2, 3], [4, 5, 9]])
    emb = model[0](ids)
    with dumpd.Client(config, socket=daemon.socket) as client:
        handle = dumpd.torch.attach(model, client)
        model(ids)
        client.flush()
    files = index_files(dump_files(tmp_path / "dump"))
    split = sanitize(handle.names["1"])
    embedding = sanitize(handle.names["0"])
    assert files[(0, embedding, "input", 0)].dtype == "int64"
    np.testing.assert_array_equal(files[(0, embedding, "input", 0)].load(), ids.numpy())
    assert {k[2:] for k in files if k[1] == split} == {("input", 0), ("output", 0),
                                                       ("output", 2)}
    emb = emb.detach().numpy()
    np.testing.assert_array_equal(files[(0, split, "output", 0)].load(), emb[:, :2])
    np.testing.assert_array_equal(files[(0, split, "output", 2)].load(), emb * 2)


def test_bfloat16_tensors_are_dumped_as_raw_bits(daemon: Daemon, tmp_path: Path) -> None:
    config = make_config(tmp_path)
    model = nn.Linear(4, 3).to(torch.bfloat16)
    x = torch.randn(2, 4).to(torch.bfloat16)
    with dumpd.Client(config, socket=daemon.socket) as client:
        handle = dumpd.torch.attach(model, client)
        y = model(x)
        client.flush()
    files = index_files(dump_files(tmp_path / "dump"))
    name = sanitize(handle.names[""])
    for io, t in (("input", x), ("output", y)):
        f = files[(0, name, io, 0)]
        assert f.dtype == "bfloat16"
        loaded = f.load()
        assert loaded.dtype == np.float32
        np.testing.assert_array_equal(loaded, t.detach().float().numpy())


def test_step_helpers(daemon: Daemon, tmp_path: Path) -> None:
    config = make_config(tmp_path)
    model = nn.Linear(2, 2)
    x = torch.ones(1, 2)
    with dumpd.Client(config, socket=daemon.socket) as client:
        dumpd.torch.attach(model, client, inputs=False)
        seen = []
        for item in dumpd.torch.steps(client, ["a", "b"], start=10):
            seen.append((item, client.stats()["iteration"]))
            model(x)
        assert seen == [("a", 10), ("b", 11)]
        with dumpd.torch.step(client, 7, flush=True) as it:
            assert it == 7
            model(x)
        # flushed by the block: the file is there without another flush
        assert {int(f.iteration) for f in dump_files(tmp_path / "dump")} == {10, 11, 7}
        dumpd.torch.step(client, 8)
        assert client.stats()["iteration"] == 8
    assert all(f.io == "output" for f in dump_files(tmp_path / "dump"))


def test_errors_warn_keeps_training_when_the_daemon_goes_away(tmp_path: Path) -> None:
    config = make_config(tmp_path)
    d = start_daemon()
    model = SmallNet()
    x = torch.randn(1, 3, 8, 8)
    client = dumpd.Client(config, socket=d.socket)
    handle = dumpd.torch.attach(model, client, errors="warn")
    with pytest.warns(RuntimeWarning, match="dumpd") as record:
        for i in dumpd.torch.steps(client, range(4), flush=True, errors="warn"):
            model(x).sum().backward()
            if i == 1:
                stop_daemon(d)  # the session ends; the flush after this step fails
    assert len(record) == 2  # "flush failed", then "dumping stopped" (once)
    assert isinstance(handle.error, dumpd.DaemonError)
    assert {f.iteration for f in dump_files(tmp_path / "dump")} == {"0", "1"}
    client.close()


def test_errors_raise_propagates_out_of_forward(tmp_path: Path) -> None:
    config = make_config(tmp_path)
    d = start_daemon()
    model = SmallNet()
    client = dumpd.Client(config, socket=d.socket)
    dumpd.torch.attach(model, client)
    model(torch.randn(1, 3, 8, 8))
    stop_daemon(d)
    with pytest.raises(dumpd.DaemonError):
        client.flush(timeout=30)
    with pytest.raises(dumpd.DaemonError):
        model(torch.randn(1, 3, 8, 8))
    with pytest.raises(ValueError, match="errors"):
        dumpd.torch.attach(model, client, errors="ignore")


def test_attach_checks_its_arguments(daemon: Daemon, config: Path) -> None:
    with dumpd.Client(config, socket=daemon.socket) as client:
        with pytest.raises(TypeError, match="torch.nn.Module"):
            dumpd.torch.attach(object(), client)
        with pytest.raises(TypeError, match="dumpd.Client"):
            dumpd.torch.attach(nn.Linear(1, 1), object())


@pytest.mark.conditional
@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_cuda_tensors_are_copied_to_host(daemon: Daemon, tmp_path: Path) -> None:
    config = make_config(tmp_path)
    model = nn.Linear(4, 3).cuda()
    x = torch.randn(2, 4, device="cuda")
    with dumpd.Client(config, socket=daemon.socket) as client:
        handle = dumpd.torch.attach(model, client)
        y = model(x)
        client.flush()
    files = index_files(dump_files(tmp_path / "dump"))
    name = sanitize(handle.names[""])
    np.testing.assert_array_equal(files[(0, name, "output", 0)].load(), y.detach().cpu().numpy())


# Each leaf module's output that the next module takes unchanged (same tensor object, same
# version): features.0 -> features.1 -> features.2, classifier.0 -> classifier.1 ->
# classifier.2. flatten() makes a new tensor between the two Sequentials.
REPEATS = [("features.0", "features.1"), ("features.1", "features.2"),
           ("classifier.0", "classifier.1"), ("classifier.1", "classifier.2")]


@pytest.mark.parametrize("inplace", [False, True])
def test_dump_once_links_each_repeated_tensor_to_its_first_file(daemon: Daemon, tmp_path: Path,
                                                                 inplace: bool) -> None:
    config = make_config(tmp_path, iteration="0|2")
    model = SmallNet(inplace=inplace)
    with dumpd.Client(config, socket=daemon.socket) as client:
        dumpd.torch.attach(model, client)
        recorder = Recorder(model, client)
        _train(model, client, steps=3)
        counts = client.flush()
        stats = client.stats()
    # Two dumped steps; in-place ReLU's output is its input with a new version: no repeat.
    repeats = [r for r in REPEATS if not (inplace and r[0] == "features.1")]
    links = 2 * len(repeats) + (2 if inplace else 0)  # in-place ReLU's pre-hook input
    assert stats["tensors_deduplicated"] == links
    assert counts["tensors_linked"] == links
    assert counts["tensors_failed"] == 0 and counts["tensors_dropped"] == 0
    files = index_files(dump_files(tmp_path / "dump"))
    _assert_files_match(files, recorder.forward, EXPECTED_NAMES, {0, 2})
    for it in (0, 2):
        for first, then in repeats:
            out = files[(it, sanitize(EXPECTED_NAMES[first]), "output", 0)].path
            inp = files[(it, sanitize(EXPECTED_NAMES[then]), "input", 0)].path
            assert out.stat().st_ino == inp.stat().st_ino, (first, then)
            assert inp.stat().st_nlink == 2
        # Not repeats: a new tensor (flatten), and each step's first input.
        pool = files[(it, sanitize(EXPECTED_NAMES["features.2"]), "output", 0)].path
        fc = files[(it, sanitize(EXPECTED_NAMES["classifier.0"]), "input", 0)].path
        assert pool.stat().st_ino != fc.stat().st_ino
        assert fc.stat().st_nlink == 1


def test_dump_once_links_forward_repeats_with_backward_on_too(daemon: Daemon,
                                                               tmp_path: Path) -> None:
    """backward=True hands the next module a view of each output (the gradient dump point,
    or PyTorch's full backward hook): a view of the whole tensor is still that tensor."""
    config = make_config(tmp_path, iteration="0|2")
    model = SmallNet(inplace=False)
    with dumpd.Client(config, socket=daemon.socket) as client:
        dumpd.torch.attach(model, client, backward=True)
        _train(model, client, steps=3)
        counts = client.flush()
    assert counts["tensors_linked"] >= 2 * len(REPEATS), counts
    files = index_files(dump_files(tmp_path / "dump"))
    for it in (0, 2):
        for first, then in REPEATS:
            out = files[(it, sanitize(EXPECTED_NAMES[first]), "output", 0)].path
            inp = files[(it, sanitize(EXPECTED_NAMES[then]), "input", 0)].path
            assert out.stat().st_ino == inp.stat().st_ino, (first, then)
            np.testing.assert_array_equal(np.load(out), np.load(inp))


def test_dump_once_off_and_statistics_only_give_the_same_results(daemon: Daemon,
                                                                 tmp_path: Path) -> None:
    results = {}
    for once in (True, False):
        for saved in ("tensor", "statistic"):
            out = tmp_path / f"{once}-{saved}"
            out.mkdir()
            config = make_config(out, saved_data=saved, iteration="1")
            torch.manual_seed(3)
            model = SmallNet(inplace=False)
            with dumpd.Client(config, socket=daemon.socket, dump_once=once) as client:
                dumpd.torch.attach(model, client)
                _train(model, client, steps=2, seed=5)
                client.flush()
                assert (client.stats()["tensors_deduplicated"] > 0) == once
            files = dump_files(out / "dump")
            if saved == "tensor":
                results[(once, saved)] = {(f.op_name, f.io, f.slot): f.load() for f in files}
                assert all((f.path.stat().st_nlink > 1) == once for f in files
                           if (f.op_name, f.io) in {(sanitize(EXPECTED_NAMES[t]), "input")
                                                    for _, t in REPEATS})
            else:
                assert not files
                csv = next((out / "dump").glob("rank_0/Net/0/1/statistic.csv")).read_text()
                # Timestamps differ between runs: compare every other column.
                rows = sorted(",".join(c for i, c in enumerate(r.split(",")) if i != 4)
                              for r in csv.splitlines()[1:])
                results[(once, saved)] = rows
    assert results[(True, "statistic")] == results[(False, "statistic")]
    assert len(results[(True, "statistic")]) == 12
    on, off = results[(True, "tensor")], results[(False, "tensor")]
    assert on.keys() == off.keys() and len(on) == 12
    for key in on:
        np.testing.assert_array_equal(on[key], off[key], err_msg=str(key))
