"""`make env` says which torch it installs, and how much that downloads, before pip starts;
TORCH_INDEX_URL names the index torch comes from. Read from make's dry run (`make -n`), which
prints the recipe without running it."""

from __future__ import annotations

import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CPU_INDEX = "https://download.pytorch.org/whl/cpu"


def _env_recipe(*variables: str) -> list[str]:
    """The lines `make env` would run, as if the stamp were out of date (-W pyproject.toml)."""
    done = subprocess.run(
        ["make", "--no-print-directory", "-n", "-W", "pyproject.toml", "env", *variables],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return done.stdout.splitlines()


def _torch_lines(lines: list[str]) -> tuple[str, str]:
    """The message and the pip line that installs torch, in that order."""
    (said,) = [n for n, line in enumerate(lines) if "make env: installing" in line]
    (pip,) = [n for n, line in enumerate(lines) if "pip install" in line and '"torch==' in line]
    assert said < pip, lines
    return lines[said], lines[pip]


def test_by_default_torch_comes_from_pypi_and_the_message_gives_its_size_and_the_cpu_index():
    said, pip = _torch_lines(_env_recipe())
    assert "--index-url" not in pip
    assert "torch==2.13.0 from PyPI" in said
    assert "CUDA build, 527 MB" in said and "(2.7 GB for 2.13.0)" in said
    assert f"the CPU build is 192 MB: make env TORCH_INDEX_URL={CPU_INDEX}" in said


def test_torch_index_url_names_the_index_and_the_message_says_it():
    said, pip = _torch_lines(_env_recipe(f"TORCH_INDEX_URL={CPU_INDEX}"))
    assert f'--index-url "{CPU_INDEX}" "torch==2.13.0"' in pip
    assert f"torch==2.13.0 from {CPU_INDEX} (the CPU build: 192 MB for 2.13.0)" in said
    other = "https://download.pytorch.org/whl/cu126"
    said, pip = _torch_lines(_env_recipe(f"TORCH_INDEX_URL={other}"))
    assert f'--index-url "{other}"' in pip and "192 MB" not in said
