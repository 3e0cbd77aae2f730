"""Golden trees from the real MindSpore (issue 39): tests/reference/lenet_ms.py run by each
MindSpore environment of pins.txt once per job config of tests/reference/configs/, dumping
itself through MINDSPORE_DUMP_CONFIG. Each run leaves, under the cache,

    golden/<env, '.' as '_'>/<config>/dump/...        what MindSpore wrote (when it accepted the config)
    golden/<env>/<config>/verdict.json    {"accepted": bool, "error": the RuntimeError line,
                                           "losses": [...], "key": what it was made from}

and is made again only when the script, the config or the pin changes.

    /usr/bin/python3 tests/reference/make_golden.py [--cache DIR] [--force]
"""

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from pins import read_pins  # beside this file

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]

STEPS = 4
RUN_TIMEOUT_S = 300


def pins():
    """[(name, ms_format, requirements)] of pins.txt, MindSpore environments only."""
    return [p for p in read_pins() if p[1] != "-"]


def configs():
    return sorted(HERE.glob("configs/*.json"))


def cache_dir(arg=None):
    return Path(arg or os.environ.get("DUMPD_REFERENCE_CACHE", "/var/cache/dumpd-reference"))


def run_key(reqs, config):
    h = hashlib.sha256()
    for part in (" ".join(reqs).encode(), (HERE / "lenet_ms.py").read_bytes(),
                 config.read_bytes(), str(STEPS).encode()):
        h.update(hashlib.sha256(part).digest())
    return h.hexdigest()


def mindspore_error(text):
    """The line that says why MindSpore refused a config ("RuntimeError: ..."), else ''."""
    for line in text.splitlines():
        m = re.match(r"\s*(RuntimeError|ValueError|TypeError): (.*)", line)
        if m:
            return m.group(2).strip()
    return ""


def golden_dir(cache, env, config_name):
    # MindSpore refuses a dump path with anything but letters, digits, '-', '_' and '/'.
    return cache / "golden" / env.replace(".", "_") / config_name


def make_one(cache, env, reqs, config, force=False):
    """Runs one (environment, config) unless its verdict is current; returns the verdict."""
    out = golden_dir(cache, env, config.stem)
    verdict_file = out / "verdict.json"
    key = run_key(reqs, config)
    if not force and verdict_file.exists():
        verdict = json.loads(verdict_file.read_text())
        if verdict.get("key") == key:
            return verdict
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    job = json.loads(config.read_text())
    if "path" in job["common_dump_settings"]:
        job["common_dump_settings"]["path"] = str(out / "dump")
    (out / "data_dump.json").write_text(json.dumps(job, indent=2))
    python = cache / env / "bin" / "python"
    env_vars = dict(os.environ, MINDSPORE_DUMP_CONFIG=str(out / "data_dump.json"),
                    GLOG_v="3")
    env_vars.pop("CUDA_HOME", None)  # MindSpore only warns about a GPU plugin it lacks
    run = subprocess.run([str(python), str(HERE / "lenet_ms.py"), str(STEPS)], cwd=out,
                         env=env_vars, capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
    (out / "run.log").write_text(run.stdout + run.stderr)
    losses = [float(m.group(1)) for m in re.finditer(r"^step \d+ loss (\S+)$", run.stdout, re.M)]
    verdict = {"accepted": run.returncode == 0, "error": mindspore_error(run.stderr),
               "losses": losses, "key": key}
    if run.returncode == 0 and len(losses) != STEPS:
        sys.exit(f"{env} {config.name}: exit 0 but {len(losses)} losses; see {out}/run.log")
    if run.returncode != 0 and not verdict["error"]:
        sys.exit(f"{env} {config.name}: exit {run.returncode} without an error line; "
                 f"see {out}/run.log")
    verdict_file.write_text(json.dumps(verdict, indent=2) + "\n")
    return verdict


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cache")
    ap.add_argument("--force", action="store_true", help="run even when current")
    args = ap.parse_args()
    cache = cache_dir(args.cache)
    for env, _, reqs in pins():
        if not (cache / env / "bin" / "python").exists():
            sys.exit(f"{cache / env} is missing: run scripts/install-reference first")
        for config in configs():
            v = make_one(cache, env, reqs, config, args.force)
            what = "accepted" if v["accepted"] else f"refused: {v['error']}"
            print(f"golden {env} {config.stem}: {what}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
