#!/usr/bin/env bash
# The GPU check, in two halves (docs/gpu.md, "Checking on a GPU machine"):
#   bash scripts/device-check.sh bundle   # here: builds device-check/bundle.tar.zst (< 58 MiB)
#   bash scripts/device-check.sh run      # on the GPU machine, from the repository root with device-check/
#                                         # (MCX_DEVICE_CHECK_BENCH=0 leaves the benchmarks out)
# The GPU machine has the CUDA driver, CUDA 13's libraries inside its Python packages, and no compilers or
# development packages, so the binaries are built here and carried: `bundle` configures build-device (Release,
# LLVM linked statically with only its X86 and NVPTX targets), builds the test binaries, strips them, and
# packs them with every shared library they load that is neither glibc's nor CUDA's. `run` unpacks it, finds
# the CUDA libraries (the dynamic linker's path, then the Python packages' nvidia/*/lib folders), runs the
# CUDA unit tests, the gpu label's tests, the Fashion-MNIST MLP and CNN on the CPU and on the GPU
# (accuracies compared), the CNN served on the GPU from the artifact the GPU run exported, the multi-process part
# (2 processes sharing the GPU: every cross-process collective, a peer killed with SIGKILL, the 64 MiB staged
# all-reduce against the copies it is made of, and the main job end to end: examples/train_fashion_mnist/
# check_job.sh gpu; on a machine with several GPUs, one process per GPU over NCCL and a kill there; the gpu
# label's NcclCommunicator tests run NCCL itself on one GPU), bench_gpu, and the CNN's epoch against PyTorch
# (one process, and DDP over 2 processes sharing the GPU) and JAX (bench/gpu/epoch_peers.py) (mcx against JAX and PyTorch on the same GPU, peers from
# bench/gpu/gpu_peers.py), and prints one summary; logs,
# gtest JSON and the benchmark's JSON lines go to $OUT when set.
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${1:-}
out_dir=device-check
case "$mode" in
  bundle)
    jobs=${MCX_JOBS:-2}
    # Each binary links LLVM and mcx statically (~50 MiB stripped; zstd's long window shares most of it): the
    # carried set is kept to what the checks need, under the budget.
    targets=(mcx_device_tests bench_gpu train_fashion_mnist serve_model collectives_worker mcx-run mcx-coordinator)
    cmake -S . -B build-device -G Ninja -DCMAKE_BUILD_TYPE=Release -DMCX_LLVM_STATIC=ON -DMCX_WITH_CUDA=ON \
      -DMCX_BUILD_EXAMPLES=ON -DMCX_BUILD_BENCH=ON -DCMAKE_EXE_LINKER_FLAGS="-Wl,--as-needed" > /dev/null
    cmake --build build-device -j "$jobs" --target "${targets[@]}"
    stage=$(mktemp -d)
    trap 'rm -rf "$stage"' EXIT
    mkdir -p "$stage/mcx/bin" "$stage/mcx/lib"
    for t in "${targets[@]}"; do
      bin=build-device/tests/$t
      [ -e "$bin" ] || bin=build-device/bench/gpu/$t
      [ -e "$bin" ] || bin=build-device/examples/$t/$t
      [ -e "$bin" ] || bin=build-device/tests/distributed/multiprocess/$t
      [ -e "$bin" ] || bin=build-device/bin/$t
      cp "$bin" "$stage/mcx/bin/"
      strip "$stage/mcx/bin/$t"
      # Every library the binary loads, but glibc's (the GPU machine's is newer) and the dynamic loader.
      ldd "$bin" | awk '$3 ~ /^\// {print $3}' | while read -r lib; do
        case "$(basename "$lib")" in
          libc.so.*|libm.so.*|libmvec.so.*|libdl.so.*|libpthread.so.*|librt.so.*|ld-linux*|libcuda.so*) continue ;;
        esac
        [ -e "$stage/mcx/lib/$(basename "$lib")" ] || { cp -L "$lib" "$stage/mcx/lib/"; strip --strip-unneeded "$stage/mcx/lib/$(basename "$lib")" 2>/dev/null || true; }
      done
    done
    cp examples/train_fashion_mnist/check_job.sh "$stage/mcx/bin/"
    # The data of the training checks: a Fashion-MNIST subset (the first 6400 training images,
    # 50 steps of 128, and the first 2000 test images) small enough to travel with the binaries.
    mkdir -p "$stage/mcx/data/fashion-mnist"
    [ -f data/fashion-mnist/train-images-idx3-ubyte.gz ] || bash scripts/fetch-fashion-mnist.sh
    python3 - data/fashion-mnist "$stage/mcx/data/fashion-mnist" <<'PY'
