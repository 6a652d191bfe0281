"""A device learned from its own measured rows: the predicted throughput corrected by a factor
per device, training method, answer group and GPU count, with an interval that narrows as the
device's rows accumulate.

The model, per device d, training method m, answer group g (one model, method and framework:
sfttrainer_plot's "Fastest valid" groups), subgroup s (the group's configurations at one GPU
count and sequence length: only the batch size varies inside) and row i:
log(measured_i) = log(predicted_i) + shift_d + shift_dm + shift_g + shift_s + noise_i.
The speed model's fit is the prior: shift_d is 0 give or take `Prior.shift_sd` (small on the
device the constants were fitted on, wider on a device priced from its datasheet, wide on a
device the speed model cannot price), each method's shift_dm 0 give or take `Prior.method_sd`
(LoRA's adapters and full fine-tuning's optimizer run at rates of their own on each device),
each group's 0 give or take `Prior.group_sd` and each subgroup's 0 give or take
`Prior.subgroup_sd` (the speed model errs alike for the configurations of one group, and more
alike at one GPU count and length). So a level with one row moves part of the way towards it,
one with many rows follows them (Gaussian priors on Gaussian means), and a group's first
measured row tells how far the model is off for the rest of the group.

The link apart from the compute: the speed model splits each step into compute and the
collectives within the node (plan/speed/parts.py's StepParts: their traffic at the table's bus
bandwidth, the compute that hides them). On a device priced from its datasheet the factors
above scale the compute, and one more, the link's (`Prior.link_sd`, by the link's kind),
scales the traffic alone; the part the compute does not hide follows both. A row at one GPU
has no collectives: it tells the compute; a row at more tells the link by what the compute
leaves unexplained, and the link then moves every other GPU count as much as its collectives
weigh there. The rows' gain is nonlinear in the link (a slower link exposes traffic the compute
hid), so the factors are fitted by Gauss-Newton, their intervals by the delta method. Without
rows at more than one GPU the link keeps its prior (the multi-GPU rows' intervals wider by it);
on the fitted device, whose GPU counts' errors its subgroups' spreads were fitted on, there is
no link factor and the factors scale the whole step, as before.

How much of the traffic the compute hides, apart from the link: on a PCIe device one more
factor (`Prior.beside_sd`) scales the compute's slowdown beside the collectives
(parts.COMPUTE_SLOWDOWN_BESIDE_COLLECTIVES), so the share of the traffic the compute could hide
that the step still pays, from none to all of it. A multi-GPU row whose compute outlasts its
traffic tells it; one whose traffic outlasts its compute tells the link. A link factor alone
could not follow a node whose collectives overlap nothing: a slower link exposes traffic only
where it outlasts the compute, while such a node pays it at every batch size.

The noise is how far one configuration strays from its subgroup's factor. How far the device's
rows stray, against what the prior says, comes from the rows themselves, each predicted with
the factors fitted on the others (leave one out), pooled with the prior's word counted as
`Prior.weight` rows; every level below the method's scales with it (up or down where the
spreads were fitted on the device's own rows, only up where they are carried from elsewhere).
An interval adds the factors' own uncertainty to that spread; where the spreads were carried
from another device it is Student's t (their own uncertainty), else normal.

The spreads: on the fitted device (the reference A100, the framework the speed model was
fitted on), fitted on its own rows' errors, small; on any other device or framework, fitted
on the speed model's errors on public runs it was not fitted on (OFF_SOURCE_*), larger, so a
device's first rows move its factor less there.

Pure: rows in, calibrations out (numpy for the small solve). Every figure it returns is a
prediction.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Sequence
from statistics import NormalDist

import numpy as np
import numpy.typing as npt

from ado_actuators.sfttrainer.plan.speed.devices import REFERENCE_NAME, link_kind_of
from ado_actuators.sfttrainer.plan.speed.parts import COMPUTE_SLOWDOWN_BESIDE_COLLECTIVES, StepParts
from ado_actuators.sfttrainer.space.groups import CPU
from ado_actuators.sfttrainer.stats.interval import COVERAGE, Interval, t_quantile

REFERENCE_DEVICE = REFERENCE_NAME
"""The device the speed model's constants were fitted on: it prices its own attention kernel."""
Array = npt.NDArray[np.float64]


