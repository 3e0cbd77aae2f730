"""Raw dumpd protocol pieces for the hostile-client tests (tests/integration/test_hostile_*.py).

* `pb2()`: the dumpd.v1 messages, generated from proto/dumpd.proto with protoc at test time.
* Framing: `encode_frame`, `Conn` (send with or without SCM_RIGHTS fds, read envelopes).
* `make_hello`: a Hello envelope with any field set (protocol 2 carries 2 fds: ring, root).
* `Ring`: a producer of the shared-memory ring over memfd + mmap, following ipc/ring_format.h
  and ipc/op_codec.cc byte for byte; every control word can also be poked (hostile clients).
* `RawSession`: a ring, a dump root fd and a connection that sent the Hello.
* Agents (`python3 rawclient.py COMMAND ...`): client processes the tests start, optionally as
  another uid: `benign` (a dumpd.Client that dumps and flushes in a loop, reporting each flush's
  latency), `tightloop` (dump() until DaemonError, counting True returns), `connections` and
  `sessions` (open raw connections / sessions and report what the daemon answered), `steps`
  (step marks naming chosen selection generations, ops, Trigger records; agent_steps). Each
  writes one JSON object per line on stdout and holds what it opened until stdin is closed.
"""

import argparse
import atexit
import ctypes
import fcntl
import json
import mmap
import os
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PROTO = REPO / "proto" / "dumpd.proto"

# ---------------------------------------------------------------- ring layout (ring_format.h)

RING_MAGIC = 0x31676E6952445044  # "DPDRing1" little-endian
RING_VERSION = 7
CONTROL_BYTES = 4096
RECORD_ALIGN = 64
RECORD_MAGIC = 0x52445044  # "DPDR"
PAGE = 4096

KIND_PAD, KIND_OP, KIND_CONTROL = 1, 2, 3
DTYPE_FLOAT32 = 10  # base/dtype.h wire value
# A tensor descriptor's io byte (ipc/ring_format.h): the memo bit, the payload kind << 4.
MEMO_BIT = 0x02
PAYLOAD_STATISTICS, PAYLOAD_SAME, PAYLOAD_DEFERRED = 1 << 4, 2 << 4, 3 << 4
STATS_PAYLOAD = struct.Struct("<7Q4dQ")  # ipc::StatsPayload
DEFERRED_STATE_OFFSET = STATS_PAYLOAD.size  # ipc::DeferredPayload: stats, state, reserved[3]
DEFERRED_HEADER_BYTES = 128
DEFERRED_ON_DEVICE, DEFERRED_FILLED, DEFERRED_LOST = 0, 1, 2
SAME_PAYLOAD = struct.Struct("<QII")  # ipc::SamePayload

# RingControl offsets (static_asserts in ring_format.h) and widths.
CONTROL_WORDS = {
    "magic": (0, 8),
    "version": (8, 4),
    "control_bytes": (12, 4),
    "capacity": (16, 8),
    "head": (64, 8),
    "tail": (128, 8),
    "consumer_waiting": (192, 4),
    "data_wake": (196, 4),
    "producer_waiting": (256, 4),
    "space_wake": (260, 4),
    "dropped_records": (320, 8),
    "dropped_tensors": (328, 8),
    "closing": (384, 4),
    "producer_busy": (448, 4),
    "fetch_generation": (512, 4),
}

RECORD_HEADER = struct.Struct("<IHHIIQQ")  # magic kind flags reserved body_bytes length seq
OP_HEADER = struct.Struct("<IIIIIHHII")  # graph it task stream count type_len name_len flags rsv
TENSOR_DESC = struct.Struct("<BBBBIQQQ")  # io dtype ndim format_len slot ts data_off data_bytes
assert RECORD_HEADER.size == 32 and OP_HEADER.size == 32 and TENSOR_DESC.size == 32


def align_up(v, a):
    return (v + a - 1) // a * a


# ---------------------------------------------------------------- protobuf messages

_pb2 = None


def pb2():
    """The generated dumpd_pb2 module (protoc --python_out into a temp dir, once per process;
    a parent passes its directory to child agents in $DUMPD_TEST_PB2_DIR)."""
    global _pb2
    if _pb2 is not None:
        return _pb2
    out = os.environ.get("DUMPD_TEST_PB2_DIR")
    if not out or not (Path(out) / "dumpd_pb2.py").exists():
        out = tempfile.mkdtemp(prefix="dumpd-pb2-")
        atexit.register(shutil.rmtree, out, True)
        subprocess.run(["protoc", f"-I{PROTO.parent}", f"--python_out={out}", str(PROTO)],
                       check=True)
        os.chmod(out, 0o755)  # child agents running as another uid import it too
        os.environ["DUMPD_TEST_PB2_DIR"] = out
    sys.path.insert(0, out)
    import dumpd_pb2  # noqa: E402  (generated above)
    _pb2 = dumpd_pb2
    return _pb2


