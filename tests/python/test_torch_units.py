"""Modules whose hooked children never run (issue 49): dumped as a unit, and a warning that
names hooked modules that never ran (dumpd/torch/_units.py). Eager, so under Debian's torch
1.13 and the torch 2 environment alike."""

from __future__ import annotations

import inspect
import warnings
from pathlib import Path
from typing import Any, Callable, Dict, List, Tuple

import numpy as np
import pytest
import torch
from torch import nn

import dumpd
import dumpd.torch
from conftest import Daemon, dump_files, index_files, make_config
from dumpd.torch._units import UNIT_CLASSES

torch.set_num_threads(1)
E = 8


def run(tmp_path: Path, daemon: Daemon, model: nn.Module, call: Callable[[nn.Module], Any],
        steps: int = 1, every_call: bool = False,
        **attach: Any) -> Tuple[Any, List[str], Any]:
    """Attaches, runs `call(model)` once a step under dumpd.torch.steps; returns the tree
    (index_files: one op execution per op and step; every_call: the list of files), the
    dumpd warnings, and the handle."""
    tmp_path.mkdir(exist_ok=True)
    client = dumpd.Client(str(make_config(tmp_path)), socket=daemon.socket)
    handle = dumpd.torch.attach(model, client, **attach)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in dumpd.torch.steps(client, range(steps)):
            call(model)
        dumpd.torch.step(client, steps)  # the mark after the last step
    handle.remove()
    client.close()
    said = [str(w.message) for w in caught if str(w.message).startswith("dumpd:")]
    files = dump_files(tmp_path / "dump")
    return (files if every_call else index_files(files)), said, handle


def test_multihead_attention_is_dumped_as_one_op(daemon: Daemon, tmp_path: Path) -> None:
    """Its out_proj is never called (F.multi_head_attention_forward uses its weight): the
    module is dumped as a unit, inputs q, k, v and its output, the very values it returned."""
    torch.manual_seed(0)
    attn = nn.MultiheadAttention(E, 2, batch_first=True)
    q, k, v = (torch.randn(2, 5, E) for _ in range(3))
    seen: List[torch.Tensor] = []
    files, said, handle = run(tmp_path, daemon, nn.Sequential(attn),
                              lambda m: seen.append(m[0](q, k, v)[0].detach()))
    unit = "Default_0-MultiheadAttention_MultiheadAttention-op1"
    assert handle.names["0"] == "Default/0-MultiheadAttention/MultiheadAttention-op1"
    # Outputs: the attention output and the head-averaged weights (need_weights=True).
    assert sorted(k_[1:] for k_ in files) == [(unit, "input", 0), (unit, "input", 1),
                                              (unit, "input", 2), (unit, "output", 0),
                                              (unit, "output", 1)]
    for slot, t in enumerate((q, k, v)):
        np.testing.assert_array_equal(files[(0, unit, "input", slot)].load(), t.numpy())
    np.testing.assert_array_equal(files[(0, unit, "output", 0)].load(), seen[0].numpy())
    assert not said, said  # the unit covers out_proj: nothing to warn about


def test_a_unit_whose_children_ran_is_not_dumped_again(daemon: Daemon,
                                                        tmp_path: Path) -> None:
    """A TransformerEncoderLayer in training calls its leaves (and its attention, a unit):
    they are dumped, the layer itself is not."""
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(E, 2, 16, batch_first=True, dropout=0.0)
    x = torch.randn(2, 5, E)
    files, said, _ = run(tmp_path, daemon, layer, lambda m: m(x))
    ops = {k[1].rsplit("_", 1)[1] for k in files}
    assert "TransformerEncoderLayer-op0" not in ops
    assert {"MultiheadAttention-op1", "Linear-op3", "LayerNorm-op6"} <= ops, ops
    assert not said, said


