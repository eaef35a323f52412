#!/usr/bin/env python3
"""Token files (data/tokens.c) through tokens_dump (tests/tokens_dump.c).

Every file is written here with struct, independently of the library:
llm.c's header (magic 20240520 version 1 + uint16; magic 20240801
version 7 + uint32), nanoGPT's raw uint16, raw uint32. The batches the
text source yields from them must equal the windows computed here from
data/text.c's documented formula (splitmix64, rejection sampling), with
one rank and split over two and four ranks (rows rank, rank + world, ...
of the global batch). Damaged files must be refused with an error that
names the file and the byte offset (and the token, for a bad token).

    test_data_tokens.py TOKENS_DUMP
"""
import os
import struct
import subprocess
import sys
import tempfile

MASK = (1 << 64) - 1
GAMMA = 0x9E3779B97F4A7C15
failures = 0


def check(cond, what):
    global failures
    if not cond:
        failures += 1
        print("FAIL:", what)


def mix64(z):
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
    return z ^ (z >> 31)


def windows(tokens, B, T, seed, index):
    """The B windows of batch `index`: data/text.c's documented draws."""
    state = mix64(seed ^ mix64((index + GAMMA) & MASK))
    bound = len(tokens) - T
    threshold = (-bound % (1 << 64)) % bound
    out = []
    for _ in range(B):
        while True:
            state = (state + GAMMA) & MASK
            r = mix64(state)
            if r >= threshold:
                break
        off = r % bound
        out.append((tokens[off:off + T], tokens[off + 1:off + T + 1]))
    return out


def llmc(tokens, wide=False, magic=None, version=None, count=None, reserved=None):
    header = [0] * 256
    header[0] = magic if magic is not None else (20240801 if wide else 20240520)
    header[1] = version if version is not None else (7 if wide else 1)
    header[2] = count if count is not None else len(tokens)
    if reserved:
        header[reserved[0]] = reserved[1]
    fmt = "<%d%s" % (len(tokens), "I" if wide else "H")
    return struct.pack("<256i", *header) + struct.pack(fmt, *tokens)


def raw(tokens, wide=False):
    return struct.pack("<%d%s" % (len(tokens), "I" if wide else "H"), *tokens)


def known_tokens(n, vocab):
    x, out = 2024, []
    for _ in range(n):
        x = (x * 1103515245 + 12345) & 0x7FFFFFFF
        out.append(x % vocab)
    return out


def run(dump, path, fmt, vocab, B=4, T=8, seed=7, batches=3, world=1):
    return subprocess.run([dump, path, fmt, str(vocab), str(B), str(T), str(seed),
                           str(batches), str(world)], capture_output=True, text=True)


def parse(out):
    rows = {}
    for line in out.splitlines()[1:]:
        head, tok, tgt = line.split(":")
        rank, batch, row = map(int, head.split())
        rows[(rank, batch, row)] = ([int(v) for v in tok.split()],
                                    [int(v) for v in tgt.split()])
    return rows