@dataclasses.dataclass(frozen=True)
class Prior:
    """What is believed of a device before any of its rows (spreads on the log scale): its
    factor's spread, each training method's on top of it, each answer group's on top of that
    (`group_sd`), each subgroup's on top of that (`subgroup_sd`), and one row's spread about
    them (`spread`), worth `weight` rows. A spread of 0 for a level leaves it out."""

    shift_sd: float
    spread: float
    method_sd: float = 0.10
    weight: float = 3.0
    group_sd: float = 0.0
    subgroup_sd: float = 0.0
    known_spreads: bool = False
    """True: the spreads were fitted on this device's own rows, and its intervals are normal.
    False: they are carried from another device, worth `weight` rows, and its intervals are
    Student's t with `weight` + its rows degrees of freedom (the spreads' own uncertainty)."""
    attention_sd: float = 0.0
    """The spread of the log rate of the attention kernel the device's runs use, against the
    one the speed model priced: a factor on the attention's share of each step (0: none)."""
    link_sd: float = 0.0
    """The spread of the log of the time the collectives within a node take, against what the
    device table's bus bandwidth prices: a factor on the step's traffic alone, the compute
    they overlap kept at the compute's factor (0: none; the link errs with the rest)."""
    beside_sd: float = 0.0
    """The spread of the log of how much slower the compute runs beside those collectives,
    against the slowdown priced (parts.COMPUTE_SLOWDOWN_BESIDE_COLLECTIVES): a factor on the
    share of the hidden traffic the step still pays (0: none; only with a link factor)."""


