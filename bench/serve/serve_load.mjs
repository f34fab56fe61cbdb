// Load benchmark of `omni serve`: N clients on loopback against a real server,
// once per configuration, side by side. Prints a table (and writes JSON) of
// requests per hour, p50/p95 latency, uploads per request (from /metrics'
// omni_component_uploads_total: how many times a component became resident),
// text-encoder uploads per request, requests per upload of the high-noise
// expert (the mean batch), prompt cache hits and the HTTP status counts. A program, not a test: the figures are
// measurements of this machine (bench/README.md).
//
//   node bench/serve/serve_load.mjs --omni build/bin/omni --model example:wan-shaped \
//        [--clients 4] [--requests 8] [--prompts 3] [--size 64x64] [--steps 8]
//        [--frames 1] [--sim-link-gbps 0] [--max-batch 4] [--batch-wait-ms 0]
//        [--configs plain,cache,batch,cache+batch] [--json bench-serve.json]
//
// Configurations: plain (--prompt-cache 0 --max-batch 1), cache (256 MiB
// prompt cache, no batching), batch (no cache, --max-batch N), cache+batch.
// Requests are sync ones (/v1/images/generations for --frames 1, else
// /v1/videos/sync), each client cycling through --prompts distinct prompts
// with one shared negative prompt, as real traffic repeats them. With
// --sim-link-gbps G the sim device's copies take the time a G GB/s link
// would: the figures are then simulated, and the table says so.
import { spawn } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { parseArgs } from 'node:util';

const { values: opt } = parseArgs({
  options: {
    omni: { type: 'string', default: 'build/bin/omni' },
    model: { type: 'string', default: 'example:wan-shaped' },
    clients: { type: 'string', default: '4' },
    requests: { type: 'string', default: '8' },
    prompts: { type: 'string', default: '3' },
    size: { type: 'string', default: '64x64' },
    steps: { type: 'string', default: '8' },
    frames: { type: 'string', default: '1' },
    'sim-link-gbps': { type: 'string', default: '0' },
    'max-batch': { type: 'string', default: '4' },
    'batch-wait-ms': { type: 'string', default: '0' },
    configs: { type: 'string', default: 'plain,cache,batch,cache+batch' },
    json: { type: 'string', default: 'bench-serve.json' },
  },
});
const clients = Number(opt.clients);
const perClient = Number(opt.requests);
const frames = Number(opt.frames);
const noCache = ['--prompt-cache', '0'];
const cache = ['--prompt-cache', '256MiB'];
const noBatch = ['--max-batch', '1'];
const batch = ['--max-batch', opt['max-batch'], '--batch-wait-ms', opt['batch-wait-ms']];
const configs = {
  plain: [...noCache, ...noBatch],
  cache: [...cache, ...noBatch],
  batch: [...noCache, ...batch],
  'cache+batch': [...cache, ...batch],
};
const simulated = Number(opt['sim-link-gbps']) > 0;
const prompts = ['a red circle moving right on a black background',
                 'a blue square moving left on a white background',
                 'a green triangle moving up on a black background',
                 'a yellow circle moving down on a white background'];

function startServer(extra) {
  return new Promise((resolve, reject) => {
    const child = spawn(opt.omni, ['serve', opt.model, '--enable-cpu-offload', '--device', 'sim',
                                   '--sim-link-gbps', opt['sim-link-gbps'],
                                   '--port', '0', '--max-queue', String(clients + 1), ...extra],
                        { stdio: ['ignore', 'pipe', 'ignore'] });
    let out = '';
    child.stdout.on('data', (d) => {
      out += d;
      const m = out.match(/listening on http:\/\/127\.0\.0\.1:(\d+)/);
      if (m) resolve({ child, base: `http://127.0.0.1:${m[1]}` });
    });
    child.on('exit', (code) => reject(new Error(`omni serve exited ${code} before listening`)));
  });
}

// Sum of a Prometheus family's samples whose labels contain every `match`.
function sum(text, family, match = []) {
  let total = 0;
  for (const line of text.split('\n')) {
    if (!line.startsWith(family + '{') && !line.startsWith(family + ' ')) continue;
    if (match.every((m) => line.includes(m))) total += Number(line.split(' ').pop());
  }
  return total;
}

function figures(metrics) {
  return {
    uploads: sum(metrics, 'omni_component_uploads_total'),
    encoderUploads: sum(metrics, 'omni_component_uploads_total', ['component="text_encoder"']),
    expertUploads: sum(metrics, 'omni_component_uploads_total', ['component="transformer"']),
    hits: sum(metrics, 'omni_prompt_cache_hits_total'),
    misses: sum(metrics, 'omni_prompt_cache_misses_total'),
  };
}

