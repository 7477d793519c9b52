#!/usr/bin/env bash
# check_job.sh MODE ...: end-to-end checks of train_fashion_mnist --model cnn (short runs of 40 steps).
#   check_job.sh resume TRAIN SERVE_MODEL MCX_EXPORT DATA_DIR
#     A run stopped after 20 steps (checkpoint) and resumed to 40 ends on the same batch order and the same
#     parameters, bit for bit, as a run of 40 steps never interrupted; its exported artifact classifies the
#     held-out set in serve_model with the accuracy the job printed, and `mcx-export run` serves it on .npy
#     batches of two sizes with the same classes for the same images.
#   check_job.sh kill MCX_RUN TRAIN DATA_DIR
#     2 processes x 2 devices under `mcx-run --recoverable`; process 1 kills itself (SIGKILL) at step 15. Process 0
#     carries on over its own 2 devices, reads exactly the batches an uninterrupted run reads (same batch order
#     digest), commits the final checkpoint alone, and exports the classifier.
#   check_job.sh early|save|restore MCX_RUN TRAIN DATA_DIR
#     The MLP on 3 processes x 1 device under `mcx-run --recoverable`, checkpointing every 10 steps of 40, with
#     process 2 killed (SIGKILL) before its first step (early), right after it started saving step 20 (save),
#     or right after a resumed run restored step 20 (restore). The survivors save without it: the checkpoints
#     of steps 30 and 40 commit and no save after the kill is reported lost (early, restore; with the save in
#     flight at the kill allowed to fail in save), while a save waiting for the dead process would take 120 s
#     and fail; the job ends within 150 s (a few seconds on idle cores); the summary counts the failure, and
#     the held-out accuracy is over all 10,000 images (split over the 2 live devices, or the 3 of the first run).
#   check_job.sh gpu MCX_RUN TRAIN SERVE_MODEL DATA_DIR [FIRST_STEPS TOTAL_STEPS KILL_STEP]
#     The main job on the GPU (--platform cuda): 2 processes sharing GPU 0 (mcx-run --gpus-per-process 1
#     --gpus 1 --recoverable), collectives through host staging; process 1 kills itself (SIGKILL) at KILL_STEP
#     (default 10) and process 0 carries on to FIRST_STEPS (default 30), checkpointing GPU arrays every 10 steps
#     and filling a compilation cache; the same job again resumes from the newest checkpoint with both processes,
#     compiles no kernel (every executable read back from the cache), trains to TOTAL_STEPS (default 40) and
#     exports the classifier; serve_model classifies the held-out set from it on the GPU and on the CPU, each
#     with the job's accuracy. The caller's environment reaches every program (the device check's library path,
#     or the stand-in driver's variables to run it emulated).
#   check_job.sh profile MCX_RUN MCX_PROFILE TRAIN DATA_DIR
#     The CNN over 2 processes x 2 devices under `mcx-run --report` (20 steps, a checkpoint): one merged trace
#     that follows the trace-event format (mcx-profile check) with every kind of event of both processes
#     (compiles, launches, collectives, transfers, data, checkpoint), and the HTML report beside it.
# Exits 77 (skipped) when DATA_DIR has no Fashion-MNIST (scripts/fetch-fashion-mnist.sh).
set -uo pipefail
mode=$1
shift
fail() { echo "check_job.sh: FAILED: $*" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
field() { sed -n "s/.*$1 \([0-9a-f.]*\).*/\1/p" "$2" | tail -1; }  # the value after a label in the summary

case "$mode" in
  resume)
    train=$1 serve=$2 mcx_export=$3 data=$4
    [ -f "$data/train-images-idx3-ubyte.gz" ] || { echo "check_job.sh: $data has no Fashion-MNIST; skipping"; exit 77; }
    common=(--model cnn --data "$data" --devices 2 --threads 2 --min-accuracy 0.6)
    "$train" "${common[@]}" --steps 40 --export "$tmp/straight.mcx" > "$tmp/straight.log" 2>&1 || { cat "$tmp/straight.log"; fail "the uninterrupted run"; }
    "$train" "${common[@]}" --steps 20 --checkpoint-dir "$tmp/ckpt" > "$tmp/first.log" 2>&1 || { cat "$tmp/first.log"; fail "the first half"; }
    [ -f "$tmp/ckpt/20/COMMIT" ] || fail "no committed checkpoint of step 20"
    "$train" "${common[@]}" --steps 40 --checkpoint-dir "$tmp/ckpt" --resume --export "$tmp/model.mcx" > "$tmp/resumed.log" 2>&1 || { cat "$tmp/resumed.log"; fail "the resumed run"; }
    cat "$tmp/resumed.log"
    grep -q "resuming from .* step 20 " "$tmp/resumed.log" || fail "the second run did not resume from step 20"
    for what in "batch order digest" "parameters digest" "test acc"; do
      a=$(field "$what" "$tmp/straight.log") b=$(field "$what" "$tmp/resumed.log")
      [ -n "$a" ] && [ "$a" = "$b" ] || fail "$what: uninterrupted '$a', stopped and resumed '$b'"
    done
    acc=$(field "test acc" "$tmp/resumed.log")
    "$serve" --artifact "$tmp/model.mcx" --images "$data/t10k-images-idx3-ubyte.gz" \
      --labels "$data/t10k-labels-idx1-ubyte.gz" --batch 768 > "$tmp/serve.log" 2>&1 || { cat "$tmp/serve.log"; fail "serve_model"; }
    cat "$tmp/serve.log"
    served=$(field "accuracy" "$tmp/serve.log")
    [ "$served" = "$acc" ] || fail "serve_model's accuracy $served is not the job's $acc"
    /usr/bin/python3 - "$data/t10k-images-idx3-ubyte.gz" "$tmp" <<'PY' || fail "writing the .npy batches"
