"""Feeding a stop policy synthetic steps, as the callback would at each step's start and end."""

from __future__ import annotations


def drive(policy, durations, tokens=0, t0=1000.0, gap=0.0):
    """Feeds steps of the given durations (each carrying `tokens`, `gap` seconds apart);
    returns how many steps ran before the stop."""
    t = t0
    for n, duration in enumerate(durations, start=1):
        start, end = t, t + duration
        policy.begin(start)
        decision = policy.propose(start, end, tokens)
        policy.commit(end, decision)
        if decision.stop:
            return n
        t = end + gap
    return len(durations)
