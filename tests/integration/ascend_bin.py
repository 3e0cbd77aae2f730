"""An independent reader and writer of the Ascend dump "bin" file, version 2.0.

Written from shared/spec/ascend-bin-format.md alone: it shares no code with dumpd and is not
generated from proto/ascend_dump.proto. The DumpData message classes are built at run time
from a FileDescriptorProto described below from the spec's table (field numbers and types;
the package name never reaches the wire).

File layout:
    [uint64 LE header_len][serialized DumpData, every `data` empty, every `size` set]
    [raw bytes of every input, then every output, then every buffer, in header order]

read_bin(path) checks the sizes and decodes each tensor to numpy (DT_BF16 -> float32,
DT_INT4 -> int8 (two per byte, low nibble first), DT_UINT1 -> uint8 (one byte per element)).
write_bin(path, op_name, inputs, outputs, ...) builds a file for tests.
"""

import struct
from collections import namedtuple

import numpy as np
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.message import DecodeError

PACKAGE = "toolkit.dumpdata"
VERSION = "2.0"

# OutputDataType, by value.
DATA_TYPES = [
    "DT_UNDEFINED", "DT_FLOAT", "DT_FLOAT16", "DT_INT8", "DT_UINT8", "DT_INT16", "DT_UINT16",
    "DT_INT32", "DT_INT64", "DT_UINT32", "DT_UINT64", "DT_BOOL", "DT_DOUBLE", "DT_STRING",
    "DT_DUAL_SUB_INT8", "DT_DUAL_SUB_UINT8", "DT_COMPLEX64", "DT_COMPLEX128", "DT_QINT8",
    "DT_QINT16", "DT_QINT32", "DT_QUINT8", "DT_QUINT16", "DT_RESOURCE", "DT_STRING_REF",
    "DT_DUAL", "DT_VARIANT", "DT_BF16", "DT_INT4", "DT_UINT1", "DT_INT2", "DT_UINT2",
]

# OutputFormat, by value (0..40, then 255).
FORMATS = {i: "FORMAT_" + n for i, n in enumerate([
    "NCHW", "NHWC", "ND", "NC1HWC0", "FRACTAL_Z", "NC1C0HWPAD", "NHWC1C0", "FSR_NCHW",
    "FRACTAL_DECONV", "C1HWNC0", "FRACTAL_DECONV_TRANSPOSE", "FRACTAL_DECONV_SP_STRIDE_TRANS",
    "NC1HWC0_C04", "FRACTAL_Z_C04", "CHWN", "FRACTAL_DECONV_SP_STRIDE8_TRANS", "HWCN",
    "NC1KHKWHWC0", "BN_WEIGHT", "FILTER_HWCK", "HASHTABLE_LOOKUP_LOOKUPS",
    "HASHTABLE_LOOKUP_KEYS", "HASHTABLE_LOOKUP_VALUE", "HASHTABLE_LOOKUP_OUTPUT",
    "HASHTABLE_LOOKUP_HITS", "C1HWNCoC0", "MD", "NDHWC", "FRACTAL_ZZ", "FRACTAL_NZ", "NCDHW",
    "DHWCN", "NDC1HWC0", "FRACTAL_Z_3D", "CN", "NC", "DHWNC", "FRACTAL_Z_3D_TRANSPOSE",
    "FRACTAL_ZN_LSTM", "FRACTAL_Z_G", "RESERVED"])}
FORMATS[255] = "FORMAT_MAX"

# Data types held one element per fixed number of bytes, as their numpy dtype (little-endian).
NUMPY_TYPES = {
    "DT_FLOAT": "<f4", "DT_FLOAT16": "<f2", "DT_DOUBLE": "<f8",
    "DT_INT8": "i1", "DT_INT16": "<i2", "DT_INT32": "<i4", "DT_INT64": "<i8",
    "DT_UINT8": "u1", "DT_UINT16": "<u2", "DT_UINT32": "<u4", "DT_UINT64": "<u8",
    "DT_BOOL": "?", "DT_COMPLEX64": "<c8", "DT_COMPLEX128": "<c16",
    "DT_UINT1": "u1",  # one byte (0 or 1) per element
}
# What read_bin returns for each decodable data type.
DECODED_TYPES = dict(NUMPY_TYPES, DT_BF16="<f4", DT_INT4="i1")

_F = descriptor_pb2.FieldDescriptorProto
_SCALARS = {"string": _F.TYPE_STRING, "bytes": _F.TYPE_BYTES, "uint32": _F.TYPE_UINT32,
            "uint64": _F.TYPE_UINT64, "int32": _F.TYPE_INT32}
_ENUMS = ("OutputDataType", "OutputFormat", "BufferType")

