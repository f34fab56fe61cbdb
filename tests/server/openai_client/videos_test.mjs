// The official openai npm client's video calls against a real `omni serve`
// (./run starts it): create (multipart/form-data, as videos.create sends
// it), retrieve until completed, download the content, list (two pages),
// delete, and the errors a client sees. Exits non-zero on the first failure.
import assert from 'node:assert/strict';
import OpenAI from 'openai';

const client = new OpenAI({
  apiKey: process.env.OMNI_API_KEY,
  baseURL: process.env.OMNI_BASE_URL,
  maxRetries: 0,
  timeout: 120_000,
});
const model = process.env.OMNI_MODEL;

async function until_finished(id) {
  const deadline = Date.now() + 120_000;
  for (;;) {
    const video = await client.videos.retrieve(id);
    if (video.status === 'completed' || video.status === 'failed') return video;
    assert.ok(Date.now() < deadline, `video ${id} still ${video.status}`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

// OpenAI's fields, plus vllm-omni's num_inference_steps as an extra form
// field (small and quick on the built-in example model).
async function create(prompt) {
  return client.videos.create({
    model,
    prompt,
    seconds: '4',
    size: '32x32',
    num_inference_steps: '2',
  });
}

const created = await create('a red circle moving right');
assert.equal(created.object, 'video');
assert.equal(created.status, 'queued');
assert.equal(created.model, model);
assert.equal(created.size, '32x32');
assert.match(created.id, /^video_[0-9a-f]{32}$/);
// 4 s became a frame count the model takes (4k+1), and the reply says so.
assert.equal(created.num_frames % 4, 1);
assert.ok(Math.abs(Number(created.seconds) - 4) <= 4 / created.fps, created.seconds);
assert.ok(Number.isSafeInteger(created.seed), `seed ${created.seed}`);
console.log(`created ${created.id}: ${created.num_frames} frames at ${created.fps} fps ` +
            `(${created.seconds} s), seed ${created.seed}`);

const done = await until_finished(created.id);
assert.equal(done.status, 'completed', JSON.stringify(done.error));
assert.equal(done.progress, 100);
assert.ok(done.completed_at >= done.created_at);

const content = await client.videos.downloadContent(created.id);
assert.equal(content.headers.get('content-type'), 'video/mp4');
const mp4 = Buffer.from(await content.arrayBuffer());
assert.ok(mp4.length > 100, `${mp4.length} bytes`);
assert.equal(mp4.subarray(4, 8).toString('latin1'), 'ftyp');
console.log(`downloaded ${mp4.length} bytes of MP4`);

const second = await create('a blue square');
await until_finished(second.id);
// limit 1: the client follows the cursor (after = last_id) to the second page.
const listed = [];
for await (const video of client.videos.list({ limit: 1 })) listed.push(video.id);
assert.deepEqual(listed, [second.id, created.id]);
console.log(`listed ${listed.length} videos, one per page`);

const deleted = await client.videos.delete(created.id);
assert.equal(deleted.id, created.id);
assert.equal(deleted.deleted, true);
await assert.rejects(client.videos.retrieve(created.id), (e) => {
  assert.ok(e instanceof OpenAI.NotFoundError, String(e));
  assert.equal(e.code, 'video_not_found');
  return true;
});
console.log(`deleted ${created.id}`);

// What the client sees for a request this server refuses.
await assert.rejects(
  client.videos.create({
    model,
    prompt: 'x',
    input_reference: new File([Buffer.from('not an image')], 'ref.png', { type: 'image/png' }),
  }),
  (e) => {
    assert.ok(e instanceof OpenAI.UnprocessableEntityError, String(e));
    assert.equal(e.code, 'unsupported_parameter');
    return true;
  });
await assert.rejects(
  new OpenAI({ apiKey: 'wrong', baseURL: process.env.OMNI_BASE_URL, maxRetries: 0 })
      .videos.retrieve(second.id),
  (e) => e instanceof OpenAI.AuthenticationError);
console.log('openai client: all video calls behaved');