def check_batches(dump, tmp, name, data, fmt, tokens, vocab):
    path = os.path.join(tmp, name)
    with open(path, "wb") as f:
        f.write(data)
    B, T, seed, batches = 4, 8, 7, 3
    for world in (1, 2, 4):
        r = run(dump, path, fmt, vocab, B, T, seed, batches, world)
        check(r.returncode == 0, "%s world %d: exit %d: %s" % (name, world, r.returncode,
                                                                r.stderr.strip()))
        if r.returncode:
            continue
        check(r.stdout.splitlines()[0] == "size %d" % len(tokens),
              "%s: %s, expected size %d" % (name, r.stdout.splitlines()[0], len(tokens)))
        got = parse(r.stdout)
        want = {}
        for i in range(batches):
            ws = windows(tokens, B, T, seed, i)
            for rank in range(world):
                for row in range(B // world):
                    want[(rank, i, row)] = ws[rank + row * world]
        check(got == want, "%s world %d: the batches differ from the windows "
              "computed here" % (name, world))
    print("ok  %-28s %d tokens, 3 batches of %dx%d, 1/2/4 ranks" % (name, len(tokens), B, T))


def check_refused(dump, tmp, name, data, fmt, vocab, *needles):
    path = os.path.join(tmp, name)
    with open(path, "wb") as f:
        f.write(data)
    r = run(dump, path, fmt, vocab)
    ok = r.returncode == 1 and path in r.stderr and all(n in r.stderr for n in needles)
    check(ok, "%s: exit %d, expected 1 and an error naming %s and %s; got: %s" %
          (name, r.returncode, path, needles, r.stderr.strip()))
    if ok:
        print("ok  %-28s refused: %s" % (name, r.stderr.strip().split(": ", 2)[-1]))


def main():
    dump = sys.argv[1]
    with tempfile.TemporaryDirectory(prefix="pl_tokens_") as tmp:
        small = known_tokens(500, 50257)
        big = known_tokens(300, 200000)
        check_batches(dump, tmp, "gpt2.bin", llmc(small), "llmc", small, 50257)
        check_batches(dump, tmp, "llama3.bin", llmc(big, wide=True), "llmc", big, 200000)
        check_batches(dump, tmp, "nanogpt_train.bin", raw(small), "raw-u16", small, 50257)
        check_batches(dump, tmp, "raw32.bin", raw(big, wide=True), "raw-u32", big, 200000)
        edge = [0, 65535] * 20  # the extreme uint16 values survive decoding
        check_batches(dump, tmp, "edges.bin", llmc(edge), "llmc", edge, 65536)

        good = llmc(small)
        check_refused(dump, tmp, "bad_magic.bin", llmc(small, magic=20240519), "llmc",
                      50257, "byte offset 0", "magic 20240519")
        check_refused(dump, tmp, "bad_version.bin", llmc(small, version=2), "llmc", 50257,
                      "byte offset 4", "version 2")
        check_refused(dump, tmp, "negative_count.bin", llmc(small, count=-5), "llmc",
                      50257, "byte offset 8", "count -5")
        check_refused(dump, tmp, "count_too_big.bin", llmc(small, count=501), "llmc",
                      50257, "byte offset 8", "truncated")
        check_refused(dump, tmp, "count_too_small.bin", llmc(small, count=499), "llmc",
                      50257, "byte offset 8", "trailing bytes")
        check_refused(dump, tmp, "truncated.bin", good[:-3], "llmc", 50257,
                      "byte offset 8", "truncated")
        check_refused(dump, tmp, "header_only_part.bin", good[:100], "llmc", 50257,
                      "shorter than llm.c's header")
        check_refused(dump, tmp, "reserved.bin", llmc(small, reserved=(17, 3)), "llmc",
                      50257, "byte offset 68", "header int 17 is 3")
        bad = list(small)
        bad[123] = 50257
        check_refused(dump, tmp, "bad_token.bin", llmc(bad), "llmc", 50257,
                      "byte offset %d" % (1024 + 2 * 123), "token 50257")
        check_refused(dump, tmp, "bad_token_raw.bin", raw(bad), "raw-u16", 50257,
                      "byte offset %d" % (2 * 123), "token 50257")
        bad32 = list(big)
        bad32[299] = 4000000000
        check_refused(dump, tmp, "bad_token_u32.bin", raw(bad32, wide=True), "raw-u32",
                      200000, "byte offset %d" % (4 * 299), "token 4000000000")
        check_refused(dump, tmp, "odd_size.bin", raw(small) + b"\x01", "raw-u16", 50257,
                      "not a whole number of uint16 tokens")
        check_refused(dump, tmp, "empty.bin", b"", "raw-u16", 50257, "empty")
        check_refused(dump, tmp, "one_token.bin", llmc([5]), "llmc", 50257,
                      "too few for a window")
        check_refused(dump, tmp, "vocab_small.bin", llmc(small), "llmc", 1000,
                      "outside the vocabulary [0, 1000)")
        r = run(dump, os.path.join(tmp, "missing.bin"), "llmc", 50257)
        check(r.returncode == 1 and "missing.bin" in r.stderr, "a missing file: " + r.stderr)
    if failures:
        print("%d failure(s)" % failures)
        return 1
    print("all token file checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