# The spec's message table: (name, type, number, repeated).
_MESSAGES = {
    "OriginalOp": [("name", "string", 1, False), ("output_index", "uint32", 2, False),
                   ("data_type", "OutputDataType", 3, False),
                   ("format", "OutputFormat", 4, False)],
    "Shape": [("dim", "uint64", 1, True)],
    "OpOutput": [("data_type", "OutputDataType", 1, False), ("format", "OutputFormat", 2, False),
                 ("shape", "Shape", 3, False), ("original_op", "OriginalOp", 4, False),
                 ("data", "bytes", 5, False), ("size", "uint64", 6, False),
                 ("original_shape", "Shape", 7, False), ("sub_format", "int32", 8, False)],
    "OpInput": [("data_type", "OutputDataType", 1, False), ("format", "OutputFormat", 2, False),
                ("shape", "Shape", 3, False), ("data", "bytes", 4, False),
                ("size", "uint64", 5, False), ("original_shape", "Shape", 6, False),
                ("sub_format", "int32", 7, False)],
    "OpBuffer": [("buffer_type", "BufferType", 1, False), ("data", "bytes", 2, False),
                 ("size", "uint64", 3, False)],
    "DumpData": [("version", "string", 1, False), ("dump_time", "uint64", 2, False),
                 ("output", "OpOutput", 3, True), ("input", "OpInput", 4, True),
                 ("buffer", "OpBuffer", 5, True), ("op_name", "string", 6, False)],
}


def file_descriptor():
    """The FileDescriptorProto of the spec's messages and enums (proto3)."""
    f = descriptor_pb2.FileDescriptorProto(name="ascend_bin_spec.proto", package=PACKAGE,
                                           syntax="proto3")
    for enum_name, values in (("OutputDataType", dict(enumerate(DATA_TYPES))),
                              ("OutputFormat", FORMATS), ("BufferType", {0: "L1"})):
        e = f.enum_type.add(name=enum_name)
        for number, name in sorted(values.items()):
            e.value.add(name=name, number=number)
    for message_name, fields in _MESSAGES.items():
        m = f.message_type.add(name=message_name)
        for name, type_name, number, repeated in fields:
            field = m.field.add(name=name, number=number, json_name=name,
                                label=_F.LABEL_REPEATED if repeated else _F.LABEL_OPTIONAL)
            if type_name in _SCALARS:
                field.type = _SCALARS[type_name]
            else:
                field.type = _F.TYPE_ENUM if type_name in _ENUMS else _F.TYPE_MESSAGE
                field.type_name = f".{PACKAGE}.{type_name}"
    return f


def _message_classes():
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file_descriptor())
    classes = {}
    for name in _MESSAGES:
        desc = pool.FindMessageTypeByName(f"{PACKAGE}.{name}")
        if hasattr(message_factory, "GetMessageClass"):  # protobuf >= 4.22
            classes[name] = message_factory.GetMessageClass(desc)
        else:
            classes[name] = message_factory.MessageFactory(pool).GetPrototype(desc)
    return classes


MESSAGES = _message_classes()
DumpData = MESSAGES["DumpData"]


def data_type_name(value):
    return DATA_TYPES[value] if 0 <= value < len(DATA_TYPES) else f"DT_{value}"


def format_name(value):
    return FORMATS.get(value, f"FORMAT_{value}")


def _format_value(name):
    if not name.startswith("FORMAT_"):
        name = "FORMAT_" + name
    for value, n in FORMATS.items():
        if n == name:
            return value
    raise ValueError(f"unknown format {name}")


def element_count(shape):
    n = 1
    for d in shape:
        n *= int(d)
    return n


def expected_size(dtype_name, shape):
    """Bytes a tensor of `shape` takes in the file; None when the type is not decodable."""
    n = element_count(shape)
    if dtype_name == "DT_BF16":
        return 2 * n
    if dtype_name == "DT_INT4":
        return (n + 1) // 2
    if dtype_name in NUMPY_TYPES:
        return np.dtype(NUMPY_TYPES[dtype_name]).itemsize * n
    return None


def bf16_bytes(values):
    """The bfloat16 bytes of float32 `values` (the upper half of each, truncated)."""
    bits = np.ascontiguousarray(values, dtype="<f4").view("<u4") >> 16
    return bits.astype("<u2").tobytes()


def pack_int4(values):
    """Packs ints in [-8, 7] two per byte, low nibble first (the last high nibble is 0)."""
    nibbles = np.asarray(values, dtype=np.int64).ravel()
    if nibbles.size and (nibbles.min() < -8 or nibbles.max() > 7):
        raise ValueError("int4 values must lie in [-8, 7]")
    nibbles = (nibbles & 0xF).astype(np.uint8)
    if nibbles.size % 2:
        nibbles = np.append(nibbles, np.uint8(0))
    return (nibbles[0::2] | (nibbles[1::2] << 4)).astype(np.uint8).tobytes()


