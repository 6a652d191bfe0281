"""`make mutation`'s gate (tests/mutation/score.py): how mutmut's verdicts count, and the
equivalents list kept honest."""

import importlib.util
from pathlib import Path

SCORE = Path(__file__).resolve().parents[1] / "mutation" / "score.py"
spec = importlib.util.spec_from_file_location("mutation_score", SCORE)
score = importlib.util.module_from_spec(spec)
spec.loader.exec_module(score)

KILLED, SURVIVED, NO_TESTS, TIMEOUT, SUSPICIOUS = 1, 0, 33, 36, -6


def run(n_killed, **others):
    found = {f"m.x_f__mutmut_{i}": KILLED for i in range(n_killed)}
    return found | others


def test_timeouts_count_as_killed_survivors_and_untested_ones_do_not():
    lines, problems = score.score(
        run(8, t=TIMEOUT, s=SURVIVED, n=NO_TESTS), {"s": "why", "n": "why"}
    )
    assert problems == ["killed share 81.8 % is under 90 %"]
    assert lines[-1] == (
        "mutation score: 11 mutants, 9 killed (81.8 %), 2 not killed "
        "(1 no tests, 1 survived), 2 of them listed as equivalent"
    )


def test_every_mutant_not_killed_must_be_listed_and_every_listed_one_alive():
    _, problems = score.score(
        run(20, s=SURVIVED, q=SUSPICIOUS), {"gone": "why", "m.x_f__mutmut_0": "why"}
    )
    assert problems == [
        "suspicious, not listed as equivalent: q (mutmut show q)",
        "survived, not listed as equivalent: s (mutmut show s)",
        "listed as equivalent but no such mutant (stale entry): gone",
        "listed as equivalent but killed (stale entry): m.x_f__mutmut_0",
    ]


def test_an_unfinished_run_gives_no_score():
    _, problems = score.score(run(20, u=None), {})
    assert problems[0].startswith("1 mutant(s) not checked")


def test_the_list_is_one_mutant_and_its_reason_per_line(tmp_path):
    listed = tmp_path / "equivalent.txt"
    listed.write_text("# comment\n\na.x_f__mutmut_1 x % 1 is always 0\n")
    assert score.equivalents(listed) == {"a.x_f__mutmut_1": "x % 1 is always 0"}
    listed.write_text("a.x_f__mutmut_1\n")
    try:
        score.equivalents(listed)
    except SystemExit as error:
        assert "has no reason" in str(error)
    else:
        raise AssertionError("a mutant listed without a reason was accepted")


def test_the_listed_equivalents_all_give_a_reason():
    assert all(why for why in score.equivalents().values())
