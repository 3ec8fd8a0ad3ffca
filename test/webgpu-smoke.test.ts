// The Node WebGPU harness works: an adapter, a device, a compute shader, a readback.
import { afterAll, describe, expect, it } from 'vitest';
import { NO_ADAPTER_HELP, createNodeGpu } from '../client/island/engine/dawn.ts';
import { getTestDevice, readF32, releaseTestDevice, upload } from './helpers/gpu.ts';

afterAll(releaseTestDevice);

describe('webgpu smoke', () => {
  it('runs a compute shader and reads the result back', async () => {
    const { device, info } = await getTestDevice();
    expect(info.vendor.length + info.description.length).toBeGreaterThan(0);
    const n = 1000;
    const x = new Float32Array(n).map((_, i) => i * 0.5);
    const inp = upload(device, x);
    const out = upload(device, new Float32Array(n));
    const module = device.createShaderModule({
      code: /* wgsl */ `
        @group(0) @binding(0) var<storage, read> x: array<f32>;
        @group(0) @binding(1) var<storage, read_write> y: array<f32>;
        @compute @workgroup_size(64) fn main(@builtin(global_invocation_id) g: vec3u) {
          if (g.x < ${n}u) { y[g.x] = 2.0 * x[g.x] + 1.0; }
        }`,
    });
    const pipeline = await device.createComputePipelineAsync({
      layout: 'auto',
      compute: { module, entryPoint: 'main' },
    });
    const bg = device.createBindGroup({
      layout: pipeline.getBindGroupLayout(0),
      entries: [
        { binding: 0, resource: { buffer: inp } },
        { binding: 1, resource: { buffer: out } },
      ],
    });
    const enc = device.createCommandEncoder();
    const pass = enc.beginComputePass();
    pass.setPipeline(pipeline);
    pass.setBindGroup(0, bg);
    pass.dispatchWorkgroups(Math.ceil(n / 64));
    pass.end();
    device.queue.submit([enc.finish()]);
    const y = await readF32(device, out, n);
    for (let i = 0; i < n; i++) expect(y[i]).toBe(2 * x[i] + 1);
  });

  it('without an adapter, says how to get one', async () => {
    await expect(
      createNodeGpu({ adapter: 'swiftshader', swiftshaderIcd: '/nonexistent/vk_swiftshader_icd.json' }),
    ).rejects.toThrow(NO_ADAPTER_HELP);
    expect(NO_ADAPTER_HELP).toMatch(/apt-get install chromium/);
  });

  it('refuses limits the adapter lacks, naming the limit', async () => {
    const { adapter } = await getTestDevice();
    const too = adapter.limits.maxStorageBufferBindingSize * 2;
    await expect(createNodeGpu({ requiredLimits: { maxStorageBufferBindingSize: too } })).rejects.toMatchObject({
      code: 'E_ADAPTER_TOO_SMALL',
      message: expect.stringMatching(/^maxStorageBufferBindingSize: needs [\d.]+ MiB, adapter allows [\d.]+ MiB/),
    });
  });
});
