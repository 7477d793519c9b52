#!/usr/bin/env bash
# The training benchmark of the main job (docs/benchmarks.md, "Training"): one epoch of examples/train_fashion_mnist
# (the CNN and the MLP, Adam, global batch 128, fed by the mcx/data loader) against the same models in PyTorch fed
# by its DataLoader (bench/peers/train_peer.py), both with 2 CPU threads, in one run; then the CNN over 2 processes
# x 1 device (mcx-run), with its step split into data wait, step program and live-set agreement, and the
# all-reduce of the gradients timed alone (--measure-allreduce) to split the program into compute and
# collectives. Installs dependencies, fetches the data, builds in ${MCX_BENCH_BUILD_DIR:-build-bench} (Release).
# Prints one JSON line per case: {name, mcx_epoch_s, peer, peer_epoch_s, ratio = peer time / mcx time (= mcx/peer
# throughput), mcx_test_acc, peer_test_acc}, and train_step_split/2proc: {step_ms, data_ms, program_ms,
# agreement_ms, allreduce_ms, compute_ms}.
# `--built DIR` uses the programs already built in DIR (no install, no build).
set -euo pipefail
cd "$(dirname "$0")/../.."
if [ "${1:-}" = --built ]; then
  build_dir=$2
else
  build_dir=${MCX_BENCH_BUILD_DIR:-build-bench}
  bash scripts/install-deps.sh >&2
  bash scripts/fetch-fashion-mnist.sh >&2
  cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release >&2
  cmake --build "$build_dir" --target mcx-run mcx-coordinator train_fashion_mnist -j "${MCX_JOBS:-2}" >&2
fi
train="$build_dir/examples/train_fashion_mnist/train_fashion_mnist"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

/usr/bin/python3 bench/peers/train_peer.py --threads 2 > "$tmp/peer.jsonl"
for model in cnn mlp; do
  "$train" --model "$model" --epochs 1 --devices 1 --threads 2 --min-accuracy 0 > "$tmp/$model.log"
  /usr/bin/python3 - "$model" "$tmp/$model.log" "$tmp/peer.jsonl" <<'PY'
import json, re, sys
model, log, peer = sys.argv[1], open(sys.argv[2]).read(), [json.loads(l) for l in open(sys.argv[3])]
m = re.search(r"epoch 1 .*test acc ([0-9.]+) .* ([0-9.]+) s  1 devices", log)
p = next(r for r in peer if r["model"] == model)
mcx_s = float(m.group(2))
print(json.dumps({"name": "train_epoch/" + model, "mcx_epoch_s": mcx_s, "peer": "torch %s DataLoader" % p["torch"],
                  "peer_epoch_s": round(p["epoch_s"], 2), "ratio": round(p["epoch_s"] / mcx_s, 3),
                  "mcx_test_acc": float(m.group(1)), "peer_test_acc": round(p["test_acc"], 4), "threads": 2}))
PY
done

"$build_dir/bin/mcx-run" -n 2 --cpu-devices 1 -- "$train" --model cnn --epochs 1 --threads 1 --min-accuracy 0 \
  --measure-allreduce 50 > "$tmp/2proc.log" 2>&1
/usr/bin/python3 - "$tmp/2proc.log" <<'PY'
import json, re, sys
log = open(sys.argv[1]).read()
m = re.search(r"\[p0\] .*epoch 1 .* ([0-9.]+) s  2 devices  step ([0-9.]+) ms = data ([0-9.]+) \+ program ([0-9.]+) "
              r"\+ agreement ([0-9.]+)", log)
a = re.search(r"\[p0\] .*all-reduce of the .* ([0-9.]+) ms per step", log)
step, data, program, agreement = (float(m.group(i)) for i in (2, 3, 4, 5))
allreduce = float(a.group(1))
print(json.dumps({"name": "train_step_split/2proc", "epoch_s": float(m.group(1)), "step_ms": step, "data_ms": data,
                  "program_ms": program, "agreement_ms": agreement, "allreduce_ms": allreduce,
                  "compute_ms": round(program - allreduce, 2)}))
PY
