"""A deep model's traced step from a few shallow copies of it: every part of every phase
(weights, gradients, optimizer state, the forward's and the backward's tensors, temporaries)
and every parameter count is a constant plus one slope per kind of layer times the layers of
that kind, as long as the first and the last layer keep their kind (a phase's peak holds the
transients of the layer its pass reaches first or last, and of the layer recomputed under
checkpointing). So the step of a model of L layers is traced on a base copy keeping the first
layer, the last and the first inner layer of each kind (every kind present: what the model
does once for a kind, and LoRA's targets, are the full model's), and for each kind with more
inner layers a copy with one more of them; the full depth's figure is the base's plus, for each
kind, (its copy's - the base's) times its further inner layers. Integer arithmetic on bytes and
counts: exact when the premise holds (tests/integration/test_layer_extrapolation.py, and
benchmarks/memory_truth.py against full-depth traces).

A layer's kind is read from the model, never from a table per model type: its entries in every
list of transformers' config object as long as the layers (layer_types and the like: a copy
keeps its layers' entries), its modules as built on the meta device (classes, settings but its
own index, parameter shapes), and whether autograd records it (under LoRA on some kinds only,
without reentrant checkpointing, the layers before the first adapted one record nothing). Each
copy is built on the meta device too, and every copied layer must be the full model's layer at
its index: a config whose layers differ in a way it does not list per layer (attention layers
named by index, a period) is traced at full depth, and the trace says so.

torch and transformers are imported inside the functions (the trace's subprocess runs this).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ado_actuators.sfttrainer.contract.memory_trace import StepSpec, TracedStep
from ado_actuators.sfttrainer.plan.memory.trace.objects import Module
from ado_actuators.sfttrainer.plan.memory.trace.step import model_config, trace_step

DEEP = 8
"""Models with more layers than this are traced shallow and extrapolated (fewer gain little)."""
SCALARS = (int, float, str, bool, type(None))


@dataclasses.dataclass(frozen=True)
class Shallow:
    """How a model of `layers` layers is traced: the copies' layer indices (the base first),
    and per further copy how many of the full model's inner layers its added layer stands for."""

    layers: int
    copies: tuple[tuple[int, ...], ...]
    weights: tuple[int, ...]
    config: dict[str, Any]
    count_key: str
    per_layer: tuple[str, ...]

    def config_of(self, indices: tuple[int, ...]) -> dict[str, Any]:
        config = dict(self.config, **{self.count_key: len(indices)})
        for field in self.per_layer:
            config[field] = [self.config[field][i] for i in indices]
        return config


def plan(spec: StepSpec) -> Shallow | str:
    """The shallow copies of `spec`'s model, or why it is traced at full depth. A layer's kind:
    its entries in the per-layer lists, its modules as built, and whether autograd records it."""
    config = model_config(spec.config)
    layers = int(config.num_hidden_layers)
    if layers <= DEEP:
        return f"{layers} layers: traced at full depth"
    values = config.to_dict()
    count_key = getattr(config, "attribute_map", {}).get("num_hidden_layers", "num_hidden_layers")
    per_layer = tuple(
        sorted(k for k, v in values.items() if isinstance(v, list | tuple) and len(v) == layers)
    )
    model = _meta_model(values, spec)
    built = [_signature(layer) for layer in _layers(model)]
    if len(built) != layers:
        return "its layers are not one list as long as num_hidden_layers: traced at full depth"
    flows = _gradient_flows(spec, model)
    kinds = [repr((flows[i], built[i], *(values[k][i] for k in per_layer))) for i in range(layers)]
    inner: dict[str, list[int]] = {}
    for index in range(1, layers - 1):
        inner.setdefault(kinds[index], []).append(index)
    base = sorted({0, layers - 1, *(found[0] for found in inner.values())})
    growing = [found for found in inner.values() if len(found) > 1]
    shallow = Shallow(
        layers=layers,
        copies=(tuple(base), *(tuple(sorted({*base, found[1]})) for found in growing)),
        weights=tuple(len(found) - 1 for found in growing),
        config=values,
        count_key=count_key,
        per_layer=per_layer,
    )
    for indices in shallow.copies:
        copied = [
            _signature(layer) for layer in _layers(_meta_model(shallow.config_of(indices), spec))
        ]
        if copied != [built[i] for i in indices]:
            return (
                "its layers differ in a way its config does not list per layer: traced at "
                "full depth"
            )
    return shallow


def _gradient_flows(spec: StepSpec, model: Module) -> list[bool]:
    """Per layer, whether autograd records it: not the layers before the first trainable one
    when LoRA adapts only some kinds of layer and nothing makes the embedding's output
    require grad (reentrant checkpointing does, through TRL)."""
    import torch

    from ado_actuators.sfttrainer.plan.memory.trace.step import lora_targets

    layers = _layers(model)
    if spec.peft_method != "lora" or spec.checkpointing == "reentrant":
        return [True] * len(layers)
    targets = lora_targets(model, spec.target_modules)
    if not isinstance(targets, list):
        return [True] * len(layers)
    trained = [
        any(
            isinstance(m, torch.nn.Linear) and name.rsplit(".", 1)[-1] in targets
            for name, m in layer.named_modules()
        )
        for layer in layers
    ]
    return [any(trained[: i + 1]) for i in range(len(layers))]


