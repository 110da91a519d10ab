# SPDX-License-Identifier: Apache-2.0 OR MIT
"""The built wheel installs into a brand-new virtualenv, imports, and runs the example (plain and
under `python -m morpheus.run`)."""

from __future__ import annotations

import os
import subprocess
import sys
import venv
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "crunch.py"


@pytest.fixture(scope="module")
def fresh_python(tmp_path_factory):
    wheel = os.environ.get("MORPHEUS_WHEEL")
    if not wheel:
        if os.environ.get("MORPHEUS_REQUIRE_WHEEL"):
            pytest.fail("MORPHEUS_WHEEL is not set: tools/test.sh passes the wheel it built")
        pytest.skip("no wheel given (MORPHEUS_WHEEL); tools/test.sh builds one")
    home = tmp_path_factory.mktemp("venv")
    venv.EnvBuilder(with_pip=True).create(home)
    python = str(home / "bin" / "python")
    subprocess.run([python, "-m", "pip", "install", "--quiet", "--no-index", "--disable-pip-version-check", wheel],
                   check=True)
    return python


def _run(python, *args):
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["MORPHEUS_REGION"] = ""
    return subprocess.run([python, *args], capture_output=True, text=True, env=env, cwd="/", timeout=120)


def test_import_in_a_fresh_virtualenv(fresh_python):
    out = _run(fresh_python, "-c", "import morpheus, sys; print(morpheus.__file__); print(morpheus.checkpoint())")
    assert out.returncode == 0, out.stderr
    path, result = out.stdout.split()
    assert "site-packages" in path and result == "False"


def test_example_runs(fresh_python):
    out = _run(fresh_python, str(EXAMPLE))
    assert out.returncode == 0, out.stderr
    assert "crunched 4 x 200000" in out.stdout and "detached" in out.stdout


def test_example_under_morpheus_run(fresh_python):
    out = _run(fresh_python, "-m", "morpheus.run", str(EXAMPLE))
    assert out.returncode == 0, out.stderr
    assert "crunched 4 x 200000" in out.stdout


def test_morpheus_run_reports_bad_input(fresh_python):
    out = _run(fresh_python, "-m", "morpheus.run", "--region", "/nonexistent/region", str(EXAMPLE))
    assert out.returncode == 2
    assert "cannot register the main thread" in out.stderr and "/nonexistent/region" in out.stderr
