"""Installs a package list into an environment the way the spec's "Requirements" says it builds.

Packages that compile against torch (flash-attn, mamba-ssm, causal-conv1d) import torch in
their build script but do not declare it, so an isolated build fails at once ("No module named
'torch'"). The list goes in two phases: everything else first, each package built in isolation,
then those against the environment's own torch (installed by the first phase, or the worker's,
which the environment sees behind its own) without build isolation. Which packages need this is
known for the three above and learnt from the installer for any other: an isolated build that
fails for want of torch moves its package to the second phase. `find_links` reaches both phases,
so a cluster's prebuilt wheels are used instead of compiling (hours for flash-attn).
"""

from __future__ import annotations

import os
import re
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

from ado_actuators.sfttrainer.plan.launch import environments as plan

ERROR_LINES = 15
FAILED_BUILD = re.compile(r"Failed to build `([^`]+)`")
TORCH_MISSING = "No module named 'torch'"
PHASES = {
    1: "phase 1 (the list but the packages that compile against torch, each built in isolation)",
    2: "phase 2 (packages that compile against torch, built without isolation)",
}


class InstallFailed(RuntimeError):
    pass


def install(
    uv: str,
    python: str,
    lines: Sequence[str],
    *,
    find_links: Sequence[str],
    scratch: Path,
    deadline: float,
) -> list[str]:
    """Installs `lines` (--no-deps) into the environment of `python`; returns the lines built
    against torch (the second phase). Raises InstallFailed saying which package, which phase
    and the fix."""
    against_torch = [line for line in lines if plan.package_name(line) in plan.BUILDS_AGAINST_TORCH]
    isolated = [line for line in lines if line not in against_torch]
    while isolated:
        problem, output = _install(uv, python, isolated, 1, find_links, scratch, deadline)
        if problem is None:
            break
        package = _needs_torch_to_build(output)
        moved = [line for line in isolated if package and plan.package_name(line) == package]
        if not moved:
            raise InstallFailed(_failure(problem, output, 1))
        isolated = [line for line in isolated if line not in moved]
        against_torch += moved
    if against_torch:
        problem, output = _install(uv, python, against_torch, 2, find_links, scratch, deadline)
        if problem is not None:
            raise InstallFailed(_failure(problem, output, 2))
    return against_torch


def _install(
    uv: str,
    python: str,
    lines: Sequence[str],
    phase: int,
    find_links: Sequence[str],
    scratch: Path,
    deadline: float,
) -> tuple[str | None, str]:
    requirements = scratch / f"requirements-phase{phase}.txt"
    requirements.write_text("\n".join(lines) + "\n")
    argv = [uv, "pip", "install", "--no-deps", "--python", python, "-r", str(requirements)]
    if phase == 2:
        argv.append("--no-build-isolation")
    for link in find_links:
        argv += ["--find-links", link]
    return run(argv, deadline)


def _needs_torch_to_build(output: str) -> str | None:
    """The package whose isolated build failed importing torch, as the installer reports it."""
    found = FAILED_BUILD.search(output)
    if found is None or TORCH_MISSING not in output:
        return None
    return plan.package_name(found.group(1))


def _failure(problem: str, output: str, phase: int) -> str:
    found = FAILED_BUILD.search(output)
    if found is None:
        return f"{PHASES[phase]}: {problem}"
    package = plan.package_name(found.group(1))
    return (
        f"{found.group(1)} did not build in {PHASES[phase]}; give the nodes a prebuilt wheel "
        f"of it (the actuator parameter find_links names directories or URLs of wheels), or "
        f"set match_exact_dependencies: false to leave {package} out if it needs NVIDIA GPUs. "
        f"The installer said: {problem}"
    )


def run(argv: list[str], deadline: float) -> tuple[str | None, str]:
    """Runs one build step: (why it failed or None, what it printed)."""
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        return "environment_build_timeout_seconds ran out", ""
    env = {**os.environ, "UV_NO_PROGRESS": "1", "PYTHONNOUSERSITE": "1"}
    env.pop("VIRTUAL_ENV", None)
    try:
        result = subprocess.run(argv, capture_output=True, text=True, timeout=remaining, env=env)
    except subprocess.TimeoutExpired as error:
        output = _text(error.stderr) or _text(error.stdout)
        step = f"{Path(argv[0]).name} {argv[1]}"
        return f"{step} ran past environment_build_timeout_seconds{tail(output)}", output
    output = result.stderr or result.stdout
    if result.returncode != 0:
        return f"`{Path(argv[0]).name} {argv[1]}` exited {result.returncode}{tail(output)}", output
    return None, output


def _text(output: str | bytes | None) -> str:
    return output.decode(errors="replace") if isinstance(output, bytes) else (output or "")


def tail(output: str) -> str:
    lines = [line for line in output.splitlines() if line.strip()]
    return (":\n" + "\n".join(lines[-ERROR_LINES:])) if lines else ""