GROUP_SD = 0.053
"""An answer group's own factor (log scale), on top of its device's and its method's: the speed
model is off by much the same for every configuration of one model, method, framework and
device. Fitted by benchmarks/calibration.py (space/calibration.py's fit_level_spreads) on
fms-acceleration's A100 tables, each of the five model families predicted by the speed model
fitted without it: 48 groups, 244 rows."""
SUBGROUP_SD = 0.048
"""A group's configurations at one GPU count share a factor of their own on top of the group's
(the speed model's multi-GPU efficiency errs alike at every batch size), from the same fit."""
WITHIN_SUBGROUP = 0.037
"""One configuration's spread (log scale) about its subgroup's factor, from the same fit: the
relative speeds across batch sizes at one GPU count are predicted better than across GPU
counts, and both better than the level. Tested where it was not fitted: on each A100 family
with the constants fitted on the other four (benchmarks/calibration.py,
docs/benchmarks/guided.md). Off the fitted device or framework the OFF_SOURCE_* spreads hold."""
FITTED_DEVICE = Prior(
    shift_sd=0.01,
    spread=WITHIN_SUBGROUP,
    method_sd=0.01,
    group_sd=GROUP_SD,
    subgroup_sd=SUBGROUP_SD,
    known_spreads=True,
)
"""The reference device: the left-one-family-out error is 3.1 % median, 10.2 % at the 90th
percentile (docs/benchmarks/throughput.md), and no family strays as a whole: its factor barely
moves; what a family's groups stray by is their own factors'."""
OFF_SOURCE_GROUP_SD = 0.069
"""An answer group's factor on a device or framework the speed model was not fitted on, about
the device's, method's and attention kernel's: from the speed model's errors on the public runs
it was not fitted on (benchmarks/guided_search.py's validation_errors: other frameworks' runs,
fms-acceleration's L40 table, llm-foundry's MPT tables; 224 runs, 5 sources), by
fit_level_spreads (benchmarks/guided_search.py's off_source_spreads), each source's device
factors taken out (its mean error per device and method, and its attention kernel's factor
times each run's attention share). Each source is scored with the spreads fitted without it
(docs/benchmarks/guided.md)."""
OFF_SOURCE_SUBGROUP_SD = 0.042
"""A subgroup's factor on top of its group's, off the fitted source, from the same fit. Small
once the attention kernel's factor is out: what moved llm-foundry's errors by up to 70 % from
512 to 65,536 tokens was its attention's share of the step (0.126 without that factor, before
its runs' Triton attention was priced as such)."""
OFF_SOURCE_WITHIN = 0.034
"""One configuration's spread about its subgroup's factor off the fitted source, same fit."""
ATTENTION_KERNEL_SD = 0.36
"""How far the attention kernel a device's runs use may run from the one the speed model priced
(log of its rate over the priced one's), off the fitted source. The published kernels span
-0.71 to +0.56 of flash-attention 2's rate: on the H100 at 4,096 tokens, head dimension 128,
forward and backward (the backward 2.5 times the forward's FLOPs), standard attention 160,
flash-attention 2 325 and flash-attention 3 566 TFLOP/s (FlashAttention-3 paper, figures 5
and 6, as metrics/gpu_peaks.yaml holds them). 0.36 puts the farther of them at 1.96 spreads.
A framework's kernel (another release's SDPA, FA3, an attention bias) moves a
run's speed by its attention share of the step: long sequences most, short ones barely."""
LINK_SD_PCIE = 0.38
"""How far a PCIe node's collectives may run from the bus bandwidth the device table gives them
(log of their time over the priced one's). The table's own sources span it: on eight PCIe
A100s NCCL's all_reduce reached 8 GB/s of bus bandwidth without peer-to-peer and 21 GB/s with
it (NVIDIA/nccl issue 841), about 10 GB/s a GPU staged through host memory (nccl-tests issue
74), against the 10 GB/s the table prices a Gen4 node at: 0.38 puts 21 GB/s at 1.96 spreads.
Whether a node has peer-to-peer, a PCIe switch or a busy root complex is what the first
multi-GPU rows tell; no throughput table fitted it."""
LINK_SD_NVLINK = 0.11
"""The same for an NVLink node: NCCL's effective bus bandwidth on H100 NVLink, about 370 GB/s
(nccl-tests issue 212), against the 300 GB/s the NVLink rule prices: 0.11 puts it at 1.96
spreads. The fitted device has none: its GPU counts' errors are its subgroups' spreads, fitted
on its own rows."""
BESIDE_SD = 2.0
"""How far a PCIe node's compute may slow beside its collectives from the slowdown priced (log of
its slowdown s over the priced 18.9 %; the step pays s / (1 + s) of the traffic the compute
hides). Published overlaps span all of it: Lee et al.'s workloads from no slowdown to 40 %
(arXiv 2507.03114); a GEMM beside an all-gather on an H100 at 47 % MFU instead of 80 % (NVIDIA
developer forums, "Compute-Communication Overlap Causes Severe GEMM Performance Degradation
because of Tail Effect": s = 0.70); and FSDP whose collectives overlapped nothing: its
all-gathers on LUMI's nodes (allenai/OLMo issue 386) and across A100 nodes (pytorch/pytorch
issue 106177), its reduce-scatters under CUDA_DEVICE_MAX_CONNECTIONS=1 (verl-project/verl-omni
issue 421). Over PCIe without peer-to-peer NCCL stages every chunk through host memory, a path
none of them measured. 2.0 puts s = 9.5 (0.9 of the hidden traffic paid) and s = 0.004 (all of
it hidden) at 1.96 spreads. A node's multi-GPU rows tell it apart from the link: a row whose
compute outlasts its traffic shows the slowdown, one whose traffic outlasts its compute shows
the link. No throughput table fitted it."""
DATASHEET_DEVICE = Prior(
    shift_sd=0.35,
    spread=OFF_SOURCE_WITHIN,
    method_sd=0.2,
    group_sd=OFF_SOURCE_GROUP_SD,
    subgroup_sd=OFF_SOURCE_SUBGROUP_SD,
    attention_sd=ATTENTION_KERNEL_SD,
)
"""A device priced from what it achieves, the framework's constants fitted on another: the L40's
runs were up to 33 % slower than predicted before calibration, LoRA's more than full
fine-tuning's. Its groups, subgroups and rows stray about its factors as the speed model strays
on the public runs it was not fitted on (OFF_SOURCE_*), not as little as on the A100 runs it
was fitted on."""
FRAMEWORK_SHIFT_SD = 0.054
"""How far another framework's runs on the fitted device stray as a whole (log scale): the
root mean square of each public source's mean log error on the A100 (fsdp_blog, torchtitan,
xtuner, llm-foundry; benchmarks/guided_search.py's framework_shift_sd)."""
OTHER_FRAMEWORK = dataclasses.replace(
    DATASHEET_DEVICE, shift_sd=FRAMEWORK_SHIFT_SD, method_sd=0.1, link_sd=LINK_SD_NVLINK
)
"""The fitted device trained by another framework than the one the constants were fitted on:
its factor near 0 give or take FRAMEWORK_SHIFT_SD, its groups and rows as off the source."""
UNPRICED_DEVICE = Prior(shift_sd=4.0, spread=1.0, method_sd=0.3, known_spreads=True)
"""A device the speed model cannot price (CPUs): the reference device's prediction says only
which configuration is faster, not by how much; the first row sets the scale. No group levels
(the ratios within a group are no better known than the level); its wide spread is taken as
known (normal intervals). Too narrow for batch sizes far apart: a tiny model's batch 16 over
batch 1 is 15.6 times on the reference GPU, and measured on 2 idle CPU cores 1.25 times (one
thread) to 1.36 (two), 8 times on busy ones; batch 32 over batch 1, 30 times against 1.6 to 3.
The order holds, and so a walk's answer; a CPU walk is for trying the walk, not for figures."""