async function request(base, prompt) {
  const path = frames === 1 ? '/v1/images/generations' : '/v1/videos/sync';
  const body = { prompt, negative_prompt: 'blurry, low quality', size: opt.size,
                 num_inference_steps: Number(opt.steps), seed: 7 };
  if (frames !== 1) body.num_frames = frames;
  const start = performance.now();
  const r = await fetch(base + path, { method: 'POST', body: JSON.stringify(body),
                                       headers: { 'content-type': 'application/json' } });
  await r.arrayBuffer();
  return { status: r.status, ms: performance.now() - start };
}

function percentile(sorted, p) {
  if (sorted.length === 0) return NaN;
  return sorted[Math.min(sorted.length - 1, Math.floor(p * sorted.length))];
}

async function run(name) {
  const { child, base } = await startServer(configs[name]);
  try {
    await request(base, 'warm-up');  // lazily built kernels, first uploads
    const before = figures(await (await fetch(base + '/metrics')).text());
    const results = [];
    const start = performance.now();
    await Promise.all(Array.from({ length: clients }, async (_, c) => {
      for (let i = 0; i < perClient; ++i)
        results.push(await request(base, prompts[(c + i) % Number(opt.prompts)]));
    }));
    const seconds = (performance.now() - start) / 1000;
    const after = figures(await (await fetch(base + '/metrics')).text());
    const ok = results.filter((r) => r.status === 200);
    const latencies = ok.map((r) => r.ms).sort((a, b) => a - b);
    const statuses = {};
    for (const r of results) statuses[r.status] = (statuses[r.status] ?? 0) + 1;
    return {
      config: name, requests: results.length, seconds,
      requests_per_hour: ok.length / seconds * 3600,
      p50_ms: percentile(latencies, 0.5), p95_ms: percentile(latencies, 0.95),
      uploads_per_request: (after.uploads - before.uploads) / Math.max(ok.length, 1),
      encoder_uploads_per_request: (after.encoderUploads - before.encoderUploads) /
                                   Math.max(ok.length, 1),
      requests_per_expert_upload: ok.length / Math.max(after.expertUploads - before.expertUploads, 1),
      prompt_cache_hits: after.hits - before.hits,
      prompt_cache_misses: after.misses - before.misses,
      statuses,
    };
  } finally {
    child.kill('SIGTERM');
  }
}

const rows = [];
for (const name of opt.configs.split(',')) rows.push(await run(name));
const header = ['config', 'req/h', 'p50 ms', 'p95 ms', 'uploads/req', 'encoder up/req',
                'req/expert up', 'cache hit/miss', 'statuses'];
const table = [header, ...rows.map((r) => [
  r.config, r.requests_per_hour.toFixed(0), r.p50_ms.toFixed(0), r.p95_ms.toFixed(0),
  r.uploads_per_request.toFixed(2), r.encoder_uploads_per_request.toFixed(2),
  r.requests_per_expert_upload.toFixed(2),
  `${r.prompt_cache_hits}/${r.prompt_cache_misses}`, JSON.stringify(r.statuses)])];
const widths = header.map((_, i) => Math.max(...table.map((row) => String(row[i]).length)));
const link = simulated ? `simulated ${opt['sim-link-gbps']} GB/s link` : 'memcpy-speed link';
console.log(`omni serve ${opt.model} on sim (${link}), ${clients} clients x ${perClient} sync ` +
            `requests (${opt.size}, ${frames} frame(s), ${opt.steps} steps, ${opt.prompts} ` +
            `distinct prompts; batch: --max-batch ${opt['max-batch']} --batch-wait-ms ` +
            `${opt['batch-wait-ms']})`);
for (const row of table) console.log(row.map((c, i) => String(c).padStart(widths[i])).join('  '));
writeFileSync(opt.json, JSON.stringify({ model: opt.model, sim_link_gbps: Number(opt['sim-link-gbps']),
                                         simulated, max_batch: Number(opt['max-batch']),
                                         batch_wait_ms: Number(opt['batch-wait-ms']),
                                         clients, requests_per_client: perClient,
                                         size: opt.size, steps: Number(opt.steps), frames,
                                         distinct_prompts: Number(opt.prompts), rows }, null, 2));
console.log(`wrote ${opt.json}`);
