#!/usr/bin/env bash
# The demo (the README's first command): installs the dependencies, builds mcx, fetches Fashion-MNIST, then runs
# the main job end to end on this host:
#   1. a CNN trained data-parallel over 2 processes x 2 CPU devices (mcx-run), each process loading only its
#      rows of every global batch; process 1 is killed (SIGKILL) mid-epoch and process 0 carries on over its own
#      devices from the same batch, checkpointing (parameters, Adam moments, loader position) every epoch;
#   2. a second run of the same command resumes from the newest checkpoint with both processes back, reads the
#      partitioned step and the kernels the first run compiled back from the persistent compilation cache
#      instead of partitioning, planning and compiling them, trains the last epoch and exports the classifier
#      with a symbolic batch;
#   3. examples/serve_model, a C++ program with no model code, classifies the test set from the artifact alone.
# It ends on a summary (6 epochs: 0.9132 held-out measured). On 2 cores the build takes about 6 minutes from an
# empty build directory and the runs about 2. Flags after the script's
# name go to both training runs (e.g. --threads 2).
set -euo pipefail
cd "$(dirname "$0")/.."
# Only what the demo runs: the packages that build the library (not the test suite's peers), and the library,
# the launcher, the coordinator and the two programs below (not the tests, benchmarks and other examples, which
# `bash scripts/test.sh` builds).
bash scripts/install-deps.sh --demo
MCX_BUILD_TARGETS="mcx-run mcx-coordinator train_fashion_mnist serve_model" bash scripts/build.sh -DMCX_BUILD_BENCH=OFF
bash scripts/fetch-fashion-mnist.sh
build=${MCX_BUILD_DIR:-build}
run=runs/demo
rm -rf "$run"
mkdir -p "$run"
epochs=6
train=("$build/examples/train_fashion_mnist/train_fashion_mnist" --model cnn --epochs "$epochs" --threads 1
       --checkpoint-dir "$run/checkpoints" --compile-cache "$run/compile-cache" --min-accuracy 0)

echo "== 1. CNN over 2 processes x 2 devices; process 1 is killed at step 300 (epoch 1), process 0 carries on =="
"$build"/bin/mcx-run -n 2 --cpu-devices 2 --recoverable -- "${train[@]}" --steps $((468 * (epochs - 1))) \
  --kill-process 1 --at-step 300 "$@" 2>&1 | grep --line-buffered -v '^\[coord\]' | tee "$run/first.log"
echo
echo "== 2. the same job again: resumes from the newest checkpoint, trains the last epoch, exports the model =="
"$build"/bin/mcx-run -n 2 --cpu-devices 2 --recoverable -- "${train[@]}" --resume --export "$run/model.mcx" "$@" \
  2>&1 | grep --line-buffered -v '^\[coord\]' | tee "$run/second.log"
echo
echo "== 3. serve_model: the test set classified from the artifact alone =="
"$build"/examples/serve_model/serve_model --artifact "$run/model.mcx" \
  --images data/fashion-mnist/t10k-images-idx3-ubyte.gz --labels data/fashion-mnist/t10k-labels-idx1-ubyte.gz \
  | tee "$run/serve.log"

value() { sed -n "s/.*$1 \([0-9.]*\).*/\1/p" "$2" | tail -1; }
echo
echo "== summary =="
echo "held-out accuracy after $epochs epochs:  $(value 'test acc' "$run/second.log") (job)," \
     "$(value accuracy "$run/serve.log") (served from the artifact)"
echo "epoch time:                        $(grep '^\[p0\] train_fashion_mnist epoch' "$run/second.log" | tail -1 |
                                             sed -n 's/.*  \([0-9.]* s\)  [0-9]* devices.*/\1/p') (the last epoch, 2 processes x 2 devices)"
kernels() { grep '^\[p0\] train_fashion_mnist: first step done' "$1" | sed 's/.*first step done \([0-9.]* s\) after start; kernels: \(.*\)/\2; first step \1 after start/'; }
echo "compilation cache:                 run 1: $(kernels "$run/first.log")"
echo "                                   run 2: $(kernels "$run/second.log")"
grep -q "process failure survived (lost {1})" "$run/first.log" &&
  echo "failure survived:                  process 1 killed at step 300; process 0 carried on from step 300"
echo "checkpoints:                       $(ls "$run/checkpoints" | tr '\n' ' ')(in $run/checkpoints)"
echo "artifact:                          $run/model.mcx, $(stat -c %s "$run/model.mcx") bytes"