def prior_for(device: str, fitted_framework: bool = True) -> Prior:
    """The device's prior; `fitted_framework` False: its rows come from another framework than
    the one the speed model was fitted on (the reference device then strays as off the
    source)."""
    if device == REFERENCE_DEVICE:
        return FITTED_DEVICE if fitted_framework else OTHER_FRAMEWORK
    if device == CPU or not device:
        return UNPRICED_DEVICE
    # by the link's kind; a device the table lacks as PCIe, the wider. NVLink's collectives are
    # over in a few % of a step: no overlap to learn there
    if link_kind_of(device) == "nvlink":
        return dataclasses.replace(DATASHEET_DEVICE, link_sd=LINK_SD_NVLINK)
    return dataclasses.replace(DATASHEET_DEVICE, link_sd=LINK_SD_PCIE, beside_sd=BESIDE_SD)


@dataclasses.dataclass(frozen=True)
class Row:
    """One measured configuration: its device, its training method, the speed model's
    prediction and what was measured (any throughput unit, the same for both)."""

    device: str
    predicted: float
    measured: float
    method: str = ""
    group: str = ""
    subgroup: str = ""  # the group's configurations at one GPU count
    attention_share: float = 0.0  # of its predicted step time, in the attention kernel
    parts: StepParts | None = None  # its predicted step's compute and collectives

    @property
    def log_ratio(self) -> float:
        return math.log(self.measured / self.predicted)


