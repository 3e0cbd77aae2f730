"""tests/pytest_ctest.py, the plugin behind ctest's skip reporting: an unplanned skip fails the
run and names the test; a skip in a conditional run exits 77 (ctest's SKIP_RETURN_CODE)."""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

TESTS_DIR = Path(__file__).resolve().parent.parent

# Indented: tests/pytest.cmake scans this file's top-level lines for markers.
SAMPLE = textwrap.dedent('''
    import pytest

    def test_runs():
        assert True

    def test_unplanned_skip():
        pytest.skip("the machine lacks something nobody planned for")

    @pytest.mark.conditional
    def test_planned_skip():
        pytest.skip("needs root")

    @pytest.mark.conditional
    def test_planned_but_runs():
        assert True

    @pytest.mark.conditional
    def test_planned_and_fails():
        assert False, "a real failure"
''')


MODULE_SKIP = textwrap.dedent('''
    import pytest

    pytest.skip("the whole file needs root", allow_module_level=True)

    def test_never_collected():
        assert False
''')


def run_pytest(tmp_path, *args):
    (tmp_path / "test_sample.py").write_text(SAMPLE)
    (tmp_path / "test_module_skip.py").write_text(MODULE_SKIP)
    env = dict(os.environ, PYTHONPATH=str(TESTS_DIR))
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider",
                           "-p", "pytest_ctest", *args], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)
    return proc.returncode, proc.stdout + proc.stderr


def test_an_unplanned_skip_fails_the_run_and_names_the_test(tmp_path):
    rc, out = run_pytest(tmp_path, "-m", "not conditional", "test_sample.py")
    assert rc == 1, out
    assert "test_sample.py::test_unplanned_skip was skipped" in out
    assert "not marked @pytest.mark.conditional" in out


def test_a_planned_skip_exits_77(tmp_path):
    rc, out = run_pytest(tmp_path, "--dumpd-conditional", "test_sample.py::test_planned_skip")
    assert rc == 77, out
    assert "needs root" in out


def test_a_planned_skip_in_a_run_of_the_whole_file_is_no_error(tmp_path):
    rc, out = run_pytest(tmp_path, "test_sample.py::test_runs", "test_sample.py::test_planned_skip")
    assert rc == 0, out
    assert "ERROR" not in out


def test_a_planned_test_that_runs_passes(tmp_path):
    rc, out = run_pytest(tmp_path, "--dumpd-conditional", "test_sample.py::test_planned_but_runs")
    assert rc == 0, out


def test_a_failure_stays_a_failure_beside_a_planned_skip(tmp_path):
    rc, out = run_pytest(tmp_path, "--dumpd-conditional", "test_sample.py::test_planned_skip",
                         "test_sample.py::test_planned_and_fails")
    assert rc == 1, out
    assert "a real failure" in out


def test_without_skips_the_plugin_changes_nothing(tmp_path):
    rc, out = run_pytest(tmp_path, "test_sample.py::test_runs")
    assert rc == 0, out
    assert "ERROR" not in out


def test_a_file_that_skips_itself_at_import(tmp_path):
    rc, out = run_pytest(tmp_path, "--dumpd-conditional", "test_module_skip.py")
    assert rc == 77, out
    assert "the whole file needs root" in out
    rc, out = run_pytest(tmp_path, "test_module_skip.py")
    assert rc == 1, out
    assert "test_module_skip.py was skipped" in out