def encode_frame(env):
    body = env.SerializeToString()
    return struct.pack("<I", len(body)) + body


def make_hello(job_config, ring_bytes, protocol_major=2, **fields):
    """An Envelope{hello}; `fields` sets any other Hello field (rank, producer_name, ...)."""
    env = pb2().Envelope()
    h = env.hello
    h.protocol_major = protocol_major
    h.protocol_minor = 0
    h.pid = os.getpid()
    h.job_config = job_config if isinstance(job_config, str) else json.dumps(job_config)
    h.ring_bytes = ring_bytes
    h.producer_name = fields.pop("producer_name", "rawclient")
    h.producer_version = fields.pop("producer_version", "0")
    for k, v in fields.items():
        setattr(h, k, v)
    return env


def status_request():
    env = pb2().Envelope()
    env.status_request.SetInParent()
    return env


def flush_request(sequence, token=1):
    env = pb2().Envelope()
    env.flush.sequence = sequence
    env.flush.token = token
    return env


def goodbye():
    env = pb2().Envelope()
    env.goodbye.SetInParent()
    return env


def error_code_name(code):
    return pb2().Error.Code.Name(code)


class Conn:
    """A stream connection to dumpd with frame reading."""

    def __init__(self, path, timeout=10.0):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(timeout)
        self.sock.connect(path)
        self.buf = b""
        self.eof = False

    def send(self, env, fds=()):
        frame = encode_frame(env) if not isinstance(env, (bytes, bytearray)) else bytes(env)
        if fds:
            n = socket.send_fds(self.sock, [frame], list(fds))
            if n < len(frame):
                self.sock.sendall(frame[n:])
        else:
            self.sock.sendall(frame)

    def recv(self, timeout=10.0):
        """The next Envelope; None at EOF (or a reset after the last frame)."""
        deadline = time.monotonic() + timeout
        while True:
            if len(self.buf) >= 4:
                (n,) = struct.unpack_from("<I", self.buf)
                if len(self.buf) >= 4 + n:
                    env = pb2().Envelope()
                    env.ParseFromString(self.buf[4:4 + n])
                    self.buf = self.buf[4 + n:]
                    return env
            if self.eof:
                return None
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("no frame from dumpd within %.1f s" % timeout)
            self.sock.settimeout(left)
            try:
                chunk = self.sock.recv(1 << 16)
            except (ConnectionResetError, BrokenPipeError):
                chunk = b""
            if not chunk:
                self.eof = True
            self.buf += chunk

    def recv_until_eof(self, timeout=10.0):
        """Every envelope until the daemon closes the connection."""
        out = []
        while True:
            env = self.recv(timeout)
            if env is None:
                return out
            out.append(env)

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass


# ---------------------------------------------------------------- futex (ctypes)

_libc = ctypes.CDLL(None, use_errno=True)
_SYS_FUTEX = 202  # x86_64
_FUTEX_WAIT, _FUTEX_WAKE = 0, 1


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


# ---------------------------------------------------------------- the ring producer


class RingClosing(Exception):
    """The daemon set `closing`: a well-behaved producer starts no record."""