@dataclasses.dataclass(frozen=True)
class Calibration:
    """A device's factors (log scale): the device's own, each method's on top of it, each
    answer group's on top of that and each group's GPU count's on top of that; their joint
    posterior, the spread of one row about them, and how many rows made them."""

    device: str
    rows: int
    methods: tuple[str, ...]
    mean: tuple[float, ...]  # the device's shift, then one per method, group, subgroup
    covariance: tuple[tuple[float, ...], ...]
    spread: float
    method_sd: float
    groups: tuple[str, ...] = ()
    group_sd: float = 0.0
    subgroups: tuple[str, ...] = ()
    subgroup_sd: float = 0.0
    freedom: float = math.inf
    attention_sd: float = 0.0  # above 0: the last factor but the collectives' is the attention's
    link_sd: float = 0.0  # above 0: a factor after the attention's is the link's (log time)
    beside_sd: float = 0.0  # above 0: the last factor is the slowdown beside the link's traffic

    @property
    def _collectives(self) -> int:
        """How many factors end `mean` that act on the collectives alone: the link's, then the
        compute's slowdown beside them."""
        return (self.link_sd > 0) + (self.beside_sd > 0)

    @property
    def attention_factor(self) -> float:
        """The attention kernel's rate the device's rows show over the priced one's (1: none)."""
        if self.attention_sd <= 0:
            return 1.0
        return math.exp(self.mean[len(self.mean) - 1 - self._collectives])

    @property
    def link_factor(self) -> float:
        """The bus bandwidth the device's collectives within a node reach over the one the
        device table prices (1: no rows told it otherwise, or no link factor)."""
        if self.link_sd <= 0:
            return 1.0
        return math.exp(-self.mean[len(self.mean) - self._collectives])

    @property
    def beside_factor(self) -> float:
        """How much slower the compute runs beside the collectives than the slowdown priced, as
        the device's rows show (1: no rows told it otherwise, or no such factor)."""
        return math.exp(self.mean[-1]) if self.beside_sd > 0 else 1.0

    @property
    def overlapped_share(self) -> float:
        """The share of the traffic the compute can hide that it hides, the compute slowed
        beside it as the rows show: 1 / (1 + s) (parts.exposed)."""
        return 1 / (1 + COMPUTE_SLOWDOWN_BESIDE_COLLECTIVES * self.beside_factor)

    def _quadratic(self, weights: dict[int, float]) -> float:
        return sum(
            wi * wj * self.covariance[i][j]
            for i, wi in weights.items()
            for j, wj in weights.items()
        )

    def _shift(
        self,
        method: str,
        group: str = "",
        subgroup: str = "",
        share: float = 0.0,
        parts: StepParts | None = None,
    ) -> tuple[float, float, float]:
        """The log factor of a configuration of `method`, answer group `group` and subgroup
        `subgroup` on this device, whose predicted step spends `share` of its time in the
        attention kernel and splits as `parts` says, and its variance in two parts: the
        device's, the method's, the attention kernel's and the link's factors', then the rest
        (the group's and subgroup's factors' and one row's spread, which the rows scale). A
        level without rows adds its prior spread. With a link factor the compute's factors
        scale the compute and the link's the traffic (`log_gain`), their variance by the
        delta method."""
        index, unseen, offset = [0], [0.0, 0.0], 1
        levels = (
            (self.methods, method, self.method_sd, True),
            (self.groups, group, self.group_sd, bool(group)),
            (self.subgroups, subgroup, self.subgroup_sd, bool(subgroup)),
        )
        for level, (names, name, sd, named) in enumerate(levels):
            if named and name in names:
                index.append(offset + names.index(name))
            else:
                unseen[min(level, 1)] += sd**2
            offset += len(names)
        last = len(self.mean) - 1 - self._collectives
        device = {i: 1.0 for i in index if i <= len(self.methods)}
        if self.attention_sd > 0 and share:
            device[last] = share
        weights = dict.fromkeys(index, 1.0) | device
        mean = sum(self.mean[i] * w for i, w in weights.items())
        if self.link_sd > 0:
            compute = mean
            mean, by_compute, _, _ = log_gain(parts, compute, *self._collective_factors())
            slopes = {
                i: self._slope(parts, compute, mean, i) for i in range(last + 1, len(self.mean))
            }
            device = {i: w * by_compute for i, w in device.items()} | slopes
            weights = {i: w * by_compute for i, w in weights.items()} | device
        known = self._quadratic(device)
        carried = max(self._quadratic(weights) - known, 0.0) + unseen[1] + self.spread**2
        return mean, known + unseen[0], carried

    def _collective_factors(self, moved: int = -1, by: float = 0.0) -> tuple[float, float]:
        """The link's and the slowdown's log factors (0 where there is none), the one at index
        `moved` of `mean` moved `by`."""
        start = len(self.mean) - self._collectives
        found = [self.mean[i] + (by if i == moved else 0.0) for i in range(start, len(self.mean))]
        link, beside = found + [0.0] * (2 - len(found))
        return link, beside

    def _slope(self, parts: StepParts | None, compute: float, gain: float, index: int) -> float:
        """The gain's slope in the collectives' factor at `index` (the link's, the slowdown's)
        as the interval sees it: a secant over the factor's 95 % reach, on the steeper side.
        Where the compute hides the traffic at the estimate the local slope is near 0, yet a
        link slower within its spread exposes it: the delta method's slope would call such a
        configuration certain of its link."""
        reach = LINK_REACH * math.sqrt(max(self.covariance[index][index], 0.0))
        if parts is None or parts.link is None or reach <= 0:
            return 0.0
        moved = (
            abs(log_gain(parts, compute, *self._collective_factors(index, side))[0] - gain)
            for side in (reach, -reach)
        )
        return -max(moved) / reach

    def factor(
        self,
        method: str = "",
        group: str = "",
        subgroup: str = "",
        attention_share: float = 0.0,
        parts: StepParts | None = None,
    ) -> float:
        return math.exp(self._shift(method, group, subgroup, attention_share, parts)[0])

    def interval(
        self,
        predicted: float,
        coverage: float = COVERAGE,
        method: str = "",
        group: str = "",
        subgroup: str = "",
        attention_share: float = 0.0,
        parts: StepParts | None = None,
    ) -> Interval:
        """The calibrated prediction of a configuration of `method`, answer group `group` and
        subgroup `subgroup` that the speed model predicts at `predicted`, `attention_share` of
        its step in the attention kernel, its step split as `parts` (None: no collectives
        within a node), and its interval: the device's, method's, attention kernel's and
        link's part normal, the rest Student's t at `freedom` (normal where the spreads are
        known), their half-widths added in quadrature."""
        p = 0.5 + coverage / 2
        shift, known, carried = self._shift(method, group, subgroup, attention_share, parts)
        z, t = NormalDist().inv_cdf(p), t_quantile(p, self.freedom)
        half = math.sqrt(z**2 * known + t**2 * carried)
        central = predicted * math.exp(shift)
        return Interval(central, central * math.exp(-half), central * math.exp(half), coverage)


