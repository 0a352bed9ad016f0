/**
 * The rewrite plan format and its keys (src/export/rewrite/plans/rewrite-plan.ts): a plan applied gives
 * the rewriter's splice for any HTML and prefix; its pieces copy the kept middle of a URL rather
 * than repeat it; a damaged plan is refused, never applied to wrong offsets; keys change with
 * the text, the prefix and the plan, also as stored beside the plan; a small plan written straight into
 * the encoder's chunks is the same bytes; and PLAN_RULES_VERSION must change with the rewriter's output.
 */
import { PlanFormatError } from '../../../../src/errors.js';
import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import fc from 'fast-check';
import t from 'tap';
import { planContentHtml, planContentHtmlSliced } from '../../../../src/export/rewrite/plans/html-plan.js';
import { rewriteHtml } from '../../../../src/export/rewrite/rewriter/html-rewriter.js';
import { planPieces, PlanSplice, splicedLength } from '../../../../src/export/rewrite/plans/plan-splice.js';
import {
  EMPTY_PLAN,
  jsonPrefixBytes,
  PlanBuilder,
  planFromEdits,
  planKey,
  PLAN_KEY_BYTES,
  PLAN_RULES_VERSION,
  storedPlanMatches,
} from '../../../../src/export/rewrite/plans/rewrite-plan.js';
import { JsonChunker } from '../../../../src/export/encode/json-encoder.js';
import { arbitraryHtml } from '../../../helpers/html-arbitrary.js';
import { applyPlan } from '../../../helpers/plans.js';
import { sourceUrl } from '../../../helpers/paths.js';

const json = (s: string) => Buffer.from(JSON.stringify(s));
const prefixes = fc.constantFrom('/media/', '/cdn/m/', 'https://proxy.example/x?u=/', '/p/');

t.test('a plan applied equals the rewriter of record, for any HTML and prefix', async (t) => {
  fc.assert(
    fc.property(arbitraryHtml, prefixes, (h, p) => {
      const j = json(h);
      const out = applyPlan(j, planContentHtml(j, p), p);
      return out.toString('utf8') === JSON.stringify(rewriteHtml(h, p));
    }),
    { numRuns: 2000 },
  );
  t.pass('held for 2,000 documents');
});

// Builders share their buffers (rewrite-plan.ts `pieces`, `idleOuts`): documents planned in slices,
// each open across the others' pauses, must each get the plan it gets alone.
t.test('documents planned in slices at once each get the plan they get alone', async (t) => {
  await fc.assert(
    fc.asyncProperty(fc.array(arbitraryHtml, { minLength: 2, maxLength: 6 }), prefixes, async (docs, p) => {
      const texts = docs.map(json);
      const alone = texts.map((j) => planContentHtml(j, p));
      const yieldEach = () => new Promise<void>((resolve) => setImmediate(resolve));
      const together = await Promise.all(texts.map((j) => planContentHtmlSliced(j, p, yieldEach, 8)));
      return together.every((plan, i) => plan.equals(alone[i]!));
    }),
    { numRuns: 300 },
  );
  t.pass('held for 300 sets of documents');
});

t.test('a finished plan builder takes no more edits', async (t) => {
  const j = json('<img src="a.png">');
  const builder = new PlanBuilder(j, jsonPrefixBytes('/media/'));
  builder.edit(10, 15, Buffer.from('/media/a.png'));
  const plan = builder.finish();
  t.ok(plan.length > 0, 'a plan of one edit');
  t.throws(() => builder.edit(10, 15, Buffer.from('/media/b.png')), /the plan was finished/);
  t.throws(() => builder.finish(), /the plan was finished/);
  const again = new PlanBuilder(j, jsonPrefixBytes('/media/'));
  again.edit(10, 15, Buffer.from('/media/a.png'));
  t.ok(again.finish().equals(plan), 'the next builder, on the kept buffer, writes the same plan');
});

