"""A predicted step split into what the device computes and what crosses the node's own link,
so that a calibration can correct each apart (space/calibration.py): the compute by a factor
on every part but the collectives, the link by a factor on the collectives' traffic, the part
of the traffic the compute hides recomputed at both (`exposed`).

Pure arithmetic, no device table: plan/speed/step_time.py fills it.
"""

from __future__ import annotations

import dataclasses

COMPUTE_SLOWDOWN_BESIDE_COLLECTIVES = 0.189
"""How much longer compute takes while collectives run beside it: 18.9 % on average (40 % at
most) over GPT and Llama training steps on four A100s, H100s, MI250s and MI210s (Lee et al.,
"Characterizing Compute-Communication Overlap in GPU-Accelerated Distributed Deep Learning:
Performance and Power Implications", arXiv 2507.03114, abstract). NCCL's kernels hold SMs for the
whole collective and share the memory system with the matmuls (an H100 GEMM beside an
all-gather of 24 blocks ran at 47 % MFU instead of 80 %: NVIDIA developer forums, "Compute-
Communication Overlap Causes Severe GEMM Performance Degradation because of Tail Effect").
Cited, not fitted. It matters where the collectives last long beside the compute: over PCIe
without peer-to-peer and across nodes; over NVLink they are over in a few % of the step."""


def exposed(
    traffic: float,
    compute: float,
    units: int,
    slowdown: float = COMPUTE_SLOWDOWN_BESIDE_COLLECTIVES,
) -> float:
    """Seconds the collectives add to the compute when each unit's transfer overlaps the previous
    unit's compute: the first unit's transfer, then the rest beside the compute, which runs
    `slowdown` slower while they last. Where the compute (so slowed) outlasts the rest, the
    step gains the rest's share of the slowdown, rest x s / (1 + s); where it does not, the
    rest shows beyond the compute. With no slowdown: all but what the compute covers, and at
    least the first unit's."""
    first = traffic / max(1, units)
    rest = traffic - first
    return first + max(rest - compute, rest * slowdown / (1 + slowdown))


@dataclasses.dataclass(frozen=True)
class LinkTraffic:
    """A step's collectives within one node: their seconds at the bus bandwidth the device
    table gives the link (`traffic_seconds`), the compute they run beside (`overlap_seconds`)
    and the units they go in, one after another (`exposed`'s). Apart from them, FSDP's
    forward gathers (`serial_seconds`) and the compute that can hide them (`cover_seconds`):
    the forward's, or where the forward's layers wait on the GPU only what is still queued
    when each is issued (plan/speed/experts.forward_tail_seconds). Apart from both, what the
    compute waits for in full (`waiting_seconds`): FSDP's backward collectives under reentrant
    recompute (plan/speed/step_time.FsdpTraffic.waited)."""

    traffic_seconds: float
    overlap_seconds: float
    units: int
    serial_seconds: float = 0.0
    cover_seconds: float = 0.0
    waiting_seconds: float = 0.0  # the compute waits for all of it (FSDP under reentrant recompute)

    def exposed_seconds(
        self, compute: float = 1.0, link: float = 1.0, beside: float = 1.0
    ) -> float:
        """Seconds the collectives add to the step were the compute `compute` times, the
        traffic `link` times and the compute's slowdown beside the traffic `beside` times what
        was priced."""
        slowdown = COMPUTE_SLOWDOWN_BESIDE_COLLECTIVES * beside
        pooled = exposed(
            self.traffic_seconds * link, self.overlap_seconds * compute, self.units, slowdown
        )
        serial = exposed(
            self.serial_seconds * link, self.cover_seconds * compute, self.units, slowdown
        )
        return pooled + serial + self.waiting_seconds * link

    def scaled(self, factor: float) -> LinkTraffic:
        """Every figure `factor` times: a micro-batch's traffic over a step's micro-batches, or
        a step's over its seconds."""
        return dataclasses.replace(
            self,
            traffic_seconds=self.traffic_seconds * factor,
            overlap_seconds=self.overlap_seconds * factor,
            serial_seconds=self.serial_seconds * factor,
            cover_seconds=self.cover_seconds * factor,
            waiting_seconds=self.waiting_seconds * factor,
        )


@dataclasses.dataclass(frozen=True)
class StepParts:
    """One optimizer step's seconds in two: `compute_seconds`, every part but the collectives
    within the node (matmuls, attention, memory-bound kernels, host time, the optimizer;
    collectives across nodes too: the network is not the node's link), and the collectives
    within the node the compute does not hide (`comm_seconds`, from `link`)."""

    compute_seconds: float
    link: LinkTraffic | None = None

    @property
    def comm_seconds(self) -> float:
        return self.link.exposed_seconds() if self.link else 0.0

    @property
    def seconds(self) -> float:
        return self.compute_seconds + self.comm_seconds

    def seconds_at(self, compute: float = 1.0, link: float = 1.0, beside: float = 1.0) -> float:
        """The step's seconds were its compute `compute` times, its link's traffic `link` times
        and the compute's slowdown beside that traffic `beside` times what was priced."""
        moved = self.link.exposed_seconds(compute, link, beside) if self.link else 0.0
        return self.compute_seconds * compute + moved

    def shares(self) -> StepParts:
        """The same split, every figure over the step's seconds (so `seconds` is 1)."""
        total = self.seconds
        if total <= 0:
            return self
        link = self.link.scaled(1 / total) if self.link is not None else None
        return StepParts(self.compute_seconds / total, link)
