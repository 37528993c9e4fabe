"""Python's repr(float) for a spread of doubles, as the fixture tests/data/py_repr.txt that
check::py_repr is compared with (tests/suite/py_repr_fixture.rs).

Lines: the bit pattern in hex, a space, repr(x). The values: raw random bit patterns, values
near every decimal exponent from 1e-25 to 1e25, and exact ties at the 17th significant digit
(doubles whose exact decimal expansion ends in 5 right after the 17th digit: numbers
ending in .25 or .75 just above 2**50), where the shortest-digit choice rounds half to
even in Python (David Gay's dtoa, mode 0). Standard library only: no pip install needed.

    python3 scripts/py_repr_fixture.py > tests/data/py_repr.txt
"""
import random
import struct
import sys
from decimal import Decimal


def bits(x):
    return struct.unpack("<Q", struct.pack("<d", x))[0]


def from_bits(b):
    return struct.unpack("<d", struct.pack("<Q", b))[0]


def is_tie(x):
    # 17 significant digits are not always enough to pick a unique closest string: a tie is
    # an exact value whose 18th significant digit is 5 followed by nothing.
    d = Decimal(x).normalize()
    digits = d.as_tuple().digits
    return len(digits) == 18 and digits[-1] == 5


rng = random.Random(8173)
values = []
for _ in range(1500):
    x = from_bits(rng.getrandbits(64))
    if x == x and abs(x) != float("inf"):
        values.append(x)
for e in range(-25, 26):
    for _ in range(20):
        values.append(rng.random() * 10.0**e * rng.choice([1, -1]))
ties = []
b = bits(2.0**50)
while len(ties) < 200:
    b += rng.randrange(1, 1 << 30)
    x = from_bits(b)
    if is_tie(x):
        ties.append(x)
values += ties
values += [1e16, 9999999999999998.0, 1e-4, 9.999999999999999e-5, 1e-5, 5e-324, 1.7976931348623157e308]
for x in values:
    sys.stdout.write(f"{bits(x):016x} {x!r}\n")
sys.stderr.write(f"{len(values)} values, {len(ties)} ties\n")
