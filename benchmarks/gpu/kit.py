"""`make gpu-kit`: exactly the wheels a lent GPU machine's image lacks for the GPU check, in one
ignored folder that the device tool carries (`carry: [".gpu-kit"]`).

The image (image.txt here) has Python 3.12, a CUDA torch 2.11 and transformers 5.x, and no
pydantic, datasets, trl, fms-hf-tuning, ray or ado-core; it reaches no network, and one call
carries 64 MiB. fms-hf-tuning 3.2.2 needs transformers <= 4.55.4, which refuses the image's
huggingface_hub 1.x and tokenizers 0.23: those travel too, and shadow the image's copies through
PYTHONPATH on the device (device-check.sh installs with --target; the image is never touched).
No torch and no CUDA library travels: the GPU check measures the image's own.

    python benchmarks/gpu/kit.py [--dest .gpu-kit]      # download, check, write MANIFEST.json

Every wheel's requirements are checked against the kit and the image; what is knowingly left
unmet (fms-hf-tuning's torch<2.9 pin, ...) is listed with why, below.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name, parse_wheel_filename
from packaging.version import Version

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
FMS_VERSION = "3.2.2"
PACKAGE_LIST = REPO / "ado_actuators/sfttrainer/plan/packages" / f"fms-hf-tuning_v{FMS_VERSION}.txt"
LIMIT_MIB = 64.0
"""What one device call carries, the working tree included: the kit must leave room for it."""
BUDGET_MIB = 40.0

FROM_PACKAGE_LIST = ("transformers", "tokenizers", "trl", "peft", "datasets", "simpleeval")
"""Taken at the package list's own pins: the image lacks them, or has a version fms refuses
(transformers 5.17, tokenizers 0.23; peft's version there is unknown, fms pins <0.20)."""

EXTRA = (
    "fms-hf-tuning==" + FMS_VERSION,  # installed --no-deps everywhere (it pins torch<2.9)
    "huggingface-hub==0.36.2",  # image: 1.33; transformers 4.55 and tokenizers 0.21 need <1.0
    "fsspec==2026.2.0",  # see SHADOWED_UNKNOWN
    "dill==0.4.1",
    "multiprocess==0.70.19",  # datasets
    # the engine's schemas (contract, plan, settings) and the trainer's reports
    "pydantic==2.14.3",
    "pydantic-core==2.50.4",
    "annotated-types==0.8.0",
    "typing-inspection==0.4.5",
)

KNOWINGLY_UNMET = {
    "torch": "fms-hf-tuning pins torch<2.9; the check measures the image's CUDA torch 2.11",
    "torchvision": "only fms-hf-tuning's vision datasets import it; the check trains on text",
    "numpy": "fms-hf-tuning pins numpy<2.2 (for its other users' pins); the image's numpy 2.5 "
    "is what its torch, pandas and pyarrow were built against, and the rehearsal trains on it",
    "kernels": "optional in transformers 4.55 (hub kernels); absent means not used",
}
SHADOWED_UNKNOWN = {
    "peft": "fms-hf-tuning pins peft<0.20; the image's version is not known (transformers 5.x "
    "era, so likely newer)",
    "fsspec": "datasets 4.8 needs fsspec<=2026.2.0; the image's version is not known",
}
"""Carried although the image has them, at a version nobody has read there."""
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64")
TARGET = {
    **default_environment(),
    "python_version": "3.12",
    "python_full_version": "3.12.3",
    "sys_platform": "linux",
    "platform_system": "Linux",
    "platform_machine": "x86_64",
    "implementation_name": "cpython",
    "extra": "",
}


def image_packages(path: Path = HERE / "image.txt") -> dict[str, Version | None]:
    """The image's packages: name -> version where one was read, else None."""
    found: dict[str, Version | None] = {}
    for line in path.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, _, version = line.strip().partition("==")
            found[canonicalize_name(name)] = Version(version) if version else None
    return found


def kit_requirements() -> list[str]:
    """The pins to download: FROM_PACKAGE_LIST at the list's versions, then EXTRA."""
    pins = {}
    for line in PACKAGE_LIST.read_text().splitlines():
        text = line.split("#")[0].strip()
        if text:
            pins[canonicalize_name(Requirement(text).name)] = text
    missing = [n for n in FROM_PACKAGE_LIST if n not in pins]
    if missing:
        raise SystemExit(f"{PACKAGE_LIST.name} no longer pins {', '.join(missing)}")
    return [pins[n] for n in FROM_PACKAGE_LIST] + list(EXTRA)


def download(requirements: list[str], dest: Path) -> None:
    platforms = [f"--platform={p}" for p in PLATFORMS] + ["--platform=any"]
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--quiet",
            "--no-deps",
            "--only-binary=:all:",
            "--python-version=3.12",
            "--implementation=cp",
            *platforms,
            "--dest",
            str(dest),
            *requirements,
        ],
        check=True,
    )


