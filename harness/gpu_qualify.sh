#!/usr/bin/env bash
# Qualify every gate on a bare GPU box in one call (~9 minutes), or rehearse it on CPU.
#
#   harness/gpu_qualify.sh [--dry-run] [--out DIR] [--gates "cuda logits ..."] [--budget S]
#
# On the box (the tree and build/gpu-kit carried; see docs/gpu-kit.md):
#   1. checks the kit against its manifest (sha256 of every file);
#   2. installs the carried wheels into a private site dir (pip --no-index --no-deps --target),
#      put on PYTHONPATH after the tree's src/;
#   3. rebuilds the travelling SmolLM2 GGUF from the skeleton (seed 0), compares its sha256
#      with the manifest's, and exports ASSAY_SMOLLM2_GGUF so every gate uses it;
#   4. runs gate-cuda alone, then the other gates 4 at a time, each with --gate-device cuda and
#      a timeout cut to what is left of the budget; a gate that fails or times out is logged
#      and the run goes on;
#   5. leaves receipts in DIR/receipts (DIR: --out, else $OUT, else build/gpu-out), one log per
#      gate in DIR/logs, the whole run's log in DIR/gpu_qualify.log, DIR/summary.tsv and
#      DIR/environment.txt. Bring receipts home with: python harness/gpu_import.py DIR/receipts
#
# --dry-run (CPU, CI): builds the kit (harness/gpu_bundle.py) and checks its size, installs the
# wheels as the box would (for cp312 manylinux, into a throwaway dir), rebuilds the travelling
# weights, then runs the same gate path with --gate-device cpu on a reduced gate selection.
set -uo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
PY=${PYTHON:-$(command -v python3 || command -v python)}

# --- gate option names: the ONE place they are spelled (always used in the NAME=VALUE form) ---
OPT_DEVICE=--gate-device
OPT_RECEIPTS=--gate-receipts
OPT_RECORDS=--gate-records
OPT_NO_RENDER=--gate-no-render
# ----------------------------------------------------------------------------------------------

DRY=0
OUTDIR=${OUT:-$ROOT/build/gpu-out}
BUDGET=540             # seconds for all gates together: the box allows 10 minutes a command
KIT=${ASSAY_GPU_KIT:-$ROOT/build/gpu-kit}
FIRST="cuda"           # run alone: its memory and timing claims want a quiet device
FIRST_CAP=240          # ... but never for more than this, so the other gates keep their turn
ALL_GATES=$(ls gates/gate_*.py | sed 's|gates/gate_||; s|\.py$||' | tr '\n' ' ')
DRY_GATES="cuda logits"  # what CI can afford on 2 cores
GATES=""
PARALLEL=4
while [ $# -gt 0 ]; do
    case "$1" in
        --dry-run) DRY=1 ;;
        --out) OUTDIR=$2; shift ;;
        --gates) GATES=$2; shift ;;
        --budget) BUDGET=$2; shift ;;
        --kit) KIT=$2; shift ;;
        -h|--help) sed -n '2,23p' "$0"; exit 0 ;;
        *) echo "error: unknown argument $1 (see --help)" >&2; exit 2 ;;
    esac
    shift
done
if [ -z "$GATES" ]; then
    if [ $DRY = 1 ]; then GATES=$DRY_GATES; else GATES=$ALL_GATES; fi
fi
DEVICE=cuda
[ $DRY = 1 ] && DEVICE=cpu

mkdir -p "$OUTDIR/receipts" "$OUTDIR/logs"
OUTDIR=$(cd "$OUTDIR" && pwd)
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
LOG=$OUTDIR/gpu_qualify.log
exec > >(tee -a "$LOG") 2>&1
STARTED=$(date +%s)
say() { echo "[gpu_qualify +$(( $(date +%s) - STARTED ))s] $*"; }
say "dry_run=$DRY device=$DEVICE gates: $GATES"