@dataclasses.dataclass(frozen=True)
class _Levels:
    """The names each level's factors go by, in the design's column order."""

    methods: list[str]
    groups: list[str]
    subgroups: list[str]
    attention: bool = False
    link: bool = False
    beside: bool = False

    @property
    def collectives(self) -> int:
        """How many factors after the design's columns act on the collectives alone."""
        return self.link + self.beside

    @classmethod
    def of(cls, rows: Sequence[Row], prior: Prior) -> _Levels:
        def named(found: Iterable[str], sd: float) -> list[str]:
            return sorted({f for f in found if f}) if sd > 0 else []

        return cls(
            sorted({r.method for r in rows}),
            named((r.group for r in rows), prior.group_sd),
            named((r.subgroup for r in rows), prior.subgroup_sd),
            prior.attention_sd > 0,
            prior.link_sd > 0,
            prior.link_sd > 0 and prior.beside_sd > 0,
        )

    def columns(self, rows: Sequence[Row]) -> Array:
        """One line per row: the device's factor, then one column per method, group and
        subgroup, then the attention kernel's (the row's attention share)."""
        width = 1 + len(self.methods) + len(self.groups) + len(self.subgroups)
        x = np.zeros((len(rows), width + self.attention))
        for i, row in enumerate(rows):
            x[i, 0] = 1.0
            offset = 1
            for names, name in (
                (self.methods, row.method),
                (self.groups, row.group),
                (self.subgroups, row.subgroup),
            ):
                if name in names:
                    x[i, offset + names.index(name)] = 1.0
                offset += len(names)
            if self.attention:
                x[i, width] = row.attention_share
        return x

    def unshared(self, rows: Sequence[Row], prior: Prior) -> Array:
        """Each row's variance from the levels it names no factor of (noise to it)."""
        return np.array(
            [
                (0.0 if r.group in self.groups else prior.group_sd**2)
                + (0.0 if r.subgroup in self.subgroups else prior.subgroup_sd**2)
                for r in rows
            ]
        )

    def prior_sds(self, prior: Prior) -> Array:
        return np.array(
            [prior.shift_sd]
            + [prior.method_sd] * len(self.methods)
            + [prior.group_sd] * len(self.groups)
            + [prior.subgroup_sd] * len(self.subgroups)
            + [prior.attention_sd] * self.attention
            + [prior.link_sd] * self.link
            + [prior.beside_sd] * self.beside
        )


@dataclasses.dataclass(frozen=True)
class _Fit:
    """The factors' posterior, and each row's line of the design, weight (one over its
    variance about the factors) and log ratio."""

    mean: Array
    covariance: Array
    x: Array
    weights: Array
    y: Array