def decode(dtype_name, shape, raw):
    """The numpy array of one tensor's bytes (see the module doc for the conversions)."""
    n = element_count(shape)
    if dtype_name == "DT_BF16":
        bits = np.frombuffer(raw, dtype="<u2").astype("<u4") << 16
        return bits.view("<f4").reshape(shape)
    if dtype_name == "DT_INT4":
        packed = np.frombuffer(raw, dtype=np.uint8)
        nibbles = np.empty(packed.size * 2, dtype=np.uint8)
        nibbles[0::2] = packed & 0xF
        nibbles[1::2] = packed >> 4
        # Sign extension from bit 3: 8..15 -> -8..-1.
        values = nibbles[:n].astype(np.int16)
        return np.where(values > 7, values - 16, values).astype(np.int8).reshape(shape)
    return np.frombuffer(raw, dtype=NUMPY_TYPES[dtype_name]).reshape(shape).copy()


def read_bin(path):
    """Reads a version 2.0 bin file; ValueError naming `path` when it is not a valid one.

    Returns dict(version, dump_time, op_name, inputs, outputs, buffers) where inputs and
    outputs are lists of (dtype_name, shape, format_name, array). A tensor whose type this
    reader cannot decode (DT_STRING, ...) comes back as its raw bytes (a uint8 array).
    """
    with open(path, "rb") as f:
        content = f.read()
    size = len(content)
    if size < 8:
        raise ValueError(f"{path}: {size} bytes, too short for a bin file")
    (header_len,) = struct.unpack_from("<Q", content, 0)
    if header_len > size - 8:
        raise ValueError(f"{path}: header length {header_len} is past the end ({size} bytes)")
    data = DumpData()
    try:
        data.ParseFromString(content[8:8 + header_len])
    except DecodeError as e:
        raise ValueError(f"{path}: the header does not parse: {e}") from e
    tensors = [("input", t) for t in data.input] + [("output", t) for t in data.output]
    total = sum(t.size for _, t in tensors) + sum(b.size for b in data.buffer)
    if 8 + header_len + total != size:
        raise ValueError(f"{path}: sizes do not add up: 8 + {header_len} + {total} != {size}")
    result = dict(version=data.version, dump_time=data.dump_time, op_name=data.op_name,
                  inputs=[], outputs=[], buffers=[])
    offset = 8 + header_len
    for io, t in tensors:
        index = len(result[io + "s"])
        if t.data:
            raise ValueError(f"{path}: {io} {index} carries data in the header (not version 2.0)")
        raw = content[offset:offset + t.size]
        offset += t.size
        name = data_type_name(t.data_type)
        shape = tuple(int(d) for d in t.shape.dim)
        want = expected_size(name, shape)
        if want is None:
            array = np.frombuffer(raw, dtype=np.uint8).copy()
        elif want != t.size:
            raise ValueError(f"{path}: {io} {index}: {t.size} bytes, but {name} of shape "
                             f"{list(shape)} takes {want}")
        else:
            array = decode(name, shape, raw)
        result[io + "s"].append((name, shape, format_name(t.format), array))
    for b in data.buffer:
        result["buffers"].append(content[offset:offset + b.size])
        offset += b.size
    return result


Tensor = namedtuple("Tensor", ["dtype", "data", "shape", "format"], defaults=(None, "ND"))
Tensor.__doc__ = """One tensor for write_bin: `dtype` a data type name ("DT_FLOAT"); `data` a
numpy array (written as that data type) or raw bytes (written as they are; then `shape` is
required, and it is how DT_BF16 and DT_INT4 are given); `format` an OutputFormat name."""


def _tensor_bytes(t):
    if isinstance(t.data, (bytes, bytearray, memoryview)):
        if t.shape is None:
            raise ValueError(f"{t.dtype}: raw bytes need a shape")
        return bytes(t.data), tuple(t.shape)
    if t.dtype not in NUMPY_TYPES:
        raise ValueError(f"{t.dtype}: give raw bytes (see bf16_bytes, pack_int4)")
    array = np.asarray(t.data)
    shape = tuple(array.shape) if t.shape is None else tuple(t.shape)
    return np.ascontiguousarray(array, dtype=NUMPY_TYPES[t.dtype]).tobytes(), shape


def _fill(message, t, raw, shape):
    value = t.dtype if isinstance(t.dtype, int) else DATA_TYPES.index(t.dtype)
    message.data_type = value
    message.format = _format_value(t.format)
    message.shape.dim.extend(shape)
    message.original_shape.dim.extend(shape)
    message.size = len(raw)


def write_bin(path, op_name, inputs, outputs, dump_time=1_700_000_000_000_000, buffers=()):
    """Writes a version 2.0 bin file; inputs and outputs are Tensors (or tuples of their
    fields), buffers raw bytes (OpBuffer L1). Returns the bytes written."""
    data = DumpData(version=VERSION, dump_time=dump_time, op_name=op_name)
    payload = []
    for tensors, add in ((inputs, data.input.add), (outputs, data.output.add)):
        for t in tensors:
            t = Tensor(*t)
            raw, shape = _tensor_bytes(t)
            _fill(add(), t, raw, shape)
            payload.append(raw)
    for b in buffers:
        data.buffer.add(buffer_type=0, size=len(b))
        payload.append(bytes(b))
    header = data.SerializeToString()
    content = struct.pack("<Q", len(header)) + header + b"".join(payload)
    with open(path, "wb") as f:
        f.write(content)
    return content