def test_an_encoder_layer_on_its_fused_path_is_one_op(daemon: Daemon, tmp_path: Path) -> None:
    """In inference a TransformerEncoderLayer may run as one fused kernel (torch 1.13 does
    with hooks attached; later torch turns the fast path off when a module has hooks): either
    way its output is in the tree, as the layer's or as its last leaf's, never missing."""
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(E, 2, 16, batch_first=True).eval()
    x = torch.randn(2, 5, E)
    with torch.no_grad():
        expected = layer(x).numpy()
        files, said, _ = run(tmp_path, daemon, layer, lambda m: m(x))
    outputs = {k[1]: f.load() for k, f in files.items() if k[2] == "output"}
    unit = "Default_TransformerEncoderLayer-op0"
    last = "Default_norm2-LayerNorm_LayerNorm-op7"
    assert (unit in outputs) != (last in outputs), sorted(outputs)
    np.testing.assert_allclose(outputs.get(unit, outputs.get(last)), expected, rtol=1e-5,
                               atol=1e-6)
    assert not said, said


# Every torch.nn class whose modules hold submodules, with a call: attach() must leave none of
# their hooked modules silently undumped, in training and in inference.
_HOLDERS: Dict[str, Tuple[Callable[[], nn.Module], Callable[[nn.Module, torch.Tensor], Any]]] = {
    "MultiheadAttention": (lambda: nn.MultiheadAttention(E, 2, batch_first=True),
                           lambda m, x: m(x, x, x)),
    "TransformerEncoderLayer": (lambda: nn.TransformerEncoderLayer(E, 2, 16, batch_first=True),
                                lambda m, x: m(x)),
    "TransformerDecoderLayer": (lambda: nn.TransformerDecoderLayer(E, 2, 16, batch_first=True),
                                lambda m, x: m(x, x)),
    "TransformerEncoder": (lambda: nn.TransformerEncoder(
        nn.TransformerEncoderLayer(E, 2, 16, batch_first=True), 2, enable_nested_tensor=False),
        lambda m, x: m(x)),
    "TransformerDecoder": (lambda: nn.TransformerDecoder(
        nn.TransformerDecoderLayer(E, 2, 16, batch_first=True), 2), lambda m, x: m(x, x)),
    "Transformer": (lambda: nn.Transformer(E, 2, 1, 1, 16, batch_first=True),
                    lambda m, x: m(x, x)),
    "AdaptiveLogSoftmaxWithLoss": (lambda: nn.AdaptiveLogSoftmaxWithLoss(E, 20, [5, 10]),
                                   lambda m, x: m(x[0], torch.tensor([1, 7, 12, 3, 19]))),
    "Sequential": (lambda: nn.Sequential(nn.Linear(E, E)), lambda m, x: m(x)),
    "TripletMarginWithDistanceLoss": (lambda: nn.TripletMarginWithDistanceLoss(),
                                      lambda m, x: m(x, x.flip(0), x.flip(1))),
}
if hasattr(nn, "LinearCrossEntropyLoss"):  # torch 2.12 and later: uses linear's weight
    _HOLDERS["LinearCrossEntropyLoss"] = (
        lambda: nn.LinearCrossEntropyLoss(E, 4),
        lambda m, x: m(x.reshape(-1, E), torch.arange(x.numel() // E) % 4))


def _constructible_holders() -> List[str]:
    """torch.nn classes that construct with simple arguments and hold submodules."""
    found = []
    for name, cls in vars(nn).items():
        if not (inspect.isclass(cls) and issubclass(cls, nn.Module)):
            continue
        for args in ((), (E,), (E, 2), (E, E)):
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    module = cls(*args)
            except Exception:  # noqa: BLE001  (wrong arguments for this class)
                continue
            if next(module.children(), None) is not None:
                found.append(name)
            break
    return found


def test_every_torch_nn_class_with_submodules_is_in_the_table() -> None:
    missing = [n for n in _constructible_holders() if n not in _HOLDERS]
    assert not missing, f"add these torch.nn classes to _HOLDERS: {missing}"


@pytest.mark.parametrize("training", [True, False], ids=["train", "inference"])
@pytest.mark.parametrize("name", sorted(_HOLDERS))
def test_no_torch_nn_module_is_silently_left_out(daemon: Daemon, tmp_path: Path, name: str,
                                                 training: bool) -> None:
    make, call = _HOLDERS[name]
    torch.manual_seed(0)
    model = make().train(training)
    x = torch.randn(5, 3, E) if name != "AdaptiveLogSoftmaxWithLoss" else torch.randn(1, 5, E)
    with torch.set_grad_enabled(training):
        files, said, handle = run(tmp_path, daemon, model, lambda m: call(m, x),
                                  every_call=True)
    assert not said, said
    assert files, "nothing dumped"
    units = [p for p, m in model.named_modules() if isinstance(m, UNIT_CLASSES)]
    for path in units:  # named like a leaf, at its place
        assert handle.names[path].endswith(f"/{type(dict(model.named_modules())[path]).__name__}"
                                           f"-op{list(dict(model.named_modules())).index(path)}")


class TiedHead(nn.Module):
    """Uses its child's weight itself and never calls it: only units= can dump it."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(E, E)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.linear(x, self.proj.weight.t())


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(E, E)
        self.head = TiedHead()
        self.spare = nn.Linear(E, E)  # never called

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.fc(x))


def test_hooked_modules_that_never_ran_are_named_once(daemon: Daemon, tmp_path: Path) -> None:
    x = torch.randn(3, E)
    files, said, _ = run(tmp_path, daemon, Net(), lambda m: m(x), steps=3)
    assert len(said) == 1, said
    assert "2 hooked module(s) never ran during the first step: head.proj, spare" in said[0]
    assert "units=" in said[0]
    assert {k[1] for k in files} == {"Default_fc-Linear_Linear-op1"}


def test_units_names_a_module_to_dump_as_one_op(daemon: Daemon, tmp_path: Path) -> None:
    x = torch.randn(3, E)
    model = Net()
    files, said, handle = run(tmp_path, daemon, model, lambda m: m(x), units=["head"])
    assert handle.names["head"] == "Default/head-TiedHead/TiedHead-op2"
    head = "Default_head-TiedHead_TiedHead-op2"
    assert {k[1] for k in files} == {"Default_fc-Linear_Linear-op1", head}
    with torch.no_grad():
        expected = model.head(model.fc(x)).numpy()
    np.testing.assert_allclose(files[(0, head, "output", 0)].load(), expected, rtol=1e-6)
    assert len(said) == 1 and ": spare." in said[0], said  # head.proj is covered by head
    # A class works as a path does.
    _, said, handle = run(tmp_path / "by_class", daemon, Net(), lambda m: m(x),
                          units=[TiedHead])
    assert "head" in handle.names


def test_units_refuses_what_is_not_a_module_of_the_model(daemon: Daemon,
                                                         tmp_path: Path) -> None:
    client = dumpd.Client(str(make_config(tmp_path)), socket=daemon.socket)
    with pytest.raises(ValueError, match="'nope' is not the path of a module"):
        dumpd.torch.attach(Net(), client, units=["nope"])
    with pytest.raises(ValueError, match="'fc' is a leaf module"):
        dumpd.torch.attach(Net(), client, units=["fc"])
    client.close()


def test_a_parametrized_module_is_one_op_named_by_its_class(daemon: Daemon,
                                                            tmp_path: Path) -> None:
    """torch.nn.utils.parametrize gives a Linear a `parametrizations` child (it computes the
    weight): the Linear is still the op, named Linear, and its output is dumped."""
    parametrize = pytest.importorskip("torch.nn.utils.parametrize")
    parametrizations = pytest.importorskip("torch.nn.utils.parametrizations")
    if not hasattr(parametrizations, "orthogonal"):
        pytest.skip(f"torch {torch.__version__} has no parametrizations.orthogonal")
    model = nn.Sequential(nn.Linear(E, E), nn.ReLU())
    parametrizations.orthogonal(model[0])
    assert parametrize.is_parametrized(model[0])
    x = torch.randn(3, E)
    files, said, handle = run(tmp_path, daemon, model, lambda m: m(x))
    assert handle.names["0"] == "Default/0-Linear/Linear-op1"
    assert not [p for p in handle.names if p.startswith("0.")], handle.names
    with torch.no_grad():
        expected = model[0](x).numpy()
    np.testing.assert_allclose(files[(0, "Default_0-Linear_Linear-op1", "output", 0)].load(),
                               expected, rtol=1e-6)
    assert not said, said
