#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0 OR MIT
"""A deliberately broken agent for the harness's own tests.

It runs the reference agent behind a proxy and misbehaves the first time it sees request OP:

    faulty_agent.py FAULT [OP]
    FAULT: crash (SIGSEGV itself) | exit (exit status 3) | hang (never answers) | garbage (prints
           non-JSON) | wrong_id (answers with another id) | no_ok (reply without "ok") |
           bad_error (an error name that is not an error_code) | no_hello (garbage instead of hello) |
           silent (prints nothing at all, not even hello) | state_drop (declares state_fields escapable and
           priority in its hello, then leaves escapable out of OP's reply) | state_lie (reports the
           opposite escapable in OP's reply) | narrow_hello (a hello without the optional `ops` and with
           `attach_maps` false, as an SDK that lacks them; otherwise the reference agent) | no_turn_clock
           (a hello whose `ops` lack the `turn_clock` capability; otherwise the reference agent)
"""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

REFERENCE = Path(__file__).resolve().parents[3] / "agents" / "reference" / "agent.py"


def main() -> int:
    fault = sys.argv[1]
    trigger = sys.argv[2] if len(sys.argv) > 2 else "checkpoint"
    if fault == "no_hello":
        print("Segmentation fault (core dumped) -- or so it says", flush=True)
        time.sleep(60)
        return 1
    if fault == "silent":
        time.sleep(600)
        return 1
    ref = subprocess.Popen([sys.executable, str(REFERENCE)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    hello = ref.stdout.readline()
    if fault == "state_drop":
        hello = json.dumps({**json.loads(hello), "state_fields": ["escapable", "priority"]}) + "\n"
    if fault == "narrow_hello":
        narrow = {k: v for k, v in json.loads(hello).items() if k != "ops"}
        hello = json.dumps({**narrow, "attach_maps": False}) + "\n"
    if fault == "no_turn_clock":
        full = json.loads(hello)
        hello = json.dumps({**full, "ops": [op for op in full["ops"] if op != "turn_clock"]}) + "\n"
    print(hello, end="", flush=True)
    for line in sys.stdin:
        doctor = fault in ("state_drop", "state_lie") and f'"op": "{trigger}"' in line
        if f'"op": "{trigger}"' in line and not doctor:
            rid = line.split('"id": ', 1)[1].split(",", 1)[0]
            if fault == "crash":
                os.kill(os.getpid(), signal.SIGSEGV)
            if fault == "exit":
                sys.exit(3)
            if fault == "hang":
                time.sleep(600)
            if fault == "garbage":
                print("\x00\x01 this is not JSON", flush=True)
                continue
            if fault == "wrong_id":
                print(f'{{"id": {int(rid) + 100}, "ok": true}}', flush=True)
                continue
            if fault == "no_ok":
                print(f'{{"id": {rid}, "yielded": false}}', flush=True)
                continue
            if fault == "bad_error":
                print(f'{{"id": {rid}, "ok": false, "error": "OOPS"}}', flush=True)
                continue
        ref.stdin.write(line)
        ref.stdin.flush()
        if '"op": "exit"' in line:
            break
        reply = ref.stdout.readline()
        if doctor:
            msg = json.loads(reply)
            if fault == "state_drop":
                msg.pop("escapable", None)
            elif isinstance(msg.get("escapable"), bool):
                msg["escapable"] = not msg["escapable"]
            reply = json.dumps(msg) + "\n"
        print(reply, end="", flush=True)
        while '"event": "suspended"' in reply:
            resume = sys.stdin.readline()
            ref.stdin.write(resume)
            ref.stdin.flush()
            reply = ref.stdout.readline()
            print(reply, end="", flush=True)
    ref.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