import gzip, struct, sys
src, dst = sys.argv[1], sys.argv[2]
for name, n in [("train-images-idx3-ubyte", 6400), ("train-labels-idx1-ubyte", 6400),
                ("t10k-images-idx3-ubyte", 2000), ("t10k-labels-idx1-ubyte", 2000)]:
    raw = gzip.open(f"{src}/{name}.gz").read()
    rank = raw[3]
    dims = list(struct.unpack(f">{rank}I", raw[4:4 + 4 * rank]))
    item = 1
    for d in dims[1:]:
        item *= d
    dims[0] = n
    body = raw[4 + 4 * rank:4 + 4 * rank + n * item]
    with gzip.open(f"{dst}/{name}.gz", "wb", compresslevel=9) as out:
        out.write(raw[:4] + struct.pack(f">{rank}I", *dims) + body)
PY
    mkdir -p "$out_dir"
    # A long window: the binaries share most of their code (LLVM, the runtime), which it stores once.
    tar -C "$stage" -cf - mcx | zstd -q -19 --long=30 -T0 -f -o "$out_dir/bundle.tar.zst"
    size=$(stat -c %s "$out_dir/bundle.tar.zst")
    echo "device-check.sh: $out_dir/bundle.tar.zst: $((size / 1024 / 1024)) MiB ($(du -sm "$stage/mcx" | cut -f1) MiB unpacked:" \
         "$(ls "$stage/mcx/bin" | tr '\n' ' ')and $(ls "$stage/mcx/lib" | wc -l) libraries)"
    # It travels with the working tree (~5 MiB), both under the device machine's 64 MiB.
    if [ "$size" -gt $((58 * 1024 * 1024)) ]; then
      echo "device-check.sh: the bundle is over its 58 MiB budget" >&2
      exit 1
    fi
    ;;
  run)
    [ -f "$out_dir/bundle.tar.zst" ] || { echo "device-check.sh: no $out_dir/bundle.tar.zst (run 'bundle' here first)" >&2; exit 2; }
    logs=${OUT:-$(mktemp -d)}
    mkdir -p "$logs"
    root=$(mktemp -d)
    zstd -q -d --long=30 -c "$out_dir/bundle.tar.zst" | tar -C "$root" -xf -
    export LD_LIBRARY_PATH="$root/mcx/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    # CUDA's libraries (nvJitLink, later cuBLAS, cuDNN, NCCL) come from the machine: the Python packages'
    # nvidia/*/lib folders when the dynamic linker does not find them.
    cuda_dirs=$(python3 - <<'PY' 2>/dev/null || true
import glob, os, site
dirs = set()
for base in site.getsitepackages() + [site.getusersitepackages()]:
    for lib in glob.glob(os.path.join(base, "nvidia", "**", "lib*.so*"), recursive=True):
        dirs.add(os.path.dirname(lib))
print(":".join(sorted(dirs)))
PY
)
    export MCX_CUDA_LIBRARY_PATH="${cuda_dirs}${MCX_CUDA_LIBRARY_PATH:+:$MCX_CUDA_LIBRARY_PATH}"
    echo "device-check: $(date -u +%Y-%m-%dT%H:%MZ) on $(hostname)"
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | sed 's/^/device-check: gpu: /' || true
    echo "device-check: glibc $(ldd --version | head -1 | awk '{print $NF}')"
    status=0
    summary=()
    # Each result is printed (and appended to $logs/summary.txt) when it is known, so a run cut short by the
    # machine's time limit still shows what it reached; the whole summary is printed again at the end.
    record() {
      summary+=("$1")
      echo "device-check: $1" | tee -a "$logs/summary.txt"
    }
    # One binary holds both: the CUDA unit tests (no GPU needed; one may skip) and the gpu label (none may skip).
    for part in cuda gpu; do
      filter='-*Gpu*'
      [ "$part" = gpu ] && filter='*Gpu*'
      t=mcx_${part}_tests
      set +e
      timeout 300 "$root/mcx/bin/mcx_device_tests" --gtest_filter="$filter" --gtest_output="json:$logs/$t.json" > "$logs/$t.log" 2>&1
      rc=$?
      set -e
      passed=$(grep -c '^\[       OK \]' "$logs/$t.log" || true)
      failed=$(grep -c '^\[  FAILED  \].*(' "$logs/$t.log" || true)
      skipped=$(grep -c '^\[  SKIPPED \].*(' "$logs/$t.log" || true)
      record "$t: rc $rc, $passed passed, $failed failed, $skipped skipped"
      grep -E '^\[  (FAILED|SKIPPED) \].*\(|^\[gpu\]|^\[cuda codegen\]|Failure|no usable CUDA' "$logs/$t.log" | head -40 || true
      [ "$rc" -eq 0 ] && [ "$skipped" -eq 0 -o "$part" = cuda ] || status=1
    done
    # Training on the GPU against the CPU (the same seed and batches): the held-out accuracies within 0.5%;
    # then the CNN, exported by the GPU run, served on the GPU. The data: the bundle's (or $MCX_DEVICE_CHECK_DATA).
    data=${MCX_DEVICE_CHECK_DATA:-$root/mcx/data}
    accuracy() { { grep -oE "$2 [0-9.]+" "$1" 2>/dev/null || true; } | tail -1 | awk '{print $NF}'; }
    compare() {  # name, cpu accuracy, gpu accuracy
      if [ -n "$2" ] && [ -n "$3" ] && python3 -c "import sys; sys.exit(0 if abs($2 - $3) <= 0.005 else 1)"; then
        record "$1: cpu $2, gpu $3: within 0.5%"
      else
        record "$1: cpu ${2:-none}, gpu ${3:-none}: NOT within 0.5%"
        status=1
      fi
    }
    fashion=$data/fashion-mnist
    if [ -f "$fashion/train-images-idx3-ubyte.gz" ]; then
      steps=${MCX_DEVICE_CHECK_CNN_STEPS:-50}
      # The MLP (matrix products, the softmax's row reductions, Adam) for 3 epochs of the subset.
      for p in cpu cuda; do
        MCX_PLATFORMS=$p timeout 180 "$root/mcx/bin/train_fashion_mnist" --data "$fashion" --model mlp --devices 1 \
          --epochs 3 --min-accuracy 0 > "$logs/train_fashion_mnist_mlp.$p.log" 2>&1 || true
      done
      compare "train_fashion_mnist mlp (3 epochs)" "$(accuracy "$logs/train_fashion_mnist_mlp.cpu.log" 'summary: test acc')" \
                                                   "$(accuracy "$logs/train_fashion_mnist_mlp.cuda.log" 'summary: test acc')"
      for p in cpu cuda; do
        export_flag=()
        [ "$p" = cuda ] && export_flag=(--export "$logs/cnn.mcx")
        MCX_PLATFORMS=$p timeout 300 "$root/mcx/bin/train_fashion_mnist" --data "$fashion" --model cnn --devices 1 \
          --epochs 1 --steps "$steps" --min-accuracy 0 "${export_flag[@]}" > "$logs/train_fashion_mnist.$p.log" 2>&1 || true
      done
      compare "train_fashion_mnist cnn ($steps steps)" "$(accuracy "$logs/train_fashion_mnist.cpu.log" 'summary: test acc')" \
                                                      "$(accuracy "$logs/train_fashion_mnist.cuda.log" 'summary: test acc')"
      set +e
      MCX_PLATFORMS=cuda timeout 120 "$root/mcx/bin/serve_model" --artifact "$logs/cnn.mcx" \
        --images "$fashion/t10k-images-idx3-ubyte.gz" --labels "$fashion/t10k-labels-idx1-ubyte.gz" > "$logs/serve_model.log" 2>&1
      rc=$?
      set -e
      served=$(accuracy "$logs/serve_model.log" 'accuracy')
      trained=$(accuracy "$logs/train_fashion_mnist.cuda.log" 'summary: test acc')
      if [ "$rc" -eq 0 ] && [ -n "$served" ] && [ -n "$trained" ] && python3 -c "import sys; sys.exit(0 if abs($served - $trained) <= 0.001 else 1)"; then
        record "serve_model on the GPU: accuracy $served (the training run's $trained)"
      else
        record "serve_model on the GPU: rc $rc, accuracy ${served:-none} (the training run's ${trained:-none})"; status=1
      fi
      # The CNN's first step on the GPU with an empty, then a filled compilation cache (reported, not gated).
      rm -rf "$logs/cache"
      for pass in cold warm; do
        MCX_PLATFORMS=cuda timeout 180 "$root/mcx/bin/train_fashion_mnist" --data "$fashion" --model cnn --devices 1 \
          --epochs 1 --steps 1 --min-accuracy 0 --compile-cache "$logs/cache" > "$logs/first_step.$pass.log" 2>&1 || true
      done
      cold=$(accuracy "$logs/first_step.cold.log" 'first step done')
      warm=$(accuracy "$logs/first_step.warm.log" 'first step done')
      if [ -n "$cold" ] && [ -n "$warm" ]; then
        record "CNN first step on the GPU: cold cache ${cold} s, warm ${warm} s ($(python3 -c "print(f'{$cold / max($warm, 1e-9):.1f}')")x)"
      else
        record "CNN first step on the GPU: not measured (logs first_step.*.log)"; status=1
      fi
    else
      record "train_fashion_mnist: no $fashion (bash scripts/fetch-fashion-mnist.sh)"; status=1
    fi
    # The multi-process part: processes sharing the one GPU (collectives through host staging and the data plane).
    if [ "${MCX_DEVICE_CHECK_MULTIPROCESS:-1}" = 1 ]; then
      bin=$root/mcx/bin
      mp() {  # mp LOG N [mcx-run flags] -- ARGS...: an N-process job of processes on GPU 0
        local log=$1 n=$2
        shift 2
        MCX_PLATFORMS=cuda timeout 300 "$bin/mcx-run" -n "$n" --gpus-per-process 1 --gpus 1 --timeout 280 \
          --init-timeout 60 "$@" > "$logs/$log" 2>&1
      }
      set +e
      mp collectives.log 2 -- "$bin/collectives_worker" all
      rc=$?
      set -e
      ok=$(grep -c ' CHECK .* OK$' "$logs/collectives.log" || true)
      bad=$(grep -c ' CHECK .* FAIL' "$logs/collectives.log" || true)
      record "2 processes on one GPU, every collective: rc $rc, $ok checks OK, $bad failed"
      grep ' CHECK .* FAIL' "$logs/collectives.log" | head -10 || true
      [ "$rc" -eq 0 ] && [ "$bad" -eq 0 ] && [ "$ok" -gt 0 ] || status=1
      set +e
      mp selfkill.log 3 --recoverable -- "$bin/collectives_worker" selfkill
      set -e
      kill_ok=1
      for p in 0 1; do
        line=$(grep "^\[p$p\] SURVIVOR_ERROR" "$logs/selfkill.log" | head -1)
        ms=$(echo "$line" | awk '{print $3}')
        if [ -z "$ms" ] || [ "$ms" -gt 1000 ] || ! echo "$line" | grep -q "ProcessFailure(process=2 failed_devices={2})"; then kill_ok=0; fi
        record "SIGKILL of process 2: process $p's collective failed after ${ms:-never} ms"
      done
      [ "$kill_ok" = 1 ] || { status=1; grep -E 'SURVIVOR|KILLING' "$logs/selfkill.log" | head -5 || true; }
      # Where the machine has several GPUs: one process per GPU, the collectives over NCCL (demanded, so that a
      # fallback to staging is an error), and a process killed inside them.
      gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
      if [ "${gpus:-0}" -ge 2 ]; then
        set +e
        MCX_PLATFORMS=cuda MCX_GPU_COLLECTIVES=nccl timeout 300 "$bin/mcx-run" -n 2 --gpus-per-process 1 --gpus "$gpus"           --timeout 280 --init-timeout 60 -- "$bin/collectives_worker" all > "$logs/collectives_nccl.log" 2>&1
        rc=$?
        set -e
        ok=$(grep -c ' CHECK .* OK$' "$logs/collectives_nccl.log" || true)
        bad=$(grep -c ' CHECK .* FAIL' "$logs/collectives_nccl.log" || true)
        record "2 processes on 2 of $gpus GPUs, every collective over NCCL: rc $rc, $ok checks OK, $bad failed"
        [ "$rc" -eq 0 ] && [ "$bad" -eq 0 ] && [ "$ok" -gt 0 ] || status=1
        if [ "$gpus" -ge 3 ]; then
          set +e
          MCX_PLATFORMS=cuda MCX_GPU_COLLECTIVES=nccl timeout 300 "$bin/mcx-run" -n 3 --gpus-per-process 1 --gpus "$gpus"             --timeout 280 --init-timeout 60 --recoverable -- "$bin/collectives_worker" selfkill > "$logs/selfkill_nccl.log" 2>&1
          set -e
          for p in 0 1; do
            line=$(grep "^\[p$p\] SURVIVOR_ERROR" "$logs/selfkill_nccl.log" | head -1)
            ms=$(echo "$line" | awk '{print $3}')
            record "SIGKILL of process 2 over NCCL: process $p's collective failed after ${ms:-never} ms"
            if [ -z "$ms" ] || [ "$ms" -gt 1000 ] || ! echo "$line" | grep -q "ProcessFailure(process=2 failed_devices={2})"; then status=1; fi
          done
        fi
      else
        record "NCCL between processes: not run (this machine has ${gpus:-0} GPU; NCCL needs one per rank)"
      fi
      set +e
      mp bandwidth.log 2 -- "$bin/collectives_worker" bandwidth
      set -e
      record "64 MiB all-reduce, 2 processes on one GPU: $(grep '^\[p0\] BANDWIDTH' "$logs/bandwidth.log" | cut -d' ' -f3- || echo 'not measured')"
      if [ -f "$fashion/train-images-idx3-ubyte.gz" ]; then
        set +e
        timeout 420 bash "$bin/check_job.sh" gpu "$bin/mcx-run" "$bin/train_fashion_mnist" "$bin/serve_model" "$fashion" \
          > "$logs/gpu_job.log" 2>&1
        rc=$?
        set -e
        record "the main job on the GPU (2 processes, kill, warm resume, export, serve on GPU and CPU): rc $rc, $(grep 'check_job.sh: \(OK\|FAILED\)' "$logs/gpu_job.log" | tail -1)"
        [ "$rc" -eq 0 ] || status=1
      fi
    fi
    if [ "${MCX_DEVICE_CHECK_BENCH:-1}" = 1 ]; then
      set +e
      MCX_PLATFORMS=cpu,cuda timeout 150 "$root/mcx/bin/bench_gpu" --repeats 10 --warmup 2 > "$logs/bench_gpu.jsonl" 2> "$logs/bench_gpu.log"
      rc=$?
      set -e
      record "bench_gpu: rc $rc, $(grep -c '"ratio"' "$logs/bench_gpu.jsonl" || true) comparisons"
      python3 - "$logs/bench_gpu.jsonl" <<'PY' || true
