#!/usr/bin/env python3
"""Decodes a TensorBoard event file written by Pleiades, independently of
its C code (tests/test_tensorboard.c runs it).

Usage: tensorboard_decode.py FILE       prints "STEP TAG VALUE" per scalar
       tensorboard_decode.py --check    exit 0 if google.protobuf imports

TFRecord framing is read here byte by byte and both masked CRC32Cs of every
record are verified with a CRC32C written below (bitwise table, Castagnoli
polynomial), not ISA-L. The Events are parsed by python3-protobuf from
message classes built at run time out of a FileDescriptorProto written here
with TensorFlow's field numbers (tensorflow/core/util/event.proto,
tensorflow/core/framework/summary.proto): the acceptable independent
decoder, as neither protoc, protoc-c nor our event.proto is involved and
TensorFlow itself is too large to install for a test. The first event must
be file_version "brain.Event:2" and every wall_time a plausible Unix time.
Any framing, CRC or parse error: a message on stderr and exit status 1.
"""
import struct
import sys

# --------------------------------------------------------------- CRC32C
_POLY = 0x82F63B78  # Castagnoli, reflected
_TABLE = []
for _i in range(256):
    _c = _i
    for _ in range(8):
        _c = (_c >> 1) ^ _POLY if _c & 1 else _c >> 1
    _TABLE.append(_c)


def crc32c(data):
    crc = 0xFFFFFFFF
    for b in data:
        crc = _TABLE[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def masked_crc32c(data):
    crc = crc32c(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


assert crc32c(b"123456789") == 0xE3069283  # the CRC-32C check value


# ------------------------------------------------------- Event messages
def event_class():
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    F = descriptor_pb2.FieldDescriptorProto
    fd = descriptor_pb2.FileDescriptorProto(name="pl_tb_event_decode.proto",
                                            package="tensorflow", syntax="proto3")

    def field(msg, name, number, type_, label=F.LABEL_OPTIONAL, type_name=None, oneof=None):
        f = msg.field.add(name=name, number=number, type=type_, label=label)
        if type_name:
            f.type_name = type_name
        if oneof is not None:
            f.oneof_index = oneof

    summary = fd.message_type.add(name="Summary")
    value = summary.nested_type.add(name="Value")
    value.oneof_decl.add(name="value")
    field(value, "tag", 1, F.TYPE_STRING)
    field(value, "simple_value", 2, F.TYPE_FLOAT, oneof=0)
    field(summary, "value", 1, F.TYPE_MESSAGE, F.LABEL_REPEATED, ".tensorflow.Summary.Value")

    event = fd.message_type.add(name="Event")
    event.oneof_decl.add(name="what")
    field(event, "wall_time", 1, F.TYPE_DOUBLE)
    field(event, "step", 2, F.TYPE_INT64)
    field(event, "file_version", 3, F.TYPE_STRING, oneof=0)
    field(event, "summary", 5, F.TYPE_MESSAGE, type_name=".tensorflow.Summary", oneof=0)

    pool = descriptor_pool.DescriptorPool()
    pool.AddSerializedFile(fd.SerializeToString())
    desc = pool.FindMessageTypeByName("tensorflow.Event")
    if hasattr(message_factory, "GetMessageClass"):
        return message_factory.GetMessageClass(desc)
    return message_factory.MessageFactory(pool).GetPrototype(desc)


# ------------------------------------------------------------- records
def fail(msg):
    sys.stderr.write("tensorboard_decode: %s\n" % msg)
    sys.exit(1)


def records(data):
    pos = 0
    while pos < len(data):
        if len(data) - pos < 12:
            fail("truncated record header at byte %d" % pos)
        head = data[pos:pos + 8]
        (length,) = struct.unpack("<Q", head)
        (crc,) = struct.unpack("<I", data[pos + 8:pos + 12])
        if crc != masked_crc32c(head):
            fail("CRC mismatch in the length of the record at byte %d" % pos)
        start = pos + 12
        if len(data) - start < length + 4:
            fail("truncated record at byte %d" % pos)
        body = data[start:start + length]
        (crc,) = struct.unpack("<I", data[start + length:start + length + 4])
        if crc != masked_crc32c(body):
            fail("CRC mismatch in the data of the record at byte %d" % pos)
        yield pos, body
        pos = start + length + 4


def main():
    if len(sys.argv) == 2 and sys.argv[1] == "--check":
        event_class()
        return
    if len(sys.argv) != 2:
        fail("usage: tensorboard_decode.py FILE")
    with open(sys.argv[1], "rb") as f:
        data = f.read()
    Event = event_class()
    n = 0
    for pos, body in records(data):
        ev = Event()
        try:
            ev.ParseFromString(body)
        except Exception as e:  # google.protobuf.message.DecodeError
            fail("record at byte %d: not an Event (%s)" % (pos, e))
        if not 1e9 < ev.wall_time < 1e10:
            fail("record at byte %d: wall_time %r" % (pos, ev.wall_time))
        what = ev.WhichOneof("what")
        if n == 0:
            if what != "file_version" or ev.file_version != "brain.Event:2":
                fail("the first event is not file_version brain.Event:2")
        elif what != "summary":
            fail("record at byte %d: %s, not a summary" % (pos, what))
        else:
            for v in ev.summary.value:
                if v.WhichOneof("value") != "simple_value":
                    fail("record at byte %d: %r has no simple_value" % (pos, v.tag))
                print("%d %s %r" % (ev.step, v.tag, v.simple_value))
        n += 1
    if n == 0:
        fail("no events")


if __name__ == "__main__":
    main()
