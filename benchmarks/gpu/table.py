"""The benchmark's printed table: one row per configuration, the benchmark properties and the
wrapped/bare throughput ratio. Imports nothing of the engine (device-check.sh prints it even
when the engine cannot be imported)."""

from __future__ import annotations

COLUMNS = (
    ("is_valid", "valid", "{:.0f}"),
    ("dataset_tokens_per_second", "tok/s", "{:.1f}"),
    ("train_step_seconds_p50", "step p50 s", "{:.3f}"),
    ("train_step_seconds_p90", "step p90 s", "{:.3f}"),
    ("train_step_seconds_cv_percent", "step cv %", "{:.1f}"),
    ("model_tflops_per_device", "TFLOP/s", "{:.4g}"),
    ("model_flops_utilization", "MFU", "{:.3f}"),
    ("gpu_energy_joules_per_token", "J/token", "{:.4g}"),
    ("gpu_memory_max_allocated_gib", "peak GiB", "{:.2f}"),
    ("gpu_compute_utilization_avg", "GPU %", "{:.0f}"),
)


def aligned(lines: list[list[str]]) -> str:
    """Left-aligned first column, right-aligned others."""
    widths = [max(len(line[i]) for line in lines) for i in range(len(lines[0]))]
    return "\n".join(
        "  ".join(
            cell.rjust(w) if i else cell.ljust(w)
            for i, (cell, w) in enumerate(zip(line, widths, strict=True))
        )
        for line in lines
    )


def format_table(rows: list[dict], device: str, reason_chars: int | None = None) -> str:
    """The rows' properties and wrapped/bare ratio, then each row's reason where it has one."""
    header = ["configuration", *(title for _, title, _ in COLUMNS), "wrapped/bare", "launch"]
    lines = [header]
    for row in rows:
        props = row["properties"]
        cells = [row["label"]]
        for name, _, fmt in COLUMNS:
            cells.append(fmt.format(props[name]) if name in props else "-")
        ratio = row.get("observer_ratio")
        cells.append(f"{ratio:.3f}" if ratio is not None else "-")
        # accelerate's own word on what wrapped the model (CPU FSDP silently runs as DDP)
        cells.append(row.get("distributed_type") or "-")
        lines.append(cells)
    reasons = [f"{row['label']}: {row['reason'][:reason_chars]}" for row in rows if "reason" in row]
    return "\n".join([f"\nDevice: {device}", aligned(lines), *reasons])


def as_expected(row: dict) -> bool:
    if row["config"]["expect_oom"]:
        return row["properties"].get("is_valid") == 0 and bool(row.get("gpu_oom"))
    return row["properties"].get("is_valid") == 1