def log_gain(
    parts: StepParts | None, compute: float, link: float, beside: float = 0.0
) -> tuple[float, float, float, float]:
    """The log of measured over predicted throughput of a step split as `parts` (shares of its
    seconds) were its compute's log rate `compute` above the priced one, its collectives' log
    time `link` above theirs and the compute's log slowdown beside them `beside` above the
    priced one; and its derivatives in `compute`, `link` and `beside`. Without collectives
    within the node it is `compute`."""
    if parts is None or parts.link is None or parts.seconds <= 0:
        return compute, 1.0, 0.0, 0.0
    shares = parts.shares()

    def gain(c: float, ell: float, b: float) -> float:
        return -math.log(shares.seconds_at(math.exp(-c), math.exp(ell), math.exp(b)))

    h = 1e-6
    return (
        gain(compute, link, beside),
        (gain(compute + h, link, beside) - gain(compute - h, link, beside)) / (2 * h),
        (gain(compute, link + h, beside) - gain(compute, link - h, beside)) / (2 * h),
        (gain(compute, link, beside + h) - gain(compute, link, beside - h)) / (2 * h),
    )


LINK_REACH = NormalDist().inv_cdf(0.975)
"""How far either side of its estimate, in its spreads, the link's factor is followed to price
its share of an interval (Calibration._link_slope): its 95 % reach."""
LINK_ITERATIONS = 30
"""Gauss-Newton steps at most for a fit with a link factor (each row's gain is nonlinear in
it); they converge in a few."""


def _linearised(
    rows: Sequence[Row], x: Array, theta: Array, collectives: int
) -> tuple[Array, Array]:
    """Each row's log gain linearised about the factors `theta`: its Jacobian, and the
    gain less the Jacobian times `theta`. `collectives`: how many factors after x's columns act
    on the collectives (the link's, then the slowdown's). Without them the gain is linear: x."""
    if not collectives:
        return x, np.zeros(len(rows))
    width = x.shape[1]
    compute = x @ theta[:width]
    link, beside = [float(v) for v in theta[width:]] + [0.0] * (2 - collectives)
    jacobian, gains = np.zeros((len(rows), width + collectives)), np.zeros(len(rows))
    for i, row in enumerate(rows):
        gains[i], by_compute, *by_collectives = log_gain(row.parts, float(compute[i]), link, beside)
        jacobian[i, :width] = x[i] * by_compute
        jacobian[i, width:] = by_collectives[:collectives]
    return jacobian, gains - jacobian @ theta


def _posterior(rows: Sequence[Row], levels: _Levels, prior: Prior) -> _Fit:
    """The factors' posterior mean and covariance (a Gaussian prior, Gaussian rows): exact
    without a link factor; with one, Gauss-Newton on the rows' gains (`log_gain`), the
    covariance the last linearisation's."""
    x = levels.columns(rows)
    y = np.array([r.log_ratio for r in rows])
    weights = 1.0 / (prior.spread**2 + levels.unshared(rows, prior))
    prior_precision = np.diag(levels.prior_sds(prior) ** -2.0)
    theta = np.zeros(len(prior_precision))

    def loss(at: Array) -> float:
        jacobian, offset = _linearised(rows, x, at, levels.collectives)
        misfit = y - offset - jacobian @ at
        return float((weights * misfit**2).sum() + at @ prior_precision @ at)

    for _ in range(LINK_ITERATIONS if levels.collectives else 1):
        jacobian, offset = _linearised(rows, x, theta, levels.collectives)
        target = y - offset
        covariance = np.linalg.inv(prior_precision + (jacobian.T * weights) @ jacobian)
        found = covariance @ (jacobian.T @ (weights * target))
        if (
            levels.collectives
        ):  # halved until it lowers the loss: the gain bends where traffic shows
            for _ in range(20):
                if loss(found) <= loss(theta) + 1e-12:
                    break
                found = (found + theta) / 2
        moved, theta = float(np.max(np.abs(found - theta), initial=0.0)), found
        if moved < 1e-9:
            break
    return _Fit(theta, covariance, jacobian, weights, target)


