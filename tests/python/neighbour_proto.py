"""Writes the test neighbour's dumpd.proto (tests/python/CMakeLists.txt): dumpd's messages as
another build might carry them, for the full runtime and with other field numbers (each field
N becomes 100N), so a module that bound to the neighbour's code would put bytes on the wire
the daemon cannot read."""

import re
import sys

FIELD = re.compile(r"^(\s*(?:repeated |optional )?[A-Za-z0-9_.]+ [a-z_0-9]+ = )([0-9]+)(;| \[)")


def main(src: str, dst: str) -> None:
    lines = []
    for line in open(src, encoding="utf-8"):
        line = line.replace("optimize_for = LITE_RUNTIME", "optimize_for = SPEED")
        lines.append(FIELD.sub(lambda m: f"{m.group(1)}100{m.group(2)}{m.group(3)}", line))
    with open(dst, "w", encoding="utf-8") as out:
        out.writelines(lines)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
