#!/usr/bin/env bash
# Train and export the shipped tiny-Shakespeare models, sequentially, with fixed seeds.
#
#   scripts/train_all.sh                 # all eight kinds
#   scripts/train_all.sh cosine favor    # only these kinds
#
# Checkpoints: build/train/<kind>.pt, logs: build/train/<kind>.log, models: models/shakespeare-*.
# Environment: PYTHON (default /usr/bin/python3), THREADS (default 2), FORCE=1 passes --force to
# tools/export.py (needed only when the architecture of an existing model folder changes),
# EXPORT_ANYWAY=1 exports a model even if it misses the validation target (default: skip it),
# BLAS_DIR=<dir> puts a directory holding another libblas.so.3 (e.g. OpenBLAS) first on
# LD_LIBRARY_PATH for training (Debian's torch links libblas.so.3, which is the slow netlib
# reference BLAS unless OpenBLAS is installed; see docs/models.md).
# Exits non-zero if any kind failed to train/export or missed the 2.00 nats/byte target.
set -u
cd "$(dirname "$0")/.."

PY=${PYTHON:-/usr/bin/python3}
THREADS=${THREADS:-2}
OUT=build/train
ALL_KINDS="softmax linear_elu cosformer cosine favor gated window hybrid"
TARGET=2.00

kinds=("$@")
[ ${#kinds[@]} -eq 0 ] && kinds=($ALL_KINDS)

# Per-kind hyperparameters (seed fixed at 1234 for every kind).  Common: d=128, 4 layers,
# 4 heads, MLP 512, conv 4 taps (linear kinds, gated, hybrid), seq_len 128, batch 32, warmup 50;
# window and hybrid: window_size 64 (train.py's default), hybrid layout "alternate" (chosen over
# "sum" by validation loss, docs/models.md), gated: R = 32.
hparams() {
  local common="--seq_len 128 --batch 32 --warmup 50 --seed 1234 --eval_every 200"
  case "$1" in
    softmax)    echo "$common --steps 600 --lr 3e-3" ;;
    linear_elu) echo "$common --steps 600 --lr 3e-3" ;;
    cosformer)  echo "$common --steps 600 --lr 3e-3" ;;
    cosine)     echo "$common --steps 600 --lr 3e-3" ;;
    favor)      echo "$common --steps 600 --lr 3e-3" ;;
    gated)      echo "$common --steps 600 --lr 3e-3" ;;
    window)     echo "$common --steps 600 --lr 3e-3" ;;
    hybrid)     echo "$common --steps 600 --lr 3e-3 --hybrid_layout alternate" ;;
    *) return 1 ;;
  esac
}

model_name() {
  case "$1" in
    linear_elu) echo shakespeare-linear-elu ;;
    *) echo "shakespeare-$1" ;;
  esac
}

if [ -n "${BLAS_DIR:-}" ]; then
  export LD_LIBRARY_PATH="$BLAS_DIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export OPENBLAS_NUM_THREADS="$THREADS"
fi

mkdir -p "$OUT" models
status=0
for kind in "${kinds[@]}"; do
  if ! args=$(hparams "$kind"); then
    echo "error: unknown kind '$kind' (one of: $ALL_KINDS)" >&2
    status=1
    continue
  fi
  name=$(model_name "$kind")
  ckpt="$OUT/$kind.pt"
  log="$OUT/$kind.log"
  echo "== $kind -> models/$name (log $log)"
  # shellcheck disable=SC2086
  if ! "$PY" tools/train.py --kind "$kind" --out "$ckpt" --threads "$THREADS" $args >"$log" 2>&1; then
    echo "error: training $kind failed; see $log" >&2
    status=1
    continue
  fi
  grep '^final:' "$log"
  val=$(sed -n 's/^final: .* val_loss \([0-9.]*\) .*/\1/p' "$log")
  if ! awk -v v="$val" -v t="$TARGET" 'BEGIN { exit !(v != "" && v <= t) }'; then
    echo "warning: $kind val_loss $val above target $TARGET nats/byte" >&2
    status=1
    if [ "${EXPORT_ANYWAY:-0}" != 1 ]; then
      echo "not exporting $kind (set EXPORT_ANYWAY=1 to export it anyway)" >&2
      continue
    fi
  fi
  force=()
  [ "${FORCE:-0}" = 1 ] && force=(--force)
  if ! "$PY" tools/export.py --checkpoint "$ckpt" --name "$name" --models_dir models "${force[@]}"; then
    echo "error: export of $kind failed" >&2
    status=1
  fi
done
exit $status
