#!/usr/bin/env bash
# Qualify the CUDA gates on a lent GPU box in one call (~7 minutes), or rehearse it on CPU.
#
#   harness/gpu_qualify.sh [--dry-run] [--out DIR] [--gates "cuda stream ..."] [--budget S]
#                          [--kit build/gpu-kit] [--run build/gpu-run]
#
# On the box (the tree and build/gpu-kit carried; see docs/gpu-kit.md):
#   1. installs the carried wheels into a private site dir (pip --no-index --no-deps --target),
#      put on PYTHONPATH after the tree's src/;
#   2. seeds RUN/receipts (RUN: build/gpu-run, kept between calls on a warm box) with the
#      ledgers of the gates to run, so the box's receipts chain onto the heads the tree carried;
#   3. preflight (harness/gpu_preflight.py), the first minute: kit sha256s, the travelled tree
#      against the kit's file list (-> RUN/provenance.json, the commit receipts name without
#      .git), free disk, CUDA visible, one bitsandbytes NF4 matmul on the GPU; stops with one
#      line if anything is missing;
#   4. rebuilds the travelling SmolLM2 GGUF from the skeleton (seed 0), checks its sha256;
#   5. runs gate-cuda alone, then the other gates 4 at a time, each with a timeout cut to what
#      is left of --budget (360 s); a gate that fails or times out is logged and the run goes on;
#   6. packs everything into DIR (--out, else $OUT, else build/gpu-out) as four plain files:
#      assay-gpu-<commit12>.tar.gz, summary.txt, environment.txt, import.txt (harness/gpu_pack.py).
#      Bring it home with: assay import-gpu assay-gpu-<commit12>.tar.gz
#
# A second call on the same box (say --gates stream, to rerun a failed gate) chains onto the
# first call's receipts and its archive holds both calls' receipts: import the newest only.
# Default gates: cuda stream nf4 logits scale (a CUDA session of gate-scale runs its VRAM
# claims only), and distributed when the box has 2+ GPUs. gate-memory, gate-throughput and
# gate-quality hold CPU-only claims (their CUDA counterparts are gate-cuda's vram.* and
# throughput.* claims) and do not travel.
#
# --dry-run (CPU, CI): builds the kit (harness/gpu_bundle.py) and checks its size, installs the
# wheels as the box would (for cp312 manylinux, into a throwaway dir), then the same path with
# --gate-device cpu (bitsandbytes' CPU backend in preflight) on gates cuda and logits, in a
# fresh RUN folder.
set -uo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
CALLER=$PWD
PY=${PYTHON:-$(command -v python3 || command -v python)}

# --- gate option names: the ONE place they are spelled (always used in the NAME=VALUE form) ---
OPT_DEVICE=--gate-device
OPT_RECEIPTS=--gate-receipts
OPT_RECORDS=--gate-records
OPT_NO_RENDER=--gate-no-render
OPT_PROVENANCE=--gate-provenance
# ----------------------------------------------------------------------------------------------