def _left_out_scale(rows: Sequence[Row], levels: _Levels, prior: Prior) -> float:
    """How far the device's rows stray about their factors, as a multiple of what the prior
    says: each row against the factors fitted without it (exactly, by Sherman-Morrison: its
    residual over 1 - w h, with the factors' variance h / (1 - w h)), its square over the
    variance the prior gives it there; their mean pooled with 1 worth `prior.weight` rows.
    A device whose rows stray more widens every level below its factor alike. Where the spreads
    are carried from elsewhere, they only widen: the rows a walk measures first are chosen
    (the fastest predicted, alike), so their agreement says little of the rest."""
    if len(rows) < 2:
        return 1.0
    fit = _posterior(rows, levels, prior)
    leverage = np.einsum("ij,jk,ik->i", fit.x, fit.covariance, fit.x)
    kept = 1.0 - fit.weights * leverage
    residual = (fit.y - fit.x @ fit.mean) / kept
    variance = leverage / kept + 1.0 / fit.weights
    squares = float((residual**2 / variance).sum())
    scale = math.sqrt((prior.weight + squares) / (prior.weight + len(rows)))
    return scale if prior.known_spreads else max(scale, 1.0)


def scaled(prior: Prior, scale: float) -> Prior:
    """The prior with its spreads below the device's and the method's factors times `scale`."""
    return dataclasses.replace(
        prior,
        spread=prior.spread * scale,
        group_sd=prior.group_sd * scale,
        subgroup_sd=prior.subgroup_sd * scale,
    )


def calibrate(device: str, rows: Iterable[Row], prior: Prior | None = None) -> Calibration:
    """The device's calibration from its measured rows (none: the prior alone)."""
    prior = prior or prior_for(device)
    kept = [r for r in rows if r.predicted > 0 and r.measured > 0]
    levels = _Levels.of(kept, prior)
    prior = scaled(prior, _left_out_scale(kept, levels, prior))
    fit = _posterior(kept, levels, prior)
    return Calibration(
        device,
        len(kept),
        tuple(levels.methods),
        tuple(float(v) for v in fit.mean),
        tuple(tuple(float(v) for v in line) for line in fit.covariance),
        prior.spread,
        prior.method_sd,
        tuple(levels.groups),
        prior.group_sd,
        tuple(levels.subgroups),
        prior.subgroup_sd,
        math.inf if prior.known_spreads else prior.weight + len(kept),
        prior.attention_sd,
        prior.link_sd,
        prior.beside_sd if levels.beside else 0.0,
    )


def calibrate_devices(rows: Iterable[Row]) -> dict[str, Calibration]:
    """One calibration per device the rows name."""
    by_device: dict[str, list[Row]] = {}
    for row in rows:
        by_device.setdefault(row.device, []).append(row)
    return {device: calibrate(device, found) for device, found in sorted(by_device.items())}


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values)


def fit_level_spreads(groups: Iterable[Sequence[Sequence[float]]]) -> tuple[float, float, float]:
    """(an answer group's factor's spread about zero, a subgroup's about its group's, one
    row's about its subgroup's) from measured log ratios: per group, one sequence per subgroup.
    Moments, each level's spread less what the level below puts in its means: the rows' pooled
    spread about their subgroup's mean; the subgroups' means about their group's (unweighted)
    mean; the groups' means about zero."""
    found = [[list(s) for s in g if len(s)] for g in groups]
    found = [g for g in found if g]
    subs = [s for g in found for s in g]
    freedom = sum(len(s) - 1 for s in subs)
    within = sum(sum((v - _mean(s)) ** 2 for v in s) for s in subs) / freedom if freedom else 0.0
    spread, count = 0.0, 0
    for g in found:
        means = [_mean(s) for s in g]
        if len(g) > 1:
            noise = sum(within / len(s) for s in g) * (len(g) - 1) / len(g)
            spread += sum((m - _mean(means)) ** 2 for m in means) - noise
            count += len(g) - 1
    subgroup = max(spread / count, 0.0) if count else 0.0
    between = [
        _mean([_mean(s) for s in g]) ** 2 - sum(subgroup + within / len(s) for s in g) / len(g) ** 2
        for g in found
    ]
    group = max(_mean(between), 0.0) if between else 0.0
    return math.sqrt(group), math.sqrt(subgroup), math.sqrt(within)
