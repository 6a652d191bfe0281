"""The README's and the how-to's commands run as written, in a fresh shell, after the one step
the docs state (`source .venv/bin/activate`).

A ```console block with `<!-- runs on CPU -->` on the line before it (an HTML comment: neither
GitHub nor the site shows it) is run here: each page's marked blocks in one `bash`, in page
order (a later block may use what an earlier one created: ado's contexts and sample stores live
under XDG_CONFIG_HOME), from the repository's root, in a clean environment (PATH=/usr/bin:/bin,
HOME and XDG_CONFIG_HOME in a temporary folder, HF_HUB_OFFLINE=1, and the session's mark that
tests/run_marks.py follows). A block stops at its first failing command; a block that fails
fails the test with its text and its output. Every other console block is
listed below with the reason it is not run, so a new block must be classified.
"""

import os
import re
import subprocess
from pathlib import Path

import pytest
from run_marks import MARK_ENV

REPO = Path(__file__).resolve().parents[2]
PAGES = ["README.md", "docs/guide/how-to.md"]
MARKER = "<!-- runs on CPU -->"
BLOCK = re.compile(r"^(?P<before>[^\n]*)\n```console\n(?P<body>.*?)^```$", re.M | re.S)
ACTIVATE = "source .venv/bin/activate"

# Each console block of the pages that is not run, exactly as written, with why.
NOT_RUN = {
    "make env  # .venv: torch, fms-hf-tuning's requirements, fms-hf-tuning, this package": (
        "installs torch and fms-hf-tuning: minutes and the network; the test runs in the "
        "environment it made"
    ),
    "pip install torch\n"
    "pip install -r ado_actuators/sfttrainer/plan/packages/fms-hf-tuning_v3.2.2.txt\n"
    "pip install --no-deps fms-hf-tuning==3.2.2\n"
    "pip install .  # ado-core comes with it; '.[operators]' adds ado's optimisers": (
        "installs into an environment of the reader's own: minutes and the network"
    ),
    "make demo  # measures 8 configurations of a tiny model on CPU (makes .venv first)\n"
    "make test  # the whole test suite (unit, real training, real Ray, the real ado CLI)": (
        "minutes each; make test runs this test itself"
    ),
    "ado create operation -f examples/remote-raycluster/operation.yaml \\\n"
    "    --use-latest space --use-latest actuatorconfiguration\n"
    "sfttrainer_plot SPACE_ID -o plots/": (
        "the operation measures on an A100 the space names; SPACE_ID is a placeholder"
    ),
    "ado create operation -f examples/remote-raycluster/operation.yaml \\\n"
    "    --use-latest space --use-latest actuatorconfiguration": (
        "measures on an A100 the space names"
    ),
    "sfttrainer_plot SPACE_ID -o plots/": "SPACE_ID is a placeholder for a measured space",
    "ado show measurements space SPACE_ID -o csv --property-format target": (
        "SPACE_ID is a placeholder for a measured space"
    ),
}


def _blocks(page: str) -> list[tuple[bool, str]]:
    """(marked runnable, text) for each console block of the page, in order."""
    text = (REPO / page).read_text()
    return [(m["before"].strip() == MARKER, m["body"].rstrip("\n")) for m in BLOCK.finditer(text)]


def test_every_console_block_is_run_or_listed_with_its_reason():
    unmarked = [body for page in PAGES for marked, body in _blocks(page) if not marked]
    marked = [body for page in PAGES for is_marked, body in _blocks(page) if is_marked]
    for body in unmarked:
        assert body in NOT_RUN, (
            f"a console block neither marked {MARKER!r} nor listed in NOT_RUN:\n{body}"
        )
    for body in NOT_RUN:
        assert body in unmarked, f"NOT_RUN lists a block no page has (or one now marked):\n{body}"
    assert len(marked) >= 3


def test_the_docs_say_how_to_use_the_environment():
    for page in ["README.md", "docs/guide/getting-started.md", "docs/guide/how-to.md"]:
        assert ACTIVATE in (REPO / page).read_text(), page


def _script(blocks: list[str], activate: str = ACTIVATE) -> str:
    """One shell: the activation, then each block in a subshell that stops at its first
    failing command, and the shell with it; a block's status and output are told apart by the
    lines around it."""
    lines = [f"{activate} || exit 97"]
    for n, body in enumerate(blocks):
        lines += [f"echo '@@block {n}'", "(", "set -e", body, ")", "s=$?"]
        lines += [f'echo "@@status {n} $s"', '[ "$s" = 0 ] || exit "$s"']
    return "\n".join(lines) + "\n"


def _run(blocks: list[str], home: Path, activate: str = ACTIVATE) -> tuple[str, list[str]]:
    """Runs the blocks in one fresh bash from the repository's root: the whole output, and
    for each block that did not run, or failed, its text and its own output."""
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(home / ".config"),
        "HF_HUB_OFFLINE": "1",
    }
    if MARK_ENV in os.environ:  # the session's mark: nothing a test starts is left behind
        env[MARK_ENV] = os.environ[MARK_ENV]
    done = subprocess.run(
        ["bash", "-c", _script(blocks, activate)],
        cwd=REPO,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=300,
    )
    output = done.stdout
    if done.returncode == 97:
        return output, [f"{activate} failed:\n{output}"]
    pieces = re.split(r"^@@block (\d+)\n", output, flags=re.M)
    ran = {int(pieces[i]): pieces[i + 1] for i in range(1, len(pieces) - 1, 2)}
    failed = []
    for n, body in enumerate(blocks):
        own = ran.get(n)
        status = own and re.search(rf"^@@status {n} (\d+)$", own, re.M)
        if not status or status[1] != "0" or "Traceback" in own:
            why = "did not run" if own is None else f"ended {status[1] if status else '?'}"
            failed.append(f"block {n + 1} {why}:\n{body}\n--- its output:\n{own or output}")
            break  # later blocks may depend on this one
    if not failed and done.returncode != 0:
        failed.append(f"bash ended {done.returncode}:\n{output}")
    return output, failed


@pytest.mark.slow  # the real ado CLI, as the other tests that run it (about 3 s a page)
@pytest.mark.parametrize("page", PAGES)
def test_the_pages_runnable_blocks_run_as_written(page, tmp_path):
    blocks = [body for marked, body in _blocks(page) if marked]
    assert blocks, f"{page} marks no block {MARKER!r}"
    output, failed = _run(blocks, tmp_path)
    assert not failed, f"{page}, " + "\n".join(failed)
    if any(re.search(r"^ado create space ", b, re.M) for b in blocks):
        assert re.search(r"Created space with identifier: \S+", output), output


def test_a_failing_block_fails_with_its_text_and_output(tmp_path):
    """The harness itself: a block whose middle command fails stops there, is reported with
    its text and its output, and the blocks after it are not run."""
    blocks = ["echo first", "echo before\nfalse\necho after", "echo third"]
    output, failed = _run(blocks, tmp_path, activate="true")
    assert len(failed) == 1
    assert failed[0].startswith("block 2 ended 1:\necho before\nfalse\necho after\n")
    assert "before" in failed[0] and "after\n" not in failed[0].split("its output:")[1]
    assert "third" not in output
    _, failed = _run(["echo fine"], tmp_path, activate="false")
    assert failed and failed[0].startswith("false failed")
