"""tests/reference: make_golden.py importable, and where dumpctl is."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


def pytest_addoption(parser):
    root = Path(__file__).resolve().parents[2]
    parser.addoption("--dumpctl", default=str(root / "build" / "bin" / "dumpctl"),
                     help="the dumpctl binary to judge")
    parser.addoption("--dumpd", default=str(root / "build" / "bin" / "dumpd"),
                     help="the dumpd binary to judge (its Python module on PYTHONPATH)")
