# SPDX-License-Identifier: Apache-2.0 OR MIT
"""Run by test_sim_scheduler.py in a private user and mount namespace (`unshare -Urm`): a private tmpfs
over /dev/shm and /sys/fs/bpf holds a retired region (generation 0) at the default path, as a stopped
scheduler leaves it, and nothing else on the machine sees it. MORPHEUS_SOCKET names the stopped
agent's socket. Prints, as one JSON object, what Worker(), morpheus.aio.run() and
`python -m morpheus.run` did; any exception they raise ends this script with a traceback."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from conftest import SimRegion, abi  # noqa: E402  (the region layout from the generated ABI)


def private_default_paths(scratch: Path) -> None:
    for target in (Path(abi.SIM_REGION_PATH).parents[1], Path(abi.PINNED_REGION_PATH).parents[1]):
        if target.is_dir():
            subprocess.run(["mount", "-t", "tmpfs", "morpheus-test", str(target)], check=True)
    region_path = Path(abi.SIM_REGION_PATH)
    region_path.parent.mkdir(parents=True)
    region = SimRegion(region_path)
    region.put_header(abi.RegionHeader.GENERATION, 0)  # retired (§1.1): what a clean stop leaves
    region.close()
    assert not Path(abi.PINNED_REGION_PATH).exists()


def main() -> None:
    scratch = Path(sys.argv[1])
    private_default_paths(scratch)
    records = []

    class Keep(logging.Handler):
        def emit(self, record):
            records.append([record.levelname, record.getMessage()])

    logger = logging.getLogger("morpheus")
    logger.addHandler(Keep())
    logger.setLevel(logging.INFO)

    import morpheus
    import morpheus.aio

    out = {}
    w = morpheus.Worker()  # the default socket (MORPHEUS_SOCKET), then the default region paths
    out["worker"] = {"attached": w.attached, "reason": w.detach_reason, "detail": w.detach_detail,
                     "waiting": w.waiting_for_scheduler, "checkpoint": morpheus.checkpoint()}
    w.close()
    out["worker_log"] = list(records)

    async def app():
        await morpheus.checkpoint_async()
        return 42

    out["aio_run"] = morpheus.aio.run(app())

    script = scratch / "app.py"
    script.write_text("import morpheus\nprint('app ran, attached:', morpheus.current_worker().attached)\n")
    done = subprocess.run([sys.executable, "-m", "morpheus.run", str(script)], capture_output=True, text=True)
    out["morpheus_run"] = {"code": done.returncode, "stdout": done.stdout, "stderr": done.stderr}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
