"""GPU tests: the fixtures of tests/python (a real dumpd on a temp socket) plus a skip, with
its reason, wherever CUDA cannot run (CI, machines without a GPU or driver)."""

import importlib.util
import sys
from pathlib import Path

import pytest

# tests/python/conftest.py under another module name (this file is "conftest" too).
_spec = importlib.util.spec_from_file_location(
    "dumpd_python_fixtures", Path(__file__).resolve().parent.parent / "python" / "conftest.py")
_fixtures = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = _fixtures  # dataclasses look their module up there
_spec.loader.exec_module(_fixtures)
daemon = _fixtures.daemon
dump_files = _fixtures.dump_files
index_files = _fixtures.index_files
make_config = _fixtures.make_config
sanitize = _fixtures.sanitize


def _gpu_skip_reason():
    try:
        import torch
    except ImportError:
        return "torch is not installed"
    if not torch.cuda.is_available():
        return "no CUDA GPU here (torch.cuda.is_available() is False)"
    import dumpd
    reason = dumpd.cuda_unavailable_reason()
    if reason is not None:
        return f"the dumpd module cannot use CUDA: {reason}"
    return None


def pytest_collection_modifyitems(config, items):
    reason = _gpu_skip_reason()
    if reason is None:
        return
    for item in items:
        item.add_marker(pytest.mark.skip(reason=reason))
