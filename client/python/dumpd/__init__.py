"""dumpd: write MindSpore-format tensor dumps without slowing the training step.

A training process copies each op's tensors once into a shared-memory ring and returns at
once; the node's ``dumpd`` daemon filters, converts and writes the files
(``{path}/rank_{r}/{net}/{graph}/{iteration}/{op_type}.{op_name}...npy``).

    import dumpd

    with dumpd.Client("/path/data_dump.json", socket="/run/dumpd/dumpd.sock") as client:
        for step in range(100):
            client.set_step(step)
            y = x @ w
            client.dump_op("MatMul", "Default/MatMul-op0", inputs=[x, w], outputs=[y])
        counts = client.flush()

PyTorch models: see :mod:`dumpd.torch` (``dumpd.torch.attach(model, client)``).

Exceptions: :class:`ConfigError` (invalid job config; the validator's message),
:class:`DaemonError` (no daemon, protocol or I/O failure, closed client) and its subclass
:class:`DaemonTimeout`; all derive from :class:`DumpdError`. Bad arguments raise
TypeError or ValueError.
"""

from dumpd._dumpd import (  # noqa: F401  (re-exported API)
    Client,
    ConfigError,
    DeviceArray,
    Statistics,
    DaemonError,
    DaemonTimeout,
    DumpdError,
    __version__,
    compare_replicas,
    cuda_unavailable_reason,
    fingerprint,
)

#: The dtype names that appear in dump file names. "bfloat16", "int4" and "uint1" are raw
#: overrides for ``dump(..., dtype=...)``; the others are taken from the array itself.
DTYPES = (
    "bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
    "float16", "float32", "float64", "bfloat16", "int4", "uint1", "complex64", "complex128",
)

__all__ = [
    "Client",
    "ConfigError",
    "DaemonError",
    "DaemonTimeout",
    "DumpdError",
    "DeviceArray",
    "Statistics",
    "DTYPES",
    "compare_replicas",
    "cuda_unavailable_reason",
    "fingerprint",
    "__version__",
]
