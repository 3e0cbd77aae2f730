"""dumpd's tree against MindSpore's, file by file (issue 39). The replay producer
(replay.py) sends each golden run's kernels through the real dumpd with the job config
MindSpore ran, and that version's `ms_format`; then both trees are compared with the
timestamp field normalised. Files only one side can write, and fields dumpd writes otherwise
on purpose, are listed here and in docs/compatibility.md ("Checked against MindSpore").
"""

import json
import subprocess

import pytest

import make_golden
import replay

CACHE = make_golden.cache_dir()
ENVS = make_golden.pins()
# The run replayed: every input and output of every kernel in every iteration.
SOURCE = "iteration_all"
# Configs MindSpore's CPU backend runs: dumpd gets the same file and SOURCE's kernels.
REPLAYED = ["all", "kernels", "inputs", "outputs", "iteration_all", "one_device", "sample",
            "trans_flag_off", "save_kernel_args", "bad_regex"]
# Keys MindSpore's CPU backend ignores, and dumpd honours for every producer as the GPU and
# Ascend backends do (docs/compatibility.md).
CPU_IGNORES = {"overflow": "op_debug_mode 3", "file_format_bin": "file_format \"bin\""}
# What only one side writes: MindSpore's graphs (dumpd writes them when the producer sends
# them: save_graph) and dumpd's own manifest.
ONLY_MINDSPORE = {"graphs/ms_output_trace_code_graph_0.ir",
                  "graphs/ms_output_trace_code_graph_0.pb"}
ONLY_DUMPD = {".dump_metadata/manifest.jsonl"}


def normalised(root):
    """{relative path with the timestamp field as TS and the dtype in lower case: path}."""
    out = {}
    for p in root.rglob("*"):
        if not p.is_file():
            continue
        rel = p.relative_to(root)
        m = replay.FILE_NAME.match(p.name)
        if m:
            # The CPU backend writes `Float32`; dumpd writes every producer's dtype as the
            # GPU/Ascend writer does (docs/compatibility.md, "dtype text of CPU dumps").
            rel = rel.parent / (f"{m['type']}.{m['name']}.{m['task']}.{m['stream']}.TS."
                                f"{m['io']}.{m['slot']}.{m['format']}.{m['dtype'].lower()}.npy")
        out[str(rel)] = p
    return out


def replay_into(sock, env, ms_format, config, out, perturb=None, change=replay.perturbed):
    """dumpd's tree of the golden SOURCE run of `env` under `config`'s job config file
    (`perturb`, `change`: replay.replay's)."""
    import dumpd  # the build's module (PYTHONPATH)
    golden_config = make_golden.golden_dir(CACHE, env, config) / "data_dump.json"
    golden_path = str(make_golden.golden_dir(CACHE, env, config) / "dump")
    text = golden_config.read_text()
    assert text.count(json.dumps(golden_path)) == 1
    job = out / "data_dump.json"
    job.write_text(text.replace(json.dumps(golden_path), json.dumps(str(out / "dump"))))
    source = make_golden.golden_dir(CACHE, env, SOURCE) / "dump" / "rank_0"
    with dumpd.Client(str(job), socket=sock, ms_format=ms_format) as client:
        replay.replay(client, source, "LeNet", perturb=perturb, change=change)
        counts = client.flush()
    assert counts["tensors_failed"] == 0 and counts["tensors_dropped"] == 0, counts
    return out / "dump" / "rank_0"


@pytest.mark.parametrize("config", REPLAYED)
@pytest.mark.parametrize("env,ms_format", [(e[0], e[1]) for e in ENVS], ids=[e[0] for e in ENVS])
def test_dumpds_tree_is_mindspores(daemon, tmp_path, env, ms_format, config):
    assert make_golden.golden_dir(CACHE, env, config).joinpath("verdict.json").exists()
    ours = normalised(replay_into(daemon, env, ms_format, config, tmp_path))
    theirs = normalised(make_golden.golden_dir(CACHE, env, config) / "dump" / "rank_0")
    assert set(theirs) - set(ours) == ONLY_MINDSPORE, "only in MindSpore's tree"
    assert set(ours) - set(theirs) == ONLY_DUMPD, "only in dumpd's tree"
    common = sorted(set(ours) & set(theirs))
    tensors = [k for k in common if k.endswith(".npy")]
    for key in tensors + [k for k in common if k.startswith("execution_order/")]:
        assert ours[key].read_bytes() == theirs[key].read_bytes(), key
    # The job config, byte for byte but for the path each was told to write to.
    golden_path = str(make_golden.golden_dir(CACHE, env, config) / "dump")
    ours_config = ours[".dump_metadata/data_dump.json"].read_text()
    assert ours_config.replace(json.dumps(str(tmp_path / "dump")), json.dumps(golden_path)) == \
        theirs[".dump_metadata/data_dump.json"].read_text()
    # config.json: the same device target; ms_version is the producer's (the Python client
    # sends dumpd's own version).
    ours_meta = json.loads(ours[".dump_metadata/config.json"].read_text())
    theirs_meta = json.loads(theirs[".dump_metadata/config.json"].read_text())
    assert ours_meta["device_target"] == theirs_meta["device_target"] == "CPU"
    assert set(ours_meta) == set(theirs_meta)


@pytest.mark.parametrize("config", sorted(CPU_IGNORES))
@pytest.mark.parametrize("env,ms_format", [(e[0], e[1]) for e in ENVS], ids=[e[0] for e in ENVS])
def test_keys_the_cpu_backend_ignores_are_honoured(pytestconfig, daemon, tmp_path, env,
                                                    ms_format, config):
    """MindSpore's CPU backend dumps as if the key were absent (its tree holds the "all"
    config's tensor files); dumpd honours it: no tensor of this finite run overflows, and
    "bin" writes Ascend bin files, which `dumpctl convert` turns back into every tensor."""
    theirs = normalised(make_golden.golden_dir(CACHE, env, config) / "dump" / "rank_0")
    plain = normalised(make_golden.golden_dir(CACHE, env, "all") / "dump" / "rank_0")
    assert {k for k in theirs if k.endswith(".npy")} == {k for k in plain if k.endswith(".npy")}
    ours = replay_into(daemon, env, ms_format, config, tmp_path) / "LeNet"
    files = [p for p in ours.rglob("*") if p.is_file()] if ours.exists() else []
    if config == "overflow":
        assert not [p for p in files if p.suffix == ".npy"], files[:3]
        return
    assert files and not [p for p in files if p.suffix == ".npy"]
    dumpctl = pytestconfig.getoption("dumpctl")
    out = subprocess.run([dumpctl, "convert", str(ours), "-o", str(tmp_path / "npy")],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    tensors = len([k for k in plain if k.endswith(".npy")])
    assert f"converted {tensors} tensors" in out.stdout, out.stdout
