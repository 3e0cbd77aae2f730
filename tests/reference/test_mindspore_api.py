"""dumpd.mindspore's behaviour in a real MindSpore (issue 53), in every pinned version: the
flight recorder on a PyNative LeNet whose loss turns NaN, and attach()'s refusals, remove()
and errors="warn" (tests/reference/ms_cells.py, modes "recorder" and "api")."""

import json
from pathlib import Path

import numpy as np
import pytest

from test_mindspore_attach import ENVS, job, losses, outputs, run_ms, write_job

LENET = "Default/network-WithLossCell/_backbone-LeNet5"


@pytest.mark.parametrize("env", ENVS)
def test_recorder_keeps_the_last_steps_and_names_the_first_non_finite_cell(daemon, tmp_path,
                                                                          env):
    config = write_job(tmp_path / "rec.json",
                       job(tmp_path / "dump", iteration="none", saved_data="full",
                           net_name="LeNet"),
                       flight_recorder={"steps": 2, "after_steps": 0})
    out = run_ms(env, ["recorder", 8, daemon, config, 5], tmp_path)
    seen = losses(out)
    assert np.isfinite(seen[:5]).all() and np.isnan(seen[5:]).all(), seen
    root = tmp_path / "dump" / "rank_0"
    [t] = [json.loads(x) for x in (root / ".dump_metadata" / "triggers.jsonl").read_text()
           .splitlines()]
    # A NaN output or the NaN loss (reported through steps(loss=)) fires it, whichever the
    # daemon sees first; either way the step is 5 and the first non-finite Cell is fc3.
    assert t["kind"] in ("nan", "loss_spike") and t["iteration"] == 5, t
    first = t["first_nonfinite"]
    assert first["op"].startswith(f"{LENET}/fc3-Dense/") and first["tensor"] == "output 0", t
    assert t["iterations_written"] == [4, 5]
    assert sorted(int(p.name) for p in (root / "LeNet" / "0").iterdir()) == [4, 5]
    fc3 = [files for name, files in outputs(root / "LeNet" / "0" / "5").items()
           if name.startswith(f"{LENET}/fc3-Dense/".replace("/", "_"))]
    [files] = fc3
    logits = np.load(files[0])
    assert np.isnan(logits[:, 1]).all() and np.isfinite(logits[:, 0]).all()
    earlier = outputs(root / "LeNet" / "0" / "4")
    assert all(np.isfinite(np.load(f)).all() for files in earlier.values()
               for f in files.values())


@pytest.fixture(scope="module", params=ENVS)
def api(request, daemon, tmp_path_factory):
    tmp = tmp_path_factory.mktemp(request.param.replace(".", "_"))
    config = write_job(tmp / "api.json", job(tmp / "dump"))
    out = run_ms(request.param, ["api", daemon, config], tmp)
    return json.loads(out.strip().splitlines()[-1])


def test_attach_in_graph_mode_taps_and_remove_restores(api):
    assert api["graph_mode_names"]["conv"] == "Default/conv-Conv2d/Conv2d-op1"
    # A subclass with the Cell's class name (MindSpore's scopes stay), its own class again
    # once removed.
    assert api["graph_mode_class"] == ["Conv2d", False]
    assert api["graph_mode_removed"] == [True, False]
    assert api["not_a_cell"] == "net must be a mindspore.nn.Cell, got object"


def test_graph_mode_leaves_cells_with_more_arguments_untapped_and_refuses_a_second_attach(api):
    # construct(self, x, mask=None): the tap would drop mask, so the Cell is named, not tapped.
    assert api["optional_arg_names"] == ["fc"]
    [warned] = api["optional_arg_warnings"]
    assert "more than one argument" in warned and "masked" in warned, warned
    assert "handle.remove() first" in api["second_attach"], api["second_attach"]
    assert api["attach_after_remove"] == ["fc"]


def test_jit_and_a_later_graph_mode_fail_to_compile_naming_what_to_do(api):
    for key in ("jit", "graph_after_attach"):
        assert "hooks_run_in_PYNATIVE_MODE_without_jit" in api[key], api[key]
        assert api[key].startswith("Failed to compile in GRAPH_MODE"), api[key]


def test_names_follow_the_cell_tree_and_remove_detaches(api):
    assert api["names"] == {
        "conv": "Default/conv-Conv2d/Conv2d-op1",
        "bn": "Default/bn-BatchNorm2d/BatchNorm2d-op2",
        "relu": "Default/relu-ReLU/ReLU-op3",
        "pool": "Default/pool-GlobalMean/GlobalMean-op4",
        "fc": "Default/fc-Dense/Dense-op5"}
    assert api["after_one_call"] == 10  # five Cells, one input and one output each
    # Dump once: each Cell's input is the previous Cell's output, sent as a reference.
    assert api["linked_one_call"] == 4
    assert api["after_remove"] == api["after_one_call"]


def test_steps_with_no_hooked_cell_running_warn_once(api):
    [w] = api["idle_warnings"]
    assert w.startswith("dumpd: 3 steps were marked and no hooked Cell ran"), w
    assert "Attach the Cell the training loop calls" in w


def test_errors_warn_stops_dumping_and_training_goes_on(api):
    assert api["warn_warnings"] == ["dumpd: dumping stopped, training goes on: client is closed"]
    assert api["warn_error"] == "client is closed"


@pytest.mark.parametrize("env", ENVS)
def test_steps_that_dump_nothing_run_without_hooks(daemon, tmp_path, env, pytestconfig):
    """dumpd._core.gate: the hooks leave the Cells at a mark that selects nothing (after the
    first step, which runs them once) and come back at one that selects, `dumpctl control`
    included."""
    config = write_job(tmp_path / "gate.json", job(tmp_path / "dump", iteration="2|4"))
    dumpctl = str(Path(pytestconfig.getoption("dumpctl")).resolve())
    found = json.loads(run_ms(env, ["gate", daemon, config, dumpctl],
                              tmp_path).strip().splitlines()[-1])
    on = 10  # five Cells, a forward and a backward hook each
    assert found["placed"] == [on, 0, on, 0, on, 0, 0, 0, on, on, 0], found
    root = tmp_path / "dump" / "rank_0" / "Net" / "0"
    assert sorted(int(p.name) for p in root.iterdir()) == [2, 4, 8, 9]
    for step in ("2", "4", "8", "9"):  # five forward ops and five backward ops (grad by x)
        names = outputs(root / step)
        assert len(names) == 10 and sum(n.startswith("Gradients") for n in names) == 5