DRY=0
OUTDIR=${OUT:-$ROOT/build/gpu-out}
BUDGET=360             # seconds for all gates together: leaves a rerun inside a 15-minute lease
KIT=${ASSAY_GPU_KIT:-$ROOT/build/gpu-kit}
RUN=${ASSAY_GPU_RUN:-}
FIRST="cuda"           # run alone: its memory and timing claims want a quiet device
FIRST_CAP=240          # ... but never for more than this, so the other gates keep their turn
BOX_GATES="cuda stream nf4 logits scale"
DRY_GATES="cuda logits"  # what CI can afford on 2 cores
GATES=""
PARALLEL=4
value() {  # value OPTION ARGS...: the option's argument, or a usage error
    [ $# -ge 2 ] || { echo "error: $1 needs a value (see --help)" >&2; exit 2; }
    echo "$2"
}
absolute() { case "$1" in /*) echo "$1" ;; *) echo "$CALLER/$1" ;; esac; }
while [ $# -gt 0 ]; do
    case "$1" in
        --dry-run) DRY=1 ;;
        --out) v=$(value "$@") || exit 2; OUTDIR=$(absolute "$v"); shift ;;
        --gates) GATES=$(value "$@") || exit 2; shift ;;
        --budget) BUDGET=$(value "$@") || exit 2; shift ;;
        --kit) v=$(value "$@") || exit 2; KIT=$(absolute "$v"); shift ;;
        --run) v=$(value "$@") || exit 2; RUN=$(absolute "$v"); shift ;;
        -h|--help) sed -n '2,33p' "$0"; exit 0 ;;
        *) echo "error: unknown argument $1 (see --help)" >&2; exit 2 ;;
    esac
    shift
done
case "$BUDGET" in ''|*[!0-9]*) echo "error: --budget $BUDGET: expected whole seconds" >&2; exit 2 ;; esac
cd "$ROOT"
DEVICE=cuda
[ $DRY = 1 ] && DEVICE=cpu
if [ -z "$GATES" ]; then
    if [ $DRY = 1 ]; then
        GATES=$DRY_GATES
    else
        GATES=$BOX_GATES
        GPUS=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
        [ "${GPUS:-0}" -ge 2 ] && GATES="$GATES distributed"
    fi
fi
for g in $GATES; do
    [ -f "gates/gate_$g.py" ] || { echo "error: no gate $g (gates/gate_$g.py)" >&2; exit 2; }
done
SCRATCH_RUN=""
if [ -z "$RUN" ]; then
    if [ $DRY = 1 ]; then RUN=$(mktemp -d); SCRATCH_RUN=$RUN; else RUN=$ROOT/build/gpu-run; fi
fi

mkdir -p "$OUTDIR" "$RUN/receipts" "$RUN/logs"
OUTDIR=$(cd "$OUTDIR" && pwd)
RUN=$(cd "$RUN" && pwd)
WORK=$(mktemp -d)
trap 'rm -rf "$WORK" ${SCRATCH_RUN:+"$SCRATCH_RUN"}' EXIT  # a dry run's folder too (~100 MB)
BOX_PYTHONPATH=${PYTHONPATH:-}
export PYTHONPATH=$ROOT/src:$ROOT/testing${BOX_PYTHONPATH:+:$BOX_PYTHONPATH}  # the tree (product, then its test machinery) first
LOG=$RUN/gpu_qualify.log
exec > >(tee -a "$LOG") 2>&1
STARTED=$(date +%s)
say() { echo "[gpu_qualify +$(( $(date +%s) - STARTED ))s] $*"; }
[ -f "$RUN/summary.tsv" ] || printf 'gate\trc\tseconds\n' > "$RUN/summary.tsv"
finish() {  # finish RC: pack what there is into OUTDIR, whatever happened, and exit
    local rc=$1
    "$PY" harness/gpu_pack.py --run "$RUN" --out "$OUTDIR" || rc=1
    say "done in $(( $(date +%s) - STARTED ))s (exit $rc); bring home $OUTDIR/assay-gpu-*.tar.gz"
    exit "$rc"
}
stop() { say "STOPPED: $*"; printf '%s\t%s\t%s\n' "kit" "stopped: $*" 0 >> "$RUN/summary.tsv"; finish 1; }
trap 'stop "terminated by a signal"' TERM INT
say "dry_run=$DRY device=$DEVICE gates: $GATES; run folder $RUN"

# 1. the kit and its wheels ---------------------------------------------------------------------
if [ $DRY = 1 ]; then
    say "building the kit"
    # shellcheck disable=SC2086  # ASSAY_BUNDLE_ARGS: extra options, split on spaces (tests)
    "$PY" harness/gpu_bundle.py --out "$KIT" ${ASSAY_WHEELS_FROM:+--wheels-from "$ASSAY_WHEELS_FROM"} \
        ${ASSAY_BUNDLE_ARGS:-} \
        || stop "kit build failed or does not fit"
fi
[ -f "$KIT/manifest.json" ] || stop "no kit at $KIT: build it with harness/gpu_bundle.py, carry it"
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
        || stop "the carried wheels do not install for cp312"
    say "wheels install for cp312 manylinux: $(ls "$SITE" | grep -c dist-info) distributions"
else
    # Only what the box lacks: a carried wheel of a project the box already has would shadow
    # it (PYTHONPATH comes before site-packages).
    WANT=$("$PY" - "$KIT"/wheels/*.whl <<'PYEOF'
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
PYEOF
)
    # shellcheck disable=SC2086
    timeout 120 "$PY" -m pip install -q --no-deps --no-index --target "$SITE" $WANT \
        || "$PY" -c 'import sys, zipfile; [zipfile.ZipFile(w).extractall(sys.argv[1]) for w in sys.argv[2:]]' "$SITE" $WANT \
        || stop "wheel install failed"
    say "installed into $SITE: $(echo $WANT | wc -w) wheels"
    export PYTHONPATH=$ROOT/src:$ROOT/testing:$SITE${BOX_PYTHONPATH:+:$BOX_PYTHONPATH}
fi

# 2. ledger heads: the box's receipts chain onto what the tree carried ---------------------------
# shellcheck disable=SC2086
"$PY" - "$RUN" "$KIT/manifest.json" $GATES <<'PYEOF' || stop "could not seed the receipts folder"
import json, shutil, sys
from pathlib import Path
from assay.qualify.ledger.chain import chain_head
run, kit, gates = Path(sys.argv[1]), json.loads(Path(sys.argv[2]).read_text()), sys.argv[3:]
path = run / "seeded.json"
seeded = json.loads(path.read_text()) if path.is_file() else {}
commit = kit["tree"]["commit"]
if seeded.get("kit_commit", commit) != commit:
    raise SystemExit(
        f"{run} holds a run of kit {seeded['kit_commit'][:12]}, this kit is {commit[:12]}: "
        f"rm -rf {run} and call again"
    )
seeded["kit_commit"] = commit
heads = seeded.setdefault("heads", {})
for gate in gates:
    if gate in heads:
        continue  # a rerun on this box: chain onto the first call's receipts
    home = Path("records/receipts") / gate
    if home.is_dir():
        shutil.copytree(home, run / "receipts" / gate, dirs_exist_ok=True)
    heads[gate] = chain_head(run / "receipts", gate)
    print(f"seeded gate-{gate}: chains onto {(heads[gate] or 'genesis')[:12]}")
path.write_text(json.dumps(seeded, indent=1, sort_keys=True) + "\n")
PYEOF

# 3. preflight: the first minute ----------------------------------------------------------------
# the environment first: when the preflight stops the run, it says what the box has
{
    echo "date: $(date -u +%FT%TZ)"
    "$PY" -c 'import sys, torch; print("python", sys.version.split()[0]); print("torch", torch.__version__, "cuda", torch.version.cuda, "available", torch.cuda.is_available())'
    "$PY" -c 'import bitsandbytes, gguf, jsonschema; print("bitsandbytes", bitsandbytes.__version__, "gguf ok, jsonschema", jsonschema.__version__)' 2>&1 | tail -1
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv 2>&1 || true
    echo "cores $(nproc)"
} > "$RUN/environment.txt"
cat "$RUN/environment.txt"
timeout 120 "$PY" harness/gpu_preflight.py --kit "$KIT" --run "$RUN" --device "$DEVICE" \
    || stop "preflight failed (the line above says what)"

# 4. travelling weights (kept in RUN: a rerun on the same box skips the rebuild) -----------------
TRAVEL=$RUN/smollm2-travel-seed0.gguf
WANT_SHA=$("$PY" -c 'import json, sys; print(json.load(open(sys.argv[1]))["travel_model"].get("sha256") or "")' "$KIT/manifest.json")
if [ ! -f "$TRAVEL" ] || [ "$(sha256sum "$TRAVEL" | cut -d' ' -f1)" != "$WANT_SHA" ]; then
    timeout 180 "$PY" -m assay_testing.gguf_skeleton "$KIT/smollm2.skeleton.json.gz" "$TRAVEL" --seed 0 \
        || stop "could not rebuild the travelling weights"
fi
GOT_SHA=$(sha256sum "$TRAVEL" | cut -d' ' -f1)
if [ "$GOT_SHA" = "$WANT_SHA" ]; then say "travel model sha256 $GOT_SHA matches the manifest"
else say "travel model sha256 $GOT_SHA DIFFERS from the manifest's $WANT_SHA"; fi
export ASSAY_SMOLLM2_GGUF=$TRAVEL
# The coverage tracer costs about 1.25x the gate time (docs/records.md): a lease cannot spare it, so
# the kit's receipts record declared code only (set ASSAY_GATE_COVERAGE=1 to measure anyway).
export ASSAY_GATE_COVERAGE=${ASSAY_GATE_COVERAGE:-0}

# 5. gates --------------------------------------------------------------------------------------
CORES=$(nproc)
run_gate() {  # run_gate NAME THREADS [CAP]: timeout = what is left of the budget, at most CAP
    local name=$1 threads=$2 cap=${3:-100000} left timeout begun rc
    left=$(( BUDGET - ($(date +%s) - GATES_STARTED) ))
    if [ "$left" -lt 20 ]; then
        say "gate $name: not run, budget spent"
        printf '%s\t%s\t%s\n' "$name" "not-run" 0 >> "$RUN/summary.tsv"
        return
    fi
    timeout=$left
    [ "$timeout" -gt "$cap" ] && timeout=$cap
    begun=$(date +%s)
    say "gate $name: start (timeout ${timeout}s, $threads threads)"
    OMP_NUM_THREADS=$threads timeout -s INT -k 20 "$timeout" \
        "$PY" -m pytest -p no:cacheprovider -q "gates/gate_$name.py" \
        "$OPT_DEVICE=$DEVICE" "$OPT_RECEIPTS=$RUN/receipts" "$OPT_RECORDS=$RUN/records" \
        "$OPT_NO_RENDER" "$OPT_PROVENANCE=$RUN/provenance.json" > "$RUN/logs/gate_$name.log" 2>&1
    rc=$?
    [ $rc = 124 ] || [ $rc = 137 ] && rc=timeout
    say "gate $name: rc=$rc in $(( $(date +%s) - begun ))s; $(tail -n 1 "$RUN/logs/gate_$name.log")"
    printf '%s\t%s\t%s\n' "$name" "$rc" "$(( $(date +%s) - begun ))" >> "$RUN/summary.tsv"
}

GATES_STARTED=$(date +%s)
REST=""
for g in $GATES; do
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
column -t "$RUN/summary.tsv" 2>/dev/null || cat "$RUN/summary.tsv"

# 6. what comes back: one archive and three small files; non-zero when a gate of this call did
# not finish clean, so CI's dry run catches a kit that rotted.
FAILED=0
for g in $GATES; do
    awk -F'\t' -v g="$g" '$1 == g { rc = $2 } END { exit rc != "0" }' "$RUN/summary.tsv" || FAILED=1
done
finish $FAILED