# 1. the kit ------------------------------------------------------------------------------------
if [ $DRY = 1 ]; then
    say "building the kit"
    # shellcheck disable=SC2086  # ASSAY_BUNDLE_ARGS: extra options, split on spaces (tests)
    "$PY" harness/gpu_bundle.py --out "$KIT" ${ASSAY_WHEELS_FROM:+--wheels-from "$ASSAY_WHEELS_FROM"} \
        ${ASSAY_BUNDLE_ARGS:-} \
        || { say "kit build failed or does not fit"; exit 1; }
fi
"$PY" - "$KIT" <<'EOF' || { say "the kit does not match its manifest"; exit 1; }
import hashlib, json, sys
from pathlib import Path
kit = Path(sys.argv[1])
manifest = json.loads((kit / "manifest.json").read_text())
bad = [f["path"] for f in manifest["files"]
       if hashlib.sha256((kit / f["path"]).read_bytes()).hexdigest() != f["sha256"]]
if bad:
    raise SystemExit(f"{kit}: changed or missing: {', '.join(bad)}")
size = manifest["size"]
print(f"kit ok: {len(manifest['files'])} files, {size['kit_bytes'] / 2**20:.1f} MiB; "
      f"built from {manifest['tree']}")
EOF

# 2. wheels -------------------------------------------------------------------------------------
SITE=$WORK/site
if [ $DRY = 1 ]; then
    # The box's interpreter is CPython 3.12 on manylinux x86_64: install for that, aside.
    TAGS=""
    for p in manylinux_2_28_x86_64 manylinux_2_24_x86_64 manylinux_2_17_x86_64 \
             manylinux2014_x86_64 manylinux_2_5_x86_64 manylinux1_x86_64; do
        TAGS="$TAGS --platform $p"
    done
    # shellcheck disable=SC2086
    "$PY" -m pip install -q --no-deps --no-index --target "$SITE" --python-version 3.12 \
        --implementation cp $TAGS --only-binary=:all: "$KIT"/wheels/*.whl \
        || { say "the carried wheels do not install for cp312"; exit 1; }
    say "wheels install for cp312 manylinux: $(ls "$SITE" | grep -c dist-info) distributions"
    export PYTHONPATH=$ROOT/src${PYTHONPATH:+:$PYTHONPATH}
else
    # Only what the box lacks: a carried wheel of a project the box already has would shadow
    # it (PYTHONPATH comes before site-packages).
    WANT=$("$PY" - "$KIT"/wheels/*.whl <<'EOF'
import importlib.metadata as md, re, sys
for wheel in sys.argv[1:]:
    name = re.sub(r"[-_.]+", "-", wheel.rsplit("/", 1)[-1].split("-")[0]).lower()
    try:
        have = md.version(name)
    except md.PackageNotFoundError:
        have = None
    if have is None or name in ("assay-qualify", "bitsandbytes", "gguf", "jsonschema"):
        print(wheel)
    else:
        print(f"box has {name} {have}; not installing", file=sys.stderr)
EOF
)
    # shellcheck disable=SC2086
    "$PY" -m pip install -q --no-deps --no-index --target "$SITE" $WANT \
        || "$PY" -c 'import sys, zipfile; [zipfile.ZipFile(w).extractall(sys.argv[1]) for w in sys.argv[2:]]' "$SITE" $WANT \
        || { say "wheel install failed"; exit 1; }
    say "installed into $SITE: $(echo $WANT | wc -w) wheels"
    export PYTHONPATH=$ROOT/src:$SITE${PYTHONPATH:+:$PYTHONPATH}
fi

{
    echo "date: $(date -u +%FT%TZ)"
    "$PY" -c 'import sys, torch; print("python", sys.version.split()[0]); print("torch", torch.__version__, "cuda", torch.version.cuda, "available", torch.cuda.is_available())'
    "$PY" -c 'import bitsandbytes, gguf, jsonschema; print("bitsandbytes", bitsandbytes.__version__, "gguf ok, jsonschema", jsonschema.__version__)' 2>&1 | tail -1
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv 2>&1 || true
    nproc
} > "$OUTDIR/environment.txt"
cat "$OUTDIR/environment.txt"

# 3. travelling weights -------------------------------------------------------------------------
TRAVEL=$WORK/smollm2-travel-seed0.gguf
"$PY" -m assay.testing.travel "$KIT/smollm2.skeleton.json.gz" "$TRAVEL" --seed 0 \
    || { say "could not rebuild the travelling weights"; exit 1; }
"$PY" - "$KIT" "$TRAVEL" <<'EOF'
import hashlib, json, sys
from pathlib import Path
want = json.loads((Path(sys.argv[1]) / "manifest.json").read_text())["travel_model"].get("sha256")
got = hashlib.sha256(Path(sys.argv[2]).read_bytes()).hexdigest()
print("travel model sha256", got, "matches the manifest" if got == want else f"DIFFERS from the manifest's {want}")
EOF
export ASSAY_SMOLLM2_GGUF=$TRAVEL
# The coverage tracer costs about 1.25x the gate time (docs/records.md): a lease cannot spare it, so
# the kit's receipts record declared code only (set ASSAY_GATE_COVERAGE=1 to measure anyway).
export ASSAY_GATE_COVERAGE=${ASSAY_GATE_COVERAGE:-0}

# 4. gates --------------------------------------------------------------------------------------
CORES=$(nproc)
printf 'gate\trc\tseconds\n' > "$OUTDIR/summary.tsv"
run_gate() {  # run_gate NAME THREADS [CAP]: timeout = what is left of the budget, at most CAP
    local name=$1 threads=$2 cap=${3:-100000} left timeout begun rc
    left=$(( BUDGET - ($(date +%s) - STARTED) ))
    if [ "$left" -lt 20 ]; then
        say "gate $name: not run, budget spent"
        printf '%s\t%s\t%s\n' "$name" "not-run" 0 >> "$OUTDIR/summary.tsv"
        return
    fi
    timeout=$left
    [ "$timeout" -gt "$cap" ] && timeout=$cap
    begun=$(date +%s)
    say "gate $name: start (timeout ${timeout}s, $threads threads)"
    OMP_NUM_THREADS=$threads timeout -s INT -k 20 "$timeout" \
        "$PY" -m pytest -p no:cacheprovider -q "gates/gate_$name.py" \
        "$OPT_DEVICE=$DEVICE" "$OPT_RECEIPTS=$OUTDIR/receipts" \
        "$OPT_RECORDS=$OUTDIR/records" "$OPT_NO_RENDER" > "$OUTDIR/logs/gate_$name.log" 2>&1
    rc=$?
    [ $rc = 124 ] || [ $rc = 137 ] && rc=timeout
    say "gate $name: rc=$rc in $(( $(date +%s) - begun ))s; $(tail -n 1 "$OUTDIR/logs/gate_$name.log")"
    printf '%s\t%s\t%s\n' "$name" "$rc" "$(( $(date +%s) - begun ))" >> "$OUTDIR/summary.tsv"
}

REST=""
for g in $GATES; do
    [ ! -f "gates/gate_$g.py" ] && { say "no gate $g"; exit 2; }
    case " $FIRST " in *" $g "*) run_gate "$g" "$CORES" "$FIRST_CAP" ;; *) REST="$REST $g" ;; esac
done
THREADS=$(( CORES / PARALLEL )); [ "$THREADS" -lt 1 ] && THREADS=1
PIDS=""
for g in $REST; do
    while [ "$(jobs -rp | wc -l)" -ge "$PARALLEL" ]; do sleep 1; done
    run_gate "$g" "$THREADS" &
    PIDS="$PIDS $!"
done
# Wait for the gate jobs by id: a bare `wait` would also wait for the log's tee.
for pid in $PIDS; do wait "$pid"; done

# 5. what comes back ----------------------------------------------------------------------------
cp "$KIT/manifest.json" "$OUTDIR/kit-manifest.json"
say "receipts: $(find "$OUTDIR/receipts" -name '*.json' | wc -l) in $OUTDIR/receipts"
column -t "$OUTDIR/summary.tsv" 2>/dev/null || cat "$OUTDIR/summary.tsv"
say "done in $(( $(date +%s) - STARTED ))s; log $LOG"
# Non-zero when any gate did not finish clean, so CI's dry run catches a kit that rotted.
awk -F'\t' 'NR > 1 && $2 != "0" { bad = 1 } END { exit bad }' "$OUTDIR/summary.tsv"
