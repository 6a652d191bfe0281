"""A hybrid model's Mamba-2 layers (Granite 4.0's granitemoehybrid, Bamba), read from config.json,
and which code their scan runs on a GPU: what the step time (plan/speed/mamba.py) and the memory
formula (plan/memory/mamba.py) both read, so they cannot disagree on it.

transformers runs a Mamba-2 layer through mamba_ssm's fused `mamba_split_conv1d_scan_combined`
and causal_conv1d's kernels when both packages import and the weights are on a CUDA device
(modeling_granitemoehybrid.py: `is_fast_path_available and "cuda" in ...device.type`), else
through `torch_forward`, a chunked scan in plain torch that materialises tensors of
[batch, chunks, chunk, chunk, heads, state] floats. Which packages a measurement trains with is
its fms-hf-tuning version's package list (plan/packages/fms-hf-tuning_v*.txt): 2.7.1 to 3.1.0
list both; 3.2.2's list (and 2.6.0 and older) lists neither.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Literal

from packaging.utils import canonicalize_name

from ado_actuators.sfttrainer.plan.model.releases import NoEnvironment, read_package_list

ScanPath = Literal["fused", "torch"]
FUSED_PACKAGES = ("mamba-ssm", "causal-conv1d")
"""Both must import for transformers to take the fused path (canonical names)."""
MAMBA_FAMILIES = ("granitemoehybrid", "bamba")
"""The model types whose Mamba-2 layers this module reads (their config.json keys agree)."""
DEFAULTS = {"mamba_n_heads": 128, "mamba_n_groups": 1, "mamba_d_state": 256}
"""GraniteMoeHybridConfig's and BambaConfig's defaults where config.json omits a key."""
CHUNK = 256
"""mamba_chunk_size's default: the scan's block of tokens."""


@dataclasses.dataclass(frozen=True)
class MambaLayers:
    """The Mamba-2 layers of one model: how many and their shape."""

    layers: int
    hidden: int
    heads: int
    head_dim: int
    state: int
    groups: int = 1
    conv_kernel: int = 4
    chunk: int = CHUNK

    @property
    def inner(self) -> int:
        """The scan's width: heads x head dimension (mamba_expand x hidden)."""
        return self.heads * self.head_dim

    @property
    def conv_dim(self) -> int:
        """The convolution's channels: x, B and C."""
        return self.inner + 2 * self.groups * self.state

    @property
    def projected(self) -> int:
        """in_proj's outputs: the gate z, x B C, and one dt per head."""
        return self.inner + self.conv_dim + self.heads


def layer_kinds(config: dict[str, Any]) -> list[str] | None:
    """Each layer's kind ("mamba" or "attention"), None where config.json does not say."""
    kinds = config.get("layer_types") or config.get("layers_block_type")
    if isinstance(kinds, list) and kinds:
        return [str(kind) for kind in kinds]
    indices = config.get("attn_layer_indices")
    layers = config.get("num_hidden_layers")
    if config.get("model_type") == "bamba" and isinstance(layers, int):
        attention = set(indices or [])
        return ["attention" if i in attention else "mamba" for i in range(layers)]
    return None


def mamba_layers(config: dict[str, Any]) -> MambaLayers | None:
    """The model's Mamba-2 layers; None for a model without any (or one this does not read)."""
    if config.get("model_type") not in MAMBA_FAMILIES:
        return None
    kinds = layer_kinds(config) or []
    count = sum(kind == "mamba" for kind in kinds)
    hidden = config.get("hidden_size")
    if not count or not isinstance(hidden, int):
        return None
    heads = int(config.get("mamba_n_heads") or DEFAULTS["mamba_n_heads"])
    expand = int(config.get("mamba_expand") or 2)
    head_dim = config.get("mamba_d_head")
    return MambaLayers(
        layers=count,
        hidden=hidden,
        heads=heads,
        head_dim=int(head_dim) if isinstance(head_dim, int) else expand * hidden // heads,
        state=int(config.get("mamba_d_state") or DEFAULTS["mamba_d_state"]),
        groups=int(config.get("mamba_n_groups") or DEFAULTS["mamba_n_groups"]),
        conv_kernel=int(config.get("mamba_d_conv") or 4),
        chunk=int(config.get("mamba_chunk_size") or CHUNK),
    )


def scan_path(fms_hf_tuning_version: str) -> ScanPath:
    """The path a GPU measurement of that version runs: fused where its package list has both
    mamba-ssm and causal-conv1d, else transformers' torch path (an unknown version too)."""
    try:
        lines = read_package_list(fms_hf_tuning_version)
    except NoEnvironment:
        return "torch"
    names = {canonicalize_name(line.split("==")[0].split(">=")[0].strip()) for line in lines}
    return "fused" if all(package in names for package in FUSED_PACKAGES) else "torch"


def scan_note(path: ScanPath, fms_hf_tuning_version: str) -> str:
    """The words a row carries for the scan path it assumed."""
    if path == "fused":
        return (
            f"Mamba-2 scan: mamba-ssm and causal-conv1d's fused kernels (fms-hf-tuning "
            f"{fms_hf_tuning_version}'s package list has both; with match_exact_dependencies: "
            f"false only if the workers have them)"
        )
    return (
        f"Mamba-2 scan: transformers' torch path (fms-hf-tuning {fms_hf_tuning_version or '?'}'s "
        f"package list lacks mamba-ssm or causal-conv1d), many times slower and larger than the "
        f"fused kernels; fms-hf-tuning 3.1.0 lists both"
    )
