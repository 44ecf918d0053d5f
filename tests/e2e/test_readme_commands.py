"""The README's top-level commands, run as a new user runs them, so a broken demo cannot land again
(issue 27: `make demo-pulsar` hung at 12,204 / 50,000 and nothing in the suite ran it).

`make test` is this suite. The `connect` examples of the README's sections are run by
test_readme_examples.py. Every other `make` target the README's opening names must be a demo
recipe (`$(PY) -m worker.demo ...`) and is run here as that command, in a separate process with
its own brokers and `connect run`, exactly as the Makefile runs it; it must exit 0 and say OK.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest
from readme_util import ROOT, opening

DEMOS = {"demo": [], "demo-pulsar": ["--target", "pulsar"]}  # make target -> worker.demo arguments


def _readme_targets() -> set[str]:
    return set(re.findall(r"\bmake ([\w-]+)", opening()))


def _recipe(target: str) -> str:
    match = re.search(rf"^{re.escape(target)}:.*\n\t(.+)$", (ROOT / "Makefile").read_text(), re.M)
    assert match, f"the Makefile has no target {target}"
    return match.group(1).strip()


def test_every_readme_command_is_run_by_the_suite():
    assert _readme_targets() == set(DEMOS) | {"test"}, "a README command this module does not run: add it to DEMOS"
    for target, args in DEMOS.items():
        assert _recipe(target) == " ".join(["$(PY) -m worker.demo", *args]), f"make {target} runs something else"


@pytest.mark.parametrize("target", DEMOS)
def test_readme_demo_reports_ok(target, tmp_path):
    # TMPDIR: the demo's working directory (brokers' data, logs) lands in pytest's, not in /tmp.
    result = subprocess.run([sys.executable, "-m", "worker.demo", *DEMOS[target]], cwd=ROOT, capture_output=True,
                            text=True, timeout=480, env={**os.environ, "TMPDIR": str(tmp_path)})
    output = result.stdout + result.stderr
    assert result.returncode == 0, f"make {target} failed:\n{output[-4000:]}"
    assert "RESULT: OK, produced = mirrored" in result.stdout, output[-4000:]
    assert "records mirrored : 50,000" in result.stdout, output[-4000:]
