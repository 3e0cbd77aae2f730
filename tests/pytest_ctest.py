"""pytest plugin for dumpd's ctest entries: a skipped test shows in ctest's summary.

ctest runs one pytest file per entry, so a file where one test was skipped (needs root, needs a
tmpfs mount, needs a tool) used to count as passed. The convention, enforced here:

* a test that may be skipped where the machine does not allow it is marked
  ``@pytest.mark.conditional`` (or the whole file, ``pytestmark = pytest.mark.conditional`` on
  one line); tests/pytest.cmake gives each such test, or such a file, its own ctest entry;
* in those entries (``--dumpd-conditional``) a skip without a failure exits with 77, which
  ctest's SKIP_RETURN_CODE lists as "Skipped", with pytest's reason in the output;
* in every other entry a skip of a test not marked conditional is an error that names the
  test: a skip nobody planned for is a test that silently stopped testing. (A marked test
  skipped there, as in a hand run of the whole file, is reported and passes.)
"""

import pytest

SKIP_EXIT_CODE = 77


def pytest_addoption(parser):
    parser.addoption("--dumpd-conditional", action="store_true", default=False,
                     help="this run holds only tests marked conditional: a skip exits with "
                     f"{SKIP_EXIT_CODE} (ctest's SKIP_RETURN_CODE)")


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "conditional: may be skipped where the machine does not allow it (root, a "
        "mount, a tool); ctest lists it under its own name so that a skip shows")
    config.pluginmanager.register(_SkipTracker(config), "dumpd_skip_tracker")


class _SkipTracker:
    def __init__(self, config):
        self.conditional_run = config.getoption("--dumpd-conditional")
        self.skipped = []  # (nodeid, reason, planned: marked conditional)

    def _note(self, report):
        if report.skipped:
            reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(
                report.longrepr)
            planned = "conditional" in getattr(report, "keywords", {})
            self.skipped.append((report.nodeid, reason, planned))

    def pytest_runtest_logreport(self, report):
        self._note(report)

    def pytest_collectreport(self, report):
        self._note(report)

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session, exitstatus):
        # 5: nothing was collected, as when a whole module skips itself at import.
        if not self.skipped or exitstatus not in (pytest.ExitCode.OK,
                                                  pytest.ExitCode.NO_TESTS_COLLECTED):
            return  # failures stay failures
        if self.conditional_run:
            session.exitstatus = SKIP_EXIT_CODE
        elif any(not planned for _, _, planned in self.skipped):
            session.exitstatus = 1

    def pytest_terminal_summary(self, terminalreporter):
        if not self.skipped:
            return
        if self.conditional_run:
            terminalreporter.write_line(
                f"ctest: {len(self.skipped)} conditional test(s) skipped; exit "
                f"{SKIP_EXIT_CODE} lists this entry as Skipped")
            return
        for nodeid, reason, planned in self.skipped:
            if planned:
                continue
            terminalreporter.write_line(
                f"ERROR: {nodeid} was skipped ({reason}) but is not marked "
                "@pytest.mark.conditional: mark it so that ctest lists the skip "
                "(tests/pytest_ctest.py)", red=True)