import gzip, sys, numpy as np
raw = gzip.open(sys.argv[1]).read()
images = np.frombuffer(raw, dtype=np.uint8, offset=16).reshape(-1, 28, 28)
np.save(sys.argv[2] + "/few.npy", images[:7])
np.save(sys.argv[2] + "/many.npy", images[:1000])
PY
    for n in few many; do
      "$mcx_export" run "$tmp/model.mcx" --in "$tmp/$n.npy" --out-dir "$tmp/$n" > /dev/null || fail "mcx-export run on $n.npy"
    done
    /usr/bin/python3 - "$tmp" <<'PY' || fail "mcx-export run's outputs"
import sys, numpy as np
few, many = np.load(sys.argv[1] + "/few/out_0.npy"), np.load(sys.argv[1] + "/many/out_0.npy")
assert few.shape == (7,) and many.shape == (1000,), (few.shape, many.shape)
assert ((many >= 0) & (many <= 9)).all() and (few == many[:7]).all(), (few, many[:7])
print("check_job.sh: mcx-export run classified batches of 7 and 1000 images consistently")
PY
    echo "check_job.sh: OK: resumed run equals the uninterrupted one; served accuracy $served" ;;
  profile)
    mcx_run=$1 mcx_profile=$2 train=$3 data=$4
    [ -f "$data/train-images-idx3-ubyte.gz" ] || { echo "check_job.sh: $data has no Fashion-MNIST; skipping"; exit 77; }
    "$mcx_run" -n 2 --cpu-devices 2 --timeout 170 --report "$tmp/report.html" -- "$train" --model cnn --data "$data" \
      --steps 20 --threads 1 --checkpoint-dir "$tmp/ckpt" --min-accuracy 0 > "$tmp/job.log" 2>&1 || { cat "$tmp/job.log"; fail "the job"; }
    grep -q "\[mcx-run\] report: $tmp/report.html" "$tmp/job.log" || { cat "$tmp/job.log"; fail "no report"; }
    [ -s "$tmp/report.html" ] || fail "the report is empty"
    "$mcx_profile" check "$tmp/report.html.traces/job.trace.json" > "$tmp/check.log" 2>&1 || { cat "$tmp/check.log"; fail "the merged trace"; }
    cat "$tmp/check.log"
    for p in 0 1; do
      for cat in compile launch collective transfer data checkpoint; do
        grep -q "pid $p $cat: [1-9]" "$tmp/check.log" || fail "no $cat events of process $p"
      done
    done
    echo "check_job.sh: profile OK"
    ;;
  kill)
    mcx_run=$1 train=$2 data=$3
    [ -f "$data/train-images-idx3-ubyte.gz" ] || { echo "check_job.sh: $data has no Fashion-MNIST; skipping"; exit 77; }
    common=(--model cnn --data "$data" --steps 40 --min-accuracy 0.6)
    "$train" "${common[@]}" --devices 2 --threads 2 > "$tmp/straight.log" 2>&1 || { cat "$tmp/straight.log"; fail "the uninterrupted run"; }
    "$mcx_run" -n 2 --cpu-devices 2 --recoverable --timeout 150 -- "$train" "${common[@]}" --threads 1 \
      --checkpoint-dir "$tmp/ckpt" --kill-process 1 --at-step 15 --export "$tmp/model.mcx" > "$tmp/job.log" 2>&1
    rc=$?
    cat "$tmp/job.log"
    [ $rc -eq 0 ] || fail "mcx-run exited $rc"
    grep -q "^\[p1\] .*process 1 kills itself at step 15" "$tmp/job.log" || fail "process 1 did not kill itself"
    grep -q "^\[p0\] .*process 1 is gone .*retrying step 15" "$tmp/job.log" || fail "process 0 did not retry step 15"
    grep -q "^\[p0\] .*live processes {0} .*the loader resumes at step 15 " "$tmp/job.log" || fail "no loader restart on {0}"
    grep -q "^\[p0\] .*1 process failure survived (lost {1})" "$tmp/job.log" || fail "process 0's summary"
    a=$(field "batch order digest" "$tmp/straight.log") b=$(grep "^\[p0\]" "$tmp/job.log" | sed -n "s/.*batch order digest \([0-9a-f]*\).*/\1/p")
    [ -n "$a" ] && [ "$a" = "$b" ] || fail "batch order: uninterrupted '$a', with the failure '$b' (an example lost or read twice)"
    [ -f "$tmp/ckpt/40/COMMIT" ] || fail "the survivor did not commit the checkpoint of step 40"
    [ -s "$tmp/model.mcx" ] || fail "no artifact"
    echo "check_job.sh: OK: the survivor carried on over the same batches ($b) and checkpointed alone" ;;
  early|save|restore)
    mcx_run=$1 train=$2 data=$3
    [ -f "$data/train-images-idx3-ubyte.gz" ] || { echo "check_job.sh: $data has no Fashion-MNIST; skipping"; exit 77; }
    common=(--model mlp --data "$data" --batch 96 --save-every 10 --threads 1 --min-accuracy 0.5
            --checkpoint-dir "$tmp/ckpt")
    job() {  # job LOG ARGS...: the 3-process job, ended by mcx-run after 150 s
      local log=$1
      shift
      timeout 160 "$mcx_run" -n 3 --cpu-devices 1 --recoverable --timeout 150 -- "$train" "${common[@]}" "$@" > "$log" 2>&1
      local rc=$?
      cat "$log"
      [ $rc -eq 0 ] || fail "mcx-run exited $rc"
    }
    case "$mode" in
      early) job "$tmp/job.log" --steps 40 --kill-process 2 --at-step 1 ;;
      save) job "$tmp/job.log" --steps 40 --kill-process 2 --at-step 20 --kill-during save ;;
      restore)
        job "$tmp/first.log" --steps 20
        grep -q "^\[p0\] .*summary: test acc [0-9.]* on 10000 held-out images" "$tmp/first.log" ||
          fail "the 3-device evaluation did not cover all 10,000 images"
        job "$tmp/job.log" --steps 40 --resume --kill-process 2 --kill-during restore
        grep -q "^\[p0\] .*resuming from .* step 20 " "$tmp/job.log" || fail "the second run did not resume from step 20" ;;
    esac
    grep -q "^\[p2\] .*process 2 kills itself" "$tmp/job.log" || fail "process 2 did not kill itself"
    for p in 0 1; do
      grep -q "^\[p$p\] .*summary: test acc [0-9.]* on 10000 held-out images; 40 steps; .*; 1 process failure survived (lost {2})" \
        "$tmp/job.log" || fail "process $p's summary (10,000 images, 40 steps, the failure counted)"
      grep -q "^\[p$p\] .*not saved" "$tmp/job.log" && [ "$mode" != save ] && fail "process $p lost a checkpoint"
    done
    for step in 30 40; do
      [ -f "$tmp/ckpt/$step/COMMIT" ] || fail "the checkpoint of step $step (after the failure) was not committed"
    done
    echo "check_job.sh: OK: process 2 killed ($mode); the survivors committed every later checkpoint" ;;
  gpu)
    mcx_run=$1 train=$2 serve=$3 data=$4 first=${5:-30} total=${6:-40} kill_at=${7:-10}
    [ -f "$data/train-images-idx3-ubyte.gz" ] || { echo "check_job.sh: $data has no Fashion-MNIST; skipping"; exit 77; }
    job=("$mcx_run" -n 2 --gpus-per-process 1 --gpus 1 --recoverable --timeout 600 --
         "$train" --platform cuda --model cnn --data "$data" --threads 1 --min-accuracy 0 --save-every 10
         --checkpoint-dir "$tmp/ckpt" --compile-cache "$tmp/cache")
    "${job[@]}" --steps "$first" --kill-process 1 --at-step "$kill_at" > "$tmp/first.log" 2>&1
    rc=$?
    grep -v '^\[coord\]' "$tmp/first.log"
    [ $rc -eq 0 ] || fail "the first run: mcx-run exited $rc"
    grep -q "collectives of GPU arrays run through host staging" "$tmp/first.log" || fail "no collective ran on the GPU"
    grep -q "^\[p0\] .*1 process failure survived (lost {1})" "$tmp/first.log" || fail "process 0 did not survive process 1"
    [ -f "$tmp/ckpt/$first/COMMIT" ] || fail "no committed checkpoint of step $first written from GPU arrays"
    "${job[@]}" --steps "$total" --resume --export "$tmp/model.mcx" > "$tmp/second.log" 2>&1
    rc=$?
    grep -v '^\[coord\]' "$tmp/second.log"
    [ $rc -eq 0 ] || fail "the resumed run: mcx-run exited $rc"
    grep -q "^\[p0\] .*resuming from .* step $first " "$tmp/second.log" || fail "the second run did not resume from step $first"
    grep -q "^\[p0\] .*first step done .*kernels: 0 compiled" "$tmp/second.log" || fail "the second run compiled kernels (a cold cache)"
    acc=$(grep "^\[p0\]" "$tmp/second.log" | sed -n "s/.*summary: test acc \([0-9.]*\).*/\1/p" | tail -1)
    [ -n "$acc" ] || fail "no accuracy in the resumed run's summary"
    for platform in cuda cpu; do
      MCX_PLATFORMS=$platform "$serve" --artifact "$tmp/model.mcx" --images "$data/t10k-images-idx3-ubyte.gz" \
        --labels "$data/t10k-labels-idx1-ubyte.gz" > "$tmp/serve.$platform.log" 2>&1 || { cat "$tmp/serve.$platform.log"; fail "serve_model on $platform"; }
      served=$(field "accuracy" "$tmp/serve.$platform.log")
      echo "check_job.sh: served on $platform: accuracy $served"
      [ "$served" = "$acc" ] || fail "serve_model on $platform: accuracy $served, the job's $acc"
    done
    echo "check_job.sh: OK: the job on the GPU survived the kill, resumed warm from step $first, served $acc on GPU and CPU" ;;
  *) echo "check_job.sh: unknown mode '$mode' (resume|kill|early|save|restore|gpu)" >&2; exit 2 ;;
esac
