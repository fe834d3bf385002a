"""Writes small random q, k, v and dO as .npy files (float32, [1, 2, n, 8]: 9 queries, 11 keys) into
the current directory, with Python's standard library only: the inputs the test command's CLI stages
(scripts/check-valgrind.sh, scripts/check-no-avx.sh) run their commands on. The seed is fixed."""
import random
import struct

random.seed(0)
for name, n in (("q", 9), ("k", 11), ("v", 11), ("do", 9)):
    shape = (1, 2, n, 8)
    header = "{'descr': '<f4', 'fortran_order': False, 'shape': %s, }" % (shape,)
    header += " " * (63 - (10 + len(header)) % 64) + "\n"
    count = 1
    for s in shape:
        count *= s
    with open(name + ".npy", "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode())
        f.write(struct.pack("<%df" % count, *(random.gauss(0, 1) for _ in range(count))))
