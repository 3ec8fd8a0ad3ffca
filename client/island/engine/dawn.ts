// WebGPU in Node through the `webgpu` package (Dawn). Hardware adapter first,
// then SwiftShader (the software Vulkan that Debian's Chromium ships).
//
// Dawn-in-Node rules this file enforces:
//  - the object `create()` returns must stay referenced while its device lives
//    (if V8 collects it the process dies at random), so it is kept in `live`;
//  - drain the queue before destroying the device, and destroy it, or Node
//    neither exits cleanly nor on its own.

import { existsSync, readdirSync } from 'node:fs';
import { constants as osConstants } from 'node:os';
import { create, globals } from 'webgpu';

const SWIFTSHADER_ICD = '/usr/lib/chromium/vk_swiftshader_icd.json';
const CHROMIUM_LIBVULKAN = '/usr/lib/chromium/libvulkan.so.1';
const ICD_DIRS = ['/etc/vulkan/icd.d', '/usr/share/vulkan/icd.d', '/usr/local/share/vulkan/icd.d'];

export const NO_ADAPTER_HELP =
  'No WebGPU adapter found. For the software adapter install Chromium, which ships SwiftShader ' +
  `(\`apt-get install chromium\`, giving ${SWIFTSHADER_ICD}); ` +
  'or point VK_ICD_FILENAMES at the Vulkan driver manifest of a GPU.';

export interface NodeGpuOptions {
  /**
   * Limits the device must have (e.g. `requiredLimits(opts)` of the WebGPU engine), or a function of the adapter's
   * limits giving them (the engine's binding windows fit what the adapter allows). Nothing more is requested.
   */
  requiredLimits?: Record<string, number> | ((adapter: GPUSupportedLimits) => Record<string, number>);
  requiredFeatures?: GPUFeatureName[];
  /** Features requested only where the adapter has them (e.g. 'subgroups', 'timestamp-query'). */
  optionalFeatures?: GPUFeatureName[];
  powerPreference?: GPUPowerPreference;
  /** 'auto' (default): hardware, then SwiftShader. */
  adapter?: 'auto' | 'hardware' | 'swiftshader';
  /** SwiftShader's Vulkan driver manifest (default: Debian Chromium's). */
  swiftshaderIcd?: string;
}

export interface NodeGpuInfo {
  vendor: string;
  architecture: string;
  device: string;
  description: string;
  isFallbackAdapter: boolean;
}

export interface NodeGpu {
  /** The Dawn instance (`navigator.gpu` for Node): a peer such as TF.js can take its adapter from it. */
  gpu: GPU;
  adapter: GPUAdapter;
  device: GPUDevice;
  info: NodeGpuInfo;
  /** Drains the queue, destroys the device and lets Node exit. Safe to call twice. */
  dispose(): Promise<void>;
}

// Each `create()` result, held for as long as any device made from it is alive.
const live = new Set<GPU>();
// VK_ICD_FILENAMES as this module set it (so a later call can tell it from the user's own)
let icdSetHere: string | null = null;

/** WebGPU's global constants (GPUBufferUsage, GPUMapMode, ...) as in a browser. */
function installWebGpuGlobals(): void {
  const g = globalThis as Record<string, unknown>;
  for (const [k, v] of Object.entries(globals as Record<string, unknown>)) if (g[k] === undefined) g[k] = v;
}

let vulkanLoaded = false;
/**
 * Dawn dlopens `libvulkan.so.1`. Debian's Chromium bundles one next to SwiftShader, so
 * when the system has none, load Chromium's once (RTLD_NODELETE keeps it resident after
 * Node's addon check fails) and Dawn's dlopen by soname then finds it.
 */
function ensureVulkanLoader(): void {
  if (vulkanLoaded || process.platform !== 'linux') return;
  vulkanLoaded = true;
  const RTLD_NODELETE = 0x1000; // glibc
  const flags = (osConstants.dlopen.RTLD_NOW ?? 2) | (osConstants.dlopen.RTLD_GLOBAL ?? 0x100) | RTLD_NODELETE;
  for (const lib of ['libvulkan.so.1', CHROMIUM_LIBVULKAN]) {
    if (lib.startsWith('/') && !existsSync(lib)) continue;
    try {
      process.dlopen({ exports: {} } as NodeJS.Module, lib, flags);
      return;
    } catch (e) {
      // "did not self-register": the library loaded (it is not a Node addon), which is all we need
      if (/self-register/.test(String((e as Error).message))) return;
    }
  }
}