t.test('pieces: the prefix and a copy of the kept text, not the URL again', async (t) => {
  const j = json(`<p>${'x'.repeat(300)}</p><img src="images/a-rather-long-file-name-of-a-photo.png">`);
  const plan = planContentHtml(j, '/media/');
  t.ok(plan.length > 0 && plan.length <= 12, `a few bytes for one edit (${plan.length})`);
  t.notOk(plan.includes(Buffer.from('photo')), 'the URL is not in the plan');
  t.equal(
    planContentHtml(json('<img src="https://cdn.example/x.png">'), '/media/'),
    EMPTY_PLAN,
    'nothing to rewrite: the empty plan',
  );
  const literal = planFromEdits(Buffer.from('"ab"'), [1, 2], [Buffer.from('/media/zz')], jsonPrefixBytes('/media/'));
  t.equal(
    applyPlan(Buffer.from('"ab"'), literal, '/media/').toString(),
    '"/media/zzb"',
    'text found nowhere is kept as literal bytes',
  );
});

t.test('a damaged plan is refused', async (t) => {
  const j = json('<img src="a.png"><img src="b.png">');
  const plan = planContentHtml(j, '/media/');
  const pj = '/media/';
  t.throws(() => applyPlan(j, plan.subarray(0, plan.length - 1), pj), PlanFormatError, 'cut short');
  t.throws(() => applyPlan(json('<img>'), plan, pj), PlanFormatError, 'edits past the end of a shorter text');
  t.throws(() => applyPlan(j, Buffer.from([0, 1, 1, 3]), pj), PlanFormatError, 'an unknown piece kind');
  t.throws(() => applyPlan(j, Buffer.from([0, 1, 1, 5, 9]), pj), PlanFormatError, 'a copy from outside its edit');
});

t.test('splicedLength: a number for a few edits, a promise only when the slice runs out (D8.8)', async (t) => {
  const pj = jsonPrefixBytes('/media/');
  const few = json('<img src="a.png"><img src="b.png">');
  let pauses = 0;
  const due = () => {
    pauses++;
    return Promise.resolve();
  };
  const n = splicedLength(few, planContentHtml(few, '/media/'), pj, due);
  t.equal(n, applyPlan(few, planContentHtml(few, '/media/'), '/media/').length, 'the spliced length, at once');
  t.equal(pauses, 0, 'two edits never ask for a pause');
  t.equal(splicedLength(json('<img>'), planContentHtml(few, '/media/'), pj, due), -1, 'a plan that does not fit: -1');

  const many = json('<img src="a">'.repeat(10_000));
  const plan = planContentHtml(many, '/media/');
  const want = applyPlan(many, plan, '/media/').length;
  t.equal(
    splicedLength(many, plan, pj, () => undefined),
    want,
    'slice not due: still a number',
  );
  const paused = splicedLength(many, plan, pj, due);
  t.ok(paused instanceof Promise, 'slice due: a promise');
  t.equal(await paused, want, 'resolving to the same length');
  t.equal(pauses, 2, 'a pause per 4,096 edits');
});

t.test('keys: the text, the prefix and the plan each change them', async (t) => {
  const j = json('<img src="a.png">');
  const plan = planContentHtml(j, '/media/');
  const k = planKey(j, '/media/', plan);
  t.equal(k.length, 32);
  t.notSame(planKey(j, '/cdn/', plan), k, 'another prefix');
  t.notSame(planKey(json('<img src="b.png">'), '/media/', plan), k, 'another text');
  t.notSame(planKey(j, '/media/', Buffer.concat([plan, Buffer.from([0])])), k, 'another plan');
  t.same(planKey(Buffer.from(j), '/media/', Buffer.from(plan)), k, 'the same text and plan: the same key');
});

t.test(
  'a key is SHA-256 of the rules version, the prefix, the text and the plan, for small texts and over 64 KB',
  async (t) => {
    const sha = (...parts: (string | Buffer)[]) => parts.reduce((h, p) => h.update(p), createHash('sha256')).digest();
    for (const j of [json('<img src="a.png">'), json(`<img src="a.png">${'x'.repeat(70_000)}`), json('')]) {
      for (const prefix of ['/media/', '/cdn/m/']) {
        const plan = planContentHtml(j, prefix);
        const want = sha(`kb-export rewrite plan ${PLAN_RULES_VERSION}\0${prefix}\0`, j, plan);
        t.ok(planKey(j, prefix, plan).equals(want), `${j.length} bytes, ${prefix}: the plan key`);
      }
    }
    const big = Buffer.alloc(70_000, 1);
    const small = json('<img src="a.png">');
    t.ok(
      planKey(small, '/media/', big).equals(sha(`kb-export rewrite plan ${PLAN_RULES_VERSION}\0/media/\0`, small, big)),
      'a plan over 64 KB',
    );
  },
);

