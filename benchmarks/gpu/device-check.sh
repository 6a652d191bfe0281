#!/usr/bin/env bash
# The GPU check in one command, on a lent GPU machine (or --cpu, its CPU rehearsal):
#   benchmarks/gpu/device-check.sh [--cpu] [--kit DIR] [--out DIR] [--deadline SECONDS] [--only TEXT]
# Installs the kit (`make gpu-kit`: the wheels the image lacks) with --target into a folder of
# its own and puts it first on PYTHONPATH: the image's packages are never touched, only
# shadowed for this check's processes. Then check.py runs every step under a time budget and
# writes device-check.json and device-check.txt (the table) into --out (default: $OUT, the
# device tool's output folder). See benchmarks/gpu/README.md.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
kit="$repo/.gpu-kit"
out="${OUT:-$repo/device-check-out}"
python="${PYTHON:-python3}"
site="${SFT_KIT_SITE:-${TMPDIR:-/tmp}/sfttrainer-kit-site}"
args=()
while (($#)); do
    case "$1" in
        --cpu) args+=(--cpu); shift ;;
        --kit) kit=$2; shift 2 ;;
        --out) out=$2; shift 2 ;;
        --deadline) args+=(--deadline "$2"); shift 2 ;;
        --only) args+=(--only "$2"); shift 2 ;;
        *) echo "unknown argument $1 (see the header of $0)" >&2; exit 2 ;;
    esac
done

shopt -s nullglob
wheels=("$kit"/*.whl)
if ((${#wheels[@]} == 0)); then
    echo "no wheels in $kit: run 'make gpu-kit' in the checkout the device tool sends, and carry .gpu-kit" >&2
    exit 2
fi
started=$SECONDS
rm -rf "$site"
# --no-deps: the kit is complete by construction (kit.py checks it against the image)
"$python" -m pip install --quiet --no-index --no-deps --no-compile --no-cache-dir \
    --disable-pip-version-check --target "$site" "${wheels[@]}"
echo "kit: ${#wheels[@]} wheels into $site in $((SECONDS - started)) s"
export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
# Offline, and nothing written under $HOME: the hub, datasets and AIM stay out of it
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1 AIM_UI_TELEMETRY_ENABLED=0
export HF_HOME="${TMPDIR:-/tmp}/sfttrainer-check-hf"
mkdir -p "$out"
# run from outside the checkout: the installed wheel, not the working tree, is what is checked
cd "${TMPDIR:-/tmp}"
exec "$python" "$here/check.py" --out "$out" "${args[@]}"
