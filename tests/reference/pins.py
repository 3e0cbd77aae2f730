"""Reads tests/reference/pins.txt, for scripts/install-reference and make_golden.py."""

import sys
from pathlib import Path

PINS = Path(__file__).resolve().parent / "pins.txt"


def read_pins(path=PINS):
    """[(name, ms_format, [requirements])] from the pins file."""
    pins = []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        fields = line.split()
        if len(fields) < 3:
            sys.exit(f"{path}:{number}: want NAME MS_FORMAT REQUIREMENT..., got {line!r}")
        name, ms_format, reqs = fields[0], fields[1], fields[2:]
        for r in reqs:
            if "==" not in r:
                sys.exit(f"{path}:{number}: {r!r} is not an exact pin (NAME==VERSION)")
        pins.append((name, ms_format, reqs))
    names = [p[0] for p in pins]
    if len(set(names)) != len(names):
        sys.exit(f"{path}: an environment name appears twice")
    return pins


def mindspore_for_msprobe(pins=None):
    """The MindSpore environment msprobe runs beside (its MindSpore compare imports
    mindspore, and msprobe needs numpy 2, which only the newest pinned MindSpore allows): the
    last MindSpore line of the pins file."""
    return [p[0] for p in (pins or read_pins()) if p[1] != "-"][-1]