t.test(
  'a stored key and plan match their text only: another text, prefix, plan byte or key byte does not',
  async (t) => {
    const j = json('<img src="a.png">');
    const plan = planContentHtml(j, '/media/');
    const stored = Buffer.concat([planKey(j, '/media/', plan), plan]);
    t.ok(storedPlanMatches(j, '/media/', stored), 'its own text and prefix');
    t.notOk(storedPlanMatches(json('<img src="b.png">'), '/media/', stored), 'another text');
    t.notOk(storedPlanMatches(j, '/cdn/', stored), 'another prefix');
    for (const at of [0, PLAN_KEY_BYTES - 1, PLAN_KEY_BYTES, stored.length - 1]) {
      const damaged = Buffer.from(stored);
      damaged[at]! ^= 1;
      t.notOk(storedPlanMatches(j, '/media/', damaged), `byte ${at} changed`);
    }
    t.notOk(storedPlanMatches(j, '/media/', stored.subarray(0, PLAN_KEY_BYTES - 1)), 'shorter than a key');
    const long = json(`<img src="a.png">${'x'.repeat(70_000)}`);
    const longPlan = planContentHtml(long, '/media/');
    const longStored = Buffer.concat([planKey(long, '/media/', longPlan), longPlan]);
    t.ok(storedPlanMatches(long, '/media/', longStored), 'a text over 64 KB');
    longStored[PLAN_KEY_BYTES - 1]! ^= 1;
    t.notOk(storedPlanMatches(long, '/media/', longStored), "a text over 64 KB, its key's last byte changed");
  },
);

t.test("a small plan written straight into the encoder's chunks is its pieces' bytes, any chunk size", async (t) => {
  fc.assert(
    fc.property(
      arbitraryHtml,
      prefixes,
      fc.integer({ min: 1, max: 64 }),
      fc.integer({ min: 0, max: 40 }),
      (h, p, chunkSize, from) => {
        const j = json(h);
        const plan = Buffer.concat([Buffer.alloc(from, 7), planContentHtml(j, p)]);
        const out = new JsonChunker(chunkSize);
        out.push('[');
        new PlanSplice(j, plan, from, jsonPrefixBytes(p)).writeTo(out);
        out.push(']');
        const want = Buffer.concat([
          Buffer.from('['),
          ...planPieces(j, plan, jsonPrefixBytes(p), from),
          Buffer.from(']'),
        ]);
        return (
          Buffer.concat(out.takeChunks()).equals(want) &&
          Buffer.concat([...new PlanSplice(j, plan, from, jsonPrefixBytes(p))]).equals(want.subarray(1, -1))
        );
      },
    ),
    { numRuns: 2000 },
  );
  t.pass('held for 2,000 documents, prefixes, chunk sizes and plan offsets');
});

t.test("PLAN_RULES_VERSION changes when the rewriter's output does", async (t) => {
  // Stored plans are trusted while the version is the same: a rewriter whose output changed under
  // an unchanged version would have old plans applied. If this fails after a deliberate change to
  // the rewriter, raise PLAN_RULES_VERSION and put the new digest here.
  const cases = JSON.parse(readFileSync(sourceUrl(import.meta.url, '../fixtures/rewriter-cases.json'), 'utf8')) as {
    input: string;
  }[];
  const inputs = [...cases.map((c) => c.input), ...fc.sample(arbitraryHtml, { numRuns: 500, seed: 42 })];
  const hash = createHash('sha256');
  for (const input of inputs)
    for (const prefix of ['/media/', '/cdn/m/']) hash.update(JSON.stringify(rewriteHtml(input, prefix))).update('\0');
  const digests: Record<number, string> = { 1: '73211ef511b344b26008fa0341497e52b2affa382afdb9f18a30e180b4886ff7' };
  t.equal(`${PLAN_RULES_VERSION}:${hash.digest('hex')}`, `${PLAN_RULES_VERSION}:${digests[PLAN_RULES_VERSION]}`);
});
