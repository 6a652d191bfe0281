"""The stop methods an entity's `auto_stop_method` may name, and the policy a job asks for.

Adding a method is one module beside the others (a policy and its expected duration, a
stopping/method.py StopMethod) and one entry in METHODS; the entity's values, the rank's policy
and the bill all read this registry."""

from __future__ import annotations

from ado_actuators.sfttrainer.contract.trainer_io import RaceAgainst
from ado_actuators.sfttrainer.stopping import steady, warmup_stable
from ado_actuators.sfttrainer.stopping.any_of import AnyOf
from ado_actuators.sfttrainer.stopping.method import StopMethod
from ado_actuators.sfttrainer.stopping.policy import PolicyBase
from ado_actuators.sfttrainer.stopping.raced import Racing
from ado_actuators.sfttrainer.stopping.racing import Incumbent
from ado_actuators.sfttrainer.stopping.seconds import NeverStop, StopAfterSeconds

_ALL: tuple[StopMethod, ...] = (warmup_stable.METHOD, steady.METHOD)
METHODS: dict[str, StopMethod] = {m.name: m for m in _ALL}
"""Each method by its name, in the order the entity's field and the docs list them."""
AUTO_STOP_METHODS = tuple(METHODS)


def method_named(auto_stop_method: str | None) -> StopMethod | None:
    """The method an entity's value names, in any case; None for no value, "none" or a name no
    method has (make_policy refuses those, the bill bounds them otherwise)."""
    return METHODS.get((auto_stop_method or "").upper())


def make_policy(
    stop_after_seconds: float,
    auto_stop_method: str | None,
    auto_stop_max_seconds: float | None = None,
    race: RaceAgainst | None = None,
) -> PolicyBase:
    """The policy a rank runs for its job's stop settings: the method's, stop_after_seconds'
    (when positive), both at once, or none that ever stops; racing `race`'s incumbent once the
    warm-up ends, where given (stopping/raced.py)."""
    policies: list[PolicyBase] = []
    if auto_stop_method and auto_stop_method.lower() != "none":
        method = method_named(auto_stop_method)
        if method is None:
            supported = ", ".join(AUTO_STOP_METHODS)
            raise ValueError(f"auto_stop_method {auto_stop_method!r}: supported are {supported}")
        policies.append(method.policy(auto_stop_max_seconds))
    if stop_after_seconds > 0:
        policies.append(StopAfterSeconds(stop_after_seconds))
    if not policies:
        return NeverStop()
    policy = policies[0] if len(policies) == 1 else AnyOf(*policies)
    if race is None:
        return policy
    incumbent = Incumbent(race.speed, race.ci95_percent, race.incumbent)
    return Racing(policy, incumbent, race.measure_ties)
