#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0 OR MIT
"""Decode the hottest region of a benchmark in JMH `-prof perfasm` output when the JVM has no hsdis (it
then prints the code as hex words): the bytes are put back together and handed to objdump.
  disasm.py PERFASM_OUTPUT BENCHMARK   e.g. disasm.py target/perfasm-ffm.txt dev.morpheus.CheckpointBench.checkpoint
perfasm needs perf; in a container without hardware counters use `-prof 'perfasm:events=cpu-clock'`."""
import re
import subprocess
import sys
import tempfile


def main():
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    text = open(sys.argv[1]).read()
    marker = "# Benchmark: " + sys.argv[2]
    if marker not in text:
        print(f"disasm.py: no '{marker}' in {sys.argv[1]}", file=sys.stderr)
        return 1
    start = text.index(marker)
    region = text[start:text.index("<total for region 1>", start)]
    code, first = bytearray(), None
    for m in re.finditer(r"^\s*(?:[\d.]+%\s+)?(0x[0-9a-f]+): ((?:[0-9a-f]{2,8}(?: \| | |$))+)", region, re.M):
        address = int(m.group(1), 16)
        if first is None:
            first = address
        if address == first + len(code):  # the same line again (one per debug-info entry) adds nothing
            code += bytes.fromhex(re.sub(r"[ |]", "", m.group(2)))
    with tempfile.NamedTemporaryFile(suffix=".bin") as f:
        f.write(code)
        f.flush()
        out = subprocess.run(["objdump", "-D", "-b", "binary", "-mi386:x86-64", f"--adjust-vma={first}", f.name],
                             capture_output=True, text=True, check=True).stdout
    print(out.split("<.data>:", 1)[1])
    return 0


if __name__ == "__main__":
    sys.exit(main())
