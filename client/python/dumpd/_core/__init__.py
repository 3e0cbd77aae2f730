"""What every framework integration of dumpd shares, and nothing framework-specific.

``dumpd.torch`` and ``dumpd.mindspore`` are adapters over this package: they find a model's
leaf modules (Cells), hook them, and turn the framework's tensors into dump items. Everything
else lives here once, and imports neither torch nor mindspore (tests/python/test_core.py
checks both, and that the package has no import circle):

    session.py     one attach()'s state: client, error policy, dump once, the dump call
    identities.py  dump-once identities: one per (object, version)
    items.py       nested values flattened into one op's dump items
    handle.py      what attach() returns: names, error, remove()
    kernel_map.py  which of MindSpore's kernels stands for a module's op (dumpctl --map)
    steps.py       step()/steps(): iteration marks and the losses for the flight recorder
    checks.py      units, and the first-step check naming hooked ops that never ran
    naming.py      MindSpore's scope names for a module path
    gate.py        the flag a traced graph reads: does this step dump anything
"""