class Ring:
    """Producer side of a dumpd ring (ipc/ring_format.h), in a memfd this process created.

    prefault: write every page (the daemon refuses a sparse ring); seal: F_SEAL_SHRINK|GROW;
    init: write the identity words. `polite` producers follow the protocol (producer_busy
    around each record, stop at `closing`, producer_waiting only while waiting); hostile tests
    turn it off and poke the words themselves.
    """

    def __init__(self, capacity=1 << 20, prefault=True, seal=True, init=True, polite=True):
        self.capacity = align_up(capacity, PAGE)
        self.total = CONTROL_BYTES + self.capacity
        self.fd = os.memfd_create("dumpd-test-ring", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
        os.ftruncate(self.fd, self.total)
        if seal:
            fcntl.fcntl(self.fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW)
        self.mm = mmap.mmap(self.fd, self.total, mmap.MAP_SHARED,
                            mmap.PROT_READ | mmap.PROT_WRITE)
        if prefault:
            zero = b"\0"
            for off in range(0, self.total, PAGE):
                self.mm[off:off + 1] = zero
        if init:
            self.set("magic", RING_MAGIC)
            self.set("version", RING_VERSION)
            self.set("control_bytes", CONTROL_BYTES)
            self.set("capacity", self.capacity)
        self.polite = polite
        self.head = 0
        self.sequence = 0

    # -- control words
    def _word(self, name):
        off, width = CONTROL_WORDS[name]
        return (ctypes.c_uint64 if width == 8 else ctypes.c_uint32).from_buffer(self.mm, off)

    def get(self, name):
        return self._word(name).value

    def set(self, name, value):
        self._word(name).value = value  # one aligned store: atomic on x86-64

    def _futex(self, name, op, val, timeout_s=None):
        w = self._word(name)
        ts = None
        if timeout_s is not None:
            ts = _Timespec(int(timeout_s), int((timeout_s % 1) * 1e9))
        _libc.syscall(_SYS_FUTEX, ctypes.c_void_p(ctypes.addressof(w)), op, val,
                      ctypes.byref(ts) if ts is not None else None, None, 0)

    def bump_and_wake(self, name):
        self.set(name, (self.get(name) + 1) & 0xFFFFFFFF)
        self._futex(name, _FUTEX_WAKE, 0x7FFFFFFF)

    # -- space
    def used(self):
        return self.head - self.get("tail")

    def _needed(self, length):
        off = self.head % self.capacity
        pad = self.capacity - off if off + length > self.capacity else 0
        return pad, pad + length

    def _fits(self, length):
        return self._needed(length)[1] <= self.capacity - (self.head - self.get("tail"))

    def wait_for_space(self, length, timeout):
        """Sleeps on space_wake (as RingProducer::waitForSpace) until `length` fits."""
        deadline = time.monotonic() + timeout
        while not self._fits(length):
            if self.polite and self.get("closing"):
                raise RingClosing()
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("ring full for %.1f s" % timeout)
            seen = self.get("space_wake")
            self.set("producer_waiting", 1)
            if not self._fits(length):
                self._futex("space_wake", _FUTEX_WAIT, seen, min(left, 0.05))
            if self.polite:
                self.set("producer_waiting", 0)

    # -- records
    def commit(self, kind, body, timeout=30.0):
        """Writes one record with `body` (bytes) and publishes it; returns its sequence."""
        length = align_up(RECORD_HEADER.size + len(body), RECORD_ALIGN)
        if length > self.capacity:
            raise ValueError("record of %d bytes does not fit the ring" % length)
        if self.polite:
            self.set("producer_busy", 1)
            if self.get("closing"):
                self.set("producer_busy", 0)
                raise RingClosing()
        if not self._fits(length):
            if self.polite:
                self.set("producer_busy", 0)
            self.wait_for_space(length, timeout)
            if self.polite:
                self.set("producer_busy", 1)
                if self.get("closing"):
                    self.set("producer_busy", 0)
                    raise RingClosing()
        pad, _ = self._needed(length)
        data = CONTROL_BYTES
        if pad:
            off = data + self.head % self.capacity
            self.mm[off:off + RECORD_HEADER.size] = RECORD_HEADER.pack(
                RECORD_MAGIC, KIND_PAD, 0, 0, 0, pad, 0)
        start = self.head + pad
        off = data + start % self.capacity
        self.sequence += 1
        self.mm[off + RECORD_HEADER.size:off + RECORD_HEADER.size + len(body)] = body
        self.mm[off:off + RECORD_HEADER.size] = RECORD_HEADER.pack(
            RECORD_MAGIC, kind, 0, 0, len(body), length, self.sequence)
        self.head = start + length
        self.set("head", self.head)  # after the bytes (x86-64 keeps store order)
        if self.polite:
            self.set("producer_busy", 0)
        if self.get("consumer_waiting"):
            self.bump_and_wake("data_wake")
        return self.sequence

    def commit_op(self, graph, iteration, op_name, array, op_type="Add", io=1, slot=0,
                  task_id=0, stream_id=0, flags=0, fmt="DefaultFormat", dtype=DTYPE_FLOAT32,
                  timestamp_us=None, timeout=30.0, shape=None):
        """One op record with one tensor (`array`, C-contiguous; float32 by default)."""
        return self.commit(KIND_OP, op_body(graph, iteration, op_name, array, op_type, io, slot,
                                            task_id, stream_id, flags, fmt, dtype,
                                            timestamp_us, shape), timeout)

    def commit_step(self, graph, iteration, timeout=30.0):
        ctl = pb2().Control()
        ctl.step.graph_id = graph
        ctl.step.iteration = iteration
        return self.commit(KIND_CONTROL, control_body(ctl), timeout)

    def commit_bulk(self, body, iterations, timeout=30.0):
        """Commits one kOp record per entry of `iterations` (a numpy integer array), each
        `body` (op_body) with its OpHeader iteration set to that entry: whole chunks of records
        are written and published with one head store, for floods of millions of records."""
        import numpy as np
        length = align_up(RECORD_HEADER.size + len(body), RECORD_ALIGN)
        rec = bytearray(length)
        RECORD_HEADER.pack_into(rec, 0, RECORD_MAGIC, KIND_OP, 0, 0, len(body), length, 0)
        rec[RECORD_HEADER.size:RECORD_HEADER.size + len(body)] = body
        template = np.frombuffer(bytes(rec), np.uint8)
        its = np.asarray(iterations, dtype=np.uint32)
        done = 0
        while done < len(its):
            off = self.head % self.capacity
            n = min(len(its) - done, 8192, (self.capacity - off) // length,
                    (self.capacity - self.used()) // length)
            if n == 0:  # the ring's end (a pad record first) or no space: an ordinary commit
                one = bytearray(body)
                struct.pack_into("<I", one, 4, int(its[done]))
                self.commit(KIND_OP, bytes(one), timeout)
                done += 1
                continue
            chunk = np.tile(template, n).reshape(n, length)
            chunk[:, 24:32].view(np.uint64)[:, 0] = np.arange(self.sequence + 1,
                                                              self.sequence + n + 1)
            chunk[:, 36:40].view(np.uint32)[:, 0] = its[done:done + n]
            if self.polite:
                self.set("producer_busy", 1)
                if self.get("closing"):
                    self.set("producer_busy", 0)
                    raise RingClosing()
            start = CONTROL_BYTES + off
            self.mm[start:start + n * length] = chunk.tobytes()
            self.sequence += n
            self.head += n * length
            self.set("head", self.head)  # after the bytes (x86-64 keeps store order)
            if self.polite:
                self.set("producer_busy", 0)
            if self.get("consumer_waiting"):
                self.bump_and_wake("data_wake")
            done += n
        return self.sequence

    def close(self):
        try:
            self.mm.close()
        except BufferError:
            pass  # a ctypes view is still alive somewhere; the fd close below still happens
        os.close(self.fd)


def op_body(graph, iteration, op_name, array, op_type="Add", io=1, slot=0, task_id=0,
            stream_id=0, flags=0, fmt="DefaultFormat", dtype=DTYPE_FLOAT32, timestamp_us=None,
            shape=None):
    """The kOp body of ipc/op_codec.cc writeOpDescriptors for one tensor. `io` is the
    descriptor's whole io byte (memo bit 0x02, payload kind << 4); `shape` overrides the
    array's (a payload that is not the tensor's bytes)."""
    name_b = op_name.encode() if isinstance(op_name, str) else bytes(op_name)
    type_b = op_type.encode() if isinstance(op_type, str) else bytes(op_type)
    fmt_b = fmt.encode()
    payload = memoryview(array).cast("B").tobytes() if not isinstance(array, bytes) else array
    if shape is None:
        shape = getattr(array, "shape", (len(payload),))
    shape = list(shape)
    if timestamp_us is None:
        timestamp_us = int(time.time() * 1e6)
    desc_bytes = (OP_HEADER.size + align_up(len(type_b) + len(name_b), 8) + TENSOR_DESC.size +
                  align_up(8 * len(shape) + len(fmt_b), 8))
    data_off = align_up(desc_bytes + RECORD_HEADER.size, RECORD_ALIGN) - RECORD_HEADER.size
    body = bytearray(data_off + len(payload))
    OP_HEADER.pack_into(body, 0, graph, iteration, task_id, stream_id, 1, len(type_b),
                        len(name_b), flags, 0)
    off = OP_HEADER.size
    body[off:off + len(type_b) + len(name_b)] = type_b + name_b
    off += align_up(len(type_b) + len(name_b), 8)
    TENSOR_DESC.pack_into(body, off, io, dtype, len(shape), len(fmt_b), slot, timestamp_us,
                          data_off, len(payload))
    off += TENSOR_DESC.size
    struct.pack_into("<%dq" % len(shape), body, off, *shape)
    body[off + 8 * len(shape):off + 8 * len(shape) + len(fmt_b)] = fmt_b
    body[data_off:] = payload
    return bytes(body)


def deferred_payload(array, state=DEFERRED_ON_DEVICE):
    """The payload of a float32 tensor kept on the client's device (PayloadKind::kDeferred):
    ipc::DeferredPayload (the device's statistics of `array`, `state`), then room for its
    bytes. Commit it with io=PAYLOAD_DEFERRED | io bit and shape=array.shape."""
    import numpy as np
    a = np.asarray(array, dtype=np.float64).ravel()
    fin = a[np.isfinite(a)]
    counts = (a.size, int(np.isnan(a).sum()), int(np.isneginf(a).sum()),
              int(np.isposinf(a).sum()), int((a == 0).sum()), int((a < 0).sum()),
              int((a > 0).sum()))
    head = bytearray(DEFERRED_HEADER_BYTES)
    STATS_PAYLOAD.pack_into(head, 0, *counts, float(fin.max(initial=0)),
                            float(fin.min(initial=0)), float(fin.sum()),
                            float((fin * fin).sum()), 0)
    struct.pack_into("<Q", head, DEFERRED_STATE_OFFSET, state)
    return bytes(head) + bytes(4 * a.size)


def control_body(ctl):
    """A kControl body: u32 length, u32 0, the serialized Control (padded to 8)."""
    msg = ctl.SerializeToString()
    body = bytearray(align_up(8 + len(msg), 8))
    struct.pack_into("<II", body, 0, len(msg), 0)
    body[8:8 + len(msg)] = msg
    return bytes(body)


class SessionRefused(Exception):
    def __init__(self, code, message):
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


class RawSession:
    """A raw dump session: its own ring and root fd, a Hello, optionally the Welcome read."""

    def __init__(self, socket_path, job_config, root, ring=None, capacity=1 << 20,
                 read_reply=True, timeout=10.0, **hello_fields):
        self.ring = ring if ring is not None else Ring(capacity)
        self.root_fd = os.open(root, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        self.conn = Conn(socket_path)
        hello = make_hello(job_config, self.ring.total, **hello_fields)
        self.conn.send(hello, fds=[self.ring.fd, self.root_fd])
        self.welcome = None
        if read_reply:
            env = self.conn.recv(timeout)
            if env is None:
                raise SessionRefused("EOF", "dumpd closed the connection without a reply")
            if env.HasField("error"):
                raise SessionRefused(error_code_name(env.error.code), env.error.message)
            assert env.HasField("welcome"), env
            self.welcome = env.welcome

    def flush(self, timeout=30.0, token=1):
        """Flush{last sequence}; returns the FlushReply (reads past nothing else)."""
        self.conn.send(flush_request(self.ring.sequence, token))
        deadline = time.monotonic() + timeout
        while True:
            env = self.conn.recv(max(0.01, deadline - time.monotonic()))
            if env is None:
                raise SessionRefused("EOF", "dumpd closed the session")
            if env.HasField("error"):
                raise SessionRefused(error_code_name(env.error.code), env.error.message)
            if env.HasField("flush_reply") and env.flush_reply.token == token:
                return env.flush_reply

    def close(self):
        self.conn.close()
        try:
            os.close(self.root_fd)
        except OSError:
            pass
        self.ring.close()


# ---------------------------------------------------------------- agents (child processes)


def become(uid, gid):
    """Drops root: no supplementary groups, then gid, then uid."""
    os.setgroups([])
    os.setgid(gid)
    os.setuid(uid)


def emit(**obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def benign_values(iteration, elements):
    import numpy as np
    return (np.arange(elements, dtype=np.float32) * np.float32(0.25) +
            np.float32(iteration * 1000 + 7))


def _stdin_closed_event():
    ev = threading.Event()

    def watch():
        try:
            while sys.stdin.readline():
                pass
        finally:
            ev.set()

    threading.Thread(target=watch, daemon=True).start()
    return ev


def agent_benign(a):
    """dumpd.Client: per iteration set_step, dump one tensor, flush; one line per flush."""
    import dumpd
    stop = _stdin_closed_event()
    try:
        client = dumpd.Client(a.config, socket=a.socket, rank=a.rank,
                              ring_bytes=a.ring_bytes)
    except dumpd.DumpdError as e:
        emit(event="error", type=type(e).__name__, message=str(e), where="connect")
        return 3
    emit(event="ready", pid=os.getpid())
    it = 0
    try:
        while not stop.is_set() and (a.iterations == 0 or it < a.iterations):
            client.set_step(it)
            ok = client.dump("Benign", "Default/Benign-op0", "output", 0,
                             benign_values(it, a.elements))
            t0 = time.monotonic()
            counts = client.flush(timeout=30)
            emit(event="flush", it=it, dumped=ok, latency=time.monotonic() - t0,
                 t=time.time(), written=counts["tensors_written"],
                 last_error=counts["last_error"])
            it += 1
            stop.wait(a.pace_ms / 1000.0)  # pacing, not synchronisation
        t0 = time.monotonic()
        client.close(timeout=30)
        emit(event="done", iterations=it, close_s=time.monotonic() - t0)
    except dumpd.DumpdError as e:
        emit(event="error", type=type(e).__name__, message=str(e), where="loop", iterations=it)
        return 4
    return 0


def agent_tightloop(a):
    """dump() as fast as possible until DaemonError; reports how many returned True.
    SIGUSR1 makes the process _exit(0) at once (a client dying during the daemon's drain)."""
    import signal

    import dumpd
    import numpy as np
    signal.signal(signal.SIGUSR1, lambda *_: os._exit(0))
    client = dumpd.Client(a.config, socket=a.socket, rank=a.rank, ring_bytes=a.ring_bytes)
    arr = np.arange(a.elements, dtype=np.float32)
    true_count = false_count = 0
    client.set_step(0)
    i = 0
    try:
        while True:
            if client.dump("Add", f"Default/Add-op{i}", "output", 0, arr):
                true_count += 1
            else:
                false_count += 1
            i += 1
            if i == a.announce_after:
                emit(event="running", n=i)
    except dumpd.DaemonError as e:
        if a.exit_on_error:
            os._exit(0)
        emit(event="done", true_count=true_count, false_count=false_count, message=str(e))
        if a.hold_after_error:
            # Wait for the SIGUSR1 the test sends: exiting on our own first would let it find
            # the interpreter finalizing, with the default (fatal) disposition back in place.
            while True:
                time.sleep(1)
    return 0


def agent_connections(a):
    """Opens `count` plain connections; on each, one StatusRequest: reports the answer."""
    stop = _stdin_closed_event()
    held = []
    for i in range(a.count):
        try:
            c = Conn(a.socket)
            try:
                c.send(status_request())
            except (BrokenPipeError, ConnectionResetError):
                pass  # a refused connection: its Error frame is still there to read
            env = c.recv(5.0)
        except (OSError, TimeoutError) as e:
            emit(event="connection", i=i, result="oserror", message=str(e))
            continue
        if env is None:
            emit(event="connection", i=i, result="eof")
        elif env.HasField("error"):
            emit(event="connection", i=i, result="error", code=error_code_name(env.error.code),
                 message=env.error.message)
        else:
            emit(event="connection", i=i, result="status", sessions=len(env.status_reply.sessions))
        held.append(c)
    emit(event="holding")
    stop.wait()
    return 0


def agent_sessions(a):
    """Opens `count` raw dump sessions on `root` (rank = first_rank + i); reports each reply."""
    stop = _stdin_closed_event()
    held = []
    config = Path(a.config).read_text()
    for i in range(a.count):
        try:
            s = RawSession(a.socket, config, a.root, capacity=a.ring_bytes, rank=a.first_rank + i)
            emit(event="session", i=i, result="welcome", id=s.welcome.session_id)
            held.append(s)
        except SessionRefused as e:
            emit(event="session", i=i, result="error", code=e.code, message=e.message)
    emit(event="holding")
    stop.wait()
    return 0


def agent_repeats(a):
    """One flagged tensor of `elements` float32, then `count` records that each repeat it
    (PayloadKind::kSame; --forge same-reserved sets their reserved field); one line with the
    flush counts, or with dumpd's refusal; the session is held until stdin closes."""
    import numpy as np
    stop = _stdin_closed_event()
    s = RawSession(a.socket, Path(a.config).read_text(), a.root, capacity=a.ring_bytes,
                   rank=a.rank)
    y = np.arange(a.elements, dtype=np.float32)
    first = s.ring.commit_op(0, 0, "Default/First-op0", y, op_type="First", io=1 | MEMO_BIT)
    same = SAME_PAYLOAD.pack(first, 0, 1 if a.forge == "same-reserved" else 0)
    try:
        for i in range(a.count):
            s.ring.commit_op(0, 0, f"Default/Repeat-op{i + 1}", same, op_type="Repeat",
                             io=0 | PAYLOAD_SAME, shape=y.shape)
        c = s.flush(timeout=120).counts
        emit(event="flushed", written=c.tensors_written, dropped=c.tensors_dropped,
             linked=c.tensors_linked, failed=c.tensors_failed)
    except SessionRefused as e:
        emit(event="refused", code=e.code, message=e.message)
    except RingClosing:
        emit(event="refused", code="closing", message="dumpd closed the ring")
    except (BrokenPipeError, ConnectionResetError) as e:
        emit(event="refused", code="closed", message=f"dumpd closed the session ({e})")
    stop.wait()  # the session stays for `dumpctl status` until stdin closes
    s.close()
    return 0


def agent_stats(a):
    """One op whose 4-element float32 output is sent as device statistics
    (PayloadKind::kStatistics) of the values 1..4, forged as --forge says: "wrap" (nan and
    negative_inf of 2^63: their sum wraps to 0), "over" (more positive elements than
    elements), "flags" (a flag no ring version defines: 2), "none". One line as
    agent_repeats."""
    s = RawSession(a.socket, Path(a.config).read_text(), a.root, capacity=a.ring_bytes,
                   rank=a.rank)
    counts = {"count": 4, "nan": 0, "negative_inf": 0, "positive_inf": 0, "zero": 0,
              "negative": 0, "positive": 4, "flags": 0}
    counts.update({"wrap": {"nan": 1 << 63, "negative_inf": 1 << 63}, "over": {"positive": 5},
                   "flags": {"flags": 2}}.get(a.forge, {}))
    payload = STATS_PAYLOAD.pack(counts["count"], counts["nan"], counts["negative_inf"],
                                 counts["positive_inf"], counts["zero"], counts["negative"],
                                 counts["positive"], 4.0, 1.0, 10.0, 30.0, counts["flags"])
    try:
        s.ring.commit_op(0, 0, "Default/Stats-op0", payload, op_type="Stats",
                         io=1 | PAYLOAD_STATISTICS, shape=(4,))
        c = s.flush(timeout=30).counts
        emit(event="flushed", written=c.tensors_written, dropped=c.tensors_dropped,
             linked=c.tensors_linked, failed=c.tensors_failed)
    except SessionRefused as e:
        emit(event="refused", code=e.code, message=e.message)
    except (BrokenPipeError, ConnectionResetError) as e:
        emit(event="refused", code="closed", message=f"dumpd closed the session ({e})")
    s.close()
    return 0


def _stdin_lines():
    """A queue of stdin's lines (None at EOF), read on a thread."""
    import queue
    q = queue.Queue()

    def read():
        for line in sys.stdin:
            q.put(line.strip())
        q.put(None)

    threading.Thread(target=read, daemon=True).start()
    return q


def step_generation(a, step):
    """The selection generation step `step` of agent_steps names: 0 before --hold-at, then
    the --generations list (its last value repeated, or the list cycled with --cycle)."""
    if step < a.hold_at:
        return 0
    gens = [int(g) for g in a.generations.split(",")]
    k = step - a.hold_at
    return gens[k % len(gens)] if a.cycle else gens[min(k, len(gens) - 1)]


def agent_steps(a):
    """A raw session that never reads its socket while it runs (SelectionUpdates stay unread):
    `steps` steps, each a StepMark naming step_generation()'s selection generation, one op of
    `elements` float32 (values first_iteration + i) and `triggers` Trigger records. Before
    step --hold-at it reports "holding" (with its session id) and goes on at a line on stdin.
    With --read-updates it then reads what dumpd sent until the socket is quiet for 1 s and
    reports the SelectionUpdates' generations ("updates"). Then flush ("flushed", with the
    counts); the session is held until stdin closes."""
    import numpy as np
    lines = _stdin_lines()
    s = RawSession(a.socket, Path(a.config).read_text(), a.root, capacity=a.ring_bytes,
                   rank=a.rank)
    sid = s.welcome.session_id
    try:
        for i in range(a.steps + 1):
            if i == a.hold_at:
                emit(event="holding", id=sid, step=i)
                if lines.get() is None:
                    return 0
            if i == a.steps:
                break
            it = a.first_iteration + i
            ctl = pb2().Control()
            ctl.step.graph_id = 0
            ctl.step.iteration = it
            ctl.step.selection_generation = step_generation(a, i)
            s.ring.commit(KIND_CONTROL, control_body(ctl))
            s.ring.commit_op(0, it, "Default/Steps-op0",
                             np.arange(a.elements, dtype=np.float32) + np.float32(it))
            for _ in range(a.triggers):
                t = pb2().Control()
                t.trigger.reason = "agent_steps"
                s.ring.commit(KIND_CONTROL, control_body(t))
        if a.read_updates:
            gens = []
            while True:
                try:
                    env = s.conn.recv(1.0)
                except TimeoutError:
                    break
                if env is None:
                    break
                if env.HasField("selection_update"):
                    gens.append(env.selection_update.generation)
            emit(event="updates", generations=gens)
        c = s.flush(timeout=120).counts
        emit(event="flushed", id=sid, written=c.tensors_written, dropped=c.tensors_dropped)
    except SessionRefused as e:
        emit(event="refused", code=e.code, message=e.message)
    except (RingClosing, BrokenPipeError, ConnectionResetError, TimeoutError) as e:
        emit(event="refused", code="closed", message=repr(e))
    while lines.get() is not None:
        pass
    s.close()
    return 0


def agent_script(a):
    """Runs `--script` (a JSON list of actions) in one raw session; one line per action done:
    ["step", it]: a step mark; ["ops", {...}]: op records of one 1-element float32 tensor,
    "count" of them, the i-th in iteration "iteration" + i // "per_iteration" (commit_bulk),
    named "name" or "name_hex" (any bytes), "payload" "host" (the value "value"), "repeat"
    (of a tensor never sent) or "deferred" (kept on the device in state "state", the last
    one in "last_state"); ["steps", {"first", "count"}]: step marks of consecutive
    iterations; ["wait", path]: until the test creates `path`; ["trigger", reason]: a Trigger
    record (reason_hex: any bytes); ["fetch"]: waits for dumpd's
    fetch request in the ring; ["flush", timeout]. dumpd's refusal ends the script with a
    "refused" line. The session is held until stdin closes."""
    import numpy as np
    stop = _stdin_closed_event()
    try:
        s = RawSession(a.socket, Path(a.config).read_text(), a.root, capacity=a.ring_bytes,
                       rank=a.rank)
    except SessionRefused as e:  # at its Hello
        emit(event="refused", code=e.code, message=e.message)
        stop.wait()
        return 0
    emit(event="welcome", id=s.welcome.session_id)
    try:
        for action, *args in json.loads(a.script):
            t0 = time.monotonic()
            if action == "step":
                s.ring.commit_step(0, args[0])
            elif action == "steps":  # {"first": it, "count": n}: n step marks, it, it + 1, ...
                for it in range(args[0]["first"], args[0]["first"] + args[0]["count"]):
                    s.ring.commit_step(0, it)
            elif action == "wait":  # until the test creates the file args[0]
                while not os.path.exists(args[0]):
                    time.sleep(0.01)
            elif action == "ops":
                o = args[0]
                name = bytes.fromhex(o["name_hex"]) if "name_hex" in o else o["name"]
                value = np.array([o.get("value", 1.0)], dtype=np.float32)
                kind = o.get("payload", "host")
                io, array = 1, value
                if kind == "repeat":
                    io, array = PAYLOAD_SAME, SAME_PAYLOAD.pack(1 << 40, 0, 0)
                elif kind == "deferred":
                    io, array = 1 | PAYLOAD_DEFERRED, deferred_payload(value, o.get("state", 0))
                n = o.get("count", 1)
                its = o.get("iteration", 0) + np.arange(n) // o.get("per_iteration", n)
                body = op_body(0, 0, name, array, op_type="Hostile", io=io, shape=(1,))
                if "last_state" in o:
                    s.ring.commit_bulk(body, its[:-1])
                    body = op_body(0, 0, name, deferred_payload(value, o["last_state"]),
                                   op_type="Hostile", io=io, shape=(1,))
                    its = its[-1:]
                s.ring.commit_bulk(body, its)
            elif action == "trigger":
                ctl = pb2().Control()
                if isinstance(args[0], dict):  # {"reason_hex": ...}: bytes protobuf refuses
                    ctl.trigger.reason = "\x00" * len(bytes.fromhex(args[0]["reason_hex"]))
                    body = bytearray(control_body(ctl))
                    raw = bytes.fromhex(args[0]["reason_hex"])
                    at = body.index(b"\x00" * len(raw), 8)
                    body[at:at + len(raw)] = raw
                    s.ring.commit(KIND_CONTROL, bytes(body))
                else:
                    ctl.trigger.reason = args[0]
                    s.ring.commit(KIND_CONTROL, control_body(ctl))
            elif action == "fetch":
                while s.ring.get("fetch_generation") in (0, 1) or \
                        s.ring.get("fetch_generation") % 2:  # a request is published
                    time.sleep(0.005)
            counts = {}
            if action == "flush":
                c = s.flush(timeout=args[0] if args else 30.0).counts
                counts = {"written": c.tensors_written, "failed": c.tensors_failed}
            emit(event=action, took=time.monotonic() - t0, sequence=s.ring.sequence, **counts)
    except SessionRefused as e:
        emit(event="refused", code=e.code, message=e.message)
    except (RingClosing, BrokenPipeError, ConnectionResetError) as e:
        # dumpd ended the session before this client sent its last frame: its Error, if any,
        # is still there to read.
        try:
            errors = [env.error for env in s.conn.recv_until_eof(5.0) if env.HasField("error")]
        except (OSError, TimeoutError):
            errors = []
        if errors:
            emit(event="refused", code=error_code_name(errors[0].code), message=errors[0].message)
        else:
            emit(event="refused", code="closed", message=f"dumpd closed the session ({e!r})")
    stop.wait()
    s.close()
    return 0


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("command", choices=["benign", "tightloop", "connections", "sessions",
                                        "repeats", "stats", "steps", "script"])
    p.add_argument("--socket", required=True)
    p.add_argument("--config")
    p.add_argument("--uid", type=int)
    p.add_argument("--gid", type=int)
    p.add_argument("--rank", type=int, default=0)
    p.add_argument("--first-rank", type=int, default=0)
    p.add_argument("--root")
    p.add_argument("--count", type=int, default=1)
    p.add_argument("--iterations", type=int, default=0)
    p.add_argument("--elements", type=int, default=256)
    p.add_argument("--ring-bytes", type=int, default=1 << 20)
    p.add_argument("--pace-ms", type=float, default=20)
    p.add_argument("--announce-after", type=int, default=500)
    p.add_argument("--exit-on-error", action="store_true")
    p.add_argument("--hold-after-error", action="store_true")
    p.add_argument("--forge", default="none")
    p.add_argument("--script", default="[]")
    p.add_argument("--steps", type=int, default=0)
    p.add_argument("--hold-at", type=int, default=0)
    p.add_argument("--generations", default="0")
    p.add_argument("--cycle", action="store_true")
    p.add_argument("--triggers", type=int, default=0)
    p.add_argument("--first-iteration", type=int, default=0)
    p.add_argument("--read-updates", action="store_true")
    a = p.parse_args(argv)
    if a.uid is not None:
        become(a.uid, a.gid if a.gid is not None else a.uid)
    return {"benign": agent_benign, "tightloop": agent_tightloop,
            "connections": agent_connections, "sessions": agent_sessions,
            "repeats": agent_repeats, "stats": agent_stats,
            "steps": agent_steps, "script": agent_script}[a.command](a)


if __name__ == "__main__":
    sys.exit(main())