def _meta_model(values: dict[str, Any], spec: StepSpec) -> Module:
    """The model built on the meta device (shapes, no memory, a second for 7B)."""
    import torch
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        return AutoModelForCausalLM.from_config(  # type: ignore[no-untyped-call]  # transformers'
            model_config(values), torch_dtype=getattr(torch, spec.torch_dtype)
        )


def _layers(model: Module) -> Any:
    """The decoder layers: the model's largest ModuleList (as plan/memory/trace/step.inventory finds them)."""
    import torch

    return max(
        (m for m in model.modules() if isinstance(m, torch.nn.ModuleList)), key=len, default=[]
    )


def _signature(layer: Module) -> list[Any]:
    """A layer as built: each module's class, settings (but the layer's own index) and
    parameter shapes."""
    return [
        (
            name,
            type(module).__name__,
            sorted(
                (k, v)
                for k, v in vars(module).items()
                if isinstance(v, SCALARS) and "idx" not in k and not k.startswith("_")
            ),
            [(n, tuple(p.shape), p.dtype) for n, p in module.named_parameters(recurse=False)],
        )
        for name, module in layer.named_modules()
    ]


def trace(spec: StepSpec) -> tuple[TracedStep, str]:
    """The step's trace, shallow and extrapolated where the model is deep and its config
    lists how its layers differ; with a sentence saying how it was traced."""
    shallow = plan(spec)
    if isinstance(shallow, str):
        return trace_step(spec), shallow
    traces = [
        trace_step(dataclasses.replace(spec, config=shallow.config_of(indices)))
        for indices in shallow.copies
    ]
    if not _peak_keeps_its_moment(traces):
        return trace_step(spec), (
            "traced at full depth: per layer, its gradients and its activations are close, so "
            "the backward's peak may move between the backward's start and end with depth"
        )
    weights = shallow.weights

    def extrapolated(pick: Any) -> dict[str, int]:
        figures = [pick(t) for t in traces]
        names = list(dict.fromkeys(name for figure in figures for name in figure))
        return {
            name: figures[0].get(name, 0)
            + sum(
                w * (f.get(name, 0) - figures[0].get(name, 0))
                for w, f in zip(weights, figures[1:], strict=True)
            )
            for name in names
        }

    phases = {
        phase: extrapolated(lambda t, phase=phase: t.phases.get(phase, {}))
        for phase in dict.fromkeys(p for t in traces for p in t.phases)
    }
    found = TracedStep(
        phases=phases,
        assumed=tuple(sorted({a for t in traces for a in t.assumed})),
        rest=extrapolated(lambda t: t.rest),
        inventory=_inventory(traces, weights, shallow.layers, extrapolated),
    )
    sizes = ", ".join(str(len(c)) for c in shallow.copies)
    return found, (
        f"traced at reduced depth (copies of {sizes} of its {shallow.layers} layers, keeping "
        f"the first and last), extrapolated per layer of each kind"
    )


def _peak_keeps_its_moment(traces: list[TracedStep]) -> bool:
    """Whether the backward's peak grows, per layer of each kind, at least as fast as the
    other moments it could be at: its start (every layer's activations held, as at the
    forward's end) and its end (every layer's gradients made, as in the optimizer step but its
    temporaries). Each moment is affine in the layers; the peak is their largest, so an
    extrapolated peak is the full model's only when no other moment overtakes it with depth."""

    def total(trace: TracedStep, phase: str, but: str = "") -> int:
        return sum(v for k, v in trace.phases.get(phase, {}).items() if k != but)

    base, *copies = traces
    for copy in copies:
        peak = total(copy, "backward") - total(base, "backward")
        start = total(copy, "forward") - total(base, "forward")
        end = total(copy, "optimizer_step", "optimizer_temporaries") - total(
            base, "optimizer_step", "optimizer_temporaries"
        )
        if peak < max(start, end):
            return False
    return True


def _inventory(
    traces: list[TracedStep], weights: tuple[int, ...], layers: int, extrapolated: Any
) -> dict[str, Any]:  # TracedStep.inventory: JSON
    """The parameter counts of the full model: the numbers extrapolated as the bytes are, each
    linear's count by its name and shape."""
    base = traces[0].inventory
    numbers = extrapolated(
        lambda t: {
            k: v
            for k, v in t.inventory.items()
            if k in ("total", "embedding", "lm_head", "norms", "trainable")
        }
    )
    linears = extrapolated(lambda t: {(n, i, o): c for n, i, o, c in t.inventory["linears"]})
    return {
        **base,
        **numbers,
        "layers": layers,
        "linears": [[n, i, o, c] for (n, i, o), c in linears.items() if c],
    }
