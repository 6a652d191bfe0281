"""After `make test`: combine what every process measured (pytest, the trainer and its ranks,
Ray workers, ado's CLI), print the total and name each module under the bar with the reason
it stays there (tests/coverage/gaps.toml). A module under the bar with no reason recorded is
named as such: that is a gap nobody has looked at.

Never fails the run: line counts move a little with the schedule (a retry taken or not), and
`make test` must be deterministic. Usage: python tests/coverage/summary.py [DATA_DIR]
"""

from __future__ import annotations

import json
import sys
import tempfile
import tomllib
from pathlib import Path

import coverage

BAR = 80.0
HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
PACKAGE = "ado_actuators/sfttrainer/"


def reasons(path: Path = HERE / "gaps.toml") -> dict[str, str]:
    """module path under the package -> why it stays under the bar."""
    return {k: " ".join(v.split()) for k, v in tomllib.loads(path.read_text())["gaps"].items()}


def per_module(report: dict) -> dict[str, float]:
    """`coverage json` -> module path under the package -> percent of lines covered."""
    return {
        name.split(PACKAGE, 1)[1]: data["summary"]["percent_covered"]
        for name, data in report["files"].items()
        if PACKAGE in name
    }


def lines(total: float, modules: dict[str, float], known: dict[str, str]) -> list[str]:
    """What `make test` prints. Pure."""
    out = [f"coverage (every process the tests started): {total:.1f} % of lines"]
    under = sorted((pct, name) for name, pct in modules.items() if pct < BAR)
    if under:
        out.append(f"modules under {BAR:g} %:")
    for pct, name in under:
        why = known.get(
            name, "NO REASON RECORDED: add a test, or a reason to tests/coverage/gaps.toml"
        )
        out.append(f"  {pct:5.1f} %  {name}: {why}")
    stale = sorted(n for n in known if n in modules and modules[n] >= BAR)
    if stale:
        out.append(f"at or over the bar now, their reasons can go: {', '.join(stale)}")
    return out


def main() -> int:
    data_dir = Path(sys.argv[1]) if len(sys.argv) > 1 else REPO / ".coverage-data"
    cov = coverage.Coverage(
        config_file=str(REPO / "pyproject.toml"), data_file=str(data_dir / "coverage")
    )
    cov.combine(data_paths=[str(data_dir)], keep=False)
    cov.save()
    with tempfile.TemporaryDirectory() as tmp:
        target = Path(tmp) / "coverage.json"
        total = cov.json_report(outfile=str(target), ignore_errors=True)
        modules = per_module(json.loads(target.read_text()))
    print("\n".join(lines(total, modules, reasons())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