def build_own_wheel(dest: Path) -> Path:
    """This checkout's package as a wheel (never the PyPI project of the same name)."""
    with tempfile.TemporaryDirectory() as scratch:
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "wheel",
                "--quiet",
                "--no-deps",
                "--wheel-dir",
                scratch,
                str(REPO),
            ],
            check=True,
        )
        (built,) = Path(scratch).glob("*.whl")
        target = dest / built.name
        target.write_bytes(built.read_bytes())
    return target


def requires(wheel: Path) -> list[Requirement]:
    with zipfile.ZipFile(wheel) as archive:
        name = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        text = archive.read(name).decode()
    found = [Requirement(v) for v in re.findall(r"^Requires-Dist: (.+)$", text, re.M)]
    return [r for r in found if r.marker is None or r.marker.evaluate(TARGET)]


def problems(wheels: list[Path], image: dict[str, Version | None], own: str) -> list[str]:
    """What a kit wheel needs that neither the kit nor the image provides (at a fitting version).

    This package's own wheel is left out: its requirements are the ado actuator's (ado-core,
    aim, uv); what the engine imports is proved by running it (the rehearsal, the device)."""
    kit = {
        canonicalize_name(parse_wheel_filename(w.name)[0]): parse_wheel_filename(w.name)[1]
        for w in wheels
    }
    found = []
    for wheel in wheels:
        if canonicalize_name(parse_wheel_filename(wheel.name)[0]) == own:
            continue
        for req in requires(wheel):
            name = canonicalize_name(req.name)
            if name in KNOWINGLY_UNMET:
                continue
            have = kit.get(name, image.get(name)) if name in kit or name in image else "absent"
            if have == "absent":
                found.append(f"{wheel.name}: needs {req}, which neither the kit nor the image has")
            elif have is not None and not req.specifier.contains(have, prereleases=True):
                where = "kit" if name in kit else "image"
                found.append(f"{wheel.name}: needs {req}, the {where} has {have}")
    for name in kit:
        if name in image and image[name] is None and name not in SHADOWED_UNKNOWN:
            found.append(f"{name} is carried though the image has it: say why in kit.py")
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dest", type=Path, default=REPO / ".gpu-kit")
    args = parser.parse_args(argv)
    dest = args.dest.absolute()
    dest.mkdir(parents=True, exist_ok=True)
    for old in dest.glob("*.whl"):  # exactly this kit: a stale second version stops the install
        old.unlink()
    download(kit_requirements(), dest)
    own = build_own_wheel(dest)
    wheels = sorted(dest.glob("*.whl"))
    image = image_packages()
    found = problems(wheels, image, canonicalize_name(parse_wheel_filename(own.name)[0]))
    heavy = [w.name for w in wheels if re.match(r"(torch|nvidia|triton|cuda)", w.name.lower())]
    sizes = {w.name: round(w.stat().st_size / 2**20, 2) for w in wheels}
    total = round(sum(sizes.values()), 1)
    (dest / "MANIFEST.json").write_text(
        json.dumps(
            {
                "fms_hf_tuning": FMS_VERSION,
                "wheels": sizes,
                "total_mib": total,
                "knowingly_unmet": KNOWINGLY_UNMET,
            },
            indent=1,
        )
    )
    for name, mib in sizes.items():
        print(f"{mib:8.2f} MiB  {name}")
    print(f"{total:8.1f} MiB  in {len(wheels)} wheels -> {dest}")
    if heavy:
        found.append(f"torch/CUDA wheels must not travel: {', '.join(heavy)}")
    if total > BUDGET_MIB:
        found.append(f"{total} MiB is over the kit's {BUDGET_MIB} MiB (a call carries {LIMIT_MIB})")
    for problem in found:
        print(f"kit: {problem}", file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