import json, sys
for line in open(sys.argv[1]):
    try:
        j = json.loads(line)
    except ValueError:
        continue
    if "error" in j:
        print(f"device-check: bench {j.get('name')}: {j.get('peer')} error: {str(j['error'])[:200]}")
    elif "ratio" in j:
        extra = f", {j['mcx_gb_per_s']:.0f} GB/s" if "mcx_gb_per_s" in j else ""
        print(f"device-check: bench {j['name']}: mcx {j['mcx_ms']:.3f} ms, {j['peer']} {j['peer_ms']:.3f} ms, "
              f"ratio {j['ratio']:.2f}{extra}")
    elif "gb_per_s" in j:
        print(f"device-check: bench {j['name']}: {j['peer']} {j['gb_per_s']:.0f} GB/s")
PY
    fi
    # The main job's epoch against PyTorch and JAX on the same GPU and data (bench/gpu/epoch_peers.py: the same
    # CNN, Adam, batch 128; each side's second epoch, the first one warming up): mcx on 1 process against PyTorch
    # and JAX, and mcx on 2 processes sharing the GPU against PyTorch DDP on 2 processes sharing it. Reported as
    # mcx's examples/s over the peer's (>= 1: mcx is faster).
    if [ "${MCX_DEVICE_CHECK_BENCH:-1}" = 1 ] && [ -f "$fashion/train-images-idx3-ubyte.gz" ]; then
      set +e
      MCX_PLATFORMS=cuda timeout 240 "$root/mcx/bin/train_fashion_mnist" --data "$fashion" --model cnn --devices 1 \
        --epochs 2 --schedule constant --min-accuracy 0 > "$logs/epoch.mcx1.log" 2>&1
      MCX_PLATFORMS=cuda timeout 300 "$root/mcx/bin/mcx-run" -n 2 --gpus-per-process 1 --gpus 1 --timeout 280 \
        --init-timeout 60 -- "$root/mcx/bin/train_fashion_mnist" --data "$fashion" --model cnn --epochs 2 \
        --schedule constant --min-accuracy 0 > "$logs/epoch.mcx2.log" 2>&1
      timeout 300 python3 bench/gpu/epoch_peers.py --data "$fashion" > "$logs/epoch_peers.jsonl" 2> "$logs/epoch_peers.log"
      set -e
      # examples/s of the last epoch line (train_fashion_mnist prints the global rate; process 0's for mcx-run)
      rate() { { grep -E "$2" "$1" | grep -oE '[0-9.]+ examples/s' || true; } | tail -1 | awk '{print $1}'; }
      mcx1=$(rate "$logs/epoch.mcx1.log" 'epoch 2 ')
      mcx2=$(rate "$logs/epoch.mcx2.log" '^\[p0\].*epoch 2 ')
      peers=$(python3 - "$logs/epoch_peers.jsonl" "${mcx1:-0}" "${mcx2:-0}" <<'PY' || true
import json, sys
mcx = {"torch": float(sys.argv[2]), "jax": float(sys.argv[2]), "torch_ddp2": float(sys.argv[3])}
out = []
for line in open(sys.argv[1]):
    try:
        j = json.loads(line)
    except ValueError:
        continue
    if "error" in j:
        out.append(f"{j['peer']} failed ({j['error'][:80]})")
    elif mcx[j["peer"]] > 0:
        out.append(f"{j['peer']} {j['examples_per_s']:.0f} ex/s (mcx/{j['peer']} {mcx[j['peer']] / j['examples_per_s']:.2f})")
print("; ".join(out) or "no peer ran")
PY
)
      record "CNN epoch on the GPU: mcx 1 process ${mcx1:-?} ex/s, 2 processes sharing it ${mcx2:-?} ex/s; $peers"
    fi
    printf 'device-check: %s\n' "${summary[@]}"
    [ "$status" -eq 0 ] && echo "device-check: OK" || echo "device-check: FAILED (logs in $logs)"
    exit "$status"
    ;;
  *)
    echo "usage: bash scripts/device-check.sh bundle|run" >&2
    exit 2
    ;;
esac
