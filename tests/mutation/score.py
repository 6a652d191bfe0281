"""The score of `make mutation`, read from what `mutmut run` left in mutants/.

Fails (exit 1) when fewer than 90 % of the mutants are killed, when a mutant that was not
killed is not listed in equivalent.txt beside this file, when the list names a mutant that
no longer exists or is now killed (mutant names are positions in a function, so a stale entry
would silently excuse another mutant), or when mutmut left a mutant unchecked.

How mutmut's verdicts count:
- killed: a test failed (mutmut's `killed`), the tests ran past their time limit
  (`timeout`: mutmut's own semantics, a mutant that makes a loop endless is caught), the
  test process died of a signal (`segfault`), or the type checker rejected it.
- not killed: `survived`, `no tests` (no selected test calls the mutated function) and
  `suspicious` (an exit code mutmut cannot read): each must be killed by a test or listed.
- `not checked`, `skipped` and `check was interrupted by user`: the run is incomplete and the
  score is not given.
"""

from __future__ import annotations

import json
import sys
from collections import Counter, defaultdict
from pathlib import Path

THRESHOLD = 0.90
HERE = Path(__file__).resolve().parent
EQUIVALENTS = HERE / "equivalent.txt"
KILLED = {1, 3, 24, -24, 152, 255, 36, -11, -9, 37}
NOT_KILLED = {0: "survived", 5: "no tests", 33: "no tests", 35: "suspicious"}
INCOMPLETE = {None: "not checked", 34: "skipped", 2: "interrupted"}


def verdicts(mutants: Path) -> dict[str, int | None]:
    """mutant name -> mutmut's exit code, from every `<module>.py.meta` of the run."""
    found: dict[str, int | None] = {}
    for meta in sorted(mutants.rglob("*.py.meta")):
        found |= json.loads(meta.read_text())["exit_code_by_key"]
    return found


def equivalents(path: Path = EQUIVALENTS) -> dict[str, str]:
    """`name  why` per line; `#` starts a comment. A name without a reason is an error."""
    listed = {}
    for number, line in enumerate(path.read_text().splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        name, _, why = line.partition(" ")
        if not why.strip():
            raise SystemExit(f"{path.name}:{number}: {name} has no reason")
        listed[name] = why.strip()
    return listed


def module_of(name: str) -> str:
    return name.rsplit(".", 1)[0]


def score(found: dict[str, int | None], listed: dict[str, str]) -> tuple[list[str], list[str]]:
    """(what to print, problems); no problems means `make mutation` passes."""
    problems = []
    incomplete = [n for n, code in found.items() if code in INCOMPLETE]
    if incomplete:
        problems.append(
            f"{len(incomplete)} mutant(s) not checked (run mutmut to the end), e.g. {incomplete[0]}"
        )
    alive = {
        n: NOT_KILLED.get(code, "suspicious")
        for n, code in found.items()
        if code not in KILLED and code not in INCOMPLETE
    }
    for name, status in sorted(alive.items()):
        if name not in listed:
            problems.append(f"{status}, not listed as equivalent: {name} (mutmut show {name})")
    for name in sorted(listed):
        if name not in found:
            problems.append(f"listed as equivalent but no such mutant (stale entry): {name}")
        elif name not in alive:
            problems.append(f"listed as equivalent but killed (stale entry): {name}")
    total = len(found)
    killed = total - len(alive) - len(incomplete)
    per_module: dict[str, Counter] = defaultdict(Counter)
    for name, code in found.items():
        per_module[module_of(name)]["killed" if code in KILLED else "other"] += 1
    lines = [f"{'module':55} {'mutants':>7} {'killed':>7}"]
    for module, counts in sorted(per_module.items()):
        lines.append(f"{module:55} {sum(counts.values()):7} {counts['killed']:7}")
    share = killed / total if total else 0.0
    kinds = Counter(alive.values())
    summary = (
        f"mutation score: {total} mutants, {killed} killed ({100 * share:.1f} %), "
        f"{len(alive)} not killed ({', '.join(f'{n} {k}' for k, n in sorted(kinds.items())) or 'none'}), "
        f"{sum(1 for n in alive if n in listed)} of them listed as equivalent"
    )
    if not total:
        problems.append("no mutants found: did `mutmut run` run?")
    elif share < THRESHOLD:
        problems.append(f"killed share {100 * share:.1f} % is under {100 * THRESHOLD:.0f} %")
    return lines + [f"FAIL: {p}" for p in problems] + [summary], problems


def main(argv: list[str]) -> int:
    mutants = Path(argv[1]) if len(argv) > 1 else Path("mutants")
    lines, problems = score(verdicts(mutants), equivalents())
    print("\n".join(lines))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