function hasHardwareDriverHint(): boolean {
  if (process.platform !== 'linux') return true; // Metal / D3D12
  return ICD_DIRS.some((d) => {
    try {
      return readdirSync(d).some((f) => f.endsWith('.json'));
    } catch {
      return false;
    }
  });
}

async function tryAdapter(
  flags: string[],
  powerPreference?: GPUPowerPreference,
): Promise<{ gpu: GPU; adapter: GPUAdapter } | null> {
  const gpu = create(flags);
  live.add(gpu);
  try {
    const adapter = await gpu.requestAdapter(powerPreference ? { powerPreference } : undefined);
    if (adapter) return { gpu, adapter };
  } catch {
    // fall through: no adapter from this backend
  }
  live.delete(gpu);
  return null;
}

function fmtBytes(n: number): string {
  return n >= 1 << 20 ? `${(n / (1 << 20)).toFixed(n % (1 << 20) ? 1 : 0)} MiB` : `${n} B`;
}

/** A Dawn device in Node. Throws with NO_ADAPTER_HELP when no adapter exists. */
export async function createNodeGpu(opts: NodeGpuOptions = {}): Promise<NodeGpu> {
  installWebGpuGlobals();
  process.env.XDG_RUNTIME_DIR ??= '/tmp';
  ensureVulkanLoader();
  const mode = opts.adapter ?? 'auto';
  const icd = opts.swiftshaderIcd ?? SWIFTSHADER_ICD;
  const userIcd =
    process.env.VK_ICD_FILENAMES && process.env.VK_ICD_FILENAMES !== icdSetHere ? process.env.VK_ICD_FILENAMES : null;
  let found: { gpu: GPU; adapter: GPUAdapter } | null = null;
  if (userIcd) {
    // the caller chose the Vulkan driver
    found = await tryAdapter(['backend=vulkan'], opts.powerPreference);
  } else {
    if (mode !== 'swiftshader' && hasHardwareDriverHint()) {
      if (icdSetHere) delete process.env.VK_ICD_FILENAMES;
      found = await tryAdapter([], opts.powerPreference);
    }
    if (!found && mode !== 'hardware' && existsSync(icd)) {
      // the Vulkan loader reads this when Dawn creates its instance, so set it before create()
      process.env.VK_ICD_FILENAMES = icdSetHere = icd;
      found = await tryAdapter(['backend=vulkan']);
    }
  }
  if (!found) throw new Error(NO_ADAPTER_HELP);
  const { gpu, adapter } = found;

  const limits =
    typeof opts.requiredLimits === 'function' ? opts.requiredLimits(adapter.limits) : (opts.requiredLimits ?? {});
  const adapterLimits = adapter.limits as unknown as Record<string, number>;
  for (const [k, need] of Object.entries(limits)) {
    const has = adapterLimits[k];
    if (has === undefined) continue;
    const isAlignment = k.startsWith('min');
    if (isAlignment ? need < has : need > has) {
      live.delete(gpu);
      const show = k.endsWith('Size') ? fmtBytes : String;
      throw Object.assign(new Error(`${k}: needs ${show(need)}, adapter allows ${show(has)}`), {
        code: 'E_ADAPTER_TOO_SMALL',
      });
    }
  }
  let device: GPUDevice;
  try {
    const features = [
      ...(opts.requiredFeatures ?? []),
      ...(opts.optionalFeatures ?? []).filter((f) => adapter.features.has(f)),
    ];
    device = await adapter.requestDevice({ requiredLimits: limits, requiredFeatures: features });
  } catch (e) {
    live.delete(gpu);
    throw e;
  }
  const ai = adapter.info;
  const info: NodeGpuInfo = {
    vendor: ai.vendor,
    architecture: ai.architecture,
    device: ai.device,
    description: ai.description || `${ai.vendor} ${ai.architecture}`.trim(),
    isFallbackAdapter: Boolean(
      (ai as GPUAdapterInfo & { isFallbackAdapter?: boolean }).isFallbackAdapter ??
        (adapter as GPUAdapter & { isFallbackAdapter?: boolean }).isFallbackAdapter,
    ),
  };
  let disposed = false;
  return {
    gpu,
    adapter,
    device,
    info,
    async dispose() {
      if (disposed) return;
      disposed = true;
      // exiting with work still queued can segfault inside SwiftShader
      await device.queue.onSubmittedWorkDone().catch(() => {});
      device.destroy();
      await device.lost.catch(() => {});
      live.delete(gpu);
    },
  };
}
